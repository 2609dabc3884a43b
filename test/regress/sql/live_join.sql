--
-- live_join: a join whose inputs the script keeps.  An input whose join key
-- columns are NOT NULL is tracked in place (src/live.c): it stays where it
-- is, and its trigger claims the join key of each row written, migrating
-- the key's rows of both inputs first.  One whose key may be NULL is
-- replaced lazily (a row with a NULL key is a unit of its own, keyed by a
-- ctid that a BEFORE trigger does not know for the row it inserts).  Every
-- statement runs on both sides (lj_eager ran the script eagerly) and the
-- tables are compared.
--
CREATE SCHEMA lj_eager;
CREATE SCHEMA lj_lazy;
-- orders.cust is bigint and customers.id int: the join's keys convert
SELECT $$
  CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, region int);
  INSERT INTO customers SELECT g, 'c' || g, g % 3 FROM generate_series(1, 20) g;
  CREATE TABLE orders (id int PRIMARY KEY, cust bigint, amount int NOT NULL);
  CREATE INDEX orders_cust ON orders (cust);
  INSERT INTO orders SELECT g, CASE WHEN g % 10 = 0 THEN NULL ELSE g % 22 + 1 END, g
    FROM generate_series(1, 90) g;
$$ AS setup \gset
SET search_path = lj_eager;
SELECT public.regress_eager(:'setup');
SET search_path = lj_lazy;
SELECT public.regress_eager(:'setup');

SELECT $$
  CREATE TABLE order_names AS
    SELECT o.id, o.cust, c.name, o.amount FROM orders o LEFT JOIN customers c ON c.id = o.cust;
$$ AS script \gset
SET search_path = lj_eager;
SELECT public.regress_eager(:'script');
SET search_path = lj_lazy;
-- customers is tracked in place; orders (cust may be NULL) is replaced
SELECT action, input, detail FROM leapfrog.plan(:'script') WHERE action <> 'mapping' ORDER BY 2;
SELECT leapfrog.start('lj', :'script');
CREATE FUNCTION public.lj_keys_done() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
  EXECUTE format('SELECT count(*) FROM %s',
                 (SELECT p.done_keys::regclass FROM leapfrog.mapping p
                    JOIN leapfrog.migration m ON m.id = p.migration_id
                   WHERE m.name = 'lj' AND p.target_relid = 'lj_lazy.order_names'::regclass)) INTO n;
  RETURN n;
END $$;
-- the join's table of done keys holds the wider type
SELECT a.attname, a.atttypid::regtype
  FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
  JOIN pg_attribute a ON a.attrelid = p.done_keys AND a.attnum > 0
 WHERE m.name = 'lj' AND p.target_relid = 'order_names'::regclass ORDER BY a.attnum;
SELECT count(*) AS triggers FROM pg_trigger
 WHERE tgfoid = 'leapfrog.live_input_trigger'::regproc AND tgrelid = 'lj_lazy.customers'::regclass;

-- A write that changes no column the join reads migrates nothing.
SET search_path = lj_eager;
UPDATE customers SET region = region + 10 WHERE id = 2;
UPDATE customers SET name = 'renamed' WHERE id = 3;
SET search_path = lj_lazy;
UPDATE customers SET region = region + 10 WHERE id = 2;
SELECT public.lj_keys_done() AS keys_done;
-- A rename migrates the customer's key first: its orders keep the old name.
UPDATE customers SET name = 'renamed' WHERE id = 3;
SELECT public.lj_keys_done() AS keys_done;
SELECT * FROM order_names WHERE cust = 3 ORDER BY id;
-- A NULL in the key column fails as it would, and claims nothing.
SELECT public.regress_sqlstate($$INSERT INTO lj_lazy.customers VALUES (NULL, 'x', 0)$$);
SELECT public.lj_keys_done() AS keys_done;

CREATE PROCEDURE public.lj_app(s text) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_catalog.set_config('search_path', s, true);
  -- a key no order had at start(): claimed, and never computed from the
  -- order added later
  INSERT INTO customers VALUES (100, 'c100', 0);
  INSERT INTO orders VALUES (1000, 100, 5);
  -- a key changes: both keys migrate first
  UPDATE customers SET id = 101 WHERE id = 4;
  DELETE FROM customers WHERE id = 5;
  -- orders is replaced: a write of a row migrates its key through the copy
  UPDATE orders SET cust = 6 WHERE id = 7;
  UPDATE orders SET amount = -amount WHERE cust = 8;
  DELETE FROM orders WHERE id = 30;
  -- the new table
  UPDATE order_names SET name = 'x' WHERE id = 11;
  INSERT INTO order_names VALUES (2000, 9, 'n', 1);
  -- rolled back: the key it migrated is not migrated
  BEGIN
    UPDATE customers SET name = 'gone' WHERE id = 12;
    RAISE EXCEPTION 'undo';
  EXCEPTION WHEN raise_exception THEN NULL;
  END;
