--
-- live_shared: a live table read by several GROUP BY mappings (per-customer
-- and per-day totals of one orders table) is tracked in place with a table
-- of done keys per mapping (src/live.c): a write first migrates the row's
-- group in each mapping, a read of one new table migrates (or computes) the
-- groups of that mapping only.  Every write below runs on both sides (sh_eager
-- ran the script eagerly) and the tables are compared.
--
CREATE SCHEMA sh_eager;
CREATE SCHEMA sh_lazy;
SELECT $$
  CREATE TABLE orders (id int PRIMARY KEY, cust int NOT NULL, day int NOT NULL,
                       amt int NOT NULL, note text);
  CREATE INDEX orders_cust ON orders (cust);
  CREATE INDEX orders_day ON orders (day);
  INSERT INTO orders SELECT g, g % 10, g % 7, g, 'x' FROM generate_series(1, 140) g;
$$ AS setup \gset
SET search_path = sh_eager;
SELECT public.regress_eager(:'setup');
SET search_path = sh_lazy;
SELECT public.regress_eager(:'setup');

SELECT $$
  CREATE TABLE cust_total (cust int PRIMARY KEY, n bigint, amt bigint);
  INSERT INTO cust_total SELECT cust, count(*), sum(amt) FROM orders GROUP BY cust;
  CREATE TABLE day_total (day int PRIMARY KEY, n bigint, amt bigint, notes text);
  INSERT INTO day_total
  SELECT day, count(*), sum(amt), string_agg(note, ',' ORDER BY id)
    FROM orders WHERE amt > 5 GROUP BY day HAVING count(*) > 1;
$$ AS script \gset
SET search_path = sh_eager;
SELECT public.regress_eager(:'script');
SET search_path = sh_lazy;
SELECT action, input, detail FROM leapfrog.plan(:'script') WHERE action <> 'mapping';
SELECT leapfrog.start('sh', :'script');
SELECT i.orig_name, i.live_keys IS NOT NULL AS live FROM leapfrog.input i JOIN leapfrog.migration m ON m.id = i.migration_id
 WHERE m.name = 'sh';
SELECT p.target_relid::regclass AS target,
       regexp_replace(p.done_keys::regclass::text, 'm\d+_\d+_', 'mN_') AS done_keys
  FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
 WHERE m.name = 'sh' ORDER BY p.id;
-- One trigger, which goes with either table of done keys.
SELECT count(*) AS triggers FROM pg_trigger WHERE tgrelid = 'sh_lazy.orders'::regclass;

-- The rows each mapping still has to migrate: a read of one new table
-- migrates that mapping's group, and leaves the other mapping's.
CREATE FUNCTION public.sh_left() RETURNS TABLE (target regclass, groups_left bigint)
LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT p.target_relid::regclass AS t, p.done_keys::regclass AS k, a.attname AS col
             FROM leapfrog.mapping p
             JOIN pg_attribute a ON a.attrelid = p.done_keys AND a.attnum = 1
            WHERE p.done_keys IS NOT NULL ORDER BY p.id LOOP
    target := r.t;
    EXECUTE format('SELECT count(DISTINCT o.%1$I) FROM sh_lazy.orders o '
                   'WHERE NOT EXISTS (SELECT FROM %2$s d WHERE d.%1$I = o.%1$I)', r.col, r.k)
       INTO groups_left;
    RETURN NEXT;
  END LOOP;
END $$;
SELECT * FROM public.sh_left();
SELECT * FROM cust_total WHERE cust = 3;
SELECT * FROM public.sh_left();
SELECT * FROM day_total WHERE day = 4;
SELECT * FROM public.sh_left();
SELECT * FROM sh_eager.cust_total WHERE cust = 3;
SELECT * FROM sh_eager.day_total WHERE day = 4;

