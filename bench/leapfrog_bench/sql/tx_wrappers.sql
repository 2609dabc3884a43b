-- The five TPC-C transactions as the pgbench scripts call them.  These
-- wrappers are created once and never change: they draw the transaction's
-- inputs (TPC-C 2.4-2.8) and call the *_impl function, which is the
-- "application code" a migration replaces (CREATE OR REPLACE, in the same
-- transaction as the schema change).
--
-- A call of the old code that was already running when the schema switched
-- fails with 42P01/42703 (its table or column is gone); the wrapper then
-- runs the new code with the same inputs, as an application retries a
-- request, and counts it in the sequence tpcc_schema_retries.  The TPC-C 1%
-- NewOrder rollback is SQLSTATE TPCRB, raised by the impl, caught here.

CREATE FUNCTION tpcc_new_order(p_w_id int, p_scale int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_d_id  int := tpcc_rand(1, 10);
  v_c_id  int := tpcc_nurand(1023, 1, 3000, 259);
  v_cnt   int := tpcc_rand(5, 15);
  v_items int[];
  v_supply int[];
  v_qty   int[];
  v_tries int := 0;
BEGIN
  -- Sorted by (supply warehouse, item) so concurrent NewOrders lock stock
  -- rows in the same order and do not deadlock.
  SELECT array_agg(i ORDER BY s, i), array_agg(s ORDER BY s, i), array_agg(q ORDER BY s, i)
    INTO v_items, v_supply, v_qty
    FROM (SELECT tpcc_nurand(8191, 1, 100000, 7911) AS i,
                 CASE WHEN p_scale > 1 AND random() < 0.01
                      THEN 1 + (p_w_id + tpcc_rand(0, p_scale - 2)) % p_scale
                      ELSE p_w_id END AS s,
                 tpcc_rand(1, 10) AS q
            FROM generate_series(1, v_cnt)) x;
  IF random() < 0.01 THEN
    v_items[v_cnt] := 100001;          -- unused item: the order rolls back
  END IF;
  LOOP
    BEGIN
      PERFORM tpcc_new_order_impl(p_w_id, v_d_id, v_c_id, v_items, v_supply, v_qty);
      RETURN;
    EXCEPTION
      WHEN SQLSTATE 'TPCRB' THEN RETURN;
      WHEN undefined_table OR undefined_column OR undefined_function THEN
        v_tries := v_tries + 1;
        IF v_tries > 5 THEN RAISE; END IF;
        PERFORM nextval('tpcc_schema_retries');
    END;
  END LOOP;
END $$;

CREATE FUNCTION tpcc_payment(p_w_id int, p_scale int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_d_id   int := tpcc_rand(1, 10);
  v_c_w_id int := p_w_id;
  v_c_d_id int := v_d_id;
  v_c_id   int;
  v_c_last text;
  v_amount numeric(6,2) := tpcc_rand(100, 500000) / 100.0;
  v_tries  int := 0;
BEGIN
  IF p_scale > 1 AND random() < 0.15 THEN
    v_c_w_id := 1 + (p_w_id + tpcc_rand(0, p_scale - 2)) % p_scale;
    v_c_d_id := tpcc_rand(1, 10);
  END IF;
  IF random() < 0.60 THEN
    v_c_last := tpcc_lastname(tpcc_nurand(255, 0, 999, 223));
  ELSE
    v_c_id := tpcc_nurand(1023, 1, 3000, 259);
  END IF;
  LOOP
    BEGIN
      PERFORM tpcc_payment_impl(p_w_id, v_d_id, v_c_w_id, v_c_d_id, v_c_id, v_c_last, v_amount);
      RETURN;
    EXCEPTION
      WHEN undefined_table OR undefined_column OR undefined_function THEN
        v_tries := v_tries + 1;
        IF v_tries > 5 THEN RAISE; END IF;
        PERFORM nextval('tpcc_schema_retries');
    END;
  END LOOP;
END $$;

CREATE FUNCTION tpcc_order_status(p_w_id int, p_scale int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_d_id   int := tpcc_rand(1, 10);
  v_c_id   int;
  v_c_last text;
  v_tries  int := 0;
BEGIN
  IF random() < 0.60 THEN
    v_c_last := tpcc_lastname(tpcc_nurand(255, 0, 999, 223));
  ELSE
    v_c_id := tpcc_nurand(1023, 1, 3000, 259);
  END IF;
  LOOP
    BEGIN
      PERFORM tpcc_order_status_impl(p_w_id, v_d_id, v_c_id, v_c_last);
      RETURN;
    EXCEPTION
      WHEN undefined_table OR undefined_column OR undefined_function THEN
        v_tries := v_tries + 1;
        IF v_tries > 5 THEN RAISE; END IF;
        PERFORM nextval('tpcc_schema_retries');
    END;
  END LOOP;
END $$;

CREATE FUNCTION tpcc_delivery(p_w_id int, p_scale int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_carrier int := tpcc_rand(1, 10);
  v_tries   int := 0;
BEGIN
  LOOP
    BEGIN
      PERFORM tpcc_delivery_impl(p_w_id, v_carrier);
      RETURN;
    EXCEPTION
      WHEN undefined_table OR undefined_column OR undefined_function THEN
        v_tries := v_tries + 1;
        IF v_tries > 5 THEN RAISE; END IF;
        PERFORM nextval('tpcc_schema_retries');
    END;
  END LOOP;
END $$;

CREATE FUNCTION tpcc_stock_level(p_w_id int, p_scale int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_d_id      int := tpcc_rand(1, 10);
  v_threshold int := tpcc_rand(10, 20);
  v_tries     int := 0;
BEGIN
  LOOP
    BEGIN
      PERFORM tpcc_stock_level_impl(p_w_id, v_d_id, v_threshold);
      RETURN;
    EXCEPTION
      WHEN undefined_table OR undefined_column OR undefined_function THEN
        v_tries := v_tries + 1;
        IF v_tries > 5 THEN RAISE; END IF;
        PERFORM nextval('tpcc_schema_retries');
    END;
  END LOOP;
END $$;
