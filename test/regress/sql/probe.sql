--
-- probe: a relevance plan that is one btree index scan runs without the
-- executor (probe.c).  Each statement below migrates exactly the rows its
-- relevance plan finds (regress_migrated), and does to the new table what
-- the same statement does to the eager copy: key values from parameters
-- (generic plans) and constants (custom plans), NULL, a cross-type
-- comparison, an expression index, a descending index, a varchar column
-- compared as text, ranges, expressions of parameters, and the shapes that
-- still take the executor
-- (a hash index, = ANY, a filter beside the index condition).
--
CREATE SCHEMA pr;
CREATE TABLE pr.src (a int, b text, c bigint, d varchar(10), e int, PRIMARY KEY (a, b));
CREATE INDEX src_lower ON pr.src (lower(b));
CREATE INDEX src_c ON pr.src (c DESC);
CREATE INDEX src_d ON pr.src (d);
CREATE INDEX src_e ON pr.src USING hash (e);
INSERT INTO pr.src SELECT g, 'K' || g, g * 10, 'v' || g, g * 3 FROM generate_series(1, 5000) g;
ANALYZE pr.src;
CREATE TABLE pr.eager (a int, b text, c bigint, d varchar(10), e int, PRIMARY KEY (a, b));
INSERT INTO pr.eager SELECT * FROM pr.src;
SELECT leapfrog.start('probe', $$
  CREATE TABLE pr.dst (a int, b text, c bigint, d varchar(10), e int, PRIMARY KEY (a, b));
  INSERT INTO pr.dst SELECT a, b, c, d, e FROM pr.src;
  DROP TABLE pr.src;
$$);
SELECT public.regress_migrated('probe') AS migrated;
-- The same statement on both tables, then the rows it migrated.
CREATE FUNCTION pr.both(stmt text) RETURNS TABLE (eager bigint, lazy bigint, migrated bigint)
LANGUAGE plpgsql AS $f$
DECLARE ne bigint; nl bigint;
BEGIN
  EXECUTE format(stmt, 'pr.eager');
  GET DIAGNOSTICS ne = ROW_COUNT;
  EXECUTE format(stmt, 'pr.dst');
  GET DIAGNOSTICS nl = ROW_COUNT;
  RETURN QUERY SELECT ne, nl, public.regress_migrated('probe');
END $f$;
CREATE FUNCTION pr.same() RETURNS bigint LANGUAGE sql AS $f$
  SELECT count(*) FROM ((TABLE pr.dst EXCEPT ALL TABLE pr.eager)
                        UNION ALL (TABLE pr.eager EXCEPT ALL TABLE pr.dst)) x
$f$;