CREATE PROCEDURE public.sh_app(s text) LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL search_path = %I', s);
    UPDATE orders SET amt = amt + 1000 WHERE id = 15;              -- cust 5, day 1
    UPDATE orders SET cust = 9 WHERE id = 16;                      -- moves customer
    UPDATE orders SET day = 0, cust = 0 WHERE id = 17;             -- moves both
    DELETE FROM orders WHERE day = 2;                              -- a whole day
    INSERT INTO orders VALUES (200, 11, 9, 7, 'new'), (201, 3, 3, 1, 'y');  -- new groups
    UPDATE orders SET note = 'n' WHERE id = 30;                    -- no key change
    BEGIN                                                          -- a subtransaction
        UPDATE orders SET amt = 0 WHERE id = 26;                   -- migrates two groups,
        RAISE EXCEPTION 'undo';                                    -- then aborts
    EXCEPTION WHEN raise_exception THEN NULL;
    END;
    UPDATE orders SET amt = amt + 7 WHERE id = 26;                 -- migrated again first
END $$;
CALL public.sh_app('sh_eager');
CALL public.sh_app('sh_lazy');
SELECT * FROM public.sh_left();
-- Reads of the new tables after the writes: the start state, as eagerly.
SELECT * FROM cust_total WHERE cust IN (0, 3, 5, 6, 9, 11) ORDER BY cust;
SELECT * FROM sh_eager.cust_total WHERE cust IN (0, 3, 5, 6, 9, 11) ORDER BY cust;
SELECT * FROM day_total WHERE day IN (0, 1, 2, 3, 5, 9) ORDER BY day;
SELECT * FROM sh_eager.day_total WHERE day IN (0, 1, 2, 3, 5, 9) ORDER BY day;

-- The computing path reads each mapping's unmigrated groups.
SET leapfrog.read_mode = compute;
SELECT * FROM public.regress_compare('sh_lazy.cust_total', 'sh_eager.cust_total');
SELECT * FROM public.regress_compare('sh_lazy.day_total', 'sh_eager.day_total');
RESET leapfrog.read_mode;
SELECT * FROM public.sh_left();

-- Completion migrates the rest of both mappings.
SELECT leapfrog.complete('sh');
SELECT name, state, error FROM leapfrog.migrations WHERE name = 'sh';
SELECT * FROM public.regress_compare('sh_lazy.cust_total', 'sh_eager.cust_total');
SELECT * FROM public.regress_compare('sh_lazy.day_total', 'sh_eager.day_total');
SELECT * FROM public.regress_compare('sh_lazy.orders', 'sh_eager.orders');
SELECT count(*) AS triggers FROM pg_trigger WHERE tgrelid = 'sh_lazy.orders'::regclass;
SELECT relname FROM pg_class
 WHERE relnamespace = 'leapfrog_retired'::regnamespace AND relname LIKE '%done_keys%';

-- A group that cannot be computed in one mapping is set aside in that
-- mapping only (src/failed.c, quarantine_group): order 7's total breaks the
-- CHECK; its lines are also in the groups n = 1, 2, 3 of by_n, which
-- migrate (and would be lost from by_n if set aside with it).
CREATE TABLE q_line (o int NOT NULL, n int NOT NULL, amt int);
INSERT INTO q_line SELECT o, n, CASE WHEN o = 7 THEN 400 ELSE n END
  FROM generate_series(1, 20) o(o), generate_series(1, 3) n(n) ORDER BY o.o <> 7, o.o, n.n;
CREATE INDEX ON q_line (o);
CREATE INDEX ON q_line (n);
SELECT leapfrog.start('shq', $$
  CREATE TABLE q_total (o int PRIMARY KEY, amt bigint CHECK (amt < 1000));
  INSERT INTO q_total SELECT o, sum(amt) FROM q_line GROUP BY o;
  CREATE TABLE q_by_n (n int PRIMARY KEY, orders bigint, amt bigint);
  INSERT INTO q_by_n SELECT n, count(*), sum(amt) FROM q_line GROUP BY n;
$$);
SELECT * FROM q_total WHERE o = 7;
SELECT ctid, * FROM q_line WHERE ctid = '(0,1)';
SELECT leapfrog.quarantine_row('shq', 'sh_lazy.q_line', '(0,1)') AS q \gset
SELECT regexp_replace(:'q', '\d+$', 'N') AS quarantine;
SELECT o, n, amt, failed_sqlstate FROM :q ORDER BY o, n;
SELECT * FROM q_by_n ORDER BY n;
SELECT leapfrog.complete('shq');
SELECT * FROM q_total WHERE o IN (6, 7, 8) ORDER BY o;
SELECT * FROM q_by_n ORDER BY n;
SELECT n, count(*), sum(amt) FROM q_line GROUP BY n ORDER BY n;

