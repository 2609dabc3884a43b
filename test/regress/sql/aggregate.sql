--
-- aggregate: GROUP BY mappings (n:1).  The unit that migrates is a group:
-- a statement on the new table migrates the groups it needs, whole, and
-- every statement and the final state are compared with the eager run of
-- the same script (ag_eager).
--
CREATE SCHEMA ag_eager;
CREATE SCHEMA ag_lazy;
SELECT $$
  CREATE TABLE line (w int, o int, n int, item text, amount numeric(8,2), qty int,
                     PRIMARY KEY (w, o, n));
  INSERT INTO line
    SELECT w, o, n, 'item' || ((w * 7 + o * 3 + n) % 11), (w * 100 + o * 10 + n) / 7.0, n % 4
      FROM generate_series(1, 3) w, generate_series(1, 40) o,
           generate_series(1, o % 5 + 1) n;
  -- a group whose key holds NULLs: one group, eagerly and lazily
  CREATE TABLE note (w int, o int, k int, txt text);
  INSERT INTO note SELECT g % 3, CASE WHEN g % 7 = 0 THEN NULL ELSE g % 5 END, g, 't' || g
    FROM generate_series(1, 60) g;
  CREATE INDEX note_wo ON note (o, w);
  -- aggregates whose result depends on the order of their input
  CREATE TABLE tag (o int, t text, f float8);
  INSERT INTO tag SELECT g % 6, 'tag' || (g * 7 % 23), g / 10.0 FROM generate_series(1, 90) g;
  CREATE INDEX tag_o ON tag (o);
$$ AS setup \gset
SET search_path = ag_eager;
SELECT public.regress_eager(:'setup');
SET search_path = ag_lazy;
SELECT public.regress_eager(:'setup');

SELECT $$
  CREATE TABLE total (w int, o int, lines bigint NOT NULL, amount numeric(12,2),
                      big numeric, items text, qtys int[], kinds bigint,
                      PRIMARY KEY (w, o));
  INSERT INTO total
  SELECT w, o, count(*), sum(amount), max(amount) FILTER (WHERE qty > 1),
         string_agg(item, ',' ORDER BY n), array_agg(qty ORDER BY n DESC),
         count(DISTINCT item)
    FROM line
   WHERE n < 6
   GROUP BY w, o
  HAVING count(*) > 1;
  CREATE INDEX total_amount ON total (amount);
  CREATE TABLE notes (o int, w int, cnt bigint, txts text);
  INSERT INTO notes SELECT o, w, count(*), string_agg(txt, ' ' ORDER BY k) FROM note GROUP BY o, w;
  CREATE TABLE tags (o int, tags text, f float8);
  INSERT INTO tags SELECT o, string_agg(t, ','), sum(f) FROM tag GROUP BY o;
  DROP TABLE line;
  DROP TABLE note;
  DROP TABLE tag;
$$ AS script \gset

SET search_path = ag_eager;
SELECT public.regress_eager(:'script');
SET search_path = ag_lazy;
SELECT leapfrog.start('agg', :'script');
SELECT leapfrog.remaining('agg');

-- A point query by group key migrates that group only: its 3 rows.
SELECT public.regress_explain('SELECT * FROM total WHERE w = 2 AND o = 7');
SELECT * FROM total WHERE w = 2 AND o = 7;
SELECT leapfrog.remaining('agg');
SELECT * FROM ag_eager.total WHERE w = 2 AND o = 7;
-- A group HAVING leaves out (one line) is not in the table, lazily either.
SELECT * FROM total WHERE w = 1 AND o = 5;
SELECT * FROM ag_eager.total WHERE w = 1 AND o = 5;
SELECT leapfrog.remaining('agg');
-- A predicate on an aggregate migrates the groups that satisfy it.
SELECT w, o, amount FROM total WHERE amount > 420 ORDER BY w, o;
SELECT w, o, amount FROM ag_eager.total WHERE amount > 420 ORDER BY w, o;
SELECT leapfrog.remaining('agg');
-- Writes: an update of a group, a delete, an insert that meets a group not
-- migrated yet (the unique violation eager gives).
UPDATE total SET lines = lines + 100 WHERE w = 3 AND o = 9;
UPDATE ag_eager.total SET lines = lines + 100 WHERE w = 3 AND o = 9;
DELETE FROM total WHERE w = 1 AND o BETWEEN 10 AND 12;
DELETE FROM ag_eager.total WHERE w = 1 AND o BETWEEN 10 AND 12;
INSERT INTO total (w, o, lines) VALUES (3, 13, 1);
INSERT INTO total (w, o, lines) VALUES (3, 13, 1) ON CONFLICT (w, o) DO UPDATE SET lines = total.lines * 2
RETURNING w, o, lines, amount;
INSERT INTO ag_eager.total (w, o, lines) VALUES (3, 13, 1) ON CONFLICT (w, o) DO UPDATE SET lines = total.lines * 2
RETURNING w, o, lines, amount;
-- The NULL group: one unit, found by IS NULL.
SELECT * FROM notes WHERE o IS NULL ORDER BY w;
SELECT * FROM ag_eager.notes WHERE o IS NULL ORDER BY w;
SELECT * FROM notes WHERE o = 2 AND w = 1;
SELECT leapfrog.remaining('agg');
SELECT name, state, tuples_total, tuples_migrated FROM leapfrog.migrations WHERE name = 'agg';

