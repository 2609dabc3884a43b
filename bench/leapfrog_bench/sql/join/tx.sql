-- Application code for the joined schema.  Every row of one stock item
-- carries that item's stock columns, so NewOrder updates them all and copies
-- them into the order line it adds; an advisory lock per (warehouse, item)
-- serializes that read-modify-insert (a plain row lock would not cover the
-- row a concurrent NewOrder is inserting).  The fragments of tx_base.sql it
-- replaces.
--@ new_order_vars
  v_all_local int := 1; s record; v_dist text;
--@ new_order_line
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
--@ order_status_lines
  SELECT count(*), sum(ol_amount) INTO v_cnt, v_sum FROM orderline_stock
   WHERE ol_w_id = p_w_id AND ol_d_id = p_d_id AND ol_o_id = v_o_id;
--@ delivery_lines
    UPDATE orderline_stock SET ol_delivery_d = now()
     WHERE ol_w_id = p_w_id AND ol_d_id = d AND ol_o_id = v_o_id;
    SELECT sum(ol_amount) INTO v_total FROM orderline_stock
     WHERE ol_w_id = p_w_id AND ol_d_id = d AND ol_o_id = v_o_id;
--@ stock_level_count
  SELECT count(DISTINCT s_i_id) INTO v_cnt FROM orderline_stock
   WHERE ol_w_id = p_w_id AND ol_d_id = p_d_id AND ol_o_id < v_next AND ol_o_id >= v_next - 20
     AND s_w_id = p_w_id AND s_quantity < p_threshold;