-- Two GROUP BY mappings share a table only through a table of done keys
-- each: every mapping that reads it is a GROUP BY of it alone.
CREATE TABLE src (a int NOT NULL, b int, c int);
CREATE INDEX ON src (a);
CREATE INDEX ON src (b);
INSERT INTO src SELECT g % 3, g % 4, g FROM generate_series(1, 12) g;
-- a group key that may be NULL: tracked in place too (its NULL group is a
-- group; shared_null, live_in_place)
SELECT action, input, detail FROM leapfrog.plan($$
  CREATE TABLE by_a AS SELECT a, sum(c) AS c FROM src GROUP BY a;
  CREATE TABLE by_b AS SELECT b, sum(c) AS c FROM src GROUP BY b;
$$) WHERE action NOT IN ('mapping', 'run');
-- (a join mapping that reads it too, on keys of two types: shared_join)
ALTER TABLE src ALTER COLUMN b SET NOT NULL;
-- altered by the script (which would replace it, src/replace.c): refused all the same
SELECT leapfrog.start('bad', $$
  ALTER TABLE src ALTER COLUMN c TYPE bigint;
  CREATE TABLE by_a AS SELECT a, sum(c) AS c FROM src GROUP BY a;
  CREATE TABLE by_b AS SELECT b, sum(c) AS c FROM src GROUP BY b;
$$);
SELECT count(*) FROM leapfrog.migrations WHERE name = 'bad';

-- Kept, with a row mapping too: tracked in place; the row mapping's rows
-- move with the first GROUP BY mapping's groups (src/start.c,
-- track_by_keys), so a write of a row copies it first, as it was.
CREATE TABLE sh_eager.src AS SELECT * FROM src;
SELECT $$
  CREATE TABLE by_a AS SELECT a, sum(c) AS c, count(*) AS n FROM src GROUP BY a;
  CREATE TABLE by_b (b int PRIMARY KEY, c bigint, top int);
  INSERT INTO by_b SELECT b, sum(c), max(c) FROM src WHERE c > 1 GROUP BY b;
  CREATE TABLE big_src AS SELECT c, a, b FROM src WHERE c > 4;
$$ AS kept \gset
SET search_path = sh_eager;
SELECT public.regress_eager(:'kept');
SET search_path = sh_lazy;
SELECT action, input FROM leapfrog.plan(:'kept') WHERE action <> 'mapping';
SELECT leapfrog.start('shk', :'kept');
SELECT p.target_relid::regclass AS target, p.done_keys IS NOT NULL AS by_keys,
       p.done_keys = (SELECT p2.done_keys FROM leapfrog.mapping p2
                       WHERE p2.migration_id = p.migration_id ORDER BY p2.id LIMIT 1) AS first_groups
  FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
 WHERE m.name = 'shk' ORDER BY p.id;
CREATE PROCEDURE public.sh_src_app(s text) LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL search_path = %I', s);
    UPDATE src SET c = c + 100 WHERE c = 7;       -- a = 1, b = 3: copied first
    DELETE FROM src WHERE c = 8;
    INSERT INTO src VALUES (0, 0, 50), (5, 5, 60); -- an existing and a new group