END $$;
CALL public.lj_app('lj_eager');
CALL public.lj_app('lj_lazy');
SELECT * FROM order_names WHERE cust IN (3, 4, 5, 6, 100, 101) OR id IN (7, 1000) ORDER BY id;
SELECT * FROM lj_eager.order_names WHERE cust IN (3, 4, 5, 6, 100, 101) OR id IN (7, 1000) ORDER BY id;
SELECT * FROM order_names WHERE cust = 12 ORDER BY id;
SELECT * FROM lj_eager.order_names WHERE cust = 12 ORDER BY id;
SET leapfrog.read_mode = compute;
SELECT * FROM public.regress_compare('lj_lazy.order_names', 'lj_eager.order_names');
RESET leapfrog.read_mode;
SELECT * FROM public.regress_compare('lj_lazy.customers', 'lj_eager.customers');
SELECT * FROM public.regress_compare('lj_lazy.orders', 'lj_eager.orders');
SELECT leapfrog.complete('lj');
SELECT * FROM public.regress_compare('lj_lazy.order_names', 'lj_eager.order_names');
SELECT * FROM public.regress_compare('lj_lazy.customers', 'lj_eager.customers');
SELECT * FROM public.regress_compare('lj_lazy.orders', 'lj_eager.orders');
-- the trigger went with the table of done keys
SELECT count(*) AS triggers FROM pg_trigger
 WHERE tgfoid = 'leapfrog.live_input_trigger'::regproc AND tgrelid = 'lj_lazy.customers'::regclass;

-- A join key that breaks the new table is set aside whole by the worker,
-- with on_error => 'quarantine': a copy of its rows of both live tables as
-- they were at start() goes into their quarantine tables, the tables keep
-- their rows, and the migration completes without the key.
SELECT $$
  CREATE TABLE qc_cust (id int PRIMARY KEY, name text NOT NULL);
  INSERT INTO qc_cust SELECT g, CASE WHEN g = 3 THEN 'bad' ELSE 'c' || g END
    FROM generate_series(1, 6) g;
  CREATE TABLE qc_ord (id int PRIMARY KEY, cust int NOT NULL, amt int);
  CREATE INDEX ON qc_ord (cust);
  INSERT INTO qc_ord SELECT g, 1 + g % 6, g FROM generate_series(1, 18) g;
$$ AS setup_q \gset
SELECT public.regress_eager(:'setup_q');
SELECT leapfrog.start('ljq', $$
  CREATE TABLE qc_names (id int, cust int, name text CHECK (name <> 'bad'));
  INSERT INTO qc_names SELECT o.id, o.cust, c.name FROM qc_ord o JOIN qc_cust c ON c.id = o.cust;
$$, on_error => 'quarantine');
ALTER SYSTEM SET leapfrog.background = on;
ALTER SYSTEM SET leapfrog.background_delay = 0;
SELECT pg_reload_conf();
SELECT leapfrog.wait('ljq', 60);
ALTER SYSTEM RESET leapfrog.background;
ALTER SYSTEM RESET leapfrog.background_delay;
SELECT pg_reload_conf();
SELECT name, state, error FROM leapfrog.migrations WHERE name = 'ljq';
-- customer 3's three orders are not in the new table
SELECT cust, count(*) FROM qc_names GROUP BY cust ORDER BY cust;
SELECT c.oid::regclass AS qcc FROM pg_class c
 WHERE c.relnamespace = 'leapfrog_quarantine'::regnamespace AND c.relname LIKE 'qc\_cust\_m%' \gset
SELECT c.oid::regclass AS qco FROM pg_class c
 WHERE c.relnamespace = 'leapfrog_quarantine'::regnamespace AND c.relname LIKE 'qc\_ord\_m%' \gset
SELECT id, name, failed_sqlstate FROM :qcc ORDER BY id;
SELECT id, cust, amt, failed_sqlstate FROM :qco ORDER BY id;
SELECT count(*) AS customers, count(*) FILTER (WHERE name = 'bad') AS bad FROM qc_cust;
SELECT count(*) AS orders FROM qc_ord;
DROP TABLE qc_names, qc_ord, qc_cust;

DROP PROCEDURE public.lj_app(text);
DROP FUNCTION public.lj_keys_done();
DROP SCHEMA lj_eager CASCADE;
DROP SCHEMA lj_lazy CASCADE;
