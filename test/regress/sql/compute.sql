--
-- compute: reads that cannot or should not migrate compute the eager rows
-- instead (src/compute.c): in read-only transactions (as on a standby, which
-- test/python/test_standby.py checks), with leapfrog.read_mode = compute, and
-- for COPY ... TO (pg_dump, test/python/test_dump.py).  Every answer is
-- compared with the eager run of the same script and statements (cp_eager),
-- and the lazy side must have migrated nothing while computing.
--
CREATE SCHEMA cp_eager;
CREATE SCHEMA cp_lazy;
SELECT $$
  CREATE TABLE acct (id int PRIMARY KEY, owner text COLLATE "C", bal numeric, region text);
  INSERT INTO acct SELECT g, 'o' || g, g * 1.5, CASE WHEN g % 3 = 0 THEN 'north' ELSE 'south' END
    FROM generate_series(1, 200) g;
  CREATE TABLE line (o int, n int, amount int, PRIMARY KEY (o, n));
  INSERT INTO line SELECT o, n, o * 10 + n FROM generate_series(1, 40) o, generate_series(1, o % 3 + 1) n;
  CREATE TABLE customers (id int PRIMARY KEY, name text);
  INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, 20) g;
  CREATE TABLE orders (id int PRIMARY KEY, cust int, amount int);
  INSERT INTO orders SELECT g, CASE WHEN g % 9 = 0 THEN NULL ELSE g % 25 + 1 END, g
    FROM generate_series(1, 80) g;
  CREATE INDEX orders_cust ON orders (cust);
$$ AS setup \gset
SET search_path = cp_eager;
SELECT public.regress_eager(:'setup');
SET search_path = cp_lazy;
SELECT public.regress_eager(:'setup');

-- A type change with a dropped column, a split with a filter, an aggregate
-- over a table that stays, a join with a table that stays.
SELECT $$
  CREATE TABLE acct_v2 (id bigint PRIMARY KEY, gone int, owner text, bal numeric);
  ALTER TABLE acct_v2 DROP COLUMN gone;
  INSERT INTO acct_v2 SELECT id, owner, bal FROM acct;
  CREATE TABLE north (id int PRIMARY KEY, owner text);
  INSERT INTO north SELECT id, upper(owner) FROM acct WHERE region = 'north';
  DROP TABLE acct;
  CREATE TABLE total (o int PRIMARY KEY, lines bigint, amount bigint);
  INSERT INTO total SELECT o, count(*), sum(amount) FROM line GROUP BY o HAVING sum(amount) > 50;
  CREATE TABLE orders_v2 (id int PRIMARY KEY, cust int, cust_name text, amount int);
  INSERT INTO orders_v2 SELECT o.id, o.cust, c.name, o.amount
    FROM orders o LEFT JOIN customers c ON c.id = o.cust;
  DROP TABLE orders;
$$ AS script \gset
SET search_path = cp_eager;
SELECT public.regress_eager(:'script');
SET search_path = cp_lazy;
SELECT leapfrog.start('cp', :'script');
CREATE PROCEDURE public.cp_app(s text) LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.set_config('search_path', s, true);
    UPDATE acct_v2 SET bal = bal + 1 WHERE id BETWEEN 10 AND 14;
    DELETE FROM north WHERE id = 30;
    UPDATE line SET amount = amount + 100 WHERE o = 7;
    INSERT INTO total VALUES (1000, 1, 1);
    UPDATE customers SET name = 'renamed' WHERE id = 4;
    UPDATE orders_v2 SET amount = -amount WHERE id = 3;
END $$;
CALL public.cp_app('cp_eager');
CALL public.cp_app('cp_lazy');
SELECT public.regress_migrated('cp') AS migrated_first;
SELECT leapfrog.remaining('cp');

