--
-- parallel: statements whose plans parallel workers run.  A worker runs on
-- the leader's active snapshot, which must be the one the statement runs
-- on: a read that migrates rows replaces its snapshot by one that sees
-- them (src/migrate.c, "Snapshots"), and through SPI (PL/pgSQL's EXECUTE),
-- COPY (query) TO and EXPLAIN ANALYZE the plan used to run under the
-- snapshot pushed before, to which the rows it had just migrated were in
-- neither table.  (A computing read's gate in a worker: isolation
-- compute_reads.)
--
-- force_parallel_mode = on runs every plan in a worker (a Gather on top,
-- the leader not participating); in_workers() checks that one ran.
--
CREATE SCHEMA par;
SET search_path = par;
CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL);
INSERT INTO acct SELECT g, g FROM generate_series(1, 100) g;
SELECT leapfrog.start('par', $$
  CREATE TABLE acct_v2 (id bigint PRIMARY KEY, bal bigint NOT NULL);
  INSERT INTO acct_v2 SELECT id, bal * 10 FROM acct;
  DROP TABLE acct;
$$);

-- the number of rows a read returns, and whether a worker ran its plan
CREATE FUNCTION in_workers(q text) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE plan json;
BEGIN
  EXECUTE 'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, FORMAT JSON) ' || q INTO plan;
  RETURN format('%s rows, in workers: %s', plan->0->'Plan'->>'Actual Rows',
                (regexp_match(plan::text, '"Workers Launched": (\d+)'))[1]::int > 0);
END $f$;
CREATE FUNCTION count_range(lo int, hi int) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE n bigint; s bigint;
BEGIN
  EXECUTE 'SELECT count(*), sum(bal) FROM acct_v2 WHERE id BETWEEN $1 AND $2' INTO n, s USING lo, hi;
  RETURN format('%s rows, sum %s', n, s);
END $f$;

SET leapfrog.read_mode = migrate;
SET force_parallel_mode = on;
SET parallel_leader_participation = off;

-- EXPLAIN ANALYZE through SPI: ids 1 to 10 migrate, and the worker sees them
SELECT in_workers('SELECT id, bal FROM acct_v2 WHERE id BETWEEN 1 AND 10');
-- PL/pgSQL: 11 to 20 migrate here, 5 to 10 were migrated
SELECT count_range(5, 20);
-- COPY (query) TO
COPY (SELECT id, bal FROM acct_v2 WHERE id BETWEEN 21 AND 24 ORDER BY id) TO stdout;
-- a plain SELECT (PostgreSQL pushes the statement's snapshot itself)
SELECT count(*), sum(bal) FROM acct_v2 WHERE id BETWEEN 25 AND 30;

RESET force_parallel_mode;
RESET parallel_leader_participation;
SELECT leapfrog.remaining('par') AS retired_rows;
SELECT leapfrog.complete('par');
SELECT count(*), sum(bal) FROM acct_v2;
DROP SCHEMA par CASCADE;
RESET search_path;
RESET leapfrog.read_mode;
