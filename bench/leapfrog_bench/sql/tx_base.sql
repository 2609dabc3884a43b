-- Application code for the original TPC-C schema (TPC-C 2.4-2.8).
--
-- The code of each migration's new schema (<migration>/tx.sql) is this file
-- with some of the fragments marked "--@ name" ... "--@ end" replaced; the
-- functions that contain them are deployed with the migration
-- (migrations.py, Migration.tx).

CREATE OR REPLACE FUNCTION tpcc_new_order_impl(p_w_id int, p_d_id int, p_c_id int,
    p_items int[], p_supply int[], p_qty int[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_w_tax numeric; v_d_tax numeric; v_o_id int;
  v_c_discount numeric; v_c_last text; v_c_credit text;
  v_i_price numeric; v_i_name text; v_i_data text;
  --@ new_order_vars
  v_s_data text; v_dist text; v_all_local int := 1; v_total numeric := 0;
  --@ end
  n int := array_length(p_items, 1);
BEGIN
  --@ new_order_begin
  --@ end
  SELECT w_tax INTO v_w_tax FROM warehouse WHERE w_id = p_w_id;
  UPDATE district SET d_next_o_id = d_next_o_id + 1
   WHERE d_w_id = p_w_id AND d_id = p_d_id
  RETURNING d_tax, d_next_o_id - 1 INTO v_d_tax, v_o_id;
  --@ new_order_customer
  SELECT c_discount, c_last, c_credit INTO v_c_discount, v_c_last, v_c_credit
    FROM customer WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_id = p_c_id;
  --@ end
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
    --@ new_order_line
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
    --@ end
  END LOOP;
  --@ new_order_end
  --@ end
END $$;

CREATE OR REPLACE FUNCTION tpcc_payment_impl(p_w_id int, p_d_id int, p_c_w_id int, p_c_d_id int,
    p_c_id int, p_c_last text, p_amount numeric) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_w_name text; v_d_name text; v_c_id int := p_c_id; v_ids int[];
  --@ payment_vars
  v_credit text; v_balance numeric;
  --@ end
BEGIN
  UPDATE warehouse SET w_ytd = w_ytd + p_amount WHERE w_id = p_w_id RETURNING w_name INTO v_w_name;
  UPDATE district SET d_ytd = d_ytd + p_amount WHERE d_w_id = p_w_id AND d_id = p_d_id
  RETURNING d_name INTO v_d_name;
  IF p_c_last IS NOT NULL THEN
    --@ payment_by_last
    SELECT array_agg(c_id ORDER BY c_first) INTO v_ids FROM customer
     WHERE c_w_id = p_c_w_id AND c_d_id = p_c_d_id AND c_last = p_c_last;
    --@ end
    v_c_id := v_ids[(array_length(v_ids, 1) + 1) / 2];
  END IF;
  --@ payment_customer
  SELECT c_credit INTO v_credit FROM customer
   WHERE c_w_id = p_c_w_id AND c_d_id = p_c_d_id AND c_id = v_c_id FOR UPDATE;
  IF v_credit = 'BC' THEN
    UPDATE customer SET c_balance = c_balance - p_amount, c_ytd_payment = c_ytd_payment + p_amount,
           c_payment_cnt = c_payment_cnt + 1,
           c_data = substr(format('%s %s %s %s %s %s | ', v_c_id, p_c_d_id, p_c_w_id, p_d_id, p_w_id, p_amount)
                           || c_data, 1, 500)
     WHERE c_w_id = p_c_w_id AND c_d_id = p_c_d_id AND c_id = v_c_id;
  ELSE
    UPDATE customer SET c_balance = c_balance - p_amount, c_ytd_payment = c_ytd_payment + p_amount,
           c_payment_cnt = c_payment_cnt + 1
     WHERE c_w_id = p_c_w_id AND c_d_id = p_c_d_id AND c_id = v_c_id;
  END IF;
  --@ end
  INSERT INTO history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, h_data)
  VALUES (v_c_id, p_c_d_id, p_c_w_id, p_d_id, p_w_id, now(), p_amount, v_w_name || '    ' || v_d_name);
END $$;

CREATE OR REPLACE FUNCTION tpcc_order_status_impl(p_w_id int, p_d_id int, p_c_id int, p_c_last text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_c_id int := p_c_id; v_ids int[]; v_balance numeric; v_first text;
  v_o_id int; v_carrier int; v_cnt int; v_sum numeric;
BEGIN
  IF p_c_last IS NOT NULL THEN
    --@ order_status_by_last
    SELECT array_agg(c_id ORDER BY c_first) INTO v_ids FROM customer
     WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_last = p_c_last;
    --@ end
    v_c_id := v_ids[(array_length(v_ids, 1) + 1) / 2];
  END IF;
  --@ order_status_customer
  SELECT c_balance, c_first INTO v_balance, v_first FROM customer
   WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_id = v_c_id;
  --@ end
  SELECT o_id, o_carrier_id INTO v_o_id, v_carrier FROM orders
   WHERE o_w_id = p_w_id AND o_d_id = p_d_id AND o_c_id = v_c_id ORDER BY o_id DESC LIMIT 1;
  --@ order_status_lines
  SELECT count(*), sum(ol_amount) INTO v_cnt, v_sum FROM order_line
   WHERE ol_w_id = p_w_id AND ol_d_id = p_d_id AND ol_o_id = v_o_id;
  --@ end
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
    --@ delivery_lines
    UPDATE order_line SET ol_delivery_d = now()
     WHERE ol_w_id = p_w_id AND ol_d_id = d AND ol_o_id = v_o_id;
    SELECT sum(ol_amount) INTO v_total FROM order_line
     WHERE ol_w_id = p_w_id AND ol_d_id = d AND ol_o_id = v_o_id;
    --@ end
    --@ delivery_customer
    UPDATE customer SET c_balance = c_balance + v_total, c_delivery_cnt = c_delivery_cnt + 1
     WHERE c_w_id = p_w_id AND c_d_id = d AND c_id = v_c_id;
    --@ end
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION tpcc_stock_level_impl(p_w_id int, p_d_id int, p_threshold int)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_next int; v_cnt int;
BEGIN
  SELECT d_next_o_id INTO v_next FROM district WHERE d_w_id = p_w_id AND d_id = p_d_id;
  --@ stock_level_count
  SELECT count(DISTINCT s_i_id) INTO v_cnt FROM order_line, stock
   WHERE ol_w_id = p_w_id AND ol_d_id = p_d_id AND ol_o_id < v_next AND ol_o_id >= v_next - 20
     AND s_w_id = p_w_id AND s_i_id = ol_i_id AND s_quantity < p_threshold;
  --@ end
END $$;