-- The eager contents of every new table and live table, in a read-only
-- transaction, and nothing migrated.
CREATE FUNCTION public.cp_compare() RETURNS TABLE (tbl text, lazy_rows bigint, eager_rows bigint,
                                                   lazy_only bigint, eager_only bigint)
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['acct_v2', 'north', 'total', 'orders_v2', 'line', 'customers'] LOOP
        RETURN QUERY SELECT t, c.* FROM public.regress_compare(('cp_lazy.' || t)::regclass,
                                                                ('cp_eager.' || t)::regclass) c;
    END LOOP;
END $$;
BEGIN READ ONLY;
SELECT * FROM public.cp_compare();
COMMIT;
SELECT public.regress_migrated('cp') AS migrated;
BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY DEFERRABLE;
SELECT * FROM public.cp_compare();
COMMIT;
SELECT public.regress_migrated('cp') AS migrated;
-- leapfrog.read_mode = compute: plain reads compute in read-write
-- transactions too; writes still migrate what they touch.
SET leapfrog.read_mode = compute;
SELECT * FROM public.cp_compare();
SELECT public.regress_migrated('cp') AS migrated;
UPDATE cp_lazy.acct_v2 SET bal = 0 WHERE id = 100;
SELECT public.regress_migrated('cp') AS migrated_by_update;
UPDATE cp_eager.acct_v2 SET bal = 0 WHERE id = 100;
RESET leapfrog.read_mode;

-- What EXPLAIN shows: the new table's own rows, and its mappings applied to
-- the retired rows, with the statement's conditions pushed into both.
BEGIN READ ONLY;
SELECT public.regress_explain('SELECT * FROM acct_v2 WHERE id = 42');
SELECT public.regress_explain('SELECT * FROM total WHERE o = 9');
SELECT public.regress_explain('SELECT * FROM orders_v2 WHERE id = 5');
SELECT * FROM acct_v2 WHERE id = 42;
SELECT * FROM total WHERE o IN (7, 9, 1000) ORDER BY o;
SELECT * FROM cp_eager.total WHERE o IN (7, 9, 1000) ORDER BY o;
SELECT * FROM orders_v2 WHERE cust = 4 ORDER BY id;
SELECT * FROM cp_eager.orders_v2 WHERE cust = 4 ORDER BY id;
-- whole rows, joins between new tables, sub-queries
SELECT a FROM acct_v2 a WHERE id = 43;
SELECT row_to_json(n) FROM north n WHERE id = 33;
SELECT count(*) FROM acct_v2 a JOIN north n ON n.id = a.id WHERE a.bal > 100;
SELECT count(*) FROM cp_eager.acct_v2 a JOIN cp_eager.north n ON n.id = a.id WHERE a.bal > 100;
SELECT o, (SELECT count(*) FROM orders_v2 v WHERE v.amount > t.amount) FROM total t
 WHERE o < 4 ORDER BY o;
SELECT o, (SELECT count(*) FROM cp_eager.orders_v2 v WHERE v.amount > t.amount) FROM cp_eager.total t
 WHERE o < 4 ORDER BY o;
COMMIT;
SELECT public.regress_migrated('cp') AS migrated;

