--
-- live: mapping inputs the script does not drop stay live.  The application
-- keeps reading and writing them while their rows move, and the mappings
-- read them as they were at start().  An aggregate kept next to the lines
-- it sums, a column denormalized from a table that stays, an archive copy
-- of some rows: every statement and the final state are compared with the
-- eager run of the same script followed by the same statements (lv_eager).
--
CREATE SCHEMA lv_eager;
CREATE SCHEMA lv_lazy;
SELECT $$
  CREATE TABLE line (w int, o int, n int, amount int, PRIMARY KEY (w, o, n));
  INSERT INTO line SELECT w, o, n, w * 100 + o * 3 + n
    FROM generate_series(1, 2) w, generate_series(1, 30) o, generate_series(1, o % 4 + 1) n;
  CREATE TABLE customers (id int PRIMARY KEY, name text);
  INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, 20) g;
  CREATE TABLE orders (id int PRIMARY KEY, cust int REFERENCES customers, amount int);
  INSERT INTO orders SELECT g, CASE WHEN g % 9 = 0 THEN NULL ELSE g % 18 + 1 END, g
    FROM generate_series(1, 80) g;
  CREATE INDEX orders_cust ON orders (cust);
  CREATE TABLE events (id int PRIMARY KEY, kind text, at int);
  INSERT INTO events SELECT g, CASE WHEN g % 3 = 0 THEN 'old' ELSE 'new' END, g FROM generate_series(1, 60) g;
$$ AS setup \gset
SET search_path = lv_eager;
SELECT public.regress_eager(:'setup');
SET search_path = lv_lazy;
SELECT public.regress_eager(:'setup');

-- line, customers and events stay; orders is dropped.
SELECT $$
  CREATE TABLE total (w int, o int, lines bigint, amount bigint, PRIMARY KEY (w, o));
  INSERT INTO total SELECT w, o, count(*), sum(amount) FROM line GROUP BY w, o;
  CREATE TABLE orders_v2 (id int PRIMARY KEY, cust int REFERENCES customers ON DELETE CASCADE,
                          cust_name text, amount int);
  INSERT INTO orders_v2
  SELECT o.id, o.cust, c.name, o.amount FROM orders o LEFT JOIN customers c ON c.id = o.cust;
  DROP TABLE orders;
  CREATE TABLE archive AS SELECT id, at FROM events WHERE kind = 'old';
$$ AS script \gset
SET search_path = lv_eager;
SELECT public.regress_eager(:'script');
SET search_path = lv_lazy;
SELECT leapfrog.start('live', :'script');
-- customers (a join's, key NOT NULL), line (a GROUP BY) and events (only a
-- row mapping, by its primary key) are tracked in place; orders, retired,
-- is tracked by the join's keys.
SELECT i.orig_name, i.live_keys IS NOT NULL AS tracked
  FROM leapfrog.input i JOIN leapfrog.migration m ON m.id = i.migration_id
 WHERE m.name = 'live' ORDER BY 1;
SELECT leapfrog.remaining('live');
-- Writes of a live table first migrate what they touch, with its group.
SELECT public.regress_explain('UPDATE line SET amount = amount + 1000 WHERE w = 1 AND o = 5');
-- The same statements on both sides, then the tables compared.
CREATE PROCEDURE public.lv_app(s text) LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.set_config('search_path', s, true);
    -- a line of a group not migrated yet: its total stays the one at start()
    UPDATE line SET amount = amount + 1000 WHERE w = 1 AND o = 5;
    -- a new group, and a line added to a group not migrated yet
    INSERT INTO line VALUES (3, 1, 1, 7), (2, 7, 9, 9999);
    DELETE FROM line WHERE w = 2 AND o = 8;
    -- the application's own totals
    UPDATE total SET amount = amount + 1 WHERE w = 1 AND o = 6;
    INSERT INTO total VALUES (3, 1, 1, 7);
    -- the denormalized name stays as it was at start()
    UPDATE customers SET name = 'renamed' WHERE id = 3;
    INSERT INTO customers VALUES (21, 'new');
    -- a new table's foreign key to a live table: checked against its copy,
    -- and its action applies to rows not migrated yet
    DELETE FROM customers WHERE id = 18;
    INSERT INTO orders_v2 VALUES (1000, 21, 'new', 1);
    UPDATE orders_v2 SET amount = -amount WHERE id = 10;
    -- the archive has the old events as they were at start()
    UPDATE events SET at = -at WHERE id = 3;
    INSERT INTO events VALUES (100, 'old', 100);
    DELETE FROM events WHERE id = 6;
    UPDATE events SET kind = 'old' WHERE id = 7;