END $$;
CALL public.sh_src_app('sh_eager');
CALL public.sh_src_app('sh_lazy');
SELECT * FROM big_src WHERE c IN (7, 8, 50, 60, 107) ORDER BY c;
SELECT * FROM sh_eager.big_src WHERE c IN (7, 8, 50, 60, 107) ORDER BY c;
SET leapfrog.read_mode = compute;
SELECT * FROM public.regress_compare('sh_lazy.big_src', 'sh_eager.big_src');
SELECT * FROM public.regress_compare('sh_lazy.by_b', 'sh_eager.by_b');
RESET leapfrog.read_mode;
SELECT leapfrog.complete('shk');
SELECT * FROM public.regress_compare('sh_lazy.by_a', 'sh_eager.by_a');
SELECT * FROM public.regress_compare('sh_lazy.by_b', 'sh_eager.by_b');
SELECT * FROM public.regress_compare('sh_lazy.big_src', 'sh_eager.big_src');
SELECT * FROM public.regress_compare('sh_lazy.src', 'sh_eager.src');
DROP TABLE by_a, by_b, big_src, sh_eager.by_a, sh_eager.by_b, sh_eager.big_src;
DROP PROCEDURE public.sh_src_app(text);

-- Kept, with one GROUP BY mapping and a row mapping: tracked in place as
-- well (it used to be replaced lazily, every row copied once more); the
-- row mapping's rows move with the GROUP BY mapping's groups.
CREATE TABLE sh_eager.src1 AS SELECT * FROM src;
CREATE TABLE src1 AS SELECT * FROM src;
ALTER TABLE src1 ALTER COLUMN a SET NOT NULL;
CREATE INDEX ON src1 (a);
SELECT $$
  CREATE TABLE by_a AS SELECT a, sum(c) AS c, count(*) AS n FROM src1 GROUP BY a;
  CREATE TABLE big_src AS SELECT c, a, b FROM src1 WHERE c > 4;
$$ AS one \gset
SET search_path = sh_eager;
SELECT public.regress_eager(:'one');
SET search_path = sh_lazy;
SELECT action, input FROM leapfrog.plan(:'one') WHERE action <> 'mapping';
SELECT leapfrog.start('sh1', :'one');
SELECT p.target_relid::regclass AS target, p.done_keys IS NOT NULL AS by_keys,
       p.done_keys = (SELECT p2.done_keys FROM leapfrog.mapping p2
                       WHERE p2.migration_id = p.migration_id ORDER BY p2.id LIMIT 1) AS first_groups
  FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
 WHERE m.name = 'sh1' ORDER BY p.id;
-- a read of the row mapping's target migrates the row's group, whole
SELECT * FROM big_src WHERE c = 5;
SELECT * FROM by_a WHERE a = (SELECT a FROM src1 WHERE c = 5);
CREATE PROCEDURE public.sh_src_app(s text) LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL search_path = %I', s);
    UPDATE src1 SET c = c + 100 WHERE c = 9;       -- copied first, as it was
    DELETE FROM src1 WHERE c = 6;
    UPDATE big_src SET a = a + 10 WHERE c = 10;   -- the new table, written
    INSERT INTO src1 VALUES (0, 0, 70), (7, 7, 80); -- an existing and a new group
END $$;
CALL public.sh_src_app('sh_eager');
CALL public.sh_src_app('sh_lazy');
SELECT * FROM big_src WHERE c IN (6, 9, 10, 70, 80, 109) ORDER BY c;
SELECT * FROM sh_eager.big_src WHERE c IN (6, 9, 10, 70, 80, 109) ORDER BY c;
SET leapfrog.read_mode = compute;
SELECT * FROM public.regress_compare('sh_lazy.big_src', 'sh_eager.big_src');
SELECT * FROM public.regress_compare('sh_lazy.by_a', 'sh_eager.by_a');
RESET leapfrog.read_mode;
SELECT leapfrog.complete('sh1');
SELECT * FROM public.regress_compare('sh_lazy.by_a', 'sh_eager.by_a');
SELECT * FROM public.regress_compare('sh_lazy.big_src', 'sh_eager.big_src');
SELECT * FROM public.regress_compare('sh_lazy.src1', 'sh_eager.src1');
SELECT count(*) AS triggers_left FROM pg_trigger WHERE tgrelid = 'sh_lazy.src1'::regclass;
DROP TABLE by_a, big_src, src1, sh_eager.by_a, sh_eager.big_src, sh_eager.src1;
DROP PROCEDURE public.sh_src_app(text);

