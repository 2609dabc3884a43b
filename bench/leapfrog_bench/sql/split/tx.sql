-- Application code for the split schema: deployed with the migration.  The
-- fragments of tx_base.sql it replaces: customer's columns are read from
-- and written to customer_public and customer_private.
--@ new_order_customer
  SELECT c_discount, c_credit INTO v_c_discount, v_c_credit
    FROM customer_private WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_id = p_c_id;
  SELECT c_last INTO v_c_last
    FROM customer_public WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_id = p_c_id;
--@ payment_vars
  v_credit text; v_first text; v_city text;
--@ payment_by_last
    SELECT array_agg(c_id ORDER BY c_first) INTO v_ids FROM customer_public
     WHERE c_w_id = p_c_w_id AND c_d_id = p_c_d_id AND c_last = p_c_last;
--@ payment_customer
  SELECT c_first, c_city INTO v_first, v_city FROM customer_public
   WHERE c_w_id = p_c_w_id AND c_d_id = p_c_d_id AND c_id = v_c_id;
  SELECT c_credit INTO v_credit FROM customer_private
   WHERE c_w_id = p_c_w_id AND c_d_id = p_c_d_id AND c_id = v_c_id FOR UPDATE;
  IF v_credit = 'BC' THEN
    UPDATE customer_private SET c_balance = c_balance - p_amount, c_ytd_payment = c_ytd_payment + p_amount,
           c_payment_cnt = c_payment_cnt + 1,
           c_data = substr(format('%s %s %s %s %s %s | ', v_c_id, p_c_d_id, p_c_w_id, p_d_id, p_w_id, p_amount)
                           || c_data, 1, 500)
     WHERE c_w_id = p_c_w_id AND c_d_id = p_c_d_id AND c_id = v_c_id;
  ELSE
    UPDATE customer_private SET c_balance = c_balance - p_amount, c_ytd_payment = c_ytd_payment + p_amount,
           c_payment_cnt = c_payment_cnt + 1
     WHERE c_w_id = p_c_w_id AND c_d_id = p_c_d_id AND c_id = v_c_id;
  END IF;
--@ order_status_by_last
    SELECT array_agg(c_id ORDER BY c_first) INTO v_ids FROM customer_public
     WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_last = p_c_last;
--@ order_status_customer
  SELECT c_first INTO v_first FROM customer_public
   WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_id = v_c_id;
  SELECT c_balance INTO v_balance FROM customer_private
   WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_id = v_c_id;
--@ delivery_customer
    UPDATE customer_private SET c_balance = c_balance + v_total, c_delivery_cnt = c_delivery_cnt + 1
     WHERE c_w_id = p_w_id AND c_d_id = d AND c_id = v_c_id;
