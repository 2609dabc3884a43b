--
-- estimates: while a migration runs, the planner sizes a new table as the
-- eager script would leave it (its own rows plus its mappings' rows, or
-- for a GROUP BY mapping its groups), and a column that copies an input
-- column unchanged gets the input column's statistics rather than those of
-- the few rows migrated so far (estimate.c).  Without them, a lookup by key
-- on a table analyzed while nearly empty is estimated at many rows, and
-- PL/pgSQL keeps planning it afresh (custom plans).
--
CREATE SCHEMA es;
SET search_path = es;
-- the planner's row estimate of a statement
CREATE FUNCTION est(q text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE j json;
BEGIN
    EXECUTE 'EXPLAIN (FORMAT JSON) ' || q INTO j;
    RETURN (j -> 0 -> 'Plan' ->> 'Plan Rows')::int;
END $$;
-- execute prepared statement stmt(w, o) six times, the plan cache's five
-- custom plans and its first generic one, for w in 1..6 and o = w + o_from;
-- the values it returned
CREATE FUNCTION six_times(stmt text, o_from int) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE v bigint; r bigint[] := '{}';
BEGIN
    FOR i IN 1..6 LOOP
        EXECUTE format('EXECUTE %I(%s, %s)', stmt, i, i + o_from) INTO v;
        r := r || v;
    END LOOP;
    RETURN r;
END $$;
-- the index conditions of a statement's plan
CREATE FUNCTION index_conds(q text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE l text;
BEGIN
    FOR l IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
        IF l LIKE '%Index Cond%' THEN
            RETURN NEXT trim(l);
        END IF;
    END LOOP;
END $$;

-- 1:1: 10000 rows, g with 100 values of 100 rows each; a copied column
-- (g), a computed one (h)
CREATE TABLE item (k int PRIMARY KEY, g int NOT NULL, v int NOT NULL);
INSERT INTO item SELECT k, k % 100, k FROM generate_series(1, 10000) k;
ANALYZE item;
SELECT leapfrog.start('es_rows', $$
  CREATE TABLE item2 (k int PRIMARY KEY, g int NOT NULL, h int NOT NULL);
  INSERT INTO item2 SELECT k, g, g + 0 FROM item;
  DROP TABLE item;
$$);
-- the rows the application touched first: 50, each of another g
SELECT count(*) FROM item2 WHERE k <= 50;
ANALYZE item2;
SELECT reltuples FROM pg_class WHERE oid = 'item2'::regclass;
-- sized as the eager table: 10000 rows, not 50
SELECT est('SELECT * FROM item2');
-- g keeps the input's statistics: 100 rows a value.  h, computed, has the
-- table's own (50 rows, all distinct): about one row a value.
SELECT est('SELECT * FROM item2 WHERE g = 7') AS g_lent,
       est('SELECT * FROM item2 WHERE h = 7') AS h_own;

-- A column that a cast converts, where the cast keeps the values' order
-- and tells them apart (int to bigint, smallint to numeric, real to double
-- precision), gets the input column's statistics, cast; through another
-- cast (int to text) the table's own.  30000 rows, g with 50 values, s
-- with 300, f with 7.
CREATE TABLE wide (k int PRIMARY KEY, g int NOT NULL, s smallint NOT NULL, f real NOT NULL,
                   t int NOT NULL);
INSERT INTO wide SELECT k, k % 50, k % 300, k % 7, k % 50 FROM generate_series(1, 30000) k;
ANALYZE wide;
SELECT leapfrog.start('es_cast', $$
  ALTER TABLE wide ALTER COLUMN g TYPE bigint, ALTER COLUMN s TYPE numeric,
    ALTER COLUMN f TYPE float8, ALTER COLUMN t TYPE text;
$$);
-- 40 rows migrated, then analyzed: the table's own statistics know them only
SELECT count(*) FROM wide WHERE k <= 40;
ANALYZE wide;
SELECT est('SELECT * FROM wide WHERE g = 7') AS g_eq,
       est('SELECT * FROM wide WHERE g < 10') AS g_lt,
       est('SELECT * FROM wide WHERE s < 30') AS s_lt,
       est('SELECT * FROM wide WHERE f = 3') AS f_eq,
       est('SELECT * FROM wide WHERE t = ''7''') AS t_own;
SELECT leapfrog.complete('es_cast');

-- GROUP BY: 10 warehouses of 100 orders of 5 lines; the new table holds
-- one row an order
CREATE TABLE line (w int NOT NULL, o int NOT NULL, n int NOT NULL, amount int NOT NULL,
                   PRIMARY KEY (w, o, n));
INSERT INTO line SELECT w, o, n, o + n
  FROM generate_series(1, 10) w, generate_series(1, 100) o, generate_series(1, 5) n;
ANALYZE line;
SELECT leapfrog.start('es_groups', $$
  CREATE TABLE total (w int NOT NULL, o int NOT NULL, amount bigint NOT NULL,
                      PRIMARY KEY (w, o));
  INSERT INTO total SELECT w, o, sum(amount) FROM line GROUP BY w, o;
$$);
-- the last ten orders of every warehouse were read first, and the table
-- analyzed then: its own statistics know ten order numbers
SELECT count(*) FROM total WHERE o > 90;
ANALYZE total;
-- sized as its groups: 1000, not the input's 5000 rows
SELECT est('SELECT * FROM total');
SELECT est('SELECT * FROM total WHERE w = 3 AND o = 5');
-- A lookup by key keeps its generic plan (an index scan on $1 and $2) once
-- the plan cache has compared it with five custom plans.  With the table's
-- own statistics, an order number they do not know looked rarer than a
-- parameter, and every execution was planned afresh.
PREPARE by_key(int, int) AS SELECT amount FROM total WHERE w = $1 AND o = $2;
SELECT six_times('by_key', 0);
SELECT index_conds('EXECUTE by_key(7, 7)');
-- the same under computing reads
SET leapfrog.read_mode = compute;
PREPARE by_key_c(int, int) AS SELECT amount FROM total WHERE w = $1 AND o = $2;
SELECT six_times('by_key_c', 10);
SELECT index_conds('EXECUTE by_key_c(7, 17)');
RESET leapfrog.read_mode;

-- done: the tables' own statistics, from completion's ANALYZE
SELECT leapfrog.complete('es_rows');
SELECT leapfrog.complete('es_groups');
SELECT est('SELECT * FROM item2 WHERE g = 7') AS g_own,
       est('SELECT * FROM total') AS total_own;
DROP SCHEMA es CASCADE;
RESET search_path;
