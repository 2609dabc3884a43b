-- Multi-step join: triggers on both inputs keep orderline_stock in sync
-- while the batched copy joins the existing rows (locking the rows it copies
-- FOR SHARE, so a concurrent update waits and then reaches the copy).
CREATE FUNCTION bench_join_sync_ol() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO orderline_stock
    SELECT s.s_w_id, s.s_i_id, s.s_quantity, s.s_ytd, s.s_order_cnt, s.s_remote_cnt, s.s_data,
           s.s_dist_01, s.s_dist_02, s.s_dist_03, s.s_dist_04, s.s_dist_05,
           s.s_dist_06, s.s_dist_07, s.s_dist_08, s.s_dist_09, s.s_dist_10,
           NEW.ol_w_id, NEW.ol_d_id, NEW.ol_o_id, NEW.ol_number, NEW.ol_delivery_d,
           NEW.ol_quantity, NEW.ol_amount, NEW.ol_dist_info
      FROM stock s WHERE s.s_w_id = NEW.ol_supply_w_id AND s.s_i_id = NEW.ol_i_id
    ON CONFLICT (ol_w_id, ol_d_id, ol_o_id, ol_number) DO NOTHING;
  ELSIF TG_OP = 'UPDATE' THEN
    UPDATE orderline_stock
       SET ol_delivery_d = NEW.ol_delivery_d, ol_quantity = NEW.ol_quantity,
           ol_amount = NEW.ol_amount, ol_dist_info = NEW.ol_dist_info
     WHERE ol_w_id = NEW.ol_w_id AND ol_d_id = NEW.ol_d_id AND ol_o_id = NEW.ol_o_id
       AND ol_number = NEW.ol_number;
  ELSE
    DELETE FROM orderline_stock
     WHERE ol_w_id = OLD.ol_w_id AND ol_d_id = OLD.ol_d_id AND ol_o_id = OLD.ol_o_id
       AND ol_number = OLD.ol_number;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER bench_join_sync_ol AFTER INSERT OR UPDATE OR DELETE ON order_line
  FOR EACH ROW EXECUTE FUNCTION bench_join_sync_ol();

CREATE FUNCTION bench_join_sync_s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE orderline_stock
     SET s_quantity = NEW.s_quantity, s_ytd = NEW.s_ytd, s_order_cnt = NEW.s_order_cnt,
         s_remote_cnt = NEW.s_remote_cnt, s_data = NEW.s_data
   WHERE s_w_id = NEW.s_w_id AND s_i_id = NEW.s_i_id;
  RETURN NULL;
END $$;
CREATE TRIGGER bench_join_sync_s AFTER UPDATE ON stock
  FOR EACH ROW EXECUTE FUNCTION bench_join_sync_s();
