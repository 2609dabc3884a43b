-- Application code for the aggregate schema: NewOrder records the order's
-- total, Delivery reads it instead of summing the order lines.
CREATE OR REPLACE FUNCTION tpcc_new_order_impl(p_w_id int, p_d_id int, p_c_id int,
    p_items int[], p_supply int[], p_qty int[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_w_tax numeric; v_d_tax numeric; v_o_id int;
  v_c_discount numeric; v_c_last text; v_c_credit text;
  v_i_price numeric; v_i_name text; v_i_data text;
  v_s_data text; v_dist text; v_all_local int := 1; v_total numeric := 0;
  n int := array_length(p_items, 1);
BEGIN
  -- for the multi-step strategy's trigger, kept after its cut-over for
  -- transactions of the old code (multistep_cutover.sql); no effect otherwise
  PERFORM set_config('bench.new_code', 'on', true);
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
    UPDATE stock
       SET s_quantity = CASE WHEN s_quantity >= p_qty[i] + 10 THEN s_quantity - p_qty[i]
                             ELSE s_quantity - p_qty[i] + 91 END,
           s_ytd = s_ytd + p_qty[i],
           s_order_cnt = s_order_cnt + 1,
           s_remote_cnt = s_remote_cnt + (p_supply[i] <> p_w_id)::int
     WHERE s_w_id = p_supply[i] AND s_i_id = p_items[i]
    RETURNING s_data, CASE p_d_id WHEN 1 THEN s_dist_01 WHEN 2 THEN s_dist_02 WHEN 3 THEN s_dist_03
                      WHEN 4 THEN s_dist_04 WHEN 5 THEN s_dist_05 WHEN 6 THEN s_dist_06
                      WHEN 7 THEN s_dist_07 WHEN 8 THEN s_dist_08 WHEN 9 THEN s_dist_09
                      ELSE s_dist_10 END
      INTO v_s_data, v_dist;
    INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, ol_supply_w_id,
                            ol_delivery_d, ol_quantity, ol_amount, ol_dist_info)
    VALUES (v_o_id, p_d_id, p_w_id, i, p_items[i], p_supply[i], NULL, p_qty[i],
            p_qty[i] * v_i_price, v_dist);
    v_total := v_total + p_qty[i] * v_i_price;
  END LOOP;
  INSERT INTO order_total (ot_w_id, ot_d_id, ot_o_id, ot_amount)
  VALUES (p_w_id, p_d_id, v_o_id, v_total);
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
    UPDATE order_line SET ol_delivery_d = now()
     WHERE ol_w_id = p_w_id AND ol_d_id = d AND ol_o_id = v_o_id;
    SELECT ot_amount INTO v_total FROM order_total
     WHERE ot_w_id = p_w_id AND ot_d_id = d AND ot_o_id = v_o_id;
    UPDATE customer SET c_balance = c_balance + v_total, c_delivery_cnt = c_delivery_cnt + 1
     WHERE c_w_id = p_w_id AND c_d_id = d AND c_id = v_c_id;
  END LOOP;
END $$;
