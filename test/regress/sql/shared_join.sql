--
-- shared_join: a table read by a join mapping and by another GROUP BY or join
-- mapping.  Their units differ (a line's stock item, its order), so the
-- table is tracked by keys (src/start.c, track_shared_retired): a table of
-- done keys per mapping, nothing deleted from the retired inputs, and the
-- join's other input tracked by the join's keys too.  A table the script
-- keeps is tracked in place, with a trigger that claims the units of the
-- rows written (a join's key columns NOT NULL), or replaced lazily first,
-- its copy's rows moving with the first mapping's units.  Every write below runs on both
-- sides (sj_eager ran the script eagerly) and the tables are compared.
--
CREATE SCHEMA sj_eager;
CREATE SCHEMA sj_lazy;
SELECT $$
  CREATE TABLE line (o int NOT NULL, n int NOT NULL, w int NOT NULL, i int NOT NULL,
                     amt int NOT NULL, PRIMARY KEY (o, n));
  CREATE INDEX line_wi ON line (w, i);
  CREATE TABLE stock (w int NOT NULL, i int NOT NULL, qty int NOT NULL, PRIMARY KEY (w, i));
  CREATE TABLE orders (o int PRIMARY KEY, cust text NOT NULL);
  -- items 9, 18, ... are not stocked; stock rows of item 40 have no line
  INSERT INTO stock SELECT w, i, (w * 7 + i) % 50 FROM generate_series(1, 3) w,
                    generate_series(1, 40) i WHERE i % 9 <> 0;
  INSERT INTO line SELECT o, n, 1 + (o + n) % 3, 1 + (o * n) % 39, (o * 13 + n) % 100
                     FROM generate_series(1, 60) o, generate_series(1, 4) n;
  -- orders 55 to 64: 61 to 64 have no line
  INSERT INTO orders SELECT o, 'c' || o % 7 FROM generate_series(5, 64) o;
$$ AS setup \gset
SET search_path = sj_eager;
SELECT public.regress_eager(:'setup');
SET search_path = sj_lazy;
SELECT public.regress_eager(:'setup');

-- 1. Retired: the join of each line with its stock row, the orders'
-- totals, an archive of the stock, and the orders with their lines (a right
-- join: an order without lines gives a row).
SELECT $$
  CREATE TABLE line_stock AS
    SELECT l.o, l.n, l.w, l.i, l.amt, s.qty FROM line l LEFT JOIN stock s ON s.w = l.w AND s.i = l.i;
  CREATE TABLE total AS SELECT o, count(*) AS lines, sum(amt) AS amt FROM line GROUP BY o;
  CREATE TABLE stock_archive AS SELECT w, i, qty FROM stock WHERE qty > 10;
  CREATE TABLE order_lines AS
    SELECT r.o, r.cust, l.n, l.amt FROM line l RIGHT JOIN orders r ON r.o = l.o;
  DROP TABLE line;
  DROP TABLE stock;
  DROP TABLE orders;
$$ AS script \gset
SET search_path = sj_eager;
SELECT public.regress_eager(:'script');
SET search_path = sj_lazy;
SELECT leapfrog.start('sj', :'script');
-- a table of done keys per GROUP BY or join mapping; the archive's rows
-- move with the join's keys (its carrier)
SELECT p.target_relid::regclass AS target, p.done_keys IS NOT NULL AS by_keys,
       (SELECT q.target_relid::regclass FROM leapfrog.mapping q
         WHERE q.migration_id = p.migration_id AND q.done_keys = p.done_keys ORDER BY q.id LIMIT 1) AS carrier
  FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
 WHERE m.name = 'sj' ORDER BY p.id;
SELECT i.orig_name, i.live_keys IS NOT NULL AS by_keys
  FROM leapfrog.input i JOIN leapfrog.migration m ON m.id = i.migration_id
 WHERE m.name = 'sj' ORDER BY 1;
-- Keys migrated per mapping (a count of its table of done keys; a row
-- mapping shows its carrier's).
CREATE FUNCTION public.sj_done(mig text) RETURNS TABLE (target regclass, keys_done bigint)
LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT p.target_relid::regclass AS t, p.done_keys::regclass AS k
             FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
            WHERE m.name = mig AND p.done_keys IS NOT NULL ORDER BY p.id LOOP
    target := r.t;
    EXECUTE format('SELECT count(*) FROM %s', r.k) INTO keys_done;
    RETURN NEXT;
  END LOOP;
END $$;
-- the rows each mapping still reads: lines 240 for each of three mappings,
-- stock 105 for the join (the archive rides on it), orders 60
SELECT leapfrog.remaining('sj');
SELECT * FROM public.sj_done('sj');
-- a read of a line's stock item migrates that item's key (its stock row and
-- every line of it), for the join only
SELECT * FROM line_stock WHERE o = 17 AND n = 2;
SELECT * FROM public.sj_done('sj');
SELECT count(*) AS lines_of_item FROM line_stock WHERE w = 2 AND i = 35;
SELECT * FROM stock_archive WHERE w = 2 AND i = 35;
-- an order's total migrates its group, nothing else
SELECT * FROM total WHERE o = 17;
SELECT * FROM public.sj_done('sj');
-- the right join: an order without lines, and one with
SELECT * FROM order_lines WHERE o IN (17, 62) ORDER BY o, n;
SELECT * FROM public.sj_done('sj');
-- a computing read migrates nothing and sees what eager does
SET leapfrog.read_mode = compute;
SELECT * FROM public.regress_compare('sj_lazy.line_stock', 'sj_eager.line_stock');
SELECT * FROM public.regress_compare('sj_lazy.total', 'sj_eager.total');
SELECT * FROM public.regress_compare('sj_lazy.stock_archive', 'sj_eager.stock_archive');
SELECT * FROM public.regress_compare('sj_lazy.order_lines', 'sj_eager.order_lines');
SELECT * FROM public.sj_done('sj');
RESET leapfrog.read_mode;
SELECT leapfrog.complete('sj');
SELECT * FROM public.regress_compare('sj_lazy.line_stock', 'sj_eager.line_stock');
SELECT * FROM public.regress_compare('sj_lazy.total', 'sj_eager.total');
SELECT * FROM public.regress_compare('sj_lazy.stock_archive', 'sj_eager.stock_archive');
SELECT * FROM public.regress_compare('sj_lazy.order_lines', 'sj_eager.order_lines');
SELECT state FROM leapfrog.migrations WHERE name = 'sj';
-- the retired tables and the tables of done keys are gone
-- The retired tables and tables of done keys of a migration still there,
-- and the triggers on its live inputs: none once it is complete.
CREATE FUNCTION public.sj_tables_left(mig text) RETURNS bigint LANGUAGE sql AS $$
  SELECT (SELECT count(*) FROM pg_class c
           WHERE c.relnamespace = 'leapfrog_retired'::regnamespace
             AND c.oid IN (SELECT i.relid FROM leapfrog.input i JOIN leapfrog.migration m ON m.id = i.migration_id
                            WHERE m.name = mig AND i.live_keys IS NOT NULL
                           UNION
                           SELECT p.done_keys FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
                            WHERE m.name = mig))
       + (SELECT count(*) FROM pg_trigger t
           WHERE t.tgfoid = 'leapfrog.live_input_trigger'::regproc
             AND t.tgrelid IN (SELECT i.relid FROM leapfrog.input i JOIN leapfrog.migration m ON m.id = i.migration_id
                                WHERE m.name = mig))
$$;
SELECT public.sj_tables_left('sj');

-- 2. Kept: the tables stay live, tracked in place (their join key columns
-- are NOT NULL): one table of done keys for the join, which a write of
-- either table claims through that table's trigger, and one for the
-- GROUP BY.  The application writes both tables meanwhile.
SELECT $$
  CREATE TABLE line2 (o int NOT NULL, n int NOT NULL, w int NOT NULL, i int NOT NULL,
                      amt int NOT NULL, PRIMARY KEY (o, n));
  CREATE INDEX line2_wi ON line2 (w, i);
  CREATE TABLE stock2 (w int NOT NULL, i int NOT NULL, qty int NOT NULL, PRIMARY KEY (w, i));
  INSERT INTO stock2 SELECT w, i, (w * 7 + i) % 50 FROM generate_series(1, 3) w,
                     generate_series(1, 40) i WHERE i % 9 <> 0;
  INSERT INTO line2 SELECT o, n, 1 + (o + n) % 3, 1 + (o * n) % 39, (o * 13 + n) % 100
                      FROM generate_series(1, 60) o, generate_series(1, 4) n;
$$ AS setup2 \gset
SET search_path = sj_eager;
SELECT public.regress_eager(:'setup2');
SET search_path = sj_lazy;
SELECT public.regress_eager(:'setup2');
SELECT $$
  CREATE TABLE line2_stock AS
    SELECT l.o, l.n, l.amt, s.w, s.i, s.qty FROM line2 l JOIN stock2 s ON s.w = l.w AND s.i = l.i;
  CREATE TABLE total2 AS SELECT o, count(*) AS lines, sum(amt) AS amt FROM line2 GROUP BY o;
$$ AS script2 \gset
SET search_path = sj_eager;
SELECT public.regress_eager(:'script2');
SET search_path = sj_lazy;
SELECT action, input FROM leapfrog.plan(:'script2') WHERE action <> 'mapping' ORDER BY 2;
SELECT leapfrog.start('sj2', :'script2');
-- two tables of done keys, and a trigger on each live table
SELECT public.sj_tables_left('sj2');
SELECT p.target_relid::regclass AS target, p.done_keys IS NOT NULL AS by_keys,
       (SELECT q.target_relid::regclass FROM leapfrog.mapping q
         WHERE q.migration_id = p.migration_id AND q.done_keys = p.done_keys ORDER BY q.id LIMIT 1) AS carrier
  FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
 WHERE m.name = 'sj2' ORDER BY p.id;
CREATE PROCEDURE public.sj_app(s text) LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('SET LOCAL search_path = %I', s);
  UPDATE stock2 SET qty = qty + 100 WHERE w = 2 AND i = 5;         -- a stock row with lines
  UPDATE line2 SET amt = amt + 1000 WHERE o = 3;                   -- an order's lines
  UPDATE line2 SET i = 40 WHERE o = 4 AND n = 1;                   -- a line moves to another item
  DELETE FROM stock2 WHERE w = 3 AND i = 11;                       -- a stock row and its join rows
  DELETE FROM line2 WHERE o = 5;                                   -- a whole order
  INSERT INTO line2 VALUES (61, 1, 1, 1, 7);                       -- a new order, on a stocked item
  INSERT INTO stock2 VALUES (1, 9, 3);                             -- an item stocked since
  INSERT INTO line2 VALUES (62, 1, 1, 9, 8);                       -- and a line of it
  UPDATE line2_stock SET qty = -1 WHERE o = 6 AND n = 1;           -- the new table
  UPDATE total2 SET amt = 0 WHERE o = 7;
END $$;
CALL public.sj_app('sj_eager');
CALL public.sj_app('sj_lazy');
SELECT * FROM public.sj_done('sj2');
SELECT * FROM line2_stock WHERE o IN (3, 4, 61, 62) ORDER BY o, n;
SELECT * FROM sj_eager.line2_stock WHERE o IN (3, 4, 61, 62) ORDER BY o, n;
SELECT * FROM total2 WHERE o IN (3, 5, 61) ORDER BY o;
SELECT * FROM sj_eager.total2 WHERE o IN (3, 5, 61) ORDER BY o;
SET leapfrog.read_mode = compute;
SELECT * FROM public.regress_compare('sj_lazy.line2_stock', 'sj_eager.line2_stock');
SELECT * FROM public.regress_compare('sj_lazy.total2', 'sj_eager.total2');
SELECT * FROM public.regress_compare('sj_lazy.line2', 'sj_eager.line2');
SELECT * FROM public.regress_compare('sj_lazy.stock2', 'sj_eager.stock2');
RESET leapfrog.read_mode;
SELECT leapfrog.complete('sj2');
SELECT * FROM public.regress_compare('sj_lazy.line2_stock', 'sj_eager.line2_stock');
SELECT * FROM public.regress_compare('sj_lazy.total2', 'sj_eager.total2');
SELECT * FROM public.regress_compare('sj_lazy.line2', 'sj_eager.line2');
SELECT * FROM public.regress_compare('sj_lazy.stock2', 'sj_eager.stock2');
SELECT public.sj_tables_left('sj2');

-- The same with the background workers: they walk each retired table and
-- claim its keys in every mapping that tracks it.
SET search_path = sj_eager;
DROP TABLE line2_stock, total2, line2, stock2;
SELECT public.regress_eager(:'setup2');
SELECT public.regress_eager(:'script2');
SET search_path = sj_lazy;
DROP TABLE line2_stock, total2, line2, stock2;
SELECT public.regress_eager(:'setup2');
SELECT leapfrog.start('sj2_background', :'script2');
CALL public.sj_app('sj_eager');
CALL public.sj_app('sj_lazy');
ALTER SYSTEM SET leapfrog.background = on;
ALTER SYSTEM SET leapfrog.background_delay = 0;
ALTER SYSTEM SET leapfrog.batch_size = 40;
SELECT pg_reload_conf();
SELECT leapfrog.wait('sj2_background', 60);
SELECT name, state, error FROM leapfrog.migrations WHERE name = 'sj2_background';
SELECT * FROM public.regress_compare('sj_lazy.line2_stock', 'sj_eager.line2_stock');
SELECT * FROM public.regress_compare('sj_lazy.total2', 'sj_eager.total2');
SELECT * FROM public.regress_compare('sj_lazy.line2', 'sj_eager.line2');
SELECT * FROM public.regress_compare('sj_lazy.stock2', 'sj_eager.stock2');

-- A join key that breaks the join's new table is set aside whole, with
-- on_error => 'quarantine': its rows of both inputs go into their
-- quarantine tables, and the orders' totals, which read the same lines,
-- keep every line (src/failed.c, quarantine_group).
SELECT $$
  CREATE TABLE qj_line (o int NOT NULL, n int NOT NULL, w int NOT NULL, i int NOT NULL,
                       amt int NOT NULL);
  CREATE INDEX ON qj_line (w, i);
  CREATE INDEX ON qj_line (o);
  CREATE TABLE qj_stock (w int NOT NULL, i int NOT NULL, qty int NOT NULL, PRIMARY KEY (w, i));
  INSERT INTO qj_stock SELECT w, i, w * 10 + i FROM generate_series(1, 2) w, generate_series(1, 5) i;
  INSERT INTO qj_line SELECT o, n, 1 + (o + n) % 2, 1 + (o * n) % 5, o * 10 + n
                       FROM generate_series(1, 8) o, generate_series(1, 2) n;
$$ AS setup_q \gset
SELECT $$
  CREATE TABLE qj_ls (o int, n int, w int, i int, qty int CHECK (qty <> 13));
  INSERT INTO qj_ls SELECT l.o, l.n, s.w, s.i, s.qty FROM qj_line l JOIN qj_stock s ON s.w = l.w AND s.i = l.i;
  CREATE TABLE qj_total AS SELECT o, sum(amt) AS amt FROM qj_line GROUP BY o;
  DROP TABLE qj_line; DROP TABLE qj_stock;
$$ AS script_q \gset
SET search_path = sj_lazy;
SELECT public.regress_eager(:'setup_q');
SELECT leapfrog.start('sjq', :'script_q', on_error => 'quarantine');
SELECT leapfrog.wait('sjq', 60);
ALTER SYSTEM RESET leapfrog.background;
ALTER SYSTEM RESET leapfrog.background_delay;
ALTER SYSTEM RESET leapfrog.batch_size;
SELECT pg_reload_conf();
SELECT name, state, error FROM leapfrog.migrations WHERE name = 'sjq';
-- stock row (1, 3) breaks the CHECK: lines (6, 2) and (7, 1) are its key's
SELECT * FROM qj_ls ORDER BY o, n;
SELECT * FROM qj_total ORDER BY o;
SELECT c.oid::regclass AS ql FROM pg_class c
 WHERE c.relnamespace = 'leapfrog_quarantine'::regnamespace AND c.relname LIKE 'qj\_line\_m%' \gset
SELECT c.oid::regclass AS qs FROM pg_class c
 WHERE c.relnamespace = 'leapfrog_quarantine'::regnamespace AND c.relname LIKE 'qj\_stock\_m%' \gset
SELECT o, n, w, i, amt, failed_sqlstate FROM :ql ORDER BY o, n;
SELECT w, i, qty, failed_sqlstate FROM :qs ORDER BY w, i;
SELECT count(*) AS failed_rows_left FROM leapfrog.failed_rows WHERE migration = 'sjq';

-- With leapfrog.track_live_inputs = off, a live table two GROUP BY
-- mappings read is replaced and its retired version tracked by keys (it
-- was refused).
SELECT $$
  CREATE TABLE by_o AS SELECT o, sum(amt) AS amt FROM line2 GROUP BY o;
  CREATE TABLE by_i AS SELECT w, i, count(*) AS n FROM line2 GROUP BY w, i;
$$ AS script3 \gset
SET search_path = sj_eager;
SELECT public.regress_eager(:'script3');
SET search_path = sj_lazy;
SET leapfrog.track_live_inputs = off;
SELECT action, input FROM leapfrog.plan(:'script3') WHERE action <> 'mapping';
SELECT leapfrog.start('sj3', :'script3');
RESET leapfrog.track_live_inputs;
SELECT p.target_relid::regclass AS target, p.done_keys IS NOT NULL AS by_keys
  FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
 WHERE m.name = 'sj3' ORDER BY p.id;
UPDATE line2 SET amt = amt + 1, i = 1 WHERE o = 2;
UPDATE sj_eager.line2 SET amt = amt + 1, i = 1 WHERE o = 2;
SELECT leapfrog.complete('sj3');
SELECT * FROM public.regress_compare('sj_lazy.by_o', 'sj_eager.by_o');
SELECT * FROM public.regress_compare('sj_lazy.by_i', 'sj_eager.by_i');
SELECT * FROM public.regress_compare('sj_lazy.line2', 'sj_eager.line2');

-- 3. Join keys of two types: a table of done keys holds the type that the
-- other side converts to implicitly (bigint, for int = bigint), whichever
-- side that is (src/units.c, describe_key_types).  nk's keys are int, some
-- NULL; nk_big's bigint, one beyond int.  Two joins read them, one in each
-- order, with a GROUP BY of nk and a row mapping of each table (nk_copy's
-- rows move with nk_joined's keys, converted from int).
SELECT $$
  CREATE TABLE nk (k int, v int NOT NULL);
  CREATE INDEX ON nk (k);
  CREATE TABLE nk_big (k bigint PRIMARY KEY, label text);
  INSERT INTO nk SELECT CASE WHEN g % 10 = 0 THEN NULL ELSE g % 7 END, g FROM generate_series(1, 40) g;
  INSERT INTO nk_big SELECT g, 'l' || g FROM generate_series(3, 9) g;
  INSERT INTO nk_big VALUES (5000000000, 'beyond int');
$$ AS setup4 \gset
SELECT $$
  CREATE TABLE nk_joined AS SELECT n.v, n.k, o.label FROM nk n LEFT JOIN nk_big o ON o.k = n.k;
  CREATE TABLE nk_total AS SELECT k, sum(v) AS v, count(*) AS n FROM nk GROUP BY k;
  CREATE TABLE big_joined AS SELECT o.k, o.label, n.v FROM nk_big o LEFT JOIN nk n ON n.k = o.k;
  CREATE TABLE nk_copy AS SELECT k, v FROM nk WHERE v > 3;
  CREATE TABLE big_labels AS SELECT k, label FROM nk_big WHERE k > 4;
  DROP TABLE nk; DROP TABLE nk_big;
$$ AS script4 \gset
SET search_path = sj_eager;
SELECT public.regress_eager(:'setup4');
SELECT public.regress_eager(:'script4');
SET search_path = sj_lazy;
SELECT public.regress_eager(:'setup4');
SELECT leapfrog.start('sj4', :'script4');
-- each join's table of done keys holds bigint keys (and, as a key may be
-- NULL, the input and ctid of a row with a NULL key: LF_KEY_ROW)
SELECT p.target_relid::regclass AS target,
       (SELECT string_agg(format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
          FROM pg_attribute a WHERE a.attrelid = p.done_keys AND a.attnum > 0) AS done_key_type,
       (SELECT q.target_relid::regclass FROM leapfrog.mapping q
         WHERE q.migration_id = p.migration_id AND q.done_keys = p.done_keys ORDER BY q.id LIMIT 1) AS carrier
  FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
 WHERE m.name = 'sj4' ORDER BY p.id;
-- a read of one int key migrates it (as bigint) in the join, nothing else
SELECT * FROM nk_joined WHERE v = 12;
SELECT * FROM public.sj_done('sj4');
-- the key beyond int, from the bigint side: no row of nk
SELECT * FROM big_joined WHERE k = 5000000000;
-- the NULL key: its rows are one unit
SELECT count(*) FROM nk_joined WHERE k IS NULL;
SELECT * FROM nk_total WHERE k IS NULL;
SELECT * FROM public.sj_done('sj4');
-- the carried row mappings
SELECT * FROM nk_copy WHERE v = 26;
SELECT * FROM big_labels WHERE k = 6;
UPDATE nk_copy SET v = v + 100 WHERE k = 2;
UPDATE sj_eager.nk_copy SET v = v + 100 WHERE k = 2;
DELETE FROM big_joined WHERE k = 3;
DELETE FROM sj_eager.big_joined WHERE k = 3;
SET leapfrog.read_mode = compute;
SELECT * FROM public.regress_compare('sj_lazy.nk_joined', 'sj_eager.nk_joined');
SELECT * FROM public.regress_compare('sj_lazy.nk_total', 'sj_eager.nk_total');
SELECT * FROM public.regress_compare('sj_lazy.big_joined', 'sj_eager.big_joined');
SELECT * FROM public.regress_compare('sj_lazy.nk_copy', 'sj_eager.nk_copy');
SELECT * FROM public.regress_compare('sj_lazy.big_labels', 'sj_eager.big_labels');
RESET leapfrog.read_mode;
SELECT leapfrog.complete('sj4');
SELECT * FROM public.regress_compare('sj_lazy.nk_joined', 'sj_eager.nk_joined');
SELECT * FROM public.regress_compare('sj_lazy.nk_total', 'sj_eager.nk_total');
SELECT * FROM public.regress_compare('sj_lazy.big_joined', 'sj_eager.big_joined');
SELECT * FROM public.regress_compare('sj_lazy.nk_copy', 'sj_eager.nk_copy');
SELECT * FROM public.regress_compare('sj_lazy.big_labels', 'sj_eager.big_labels');
SELECT public.sj_tables_left('sj4');

-- A date joined with a timestamp: the done keys hold timestamp, and a
-- date converts (midnight) before its claim and look-up.
SELECT $$
  CREATE TABLE dk (d date, v int NOT NULL);
  CREATE INDEX ON dk (d);
  CREATE TABLE tk (t timestamp PRIMARY KEY, label text);
  INSERT INTO dk SELECT date '2026-01-01' + g % 5, g FROM generate_series(1, 20) g;
  INSERT INTO dk VALUES (NULL, 100);
  INSERT INTO tk SELECT timestamp '2026-01-01' + g * interval '12 hours', 't' || g FROM generate_series(0, 9) g;
$$ AS setup5 \gset
SELECT $$
  CREATE TABLE dk_joined AS SELECT k.v, k.d, t.label FROM dk k LEFT JOIN tk t ON t.t = k.d;
  CREATE TABLE dk_total AS SELECT d, sum(v) AS v FROM dk GROUP BY d;
  DROP TABLE dk; DROP TABLE tk;
$$ AS script5 \gset
SET search_path = sj_eager;
SELECT public.regress_eager(:'setup5');
SELECT public.regress_eager(:'script5');
SET search_path = sj_lazy;
SELECT public.regress_eager(:'setup5');
SELECT leapfrog.start('sj5', :'script5');
SELECT p.target_relid::regclass AS target,
       (SELECT string_agg(format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
          FROM pg_attribute a WHERE a.attrelid = p.done_keys AND a.attnum > 0) AS done_key_type
  FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
 WHERE m.name = 'sj5' ORDER BY p.id;
SELECT * FROM dk_joined WHERE v IN (3, 8) ORDER BY v;
SELECT * FROM public.sj_done('sj5');
UPDATE dk_joined SET label = 'x' WHERE d = date '2026-01-02';
UPDATE sj_eager.dk_joined SET label = 'x' WHERE d = date '2026-01-02';
SELECT leapfrog.complete('sj5');
SELECT * FROM public.regress_compare('sj_lazy.dk_joined', 'sj_eager.dk_joined');
SELECT * FROM public.regress_compare('sj_lazy.dk_total', 'sj_eager.dk_total');

DROP FUNCTION public.sj_done(text);
DROP FUNCTION public.sj_tables_left(text);
DROP PROCEDURE public.sj_app(text);
RESET search_path;
DROP SCHEMA sj_eager CASCADE;
DROP SCHEMA sj_lazy CASCADE;