SELECT leapfrog.complete('agg');
SELECT name, state, tuples_total, tuples_migrated, error
  FROM leapfrog.migrations WHERE name = 'agg';
SELECT * FROM public.regress_compare('ag_lazy.total', 'ag_eager.total');
SELECT * FROM public.regress_compare('ag_lazy.notes', 'ag_eager.notes');
-- string_agg without ORDER BY and a float8 sum depend on the order of the
-- rows in the group, eagerly too (the plan's): each group gets the same
-- rows, the order may differ.  Compared as sorted lists and rounded sums.
CREATE VIEW tags_norm AS
  SELECT o, (SELECT array_agg(x ORDER BY x) FROM unnest(string_to_array(tags, ',')) x) AS tags,
         round(f::numeric, 6) AS f
    FROM tags;
CREATE VIEW ag_eager.tags_norm AS
  SELECT o, (SELECT array_agg(x ORDER BY x) FROM unnest(string_to_array(tags, ',')) x) AS tags,
         round(f::numeric, 6) AS f
    FROM ag_eager.tags;
SELECT * FROM public.regress_compare('ag_lazy.tags_norm', 'ag_eager.tags_norm');
DROP VIEW tags_norm;
DROP VIEW ag_eager.tags_norm;

-- The background workers walk groups too.
SET search_path = ag_eager;
DROP TABLE total, notes, tags;
SELECT public.regress_eager(:'setup');
SELECT public.regress_eager(:'script');
SET search_path = ag_lazy;
DROP TABLE total, notes, tags;
SELECT public.regress_eager(:'setup');
SELECT leapfrog.start('agg_background', :'script');
SELECT * FROM total WHERE w = 1 AND o = 1;
ALTER SYSTEM SET leapfrog.background = on;
ALTER SYSTEM SET leapfrog.background_delay = 0;
ALTER SYSTEM SET leapfrog.batch_size = 50;
SELECT pg_reload_conf();
SELECT leapfrog.wait('agg_background', 60);
ALTER SYSTEM RESET leapfrog.background;
ALTER SYSTEM RESET leapfrog.background_delay;
ALTER SYSTEM RESET leapfrog.batch_size;
SELECT pg_reload_conf();
SELECT name, state, tuples_total, tuples_migrated, error
  FROM leapfrog.migrations WHERE name = 'agg_background';
SELECT * FROM public.regress_compare('ag_lazy.total', 'ag_eager.total');
SELECT * FROM public.regress_compare('ag_lazy.notes', 'ag_eager.notes');

-- What is refused, with the reason.
CREATE TABLE src (a int, b int, c int);
INSERT INTO src SELECT g % 10, g % 3, g FROM generate_series(1, 30) g;
CREATE INDEX src_a ON src (a);
SELECT leapfrog.start('bad', $$
  CREATE TABLE dst (a int, s bigint);
  INSERT INTO dst SELECT a + 1, sum(c) FROM src GROUP BY a + 1;
  DROP TABLE src;
$$);
SELECT leapfrog.start('bad', $$
  CREATE TABLE dst (b int, s bigint);
  INSERT INTO dst SELECT b, sum(c) FROM src GROUP BY b;
  DROP TABLE src;
$$);
SELECT leapfrog.start('bad', $$
  CREATE TABLE dst (s bigint);
  INSERT INTO dst SELECT sum(c) FROM src;
  DROP TABLE src;
$$);
SELECT leapfrog.start('bad', $$
  CREATE TABLE dst (a int, s bigint);
  INSERT INTO dst SELECT a, sum(c) FROM src GROUP BY ROLLUP (a);
  DROP TABLE src;
$$);
SELECT count(*) AS no_migration FROM leapfrog.migrations WHERE name = 'bad';

RESET search_path;
DROP SCHEMA ag_eager CASCADE;
DROP SCHEMA ag_lazy CASCADE;