-- Kept, read only by row mappings (an archive of some rows and a copy of
-- others): tracked in place by the primary key, each row a unit of its
-- own; the first mapping has the table of done keys and carries the
-- second.  Before, such a table was replaced lazily (every row moved into
-- a copy, and its statements carried a migration step).  A table without
-- a primary key still is.
CREATE TABLE sh_eager.acct (region text COLLATE "C", id int, bal int NOT NULL, note text,
                            PRIMARY KEY (region, id));
INSERT INTO sh_eager.acct SELECT CASE WHEN g % 2 = 0 THEN 'east' ELSE 'West' END, g, g * 10, 'n' || g
  FROM generate_series(1, 40) g;
CREATE TABLE acct AS SELECT * FROM sh_eager.acct;
ALTER TABLE acct ADD PRIMARY KEY (region, id);
CREATE TABLE acct_nopk AS SELECT * FROM sh_eager.acct;
SELECT $$
  CREATE TABLE rich (region text COLLATE "C", id int, bal int, PRIMARY KEY (region, id));
  INSERT INTO rich SELECT region, id, bal FROM acct WHERE bal >= 200;
  CREATE TABLE notes AS SELECT id, upper(note) AS note FROM acct WHERE id % 3 = 0;
$$ AS rows_only \gset
SET search_path = sh_eager;
SELECT public.regress_eager(:'rows_only');
SET search_path = sh_lazy;
SELECT action, input FROM leapfrog.plan(:'rows_only') WHERE action <> 'mapping';
SELECT action, input FROM leapfrog.plan(replace(:'rows_only', 'acct', 'acct_nopk'))
 WHERE action <> 'mapping';
SELECT leapfrog.start('shr', :'rows_only');
SELECT p.target_relid::regclass AS target, p.done_keys IS NOT NULL AS by_keys,
       p.done_keys = (SELECT p2.done_keys FROM leapfrog.mapping p2
                       WHERE p2.migration_id = p.migration_id ORDER BY p2.id LIMIT 1) AS first_rows
  FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
 WHERE m.name = 'shr' ORDER BY p.id;
SELECT count(*) AS triggers FROM pg_trigger WHERE tgrelid = 'sh_lazy.acct'::regclass;
-- The rows left: those whose key is not in the table of done keys.
CREATE FUNCTION public.shr_left() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
  EXECUTE format('SELECT count(*) FROM sh_lazy.acct a WHERE NOT EXISTS '
                 '(SELECT FROM %s d WHERE (d.region, d.id) = (a.region, a.id))',
                 (SELECT p.done_keys::regclass FROM leapfrog.mapping p
                    JOIN leapfrog.migration m ON m.id = p.migration_id
                   WHERE m.name = 'shr' ORDER BY p.id LIMIT 1))
     INTO n;
  RETURN n;
END $$;
SELECT public.shr_left() AS rows_left;
-- a read of either target by key migrates that one row, for both mappings
SELECT * FROM rich WHERE region = 'West' AND id = 21;
SELECT public.shr_left() AS rows_left;
SELECT * FROM notes WHERE id = 9;
SELECT public.shr_left() AS rows_left;
-- a computing read migrates nothing
SET leapfrog.read_mode = compute;
SELECT count(*), sum(bal) FROM rich;
SELECT public.shr_left() AS rows_left;
RESET leapfrog.read_mode;
CREATE PROCEDURE public.shr_app(s text) LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL search_path = %I', s);
    UPDATE acct SET bal = bal + 1000 WHERE id IN (2, 3);    -- copied first, as they were
    UPDATE acct SET id = id + 100 WHERE id = 30;            -- the key moves
    DELETE FROM acct WHERE id IN (6, 25);
    INSERT INTO acct VALUES ('east', 6, 9999, 'again');      -- a deleted key comes back
    INSERT INTO acct VALUES ('north', 1, 5000, 'new')
        ON CONFLICT (region, id) DO UPDATE SET bal = 0;
    INSERT INTO acct VALUES ('east', 4, 1, 'x')
        ON CONFLICT (region, id) DO UPDATE SET bal = excluded.bal;
    BEGIN
        UPDATE acct SET note = 'aborted' WHERE id = 12;
        RAISE EXCEPTION 'roll back';
    EXCEPTION WHEN raise_exception THEN NULL;
    END;
    UPDATE rich SET bal = -1 WHERE id = 20;                 -- the new table, written