-- A read that pins one group of each GROUP BY mapping it computes runs as
-- written, on the new table alone, when its snapshot sees those groups
-- migrated (compute.c, lf_compute_shortcut): an order's lines written, then
-- its total read, in one transaction, as TPC-C's Delivery does, or a group
-- another transaction migrated.  It computes where its snapshot cannot see
-- the group migrated (a function of the writing statement itself; a
-- snapshot older than the migrating transaction's commit: isolation
-- live_input), after a savepoint rolled the migration back, and for a group
-- not migrated.  Every answer is the eager one.
CREATE FUNCTION public.cp_ran(q text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE line text;
BEGIN
    FOR line IN EXECUTE 'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ' || q LOOP
        CONTINUE WHEN line ~ 'Heap (Fetches|Blocks)';  -- dead tuples, visibility map
        line := regexp_replace(line, '\mm\d+_\d+_', '', 'g');
        line := regexp_replace(line, 'group_migrated\(\d+', 'group_migrated(N', 'g');
        RETURN NEXT regexp_replace(line, 'sees_start\(\d+', 'sees_start(N', 'g');
    END LOOP;
END $$;
CREATE FUNCTION public.cp_total(k int) RETURNS bigint STABLE LANGUAGE plpgsql AS $$
DECLARE r bigint;
BEGIN
    SELECT amount INTO r FROM total WHERE o = k;
    RETURN r;
END $$;
SET leapfrog.read_mode = compute;
SET plan_cache_mode = force_generic_plan;
PREPARE cp_t(int) AS SELECT * FROM total WHERE o = $1;
UPDATE total SET lines = lines WHERE o = 15;  -- migrates order 15, committed
UPDATE cp_eager.total SET lines = lines WHERE o = 15;
BEGIN;
UPDATE line SET amount = amount + 1 WHERE o = 12 RETURNING o, n, public.cp_total(o);
SELECT public.cp_ran('SELECT * FROM total WHERE o = 12');
SELECT * FROM total WHERE o = 12;
SELECT public.cp_ran('EXECUTE cp_t(12)');
SELECT public.cp_ran('EXECUTE cp_t(13)');
EXECUTE cp_t(13);
SELECT public.cp_ran('EXECUTE cp_t(15)');
EXECUTE cp_t(15);
SAVEPOINT s;
UPDATE line SET amount = amount + 1 WHERE o = 14;
ROLLBACK TO s;
SELECT public.cp_ran('EXECUTE cp_t(14)');
EXECUTE cp_t(14);
ROLLBACK;
SET search_path = cp_eager;
BEGIN;
UPDATE line SET amount = amount + 1 WHERE o = 12 RETURNING o, n, public.cp_total(o);
SELECT * FROM total WHERE o IN (12, 13, 14, 15) ORDER BY o;
ROLLBACK;
SET search_path = cp_lazy;
DEALLOCATE cp_t;
RESET plan_cache_mode;
RESET leapfrog.read_mode;
DROP FUNCTION public.cp_ran(text), public.cp_total(int);
SELECT public.regress_migrated('cp') AS migrated;

-- A plan made where reads migrate, run where they compute: planned again.
SET plan_cache_mode = force_generic_plan;
PREPARE cp_q(int) AS SELECT id, owner, bal FROM acct_v2 WHERE id BETWEEN $1 AND $1 + 2 ORDER BY id;
SELECT public.regress_explain('EXECUTE cp_q(60)');
BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY;
EXECUTE cp_q(60);
SELECT public.regress_explain('EXECUTE cp_q(60)');
COMMIT;
SELECT public.regress_migrated('cp') AS migrated;
EXECUTE cp_q(60);
SELECT public.regress_migrated('cp') AS migrated_read_write;
DEALLOCATE cp_q;
RESET plan_cache_mode;

-- What cannot be computed: system columns (a union has none), row locks.
BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY;
SELECT public.regress_error('SELECT ctid FROM acct_v2 WHERE id = 70');
COMMIT;
BEGIN READ ONLY;
-- (each fails as it does eagerly, naming itself)
SELECT public.regress_error('SELECT * FROM acct_v2 WHERE id = 71 FOR UPDATE');
SELECT public.regress_error('SELECT * FROM acct_v2 WHERE id = 71 FOR KEY SHARE');
SELECT public.regress_error('UPDATE acct_v2 SET bal = 0 WHERE id = 71');
COMMIT;
SELECT public.regress_migrated('cp') AS migrated;

-- COPY new_table TO (pg_dump's read) reads every row and computes those
-- not migrated; COPY (query) TO is a query like any other (it migrates in
-- this read-write transaction); COPY FROM stays refused.
COPY north (owner, id) TO stdout;
SELECT public.regress_migrated('cp') AS migrated;
COPY (SELECT * FROM total WHERE o < 5 ORDER BY o) TO stdout;
SELECT public.regress_migrated('cp') AS migrated;
SELECT public.regress_sqlstate($$COPY north FROM '/dev/null'$$);

-- After completion: the same contents, read the plain way.
SELECT leapfrog.complete('cp');
SELECT * FROM public.cp_compare();

-- A row that would break the new table's NOT NULL or CHECK constraint once
-- migrated is not shown computed: the read fails as migrating it would.
CREATE TABLE cp_lazy.bad (id int PRIMARY KEY, v int, w int);
INSERT INTO cp_lazy.bad SELECT g, g, g FROM generate_series(1, 20) g;
UPDATE cp_lazy.bad SET v = -1 WHERE id = 10;
UPDATE cp_lazy.bad SET w = NULL WHERE id = 15;
SELECT leapfrog.start('cp_bad', $$
  CREATE TABLE cp_lazy.bad2 (id int PRIMARY KEY, v int CHECK (v > 0), w int NOT NULL);
  INSERT INTO cp_lazy.bad2 SELECT id, v, w FROM cp_lazy.bad;
  DROP TABLE cp_lazy.bad;
$$);
BEGIN READ ONLY;
-- checks of w (nullable in bad) and of v's CHECK; none of id, bad's NOT NULL key
SELECT public.regress_explain('SELECT * FROM cp_lazy.bad2 WHERE id = 5');
SELECT * FROM cp_lazy.bad2 WHERE id = 5;
SELECT public.regress_error('SELECT * FROM cp_lazy.bad2 WHERE id = 10');
SELECT public.regress_error('SELECT * FROM cp_lazy.bad2 WHERE id = 15');
SELECT public.regress_error('SELECT count(*) FROM cp_lazy.bad2');
COMMIT;
-- corrected where they wait, the rows migrate
SELECT i.relid AS bad_oid FROM leapfrog.input i JOIN leapfrog.migration m ON m.id = i.migration_id
 WHERE m.name = 'cp_bad' \gset
SELECT public.regress_on_rel('UPDATE %s SET v = 1, w = 1 WHERE id IN (10, 15)', :bad_oid);
SELECT leapfrog.complete('cp_bad');
SELECT count(*), sum(v), sum(w) FROM cp_lazy.bad2;

-- A mapping that filters (a security barrier): a row whose column cannot be
-- computed ('too long' into varchar(2)) fails the reads that read it, not a
-- read of other rows under a leaky condition (id + 0 = 5: int4pl is not
-- leakproof, so it stays above the barrier).  The barrier passes up the
-- input's columns; the mapping's are computed above it, after the
-- statement's conditions.
CREATE TABLE cp_lazy.narrow (id int PRIMARY KEY, v int, note text);
INSERT INTO cp_lazy.narrow SELECT g, g, 'ok' FROM generate_series(1, 20) g;
UPDATE cp_lazy.narrow SET note = 'too long' WHERE id = 10;
SELECT leapfrog.start('cp_narrow', $$
  CREATE TABLE cp_lazy.narrow2 (id int PRIMARY KEY, w varchar(2));
  INSERT INTO cp_lazy.narrow2 SELECT id, note FROM cp_lazy.narrow WHERE v <> 3;
  DROP TABLE cp_lazy.narrow;
$$);
BEGIN READ ONLY;
SELECT * FROM cp_lazy.narrow2 WHERE id + 0 = 5;
SELECT * FROM cp_lazy.narrow2 WHERE id + 0 = 3;
SELECT public.regress_error('SELECT * FROM cp_lazy.narrow2 WHERE id + 0 = 10');
SELECT public.regress_explain('SELECT * FROM cp_lazy.narrow2 WHERE id + 0 = 5');
COMMIT;
SELECT i.relid AS narrow_oid FROM leapfrog.input i JOIN leapfrog.migration m ON m.id = i.migration_id
 WHERE m.name = 'cp_narrow' \gset
SELECT public.regress_on_rel($$UPDATE %s SET note = 'ok' WHERE id = 10$$, :narrow_oid);
SELECT leapfrog.complete('cp_narrow');
SELECT count(*) FROM cp_lazy.narrow2;
RESET search_path;
