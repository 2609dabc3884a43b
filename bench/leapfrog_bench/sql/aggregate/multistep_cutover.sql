-- Cut-over: the caller holds ACCESS EXCLUSIVE on order_line; the new code
-- (tx.sql) follows in the same transaction.  order_line stays, so a
-- NewOrder that entered the old code before the cut-over and inserts its
-- lines after it runs to the end without an error: the trigger stays for
-- those transactions, and skips the new code's (which records the total
-- itself and says so in bench.new_code).  multistep_cleanup.sql drops it
-- once no transaction older than the cut-over is left.
CREATE OR REPLACE FUNCTION bench_aggregate_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('bench.new_code', true) = 'on' THEN
    RETURN NULL;
  END IF;
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE order_total SET ot_amount = ot_amount - OLD.ol_amount
     WHERE ot_w_id = OLD.ol_w_id AND ot_d_id = OLD.ol_d_id AND ot_o_id = OLD.ol_o_id;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO order_total VALUES (NEW.ol_w_id, NEW.ol_d_id, NEW.ol_o_id, NEW.ol_amount)
    ON CONFLICT (ot_w_id, ot_d_id, ot_o_id)
    DO UPDATE SET ot_amount = order_total.ot_amount + EXCLUDED.ot_amount;
  END IF;
  RETURN NULL;
END $$;