END $$;
CALL public.shr_app('sh_eager');
CALL public.shr_app('sh_lazy');
SELECT public.shr_left() AS rows_left;
SELECT * FROM public.regress_compare('sh_lazy.rich', 'sh_eager.rich');
SELECT * FROM public.regress_compare('sh_lazy.notes', 'sh_eager.notes');
SELECT * FROM rich WHERE id IN (2, 3, 4, 6, 20, 25, 30, 130) ORDER BY region, id;
SELECT * FROM sh_eager.rich WHERE id IN (2, 3, 4, 6, 20, 25, 30, 130) ORDER BY region, id;
SELECT leapfrog.complete('shr');
SELECT * FROM public.regress_compare('sh_lazy.rich', 'sh_eager.rich');
SELECT * FROM public.regress_compare('sh_lazy.notes', 'sh_eager.notes');
SELECT * FROM public.regress_compare('sh_lazy.acct', 'sh_eager.acct');
SELECT count(*) AS triggers_left FROM pg_trigger WHERE tgrelid = 'sh_lazy.acct'::regclass;
DROP TABLE rich, notes, acct, acct_nopk, sh_eager.rich, sh_eager.notes, sh_eager.acct;
DROP PROCEDURE public.shr_app(text);
DROP FUNCTION public.shr_left();
-- A row that breaks the archive's CHECK fails the migration; quarantined,
-- it is left out of the archive (only it: each row is its own unit) and
-- stays in the live table.
CREATE TABLE qr (id int PRIMARY KEY, amt int);
INSERT INTO qr SELECT g, CASE WHEN g = 3 THEN -1 ELSE g END FROM generate_series(1, 6) g;
SELECT leapfrog.start('shqr', $$
  CREATE TABLE qr_arch (id int PRIMARY KEY, amt int CHECK (amt > 0));
  INSERT INTO qr_arch SELECT id, amt FROM qr;
$$);
SELECT public.regress_error($$SELECT leapfrog.complete('shqr')$$);
SELECT public.regress_error($$SELECT * FROM qr_arch WHERE id = 3$$);
SELECT * FROM qr_arch WHERE id = 4;
SELECT leapfrog.quarantine_row('shqr', 'sh_lazy.qr', (SELECT ctid FROM qr WHERE id = 3)) AS qq \gset
SELECT regexp_replace(:'qq', '\d+$', 'N') AS quarantine;
SELECT id, amt, failed_sqlstate FROM :qq;
SELECT * FROM qr_arch WHERE id = 3;
SELECT leapfrog.complete('shqr');
SELECT * FROM qr_arch ORDER BY id;
SELECT count(*) AS live_rows FROM qr;
DROP TABLE qr, qr_arch;

-- Dropped by the script, with a row mapping too (a split of the table and
-- two totals of it): retired, and tracked by keys, without a trigger
-- (nobody writes it); its rows stay until completion drops it.
SELECT $$
  CREATE TABLE by_a AS SELECT a, sum(c) AS c, count(*) AS n FROM src GROUP BY a;
  CREATE TABLE src_v2 (c int PRIMARY KEY, a int, b int);
  INSERT INTO src_v2 SELECT c, a, b FROM src;
  CREATE TABLE by_b (b int PRIMARY KEY, c bigint, top int);
  INSERT INTO by_b SELECT b, sum(c), max(c) FROM src WHERE c > 1 GROUP BY b;
  DROP TABLE src;
$$ AS dropped \gset
SET search_path = sh_eager;
SELECT public.regress_eager(:'dropped');
SET search_path = sh_lazy;
SELECT action, input, detail FROM leapfrog.plan(:'dropped') WHERE action NOT IN ('mapping', 'run');
-- (leapfrog.track_live_inputs concerns tables the script keeps)
SET leapfrog.track_live_inputs = off;
SELECT action, input, detail FROM leapfrog.plan(:'dropped') WHERE action NOT IN ('mapping', 'run');
RESET leapfrog.track_live_inputs;
SELECT leapfrog.start('shd', :'dropped');
SELECT to_regclass('sh_lazy.src') AS src_gone;
SELECT i.orig_name, i.live_keys IS NOT NULL AS tracked_by_keys,
       (SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = i.relid AND t.tgname LIKE '~leapfrog%') AS triggers
  FROM leapfrog.input i JOIN leapfrog.migration m ON m.id = i.migration_id WHERE m.name = 'shd';
