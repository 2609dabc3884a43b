--
-- shared_null: a table read by several GROUP BY or join mappings whose key
-- columns may be NULL.  It is tracked by keys (src/live.c), and its tables
-- of done keys hold NULL keys, NULLs equal: a GROUP BY's NULL group is one
-- unit.  A join's row with a NULL key matches nothing: on a side the join
-- preserves (or with a row mapping riding on the join's units) it is a
-- unit of its own, the row (LF_KEY_ROW: the join's table of done keys
-- records the input and ctid of such a row); elsewhere it is no unit and
-- no row left (lf_key_joins_nothing).
-- Every write below runs on both sides (sn_eager ran the script eagerly)
-- and the tables are compared.
--
CREATE SCHEMA sn_eager;
CREATE SCHEMA sn_lazy;
SELECT $$
  CREATE TABLE ord (o int PRIMARY KEY, cust int, day int, amt int NOT NULL);
  CREATE INDEX ord_cust ON ord (cust, day);
  CREATE INDEX ord_day ON ord (day);
  CREATE TABLE cust (c int, name text NOT NULL);
  CREATE INDEX cust_c ON cust (c);
  -- orders 1-40: every fifth without a customer, every seventh without a day
  INSERT INTO ord SELECT o, CASE WHEN o % 5 = 0 THEN NULL ELSE o % 4 + 1 END,
                         CASE WHEN o % 7 = 0 THEN NULL ELSE o % 3 END, o * 3
                    FROM generate_series(1, 40) o;
  -- customers 1-3 and 5, and two without a number
  INSERT INTO cust VALUES (1, 'ann'), (2, 'bob'), (3, 'cy'), (5, 'eve'), (NULL, 'nn1'), (NULL, 'nn2');
$$ AS setup \gset
SET search_path = sn_eager;
SELECT public.regress_eager(:'setup');
SET search_path = sn_lazy;
SELECT public.regress_eager(:'setup');

-- 1. Retired: the orders with their customer's name (a left join on a
-- nullable key), the customers with their orders (a right join: customers
-- without a number come out NULL-extended), totals per customer and per
-- customer and day (NULL groups), and an archive of the big orders.
SELECT $$
  CREATE TABLE ord_name AS SELECT o.o, o.amt, c.name FROM ord o LEFT JOIN cust c ON c.c = o.cust;
  CREATE TABLE cust_ord AS SELECT c.name, o.o FROM ord o RIGHT JOIN cust c ON c.c = o.cust;
  CREATE TABLE per_cust AS SELECT cust, count(*) AS n, sum(amt) AS amt FROM ord GROUP BY cust;
  CREATE TABLE per_cust_day AS SELECT cust, day, sum(amt) AS amt FROM ord GROUP BY cust, day;
  CREATE TABLE big AS SELECT o, cust, amt FROM ord WHERE amt > 60;
  DROP TABLE ord;
  DROP TABLE cust;
$$ AS script \gset
SET search_path = sn_eager;
SELECT public.regress_eager(:'script');
SET search_path = sn_lazy;
SELECT leapfrog.start('sn', :'script');
SELECT p.target_relid::regclass AS target, p.done_keys IS NOT NULL AS by_keys,
       (SELECT q.target_relid::regclass FROM leapfrog.mapping q
         WHERE q.migration_id = p.migration_id AND q.done_keys = p.done_keys ORDER BY q.id LIMIT 1) AS carrier
  FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
 WHERE m.name = 'sn' ORDER BY p.id;
-- Keys migrated per mapping, how many of them have a NULL, and how many
-- are a join's rows.
CREATE FUNCTION public.sn_done(mig text)
RETURNS TABLE (target regclass, keys_done bigint, null_keys bigint, rows bigint)
LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT p.target_relid::regclass AS t, p.done_keys::regclass AS k
             FROM leapfrog.mapping p JOIN leapfrog.migration m ON m.id = p.migration_id
            WHERE m.name = mig AND p.done_keys IS NOT NULL ORDER BY p.id LOOP
    target := r.t;
    EXECUTE format($q$SELECT count(*),
                         count(*) FILTER (WHERE EXISTS (SELECT FROM jsonb_each(to_jsonb(d) - 'leapfrog_row_input' - 'leapfrog_row') e
                                                         WHERE e.value = 'null')),
                         count(*) FILTER (WHERE to_jsonb(d) ->> 'leapfrog_row' IS NOT NULL)
                    FROM %s d$q$, r.k)
      INTO keys_done, null_keys, rows;
    RETURN NEXT;
  END LOOP;
