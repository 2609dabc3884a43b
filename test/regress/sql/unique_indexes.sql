--
-- unique_indexes: the conflicts a write can meet in a new table's unique
-- indexes other than a plain key (src/relevance.c, key_relevance): a
-- partial index, NULLS NOT DISTINCT, an expression, an exclusion
-- constraint, an upsert's DO UPDATE.  A statement that could add an entry
-- to such an index first migrates the rows that could conflict with it
-- (all of them where the key cannot be computed beforehand: expressions,
-- exclusion, DO UPDATE SET); one that writes none of the columns the index
-- reads migrates nothing for it.  Every
-- statement runs on the eager copy (ux_eager) and on the lazy side
-- (ux_lazy); the outcomes, then the final tables, must be the same.
--
CREATE SCHEMA ux_eager;
CREATE SCHEMA ux_lazy;
SELECT $$
  CREATE TABLE s (id int PRIMARY KEY, k int, active bool, code text);
  INSERT INTO s SELECT g, g % 20, g <= 20, 'c' || g FROM generate_series(1, 40) g;
$$ AS setup \gset
SELECT $$
  CREATE TABLE p (id bigint PRIMARY KEY, k int, active bool);
  CREATE UNIQUE INDEX p_k_active ON p (k) WHERE active;
  INSERT INTO p SELECT id, k, active FROM s;
  CREATE TABLE nn (id bigint PRIMARY KEY, n int, v int);
  CREATE UNIQUE INDEX nn_n ON nn (n) NULLS NOT DISTINCT;
  INSERT INTO nn SELECT id, CASE WHEN id = 40 THEN NULL ELSE id END, id FROM s;
  CREATE TABLE ex (id bigint PRIMARY KEY, code text, v int);
  CREATE UNIQUE INDEX ex_lower ON ex (lower(code));
  INSERT INTO ex SELECT id, code, id FROM s;
  CREATE TABLE rr (id bigint PRIMARY KEY, r int4range, v int, EXCLUDE USING gist (r WITH &&));
  INSERT INTO rr SELECT id, int4range(id * 10, id * 10 + 5), id FROM s;
  DROP TABLE s;
$$ AS script \gset
SET search_path = ux_eager;
SELECT public.regress_eager(:'setup');
SELECT public.regress_eager(:'script');
SET search_path = ux_lazy;
SELECT public.regress_eager(:'setup');
SELECT leapfrog.start('ux', :'script');
RESET search_path;
SELECT public.regress_migrated('ux') AS migrated;

-- q on both sides: each one's SQLSTATE (or ok), and the input rows the
-- lazy side migrated (a failed statement's migration is undone with it)
CREATE FUNCTION public.ux_both(q text, OUT eager text, OUT lazy text, OUT migrated bigint)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('search_path', 'ux_eager', true);
    eager := public.regress_sqlstate(q);
    PERFORM set_config('search_path', 'ux_lazy', true);
    lazy := public.regress_sqlstate(q);
    migrated := public.regress_migrated('ux');
END $$;

-- Partial index: an UPDATE of its predicate's column brings the row into
-- the index, where row 2 (k = 2, active, not migrated) holds its key.
SELECT * FROM public.ux_both('SELECT * FROM p WHERE id = 22');
SELECT * FROM public.ux_both('UPDATE p SET active = true WHERE id = 22');
SELECT * FROM public.ux_both('UPDATE p SET active = true WHERE id = 35');
SELECT * FROM public.ux_both('UPDATE p SET k = 3 WHERE id = 23');
SELECT * FROM public.ux_both('UPDATE p SET k = 4, active = true WHERE id = 24');
SELECT * FROM public.ux_both('UPDATE p SET active = false WHERE id = 5');
-- NULLS NOT DISTINCT: NULL meets row 40's NULL; a write of other columns
-- migrates only the rows it updates.
SELECT * FROM public.ux_both('UPDATE nn SET v = v + 1 WHERE id = 6');
SELECT * FROM public.ux_both('INSERT INTO nn VALUES (100, NULL, 0)');
SELECT * FROM public.ux_both('INSERT INTO nn (id, v) VALUES (100, 0)');
SELECT * FROM public.ux_both('UPDATE nn SET n = NULL WHERE id = 7');
SELECT * FROM public.ux_both('UPDATE nn SET n = 9 WHERE id = 8');
SELECT * FROM public.ux_both('INSERT INTO nn VALUES (101, 500, 0)');
-- An upsert whose DO UPDATE SET writes a unique column gives the row it
-- met a key that may depend on that row: every row is needed (before, it
-- succeeded where eager fails); one that writes other columns needs only
-- the rows its own keys meet.
SELECT * FROM public.ux_both('INSERT INTO nn VALUES (9, 0, 0) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v + 1');
SELECT * FROM public.ux_both('INSERT INTO nn VALUES (9, 0, 0) ON CONFLICT (id) DO UPDATE SET n = 10');
-- Expression index: a key computed by an expression cannot be looked up
-- beforehand, so a write of code migrates every row; other writes do not.
SELECT * FROM public.ux_both('UPDATE ex SET v = 0 WHERE id = 12');
SELECT * FROM public.ux_both('UPDATE ex SET code = ''C10'' WHERE id = 11');
-- Exclusion constraint: the same.
SELECT * FROM public.ux_both('UPDATE rr SET v = 0 WHERE id = 13');
SELECT * FROM public.ux_both('UPDATE rr SET r = int4range(141, 143) WHERE id = 15');

SELECT leapfrog.complete('ux');
SELECT * FROM public.regress_compare('ux_lazy.p', 'ux_eager.p');
SELECT * FROM public.regress_compare('ux_lazy.nn', 'ux_eager.nn');
SELECT * FROM public.regress_compare('ux_lazy.ex', 'ux_eager.ex');
SELECT * FROM public.regress_compare('ux_lazy.rr', 'ux_eager.rr');
DROP FUNCTION public.ux_both(text);
DROP SCHEMA ux_eager CASCADE;
DROP SCHEMA ux_lazy CASCADE;