SELECT count(DISTINCT p.done_keys) AS tables_of_done_keys
  FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
 WHERE m.name = 'shd' AND p.done_keys IS NOT NULL;
SELECT * FROM by_a WHERE a = 1;
SELECT * FROM sh_eager.by_a WHERE a = 1;
UPDATE by_b SET top = top + 100 WHERE b = 2 RETURNING *;
UPDATE sh_eager.by_b SET top = top + 100 WHERE b = 2 RETURNING *;
-- a row of src_v2 by its key migrates its a-group (a = 2: the rows with
-- c = 2, 5 and 11; c = 8 was deleted before start)
SELECT * FROM src_v2 WHERE c = 5;
CREATE FUNCTION pg_temp.a_groups_migrated() RETURNS int[] LANGUAGE plpgsql AS $$
DECLARE r int[];
BEGIN
  EXECUTE format('SELECT array_agg(a ORDER BY a) FROM %s',
                 (SELECT p.done_keys::regclass FROM leapfrog.mapping p
                    JOIN leapfrog.migration m ON m.id = p.migration_id
                   WHERE m.name = 'shd' ORDER BY p.id LIMIT 1)) INTO r;
  RETURN r;
END $$;
SELECT pg_temp.a_groups_migrated();
UPDATE src_v2 SET b = -1 WHERE c = 50 RETURNING *;
UPDATE sh_eager.src_v2 SET b = -1 WHERE c = 50 RETURNING *;
SELECT leapfrog.remaining('shd');
SET leapfrog.read_mode = compute;
SELECT * FROM public.regress_compare('sh_lazy.by_a', 'sh_eager.by_a');
SELECT * FROM public.regress_compare('sh_lazy.by_b', 'sh_eager.by_b');
SELECT * FROM public.regress_compare('sh_lazy.src_v2', 'sh_eager.src_v2');
RESET leapfrog.read_mode;
SELECT leapfrog.complete('shd');
SELECT * FROM public.regress_compare('sh_lazy.by_a', 'sh_eager.by_a');
SELECT * FROM public.regress_compare('sh_lazy.by_b', 'sh_eager.by_b');
SELECT * FROM public.regress_compare('sh_lazy.src_v2', 'sh_eager.src_v2');
-- the retired table and both tables of done keys are gone
SELECT count(*) AS retired_left FROM pg_class c
 WHERE c.oid IN (SELECT i.relid FROM leapfrog.input i JOIN leapfrog.migration m ON m.id = i.migration_id
                  WHERE m.name = 'shd'
                 UNION ALL
                 SELECT p.done_keys FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
                  WHERE m.name = 'shd');

-- A chain: a later migration reads t1, which a row mapping of a table
-- tracked by keys still fills; a read of its new table pulls t1's rows up
-- the chain, which migrates their carrier's groups (relevance.c, pulls).
CREATE TABLE t0 (g int NOT NULL, h int NOT NULL, v int);
CREATE INDEX ON t0 (g);
CREATE INDEX ON t0 (h);
INSERT INTO t0 SELECT i % 4, i % 5, i FROM generate_series(1, 20) i;
CREATE TABLE sh_eager.t0 AS SELECT * FROM t0;
SELECT $$
  CREATE TABLE t0_g AS SELECT g, sum(v) AS v FROM t0 GROUP BY g;
  CREATE TABLE t0_h AS SELECT h, count(*) AS n FROM t0 GROUP BY h;
  CREATE TABLE t1 AS SELECT v, g FROM t0;
  CREATE INDEX ON t1 (g);
  DROP TABLE t0;
