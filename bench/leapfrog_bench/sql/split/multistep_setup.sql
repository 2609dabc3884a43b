-- Multi-step split (pgroll / pg-osc style), run after the CREATE statements
-- of script.sql: a trigger keeps the shadow tables in sync with customer
-- while the old code keeps running; a batched copy fills in the rest.
CREATE FUNCTION bench_split_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    DELETE FROM customer_private WHERE c_w_id = OLD.c_w_id AND c_d_id = OLD.c_d_id AND c_id = OLD.c_id;
    DELETE FROM customer_public  WHERE c_w_id = OLD.c_w_id AND c_d_id = OLD.c_d_id AND c_id = OLD.c_id;
    RETURN NULL;
  END IF;
  IF TG_OP = 'INSERT'
     OR (NEW.c_credit, NEW.c_credit_lim, NEW.c_discount, NEW.c_balance, NEW.c_ytd_payment,
         NEW.c_payment_cnt, NEW.c_delivery_cnt, NEW.c_data)
        IS DISTINCT FROM
        (OLD.c_credit, OLD.c_credit_lim, OLD.c_discount, OLD.c_balance, OLD.c_ytd_payment,
         OLD.c_payment_cnt, OLD.c_delivery_cnt, OLD.c_data) THEN
    INSERT INTO customer_private
    VALUES (NEW.c_w_id, NEW.c_d_id, NEW.c_id, NEW.c_credit, NEW.c_credit_lim, NEW.c_discount,
            NEW.c_balance, NEW.c_ytd_payment, NEW.c_payment_cnt, NEW.c_delivery_cnt, NEW.c_data)
    ON CONFLICT (c_w_id, c_d_id, c_id) DO UPDATE
       SET c_credit = EXCLUDED.c_credit, c_credit_lim = EXCLUDED.c_credit_lim,
           c_discount = EXCLUDED.c_discount, c_balance = EXCLUDED.c_balance,
           c_ytd_payment = EXCLUDED.c_ytd_payment, c_payment_cnt = EXCLUDED.c_payment_cnt,
           c_delivery_cnt = EXCLUDED.c_delivery_cnt, c_data = EXCLUDED.c_data;
  END IF;
  IF TG_OP = 'INSERT'
     OR (NEW.c_first, NEW.c_middle, NEW.c_last, NEW.c_street_1, NEW.c_street_2, NEW.c_city,
         NEW.c_state, NEW.c_zip, NEW.c_phone, NEW.c_since)
        IS DISTINCT FROM
        (OLD.c_first, OLD.c_middle, OLD.c_last, OLD.c_street_1, OLD.c_street_2, OLD.c_city,
         OLD.c_state, OLD.c_zip, OLD.c_phone, OLD.c_since) THEN
    INSERT INTO customer_public
    VALUES (NEW.c_w_id, NEW.c_d_id, NEW.c_id, NEW.c_first, NEW.c_middle, NEW.c_last,
            NEW.c_street_1, NEW.c_street_2, NEW.c_city, NEW.c_state, NEW.c_zip, NEW.c_phone, NEW.c_since)
    ON CONFLICT (c_w_id, c_d_id, c_id) DO UPDATE
       SET c_first = EXCLUDED.c_first, c_middle = EXCLUDED.c_middle, c_last = EXCLUDED.c_last,
           c_street_1 = EXCLUDED.c_street_1, c_street_2 = EXCLUDED.c_street_2,
           c_city = EXCLUDED.c_city, c_state = EXCLUDED.c_state, c_zip = EXCLUDED.c_zip,
           c_phone = EXCLUDED.c_phone, c_since = EXCLUDED.c_since;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER bench_split_sync AFTER INSERT OR UPDATE OR DELETE ON customer
  FOR EACH ROW EXECUTE FUNCTION bench_split_sync();