-- Parameters: generic plans
SET plan_cache_mode = force_generic_plan;
PREPARE key_e(int, text) AS UPDATE pr.eager SET e = e + 1 WHERE a = $1 AND b = $2;
PREPARE key_l(int, text) AS UPDATE pr.dst SET e = e + 1 WHERE a = $1 AND b = $2;
EXECUTE key_e(5, 'K5');
EXECUTE key_l(5, 'K5');
SELECT public.regress_migrated('probe') AS migrated;
-- again: nothing left to migrate
EXECUTE key_l(5, 'K5');
EXECUTE key_e(5, 'K5');
SELECT public.regress_migrated('probe') AS migrated;
-- NULL: no row, none migrated
EXECUTE key_e(NULL, 'K6');
EXECUTE key_l(NULL, 'K6');
EXECUTE key_l(6, NULL);
SELECT public.regress_migrated('probe') AS migrated;
-- no such key
EXECUTE key_l(6, 'K7');
SELECT public.regress_migrated('probe') AS migrated;
-- int4 column, int8 parameter (a cross-type operator of the family)
PREPARE wide_e(bigint) AS UPDATE pr.eager SET e = e + 1 WHERE a = $1 AND b = 'K7';
PREPARE wide_l(bigint) AS UPDATE pr.dst SET e = e + 1 WHERE a = $1 AND b = 'K7';
EXECUTE wide_e(7);
EXECUTE wide_l(7);
SELECT public.regress_migrated('probe') AS migrated;
-- expression index
PREPARE low_e(text) AS UPDATE pr.eager SET e = e + 1 WHERE lower(b) = $1;
PREPARE low_l(text) AS UPDATE pr.dst SET e = e + 1 WHERE lower(b) = $1;
EXECUTE low_e('k8');
EXECUTE low_l('k8');
SELECT public.regress_migrated('probe') AS migrated;
-- descending index, and a range on it
PREPARE c_e(bigint) AS UPDATE pr.eager SET e = e + 1 WHERE c = $1;
PREPARE c_l(bigint) AS UPDATE pr.dst SET e = e + 1 WHERE c = $1;
EXECUTE c_e(90);
EXECUTE c_l(90);
SELECT public.regress_migrated('probe') AS migrated;
PREPARE crange_e(bigint, bigint) AS UPDATE pr.eager SET e = e + 1 WHERE c > $1 AND c <= $2;
PREPARE crange_l(bigint, bigint) AS UPDATE pr.dst SET e = e + 1 WHERE c > $1 AND c <= $2;
EXECUTE crange_e(100, 150);
EXECUTE crange_l(100, 150);
SELECT public.regress_migrated('probe') AS migrated;
-- varchar column, text parameter
PREPARE d_e(text) AS UPDATE pr.eager SET e = e + 1 WHERE d = $1;
PREPARE d_l(text) AS UPDATE pr.dst SET e = e + 1 WHERE d = $1;
EXECUTE d_e('v20');
EXECUTE d_l('v20');
SELECT public.regress_migrated('probe') AS migrated;
-- a range on the key's first column
PREPARE arange_e(int, int) AS UPDATE pr.eager SET e = e + 1 WHERE a BETWEEN $1 AND $2;
PREPARE arange_l(int, int) AS UPDATE pr.dst SET e = e + 1 WHERE a BETWEEN $1 AND $2;
EXECUTE arange_e(30, 34);
EXECUTE arange_l(30, 34);
SELECT public.regress_migrated('probe') AS migrated;
-- expressions of parameters (PL/pgSQL's p_items[i]), evaluated as the
-- executor evaluates a run-time key: an element, NULL past the array's end,
-- and the executor's error
PREPARE el_e(int[], int) AS UPDATE pr.eager SET e = e + 1 WHERE a = $1[$2] AND b = 'K' || $1[$2];
PREPARE el_l(int[], int) AS UPDATE pr.dst SET e = e + 1 WHERE a = $1[$2] AND b = 'K' || $1[$2];
EXECUTE el_e('{40, 41}', 2);
EXECUTE el_l('{40, 41}', 2);
SELECT public.regress_migrated('probe') AS migrated;
EXECUTE el_e('{40, 41}', 3);
EXECUTE el_l('{40, 41}', 3);
SELECT public.regress_migrated('probe') AS migrated;
PREPARE div_l(int) AS UPDATE pr.dst SET e = e + 1 WHERE a = 42 / $1 AND b = 'K42';
EXECUTE div_l(0);
EXECUTE div_l(1);
SELECT public.regress_migrated('probe') AS migrated;
UPDATE pr.eager SET e = e + 1 WHERE a = 42 AND b = 'K42';
-- the executor's shapes: a hash index, = ANY, a filter
PREPARE h_e(int) AS UPDATE pr.eager SET d = 'h' WHERE e = $1;
PREPARE h_l(int) AS UPDATE pr.dst SET d = 'h' WHERE e = $1;
EXECUTE h_e(120);
EXECUTE h_l(120);
SELECT public.regress_migrated('probe') AS migrated;
PREPARE any_e(bigint[]) AS UPDATE pr.eager SET e = e + 1 WHERE c = ANY ($1);
PREPARE any_l(bigint[]) AS UPDATE pr.dst SET e = e + 1 WHERE c = ANY ($1);
EXECUTE any_e('{500, 510, 520}');
EXECUTE any_l('{500, 510, 520}');
SELECT public.regress_migrated('probe') AS migrated;
PREPARE filt_e(int) AS UPDATE pr.eager SET e = e + 1 WHERE a = $1 AND e % 2 = 0;
PREPARE filt_l(int) AS UPDATE pr.dst SET e = e + 1 WHERE a = $1 AND e % 2 = 0;
EXECUTE filt_e(60);
EXECUTE filt_l(60);
EXECUTE filt_e(61);
EXECUTE filt_l(61);
SELECT public.regress_migrated('probe') AS migrated;
RESET plan_cache_mode;

-- Constants (custom plans), a locking read, and a DELETE
SELECT * FROM pr.both('UPDATE %s SET e = e + 1 WHERE a = 100 AND b = ''K100''');
SELECT * FROM pr.both('UPDATE %s SET e = e + 1 WHERE a = 101 AND b IS NULL');
SELECT * FROM pr.both('DELETE FROM %s WHERE lower(b) = ''k102''');
SELECT * FROM pr.both('SELECT * FROM %s WHERE c = 1030 FOR UPDATE');
SELECT * FROM pr.both('UPDATE %s SET e = -e WHERE d = ''v104''::varchar');

-- An INSERT whose key is an unmigrated row's: the eager error, nothing
-- migrated (the statement's transaction rolls back).
\set VERBOSITY sqlstate
INSERT INTO pr.eager VALUES (200, 'K200', 0, 'x', 0);
INSERT INTO pr.dst VALUES (200, 'K200', 0, 'x', 0);
\set VERBOSITY default
SELECT public.regress_migrated('probe') AS migrated;
INSERT INTO pr.dst VALUES (200, 'k200', 0, 'x', 0);
INSERT INTO pr.eager VALUES (200, 'k200', 0, 'x', 0);
SELECT public.regress_migrated('probe') AS migrated;

-- In a transaction: a row migrated by an earlier statement is not found
-- again; after a rollback to a savepoint it is found again.
BEGIN;
SELECT * FROM pr.both('UPDATE %s SET e = e + 1 WHERE a = 300 AND b = ''K300''');
SAVEPOINT s;
SELECT * FROM pr.both('UPDATE %s SET e = e + 1 WHERE a = 301 AND b = ''K301''');
ROLLBACK TO s;
SELECT * FROM pr.both('UPDATE %s SET e = e + 1 WHERE a = 300 AND b = ''K300''');
SELECT * FROM pr.both('UPDATE %s SET e = e + 1 WHERE a = 301 AND b = ''K301''');
COMMIT;

SELECT pr.same() AS differences;
SELECT leapfrog.complete('probe');
SELECT pr.same() AS differences, (SELECT count(*) FROM pr.dst) AS rows;
DROP SCHEMA pr CASCADE;
