-- Application code for the joined schema.  Every row of one stock item
-- carries that item's stock columns, so NewOrder updates them all and copies
-- them into the order line it adds; an advisory lock per (warehouse, item)
-- serializes that read-modify-insert (a plain row lock would not cover the
-- row a concurrent NewOrder is inserting).
CREATE OR REPLACE FUNCTION tpcc_new_order_impl(p_w_id int, p_d_id int, p_c_id int,
    p_items int[], p_supply int[], p_qty int[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_w_tax numeric; v_d_tax numeric; v_o_id int;
  v_c_discount numeric; v_c_last text; v_c_credit text;
  v_i_price numeric; v_i_name text; v_i_data text;
  v_all_local int := 1; s record; v_dist text;
  n int := array_length(p_items, 1);
BEGIN
  SELECT w_tax INTO v_w_tax FROM warehouse WHERE w_id = p_w_id;
  UPDATE district SET d_next_o_id = d_next_o_id + 1
   WHERE d_w_id = p_w_id AND d_id = p_d_id
  RETURNING d_tax, d_next_o_id - 1 INTO v_d_tax, v_o_id;
  SELECT c_discount, c_last, c_credit INTO v_c_discount, v_c_last, v_c_credit
    FROM customer WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_id = p_c_id;
  FOR i IN 1..n LOOP
    IF p_supply[i] <> p_w_id THEN v_all_local := 0; END IF;
  END LOOP;
  INSERT INTO orders (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_carrier_id, o_ol_cnt, o_all_local)
  VALUES (v_o_id, p_d_id, p_w_id, p_c_id, now(), NULL, n, v_all_local);
  INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES (v_o_id, p_d_id, p_w_id);
  FOR i IN 1..n LOOP
    SELECT i_price, i_name, i_data INTO v_i_price, v_i_name, v_i_data
      FROM item WHERE i_id = p_items[i];
    IF NOT FOUND THEN
      RAISE EXCEPTION 'item % not found', p_items[i] USING ERRCODE = 'TPCRB';
    END IF;
    PERFORM pg_advisory_xact_lock(p_supply[i]::bigint * 1000000 + p_items[i]);
    UPDATE orderline_stock
       SET s_quantity = CASE WHEN s_quantity >= p_qty[i] + 10 THEN s_quantity - p_qty[i]
                             ELSE s_quantity - p_qty[i] + 91 END,
           s_ytd = s_ytd + p_qty[i],
           s_order_cnt = s_order_cnt + 1,
           s_remote_cnt = s_remote_cnt + (p_supply[i] <> p_w_id)::int
     WHERE s_w_id = p_supply[i] AND s_i_id = p_items[i];
    SELECT * INTO s FROM orderline_stock
     WHERE s_w_id = p_supply[i] AND s_i_id = p_items[i] LIMIT 1;
    v_dist := CASE p_d_id WHEN 1 THEN s.s_dist_01 WHEN 2 THEN s.s_dist_02 WHEN 3 THEN s.s_dist_03
                WHEN 4 THEN s.s_dist_04 WHEN 5 THEN s.s_dist_05 WHEN 6 THEN s.s_dist_06
                WHEN 7 THEN s.s_dist_07 WHEN 8 THEN s.s_dist_08 WHEN 9 THEN s.s_dist_09
                ELSE s.s_dist_10 END;
    INSERT INTO orderline_stock
    VALUES (s.s_w_id, s.s_i_id, s.s_quantity, s.s_ytd, s.s_order_cnt, s.s_remote_cnt, s.s_data,
            s.s_dist_01, s.s_dist_02, s.s_dist_03, s.s_dist_04, s.s_dist_05,
            s.s_dist_06, s.s_dist_07, s.s_dist_08, s.s_dist_09, s.s_dist_10,
            p_w_id, p_d_id, v_o_id, i, NULL, p_qty[i], p_qty[i] * v_i_price, v_dist);
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION tpcc_order_status_impl(p_w_id int, p_d_id int, p_c_id int, p_c_last text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_c_id int := p_c_id; v_ids int[]; v_balance numeric; v_first text;
  v_o_id int; v_carrier int; v_cnt int; v_sum numeric;
BEGIN
  IF p_c_last IS NOT NULL THEN
    SELECT array_agg(c_id ORDER BY c_first) INTO v_ids FROM customer
     WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_last = p_c_last;
    v_c_id := v_ids[(array_length(v_ids, 1) + 1) / 2];
  END IF;
  SELECT c_balance, c_first INTO v_balance, v_first FROM customer
   WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_id = v_c_id;
  SELECT o_id, o_carrier_id INTO v_o_id, v_carrier FROM orders
   WHERE o_w_id = p_w_id AND o_d_id = p_d_id AND o_c_id = v_c_id ORDER BY o_id DESC LIMIT 1;
  SELECT count(*), sum(ol_amount) INTO v_cnt, v_sum FROM orderline_stock
   WHERE ol_w_id = p_w_id AND ol_d_id = p_d_id AND ol_o_id = v_o_id;
END $$;

CREATE OR REPLACE FUNCTION tpcc_delivery_impl(p_w_id int, p_carrier int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_o_id int; v_c_id int; v_total numeric;
BEGIN
  FOR d IN 1..10 LOOP
    SELECT no_o_id INTO v_o_id FROM new_order WHERE no_w_id = p_w_id AND no_d_id = d
     ORDER BY no_o_id LIMIT 1 FOR UPDATE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;
    DELETE FROM new_order WHERE no_w_id = p_w_id AND no_d_id = d AND no_o_id = v_o_id;
    UPDATE orders SET o_carrier_id = p_carrier
     WHERE o_w_id = p_w_id AND o_d_id = d AND o_id = v_o_id RETURNING o_c_id INTO v_c_id;
    UPDATE orderline_stock SET ol_delivery_d = now()
     WHERE ol_w_id = p_w_id AND ol_d_id = d AND ol_o_id = v_o_id;
    SELECT sum(ol_amount) INTO v_total FROM orderline_stock
     WHERE ol_w_id = p_w_id AND ol_d_id = d AND ol_o_id = v_o_id;
    UPDATE customer SET c_balance = c_balance + v_total, c_delivery_cnt = c_delivery_cnt + 1
     WHERE c_w_id = p_w_id AND c_d_id = d AND c_id = v_c_id;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION tpcc_stock_level_impl(p_w_id int, p_d_id int, p_threshold int)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_next int; v_cnt int;
BEGIN
  SELECT d_next_o_id INTO v_next FROM district WHERE d_w_id = p_w_id AND d_id = p_d_id;
  SELECT count(DISTINCT s_i_id) INTO v_cnt FROM orderline_stock
   WHERE ol_w_id = p_w_id AND ol_d_id = p_d_id AND ol_o_id < v_next AND ol_o_id >= v_next - 20
     AND s_w_id = p_w_id AND s_quantity < p_threshold;
END $$;
