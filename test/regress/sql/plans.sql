--
-- plans: prepared statements (one prepared before start(), one executed
-- eight times, one with generic plans only), PL/pgSQL and SQL functions
-- reading and writing the new table, cursors.  The rows a statement needs
-- are found at each execution, whatever plan is reused.
--
CREATE SCHEMA pl_eager;
CREATE SCHEMA pl_lazy;
CREATE TABLE pl_eager.acct (id int PRIMARY KEY, owner text NOT NULL, bal int NOT NULL);
INSERT INTO pl_eager.acct SELECT g, 'owner' || g, g * 10 FROM generate_series(1, 100) g;
CREATE TABLE pl_lazy.acct (id int PRIMARY KEY, owner text NOT NULL, bal int NOT NULL);
INSERT INTO pl_lazy.acct SELECT * FROM pl_eager.acct;
SELECT $$
  CREATE TABLE acct_new (id int PRIMARY KEY, owner text NOT NULL, bal bigint NOT NULL);
  INSERT INTO acct_new SELECT id, owner, bal FROM acct;
  DROP TABLE acct;
  ALTER TABLE acct_new RENAME TO acct;
$$ AS script \gset
-- The functions find acct through search_path.
CREATE FUNCTION public.transfer(src int, dst int, amount int) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE b bigint;
BEGIN
    UPDATE acct SET bal = bal - amount WHERE id = src;
    UPDATE acct SET bal = bal + amount WHERE id = dst;
    SELECT bal INTO b FROM acct WHERE id = dst;
    RETURN b;
END $$;
CREATE FUNCTION public.sum_range(lo int, hi int) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE r record; s bigint := 0;
BEGIN
    FOR r IN SELECT bal FROM acct WHERE id BETWEEN lo AND hi LOOP
        s := s + r.bal;
    END LOOP;
    RETURN s;
END $$;