$$ AS chain1, $$
  CREATE TABLE t2 AS SELECT v, g FROM t1 WHERE v > 2;
  CREATE TABLE t2_g AS SELECT g, sum(v) AS v, count(*) AS n FROM t1 GROUP BY g;
  DROP TABLE t1;
$$ AS chain2 \gset
SET search_path = sh_eager;
SELECT public.regress_eager(:'chain1');
SELECT public.regress_eager(:'chain2');
SET search_path = sh_lazy;
SELECT leapfrog.start('shc1', :'chain1');
SELECT leapfrog.start('shc2', :'chain2');
SELECT * FROM t2 WHERE v = 7;
SELECT * FROM sh_eager.t2 WHERE v = 7;
-- a GROUP BY of t1 migrates its group's rows up the chain first (their
-- carrier's groups in t0): g = 1 is v = 1, 5, 9, 13, 17
SELECT * FROM t2_g WHERE g = 1;
SELECT * FROM sh_eager.t2_g WHERE g = 1;
SELECT leapfrog.complete('shc2');
SELECT name, state FROM leapfrog.migrations WHERE name IN ('shc1', 'shc2') ORDER BY 1;
SELECT * FROM public.regress_compare('sh_lazy.t2', 'sh_eager.t2');
SELECT * FROM public.regress_compare('sh_lazy.t2_g', 'sh_eager.t2_g');
SELECT * FROM public.regress_compare('sh_lazy.t0_g', 'sh_eager.t0_g');
SELECT * FROM public.regress_compare('sh_lazy.t0_h', 'sh_eager.t0_h');

-- An UPDATE that changes no column a group's copy reads, nor its key,
-- migrates nothing (live.c, unit_columns_changed): the columns of the GROUP
-- BY mapping and of the row mappings its groups carry.  arch copies note,
-- which by_k does not read: an UPDATE of note migrates the row's group; one
-- of pad does not, nor one that sets v to itself.
CREATE TABLE u0 (k int NOT NULL, v int, note text, pad text);
CREATE INDEX ON u0 (k);
INSERT INTO u0 SELECT i % 5, i, 'n' || i, 'p' FROM generate_series(1, 20) i;
CREATE TABLE sh_eager.u0 AS SELECT * FROM u0;
SELECT $$
  CREATE TABLE by_k AS SELECT k, sum(v) AS v FROM u0 GROUP BY k;
  CREATE TABLE arch AS SELECT v, note FROM u0 WHERE v > 10;
$$ AS uscript \gset
SET search_path = sh_eager;
SELECT public.regress_eager(:'uscript');
SET search_path = sh_lazy;
SELECT action, input FROM leapfrog.plan(:'uscript') WHERE action = 'track';
SELECT leapfrog.start('shu', :'uscript');
SELECT leapfrog.remaining('shu') AS before;
UPDATE u0 SET pad = 'q' WHERE k = 1;
UPDATE u0 SET v = v WHERE k = 2;
SELECT leapfrog.remaining('shu') AS after_pad_and_v;
UPDATE u0 SET note = 'changed' WHERE v = 13;
SELECT leapfrog.remaining('shu') AS after_note;
UPDATE sh_eager.u0 SET pad = 'q' WHERE k = 1;
UPDATE sh_eager.u0 SET v = v WHERE k = 2;
UPDATE sh_eager.u0 SET note = 'changed' WHERE v = 13;
SET leapfrog.read_mode = compute;
SELECT * FROM public.regress_compare('sh_lazy.by_k', 'sh_eager.by_k');
SELECT * FROM public.regress_compare('sh_lazy.arch', 'sh_eager.arch');
RESET leapfrog.read_mode;
SELECT leapfrog.complete('shu');
SELECT * FROM public.regress_compare('sh_lazy.by_k', 'sh_eager.by_k');
SELECT * FROM public.regress_compare('sh_lazy.arch', 'sh_eager.arch');
SELECT * FROM public.regress_compare('sh_lazy.u0', 'sh_eager.u0');

DROP FUNCTION public.sh_left();
DROP PROCEDURE public.sh_app(text);
DROP SCHEMA sh_eager CASCADE;
DROP SCHEMA sh_lazy CASCADE;
