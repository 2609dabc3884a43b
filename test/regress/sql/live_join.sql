--
-- live_join: a join whose inputs the script keeps.  An input whose join key
-- columns are NOT NULL is tracked in place (src/live.c): it stays where it
-- is, and its trigger claims the join key of each row written, migrating
-- the key's rows of both inputs first.  One whose key may be NULL on a
-- side the join preserves is replaced lazily (a row with a NULL key is a
-- unit of its own, keyed by a ctid that a BEFORE trigger does not know for
-- the row it inserts); elsewhere such a row joins nothing.  Every
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

-- A live input whose key may be NULL is tracked in place too where the
-- join does not preserve it (the nullable side of a LEFT JOIN, either side
-- of an inner join): a row with a NULL key joins nothing, so it is no unit
-- (lf_key_joins_nothing).  Its writes claim nothing, a key set to NULL or
-- from NULL migrates the other key first, and it is never a row left.
CREATE FUNCTION public.lj_done(target regclass) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
  EXECUTE format('SELECT count(*) FROM %s',
                 (SELECT p.done_keys::regclass FROM leapfrog.mapping p
                   WHERE p.target_relid = target)) INTO n;
  RETURN n;
END $$;
SELECT $$
  CREATE TABLE nk_items (id int PRIMARY KEY, name text NOT NULL);
  INSERT INTO nk_items SELECT g, 'i' || g FROM generate_series(1, 8) g;
  CREATE TABLE nk_lines (id int PRIMARY KEY, item int, qty int NOT NULL);
  CREATE INDEX ON nk_lines (item);
  INSERT INTO nk_lines SELECT g, CASE WHEN g % 4 = 0 THEN NULL ELSE 1 + g % 10 END, g
    FROM generate_series(1, 40) g;
$$ AS setup_n \gset
SET search_path = lj_eager;
SELECT public.regress_eager(:'setup_n');
SET search_path = lj_lazy;
SELECT public.regress_eager(:'setup_n');
SELECT $$
  CREATE TABLE nk_left AS SELECT i.id AS item, i.name, l.id AS line, l.qty
    FROM nk_items i LEFT JOIN nk_lines l ON l.item = i.id;
  CREATE TABLE nk_inner AS SELECT l.id AS line, l.item, i.name, l.qty
    FROM nk_lines l JOIN nk_items i ON i.id = l.item;
$$ AS script_n \gset
SET search_path = lj_eager;
SELECT public.regress_eager(:'script_n');
SET search_path = lj_lazy;
SELECT action, input, detail FROM leapfrog.plan(:'script_n') WHERE action <> 'mapping' ORDER BY 2;
-- the preserved side of an outer join, and a row mapping's table, are still replaced
SELECT action, input, detail FROM leapfrog.plan($$
  CREATE TABLE nk_right AS SELECT l.id AS line, i.name FROM nk_items i RIGHT JOIN nk_lines l ON l.item = i.id;
$$) WHERE action <> 'mapping' ORDER BY 2;
SELECT action, input, detail FROM leapfrog.plan($$
  CREATE TABLE nk_arch AS SELECT * FROM nk_lines WHERE qty > 30;
  CREATE TABLE nk_in AS SELECT l.id AS line, i.name FROM nk_lines l JOIN nk_items i ON i.id = l.item;
$$) WHERE action <> 'mapping' ORDER BY 2;
SELECT leapfrog.start('ljn', :'script_n');
-- the rows with a NULL key (10 of 40) are not rows left, in either mapping
SELECT leapfrog.remaining('ljn');
-- writes of rows with a NULL key claim nothing
SET search_path = lj_eager;
INSERT INTO nk_lines VALUES (100, NULL, 1);
UPDATE nk_lines SET qty = qty + 1000 WHERE item IS NULL;
DELETE FROM nk_lines WHERE id = 8;
SET search_path = lj_lazy;
INSERT INTO nk_lines VALUES (100, NULL, 1);
UPDATE nk_lines SET qty = qty + 1000 WHERE item IS NULL;
DELETE FROM nk_lines WHERE id = 8;
SELECT public.lj_done('lj_lazy.nk_left') AS left_done, public.lj_done('lj_lazy.nk_inner') AS inner_done;
-- a key set to NULL migrates the old key first, in each mapping
SET search_path = lj_eager;
UPDATE nk_lines SET item = NULL WHERE id = 1;
SET search_path = lj_lazy;
UPDATE nk_lines SET item = NULL WHERE id = 1;
SELECT public.lj_done('lj_lazy.nk_left') AS left_done, public.lj_done('lj_lazy.nk_inner') AS inner_done;
SELECT * FROM nk_left WHERE item = 2 ORDER BY line;
-- a key set from NULL migrates the new key first: the line joins item 3
-- from now on, and the rows migrated for item 3 are those of start()
SET search_path = lj_eager;
UPDATE nk_lines SET item = 3 WHERE id = 4;
SET search_path = lj_lazy;
UPDATE nk_lines SET item = 3 WHERE id = 4;
SELECT public.lj_done('lj_lazy.nk_left') AS left_done, public.lj_done('lj_lazy.nk_inner') AS inner_done;
SELECT * FROM nk_inner WHERE item = 3 ORDER BY line;
SELECT * FROM lj_eager.nk_inner WHERE item = 3 ORDER BY line;
SELECT leapfrog.remaining('ljn');
SELECT * FROM public.regress_compare('lj_lazy.nk_left', 'lj_eager.nk_left');
SELECT * FROM public.regress_compare('lj_lazy.nk_inner', 'lj_eager.nk_inner');
SELECT leapfrog.complete('ljn');
SELECT * FROM public.regress_compare('lj_lazy.nk_left', 'lj_eager.nk_left');
SELECT * FROM public.regress_compare('lj_lazy.nk_inner', 'lj_eager.nk_inner');
SELECT * FROM public.regress_compare('lj_lazy.nk_lines', 'lj_eager.nk_lines');
-- ... but where a row mapping of the table rides on the join's units, a
-- row with a NULL key is a unit all the same, the row (LF_KEY_ROW): here
-- nk_lines, dropped and tracked by the keys of the join with the live
-- nk_items, carries the archive of its big lines, some with no item.
SELECT $$
  CREATE TABLE nk_named AS SELECT l.id AS line, i.name FROM nk_items i JOIN nk_lines l ON l.item = i.id;
  CREATE TABLE nk_big AS SELECT * FROM nk_lines WHERE qty > 20;
  DROP TABLE nk_lines;
$$ AS script_c \gset
SET search_path = lj_eager;
SELECT public.regress_eager(:'script_c');
SET search_path = lj_lazy;
SELECT leapfrog.start('ljc', :'script_c');
SELECT count(*) AS big_without_item FROM nk_big WHERE item IS NULL;
SELECT leapfrog.remaining('ljc');
SELECT leapfrog.complete('ljc');
SELECT * FROM public.regress_compare('lj_lazy.nk_big', 'lj_eager.nk_big');
SELECT * FROM public.regress_compare('lj_lazy.nk_named', 'lj_eager.nk_named');
DROP FUNCTION public.lj_done(regclass);

DROP PROCEDURE public.lj_app(text);
DROP FUNCTION public.lj_keys_done();
DROP SCHEMA lj_eager CASCADE;
DROP SCHEMA lj_lazy CASCADE;
