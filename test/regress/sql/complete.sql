--
-- complete: leapfrog.complete() migrates what is left in steps of 10,000
-- rows and walks each input once (src/complete.c): here a table tracked in
-- place, whose groups' rows are scattered, and a retired one, both of more
-- than one step, with rows migrated beforehand all through them; then
-- against the eager run.
--
CREATE SCHEMA cm_eager;
CREATE SCHEMA cm_lazy;
SELECT $$
  CREATE TABLE line (g int NOT NULL, n int NOT NULL, amt int NOT NULL, PRIMARY KEY (g, n));
  INSERT INTO line SELECT g, n, g * 10 + n
    FROM generate_series(1, 3000) g, generate_series(1, 10) n ORDER BY n, g;
  CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL);
  INSERT INTO acct SELECT g, g % 1000 FROM generate_series(1, 25000) g;
$$ AS setup \gset
SET search_path = cm_eager;
SELECT public.regress_eager(:'setup');
SET search_path = cm_lazy;
SELECT public.regress_eager(:'setup');

SELECT $$
  CREATE TABLE total (g int PRIMARY KEY, amt bigint NOT NULL, lines bigint NOT NULL);
  INSERT INTO total SELECT g, sum(amt), count(*) FROM line GROUP BY g;
  CREATE TABLE acct2 (id bigint PRIMARY KEY, bal bigint NOT NULL);
  INSERT INTO acct2 SELECT id, bal FROM acct;
  DROP TABLE acct;
$$ AS script \gset
SET search_path = cm_eager;
SELECT public.regress_eager(:'script');
SET search_path = cm_lazy;
SELECT action, input FROM leapfrog.plan(:'script') WHERE action <> 'mapping';
SELECT leapfrog.start('cm', :'script');

CREATE PROCEDURE public.cm_app(s text) LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL search_path = %I', s);
    UPDATE total SET lines = lines + 100 WHERE g % 7 = 0;   -- groups all through line
    UPDATE line SET amt = amt + 1 WHERE g % 11 = 0 AND n = 3;
    UPDATE acct2 SET bal = bal + 5 WHERE id % 13 = 0;        -- rows all through acct
    DELETE FROM acct2 WHERE id % 17 = 0;
END $$;
CALL public.cm_app('cm_eager');
CALL public.cm_app('cm_lazy');
SELECT leapfrog.remaining('cm') > 40000 AS more_than_two_steps;
SELECT leapfrog.complete('cm');
SELECT state, tuples_total FROM leapfrog.migrations WHERE name = 'cm';
SELECT * FROM public.regress_compare('cm_lazy.total', 'cm_eager.total');
SELECT * FROM public.regress_compare('cm_lazy.acct2', 'cm_eager.acct2');
SELECT * FROM public.regress_compare('cm_lazy.line', 'cm_eager.line');

DROP PROCEDURE public.cm_app(text);
DROP SCHEMA cm_eager CASCADE;
DROP SCHEMA cm_lazy CASCADE;

-- complete() in a transaction with a cursor open on a new table (which
-- reads the retired one): the retired table, in use, is left to a worker
-- (not 55006, which took the transaction and the cursor with it), and the
-- cursor reads on.
CREATE TABLE public.cm_cur (id int PRIMARY KEY, v text);
INSERT INTO public.cm_cur SELECT g, 'v' || g FROM generate_series(1, 20) g;
SELECT 'public.cm_cur'::regclass::oid AS cur_oid \gset
SELECT leapfrog.start('cm_cur', $$
  CREATE TABLE public.cm_cur2 (id int PRIMARY KEY, v text);
  INSERT INTO public.cm_cur2 SELECT id, v FROM public.cm_cur;
  DROP TABLE public.cm_cur;
$$);
BEGIN;
SET LOCAL leapfrog.read_mode = compute;
DECLARE c CURSOR FOR SELECT * FROM public.cm_cur2 WHERE id > 15 ORDER BY id;
FETCH 2 FROM c;
SELECT leapfrog.complete('cm_cur');
FETCH ALL FROM c;
SELECT count(*) AS retired_still_there FROM pg_class WHERE oid = :cur_oid;
COMMIT;
SELECT state FROM leapfrog.migrations WHERE name = 'cm_cur';
-- a worker drops it after the commit (up to 30 s)
CREATE FUNCTION pg_temp.gone(o oid) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..300 LOOP
    IF NOT EXISTS (SELECT FROM pg_class WHERE oid = o) THEN RETURN true; END IF;
    PERFORM pg_sleep(0.1);
  END LOOP;
  RETURN false;
END $$;
SELECT pg_temp.gone(:cur_oid) AS retired_dropped;
DROP TABLE public.cm_cur2;