END $$;
SELECT leapfrog.remaining('sn');
-- an order without a customer: its join unit is that order alone, for the
-- join only (a row that matches nothing)
SELECT * FROM ord_name WHERE o = 10;
SELECT * FROM public.sn_done('sn');
SELECT count(*) AS unnamed FROM ord_name WHERE name IS NULL;
-- the NULL group of the totals per customer, and a group with a NULL day
SELECT * FROM per_cust WHERE cust IS NULL;
SELECT * FROM per_cust_day WHERE cust = 1 AND day IS NULL;
SELECT * FROM public.sn_done('sn');
-- a customer without a number, through the right join
SELECT * FROM cust_ord WHERE name = 'nn1';
-- computing reads of what is left, NULL keys among it, see what eager does
SET leapfrog.read_mode = compute;
SELECT * FROM public.regress_compare('sn_lazy.ord_name', 'sn_eager.ord_name');
SELECT * FROM public.regress_compare('sn_lazy.cust_ord', 'sn_eager.cust_ord');
SELECT * FROM public.regress_compare('sn_lazy.per_cust', 'sn_eager.per_cust');
SELECT * FROM public.regress_compare('sn_lazy.per_cust_day', 'sn_eager.per_cust_day');
SELECT * FROM public.regress_compare('sn_lazy.big', 'sn_eager.big');
SELECT * FROM public.sn_done('sn');
RESET leapfrog.read_mode;
-- the rows left count the NULL keys not migrated
SELECT leapfrog.remaining('sn');
SELECT leapfrog.complete('sn');
SELECT * FROM public.regress_compare('sn_lazy.ord_name', 'sn_eager.ord_name');
SELECT * FROM public.regress_compare('sn_lazy.cust_ord', 'sn_eager.cust_ord');
SELECT * FROM public.regress_compare('sn_lazy.per_cust', 'sn_eager.per_cust');
SELECT * FROM public.regress_compare('sn_lazy.per_cust_day', 'sn_eager.per_cust_day');
SELECT * FROM public.regress_compare('sn_lazy.big', 'sn_eager.big');
SELECT state FROM leapfrog.migrations WHERE name = 'sn';

-- 2. Kept live, with the background workers: ord is replaced (its NULL
-- keys are on the side the join preserves) and its retired version tracked
-- by keys; cust, whose NULL keys join nothing, is tracked in place.  The
-- application writes both tables meanwhile, NULL keys included.
SET search_path = sn_eager;
DROP TABLE ord_name, cust_ord, per_cust, per_cust_day, big;
SELECT public.regress_eager(:'setup');
SET search_path = sn_lazy;
DROP TABLE ord_name, cust_ord, per_cust, per_cust_day, big;
SELECT public.regress_eager(:'setup');
SELECT $$
  CREATE TABLE ord_name AS SELECT o.o, o.amt, c.name FROM ord o LEFT JOIN cust c ON c.c = o.cust;
  CREATE TABLE per_cust AS SELECT cust, count(*) AS n, sum(amt) AS amt FROM ord GROUP BY cust;
  CREATE TABLE per_day AS SELECT day, sum(amt) AS amt FROM ord GROUP BY day;
$$ AS script2 \gset
SET search_path = sn_eager;
SELECT public.regress_eager(:'script2');
SET search_path = sn_lazy;
SELECT action, input FROM leapfrog.plan(:'script2') WHERE action <> 'mapping' ORDER BY 2;
SELECT leapfrog.start('sn2', :'script2');
CREATE PROCEDURE public.sn_app(s text) LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('SET LOCAL search_path = %I', s);
  UPDATE ord SET cust = NULL WHERE o = 1;                -- into the NULL group
  UPDATE ord SET cust = 2, day = NULL WHERE o = 5;        -- out of it, into a NULL day
  UPDATE ord SET amt = amt + 1000 WHERE cust IS NULL;     -- every order without a customer
  DELETE FROM ord WHERE o = 15;
  INSERT INTO ord VALUES (41, NULL, NULL, 7), (42, 5, 1, 8);
  UPDATE cust SET c = NULL WHERE c = 3;                    -- a customer loses its number
  INSERT INTO cust VALUES (NULL, 'nn3');
  UPDATE per_cust SET amt = 0 WHERE cust = 1;               -- the new tables
  UPDATE ord_name SET name = 'x' WHERE o = 2;
END $$;
CALL public.sn_app('sn_eager');
CALL public.sn_app('sn_lazy');
SELECT * FROM per_cust WHERE cust IS NULL;
SELECT * FROM sn_eager.per_cust WHERE cust IS NULL;
ALTER SYSTEM SET leapfrog.background = on;
ALTER SYSTEM SET leapfrog.background_delay = 0;
ALTER SYSTEM SET leapfrog.batch_size = 7;
SELECT pg_reload_conf();
SELECT leapfrog.wait('sn2', 60);
ALTER SYSTEM RESET leapfrog.background;
ALTER SYSTEM RESET leapfrog.background_delay;
ALTER SYSTEM RESET leapfrog.batch_size;
SELECT pg_reload_conf();
SELECT name, state, error FROM leapfrog.migrations WHERE name = 'sn2';
SELECT * FROM public.regress_compare('sn_lazy.ord_name', 'sn_eager.ord_name');
SELECT * FROM public.regress_compare('sn_lazy.per_cust', 'sn_eager.per_cust');
SELECT * FROM public.regress_compare('sn_lazy.per_day', 'sn_eager.per_day');
SELECT * FROM public.regress_compare('sn_lazy.ord', 'sn_eager.ord');
SELECT * FROM public.regress_compare('sn_lazy.cust', 'sn_eager.cust');

-- 3. Refused: more than four key columns that may be NULL (each pattern of
-- NULLs is a test of its own in every read).
CREATE TABLE wide (a int, b int, c int, d int, e int, v int);
CREATE INDEX ON wide (a, b, c, d, e);
CREATE INDEX ON wide (v);
SELECT leapfrog.start('sn_bad', $$
  CREATE TABLE wide_total AS SELECT a, b, c, d, e, sum(v) AS v FROM wide GROUP BY a, b, c, d, e;
  CREATE TABLE wide_v AS SELECT v, count(*) AS n FROM wide GROUP BY v;
  DROP TABLE wide;
$$);

DROP FUNCTION public.sn_done(text);
DROP PROCEDURE public.sn_app(text);
RESET search_path;
DROP SCHEMA sn_eager CASCADE;
DROP SCHEMA sn_lazy CASCADE;
