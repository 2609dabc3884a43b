-- Application code for the aggregate schema: NewOrder records the order's
-- total, Delivery reads it instead of summing the order lines.  The
-- fragments of tx_base.sql it replaces.
--@ new_order_begin
  -- for the multi-step strategy's trigger, kept after its cut-over for
  -- transactions of the old code (multistep_cutover.sql); no effect otherwise
  PERFORM set_config('bench.new_code', 'on', true);
--@ new_order_end
  INSERT INTO order_total (ot_w_id, ot_d_id, ot_o_id, ot_amount)
  VALUES (p_w_id, p_d_id, v_o_id, v_total);
--@ delivery_lines
    UPDATE order_line SET ol_delivery_d = now()
     WHERE ol_w_id = p_w_id AND ol_d_id = d AND ol_o_id = v_o_id;
    SELECT ot_amount INTO v_total FROM order_total
     WHERE ot_w_id = p_w_id AND ot_d_id = d AND ot_o_id = v_o_id;