-- The lazy run: some use before start(), then start(), then the rest.
SET search_path = pl_lazy;
CREATE FUNCTION public.owner_of(int) RETURNS text
LANGUAGE sql STABLE AS 'SELECT owner FROM acct WHERE id = $1';
PREPARE pre(int) AS SELECT id, owner FROM acct WHERE id = $1;
EXECUTE pre(1);
SELECT public.transfer(1, 2, 5);
SELECT public.owner_of(3);
SELECT leapfrog.start('plans', :'script');
-- (an inlinable SQL function over the new table's row type)
CREATE FUNCTION public.accts_between(lo int, hi int) RETURNS TABLE (o_id int, o_owner text)
LANGUAGE sql STABLE AS 'SELECT id, owner FROM acct WHERE id BETWEEN lo AND hi ORDER BY id';
SELECT public.regress_migrated('plans') AS migrated;
-- A statement prepared before start() now reads the new table.
EXECUTE pre(2);
SELECT public.regress_migrated('plans') AS migrated;
-- A prepared statement executed eight times (custom, then generic plans).
PREPARE q(int) AS SELECT owner, bal FROM acct WHERE id = $1;
EXECUTE q(20);
EXECUTE q(21);
EXECUTE q(22);
EXECUTE q(23);
EXECUTE q(24);
SELECT public.regress_migrated('plans') AS migrated;
EXECUTE q(25);
SELECT public.regress_migrated('plans') AS migrated;
EXECUTE q(26);
SELECT public.regress_migrated('plans') AS migrated;
EXECUTE q(27);
SELECT public.regress_migrated('plans') AS migrated;
EXECUTE q(20);
SELECT public.regress_migrated('plans') AS migrated;
-- Generic plans only: the rows are chosen by the parameters of each execution.
SET plan_cache_mode = force_generic_plan;
PREPARE u(int, int) AS UPDATE acct SET bal = bal + $2 WHERE id = $1;
EXECUTE u(30, 1);
EXECUTE u(31, 1);
EXECUTE u(32, 1);
EXECUTE u(33, 1);
EXECUTE u(34, 1);
EXECUTE u(35, 1);
EXECUTE u(36, 1);
SELECT public.regress_migrated('plans') AS migrated;
EXECUTE u(30, 1);
SELECT public.regress_migrated('plans') AS migrated;
SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'u';
RESET plan_cache_mode;
-- PL/pgSQL, whose plans were cached on the old table before start().
SELECT public.transfer(40, 41, 5);
SELECT public.regress_migrated('plans') AS migrated;
-- Seven more calls: its cached plans become generic.
SELECT sum(public.transfer(g, g + 10, 1)) FROM generate_series(50, 56) g;
SELECT public.regress_migrated('plans') AS migrated;
-- A PL/pgSQL loop over a query.
SELECT public.sum_range(70, 74);
SELECT public.regress_migrated('plans') AS migrated;
-- SQL functions.
SELECT public.owner_of(75);
SELECT public.regress_migrated('plans') AS migrated;
SELECT public.owner_of(g) FROM generate_series(76, 78) g;
SELECT public.regress_migrated('plans') AS migrated;
-- A cursor.
BEGIN;
DECLARE c CURSOR FOR SELECT id, bal FROM acct WHERE id BETWEEN 84 AND 88 ORDER BY id;
FETCH 2 FROM c;
FETCH ALL FROM c;
CLOSE c;
COMMIT;
SELECT public.regress_migrated('plans') AS migrated;
-- A cursor WITH HOLD, read after its transaction committed.
BEGIN;
DECLARE h CURSOR WITH HOLD FOR SELECT id, owner FROM acct WHERE id IN (89, 90) ORDER BY id;
COMMIT;
FETCH ALL FROM h;
CLOSE h;
SELECT public.regress_migrated('plans') AS migrated;
-- A DO block.
DO $$ BEGIN UPDATE acct SET bal = bal + 100 WHERE id = 91; END $$;
SELECT public.regress_migrated('plans') AS migrated;
SELECT bal FROM acct WHERE id = 91;
SELECT public.regress_migrated('plans') AS migrated;
-- An inlined SQL function: it needs rows 80 to 82; it may migrate more (up
-- to the 51 rows left), the result shows it is right.
SELECT * FROM public.accts_between(80, 82);
SELECT public.regress_migrated('plans') BETWEEN 3 AND 51 AS migrated_3_to_51;
SELECT leapfrog.complete('plans');
DEALLOCATE ALL;

-- The eager run of the same statements.
SET search_path = pl_eager;
PREPARE pre(int) AS SELECT id, owner FROM acct WHERE id = $1;
EXECUTE pre(1);
SELECT public.transfer(1, 2, 5);
SELECT public.owner_of(3);
SELECT public.regress_eager(:'script');
EXECUTE pre(2);
PREPARE q(int) AS SELECT owner, bal FROM acct WHERE id = $1;
EXECUTE q(20);
EXECUTE q(21);
EXECUTE q(22);
EXECUTE q(23);
EXECUTE q(24);
EXECUTE q(25);
EXECUTE q(26);
EXECUTE q(27);
EXECUTE q(20);
SET plan_cache_mode = force_generic_plan;
PREPARE u(int, int) AS UPDATE acct SET bal = bal + $2 WHERE id = $1;
EXECUTE u(30, 1);
EXECUTE u(31, 1);
EXECUTE u(32, 1);
EXECUTE u(33, 1);
EXECUTE u(34, 1);
EXECUTE u(35, 1);
EXECUTE u(36, 1);
EXECUTE u(30, 1);
SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'u';
RESET plan_cache_mode;
SELECT public.transfer(40, 41, 5);
SELECT sum(public.transfer(g, g + 10, 1)) FROM generate_series(50, 56) g;
SELECT public.sum_range(70, 74);
SELECT public.owner_of(75);
SELECT public.owner_of(g) FROM generate_series(76, 78) g;
BEGIN;
DECLARE c CURSOR FOR SELECT id, bal FROM acct WHERE id BETWEEN 84 AND 88 ORDER BY id;
FETCH 2 FROM c;
FETCH ALL FROM c;
CLOSE c;
COMMIT;
BEGIN;
DECLARE h CURSOR WITH HOLD FOR SELECT id, owner FROM acct WHERE id IN (89, 90) ORDER BY id;
COMMIT;
FETCH ALL FROM h;
CLOSE h;
DO $$ BEGIN UPDATE acct SET bal = bal + 100 WHERE id = 91; END $$;
SELECT bal FROM acct WHERE id = 91;
SELECT * FROM public.accts_between(80, 82);
DEALLOCATE ALL;

SELECT name, state, tuples_total, tuples_migrated, error
  FROM leapfrog.migrations WHERE name = 'plans';
SELECT * FROM public.regress_compare('pl_lazy.acct', 'pl_eager.acct');

RESET search_path;
DROP FUNCTION public.transfer(int, int, int), public.sum_range(int, int),
              public.owner_of(int), public.accts_between(int, int);
DROP SCHEMA pl_eager CASCADE;
DROP SCHEMA pl_lazy CASCADE;
