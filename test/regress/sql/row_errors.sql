--
-- row_errors: input rows whose migration fails (bad cast, NULL into NOT
-- NULL, CHECK violation).  start() succeeds; a statement that needs such a
-- row fails with the original SQLSTATE and a CONTEXT naming the migration;
-- nothing is lost (the row stays in the retired table); other rows keep
-- migrating on demand.  Then the background worker (turned on here) marks
-- the migration failed and wait() reports it.  Last test of the suite: the
-- failed migration stays.
--
CREATE SCHEMA re;
CREATE TABLE re.src (id int PRIMARY KEY, qty text NOT NULL, code int);
INSERT INTO re.src VALUES (1, '10', 1), (2, '20', 2), (3, 'abc', 3), (4, '40', 4),
                          (5, '50', NULL), (6, '60', 6), (7, '70', -7), (8, '80', 8);
SELECT 're.src'::regclass::oid AS old_oid \gset
SELECT leapfrog.start('row_errors', $$
  CREATE TABLE re.dst (id int PRIMARY KEY, qty int NOT NULL, code int NOT NULL CHECK (code > 0));
  INSERT INTO re.dst SELECT id, qty::int, code FROM re.src;
  DROP TABLE re.src;
$$);
SELECT leapfrog.remaining('row_errors');
SELECT * FROM re.dst WHERE id = 1;
SELECT leapfrog.remaining('row_errors');
\set VERBOSITY sqlstate
SELECT * FROM re.dst WHERE id = 3;
SELECT * FROM re.dst WHERE id = 5;
SELECT * FROM re.dst WHERE id = 7;
UPDATE re.dst SET qty = 0 WHERE id = 7;
-- the good row 6 is needed with the bad row 7: the statement fails whole
SELECT * FROM re.dst WHERE id IN (6, 7);
\set VERBOSITY default
SELECT leapfrog.remaining('row_errors'), public.regress_rows(:old_oid) AS retired_rows;
-- The error's CONTEXT names the migration.
DO $$
DECLARE st text; ctx text;
BEGIN
    PERFORM * FROM re.dst WHERE id = 3;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, ctx = PG_EXCEPTION_CONTEXT;
    RAISE NOTICE 'sqlstate %, context names the migration: %', st, ctx LIKE '%row_errors%';
END $$;
-- Other rows still migrate on demand.
SELECT * FROM re.dst WHERE id IN (2, 4) ORDER BY id;
SELECT * FROM re.dst WHERE id = 6;
SELECT leapfrog.remaining('row_errors'), public.regress_rows(:old_oid) AS retired_rows;
-- complete() fails on one of the bad rows and changes nothing.
SELECT public.regress_sqlstate($$SELECT leapfrog.complete('row_errors')$$)
       IN ('22P02', '23502', '23514') AS complete_fails;
SELECT name, state, error FROM leapfrog.migrations WHERE name = 'row_errors';
SELECT leapfrog.remaining('row_errors'), public.regress_rows(:old_oid) AS retired_rows;

-- The background worker meets a bad row: the migration is marked failed,
-- with the error, and wait() fails.
ALTER SYSTEM SET leapfrog.background = on;
ALTER SYSTEM SET leapfrog.background_delay = 100;
SELECT pg_reload_conf();
SELECT public.regress_sqlstate($$SELECT leapfrog.wait('row_errors', 60)$$) <> 'ok' AS wait_fails;
SELECT name, state, error IS NOT NULL AS has_error FROM leapfrog.migrations WHERE name = 'row_errors';
-- Rows still migrate on demand, and none is lost.
SELECT * FROM re.dst WHERE id = 8;
SELECT (SELECT count(*) FROM re.dst WHERE id IN (1, 2, 4, 6, 8)) AS migrated_good_rows,
       public.regress_rows(:old_oid) AS retired_rows;
ALTER SYSTEM RESET leapfrog.background;
ALTER SYSTEM RESET leapfrog.background_delay;
SELECT pg_reload_conf();