END $$;
CALL public.lv_app('lv_eager');
CALL public.lv_app('lv_lazy');
SELECT leapfrog.remaining('live');
SELECT * FROM total WHERE w = 1 AND o IN (5, 6) ORDER BY o;
SELECT * FROM lv_eager.total WHERE w = 1 AND o IN (5, 6) ORDER BY o;
SELECT * FROM total WHERE (w, o) IN ((2, 7), (2, 8), (3, 1)) ORDER BY w, o;
SELECT * FROM lv_eager.total WHERE (w, o) IN ((2, 7), (2, 8), (3, 1)) ORDER BY w, o;
SELECT * FROM orders_v2 WHERE cust = 3 ORDER BY id;
SELECT * FROM lv_eager.orders_v2 WHERE cust = 3 ORDER BY id;
SELECT * FROM archive WHERE id IN (3, 6, 7, 100) ORDER BY id;
SELECT * FROM lv_eager.archive WHERE id IN (3, 6, 7, 100) ORDER BY id;
-- The live tables read as the application left them.
SELECT * FROM public.regress_compare('lv_lazy.line', 'lv_eager.line');
SELECT * FROM public.regress_compare('lv_lazy.customers', 'lv_eager.customers');
SELECT * FROM public.regress_compare('lv_lazy.events', 'lv_eager.events');
SELECT leapfrog.remaining('live');

SELECT leapfrog.complete('live');
SELECT name, state, tuples_total, tuples_migrated, error
  FROM leapfrog.migrations WHERE name = 'live';
SELECT * FROM public.regress_compare('lv_lazy.total', 'lv_eager.total');
SELECT * FROM public.regress_compare('lv_lazy.orders_v2', 'lv_eager.orders_v2');
SELECT * FROM public.regress_compare('lv_lazy.archive', 'lv_eager.archive');
SELECT * FROM public.regress_compare('lv_lazy.line', 'lv_eager.line');
SELECT * FROM public.regress_compare('lv_lazy.customers', 'lv_eager.customers');
SELECT * FROM public.regress_compare('lv_lazy.events', 'lv_eager.events');
-- The live tables keep their definitions (a lazy replacement).
SELECT * FROM public.regress_shape('lv_lazy.line');
SELECT * FROM public.regress_shape('lv_lazy.customers');

-- The same with the background workers.
SET search_path = lv_eager;
DROP TABLE total, orders_v2, archive, line, customers, events;
SELECT public.regress_eager(:'setup');
SELECT public.regress_eager(:'script');
SET search_path = lv_lazy;
DROP TABLE total, orders_v2, archive, line, customers, events;
SELECT public.regress_eager(:'setup');
SELECT leapfrog.start('live_background', :'script');
CALL public.lv_app('lv_eager');
CALL public.lv_app('lv_lazy');
ALTER SYSTEM SET leapfrog.background = on;
ALTER SYSTEM SET leapfrog.background_delay = 0;
ALTER SYSTEM SET leapfrog.batch_size = 40;
SELECT pg_reload_conf();
SELECT leapfrog.wait('live_background', 60);
ALTER SYSTEM RESET leapfrog.background;
ALTER SYSTEM RESET leapfrog.background_delay;
ALTER SYSTEM RESET leapfrog.batch_size;
SELECT pg_reload_conf();
SELECT name, state, tuples_total, tuples_migrated, error
  FROM leapfrog.migrations WHERE name = 'live_background';
SELECT * FROM public.regress_compare('lv_lazy.total', 'lv_eager.total');
SELECT * FROM public.regress_compare('lv_lazy.orders_v2', 'lv_eager.orders_v2');
SELECT * FROM public.regress_compare('lv_lazy.archive', 'lv_eager.archive');
SELECT * FROM public.regress_compare('lv_lazy.line', 'lv_eager.line');
SELECT * FROM public.regress_compare('lv_lazy.customers', 'lv_eager.customers');
SELECT * FROM public.regress_compare('lv_lazy.events', 'lv_eager.events');

-- A live table replaced lazily (here because tracking in place is off):
-- what a replacement cannot carry is refused, with nothing changed.
CREATE TABLE src (id int PRIMARY KEY, v int);
INSERT INTO src SELECT g, g FROM generate_series(1, 10) g;
CREATE VIEW src_view AS SELECT * FROM src;
SET leapfrog.track_live_inputs = off;
SELECT leapfrog.start('bad', $$
  CREATE TABLE dst (id int PRIMARY KEY, v int);
  INSERT INTO dst SELECT id, v FROM src;
$$);
RESET leapfrog.track_live_inputs;
SELECT count(*) AS no_migration FROM leapfrog.migrations WHERE name = 'bad';
SELECT to_regclass('lv_lazy.dst') AS dst;
-- Tracked in place by its primary key (the default), the table stays, and
-- so does its view.
SELECT leapfrog.start('viewed', $$
  CREATE TABLE dst (id int PRIMARY KEY, v int);
  INSERT INTO dst SELECT id, v FROM src;
$$);
UPDATE src SET v = -v WHERE id = 3;
SELECT * FROM dst WHERE id IN (2, 3) ORDER BY id;
SELECT count(*), sum(v) FROM src_view;
SELECT leapfrog.complete('viewed');
SELECT count(*), sum(v) FROM dst;

RESET search_path;
DROP SCHEMA lv_eager CASCADE;
DROP SCHEMA lv_lazy CASCADE;
DROP PROCEDURE public.lv_app(text);
