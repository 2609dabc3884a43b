--
-- step_copy: a migration step copies its rows into a row mapping's target
-- without starting the INSERT's plan (rowcopy.c), unless the target has an
-- INSERT trigger (here b's foreign key), which takes the plan.  Either way
-- the rows and the errors are the eager INSERT's: column defaults, a
-- dropped column, coercions, NOT NULL, CHECK, a unique index, a foreign
-- key, a filter.
--
CREATE SCHEMA sc;
CREATE TABLE sc.kind (k int PRIMARY KEY);
INSERT INTO sc.kind VALUES (0), (1), (2);
CREATE TABLE sc.src (id int PRIMARY KEY, v int, note text, k int);
INSERT INTO sc.src SELECT g, g * 10, 'n' || g, g % 3 FROM generate_series(1, 20) g;
UPDATE sc.src SET v = -1 WHERE id = 13;
UPDATE sc.src SET v = NULL WHERE id = 14;
UPDATE sc.src SET note = 'too long' WHERE id = 15;
UPDATE sc.src SET note = 'n1' WHERE id = 16;
UPDATE sc.src SET k = 9 WHERE id = 18;
SELECT 'sc.src'::regclass::oid AS old_oid \gset
SELECT leapfrog.start('step_copy', $$
  CREATE TABLE sc.a (id int PRIMARY KEY, gone int, v bigint NOT NULL CHECK (v > 0),
                     tag text DEFAULT lower('DFLT'), note varchar(3));
  ALTER TABLE sc.a DROP COLUMN gone;
  CREATE UNIQUE INDEX a_note ON sc.a (note);
  CREATE TABLE sc.b (id int PRIMARY KEY, v int, k int REFERENCES sc.kind);
  INSERT INTO sc.a (id, v, note) SELECT id, v, note FROM sc.src;
  INSERT INTO sc.b SELECT id, v + 1, k FROM sc.src WHERE id % 2 = 0;
  DROP TABLE sc.src;
$$);
SET leapfrog.read_mode = migrate;
-- one row (an odd id: a has it, b's filter leaves it out), then one of each
SELECT * FROM sc.a WHERE id = 1;
SELECT * FROM sc.b WHERE id = 1;
SELECT * FROM sc.a WHERE id = 2;
SELECT * FROM sc.b WHERE id = 2;
-- several rows in one step
UPDATE sc.a SET tag = 'upd' WHERE id BETWEEN 3 AND 8;
SELECT * FROM sc.a WHERE id BETWEEN 3 AND 8 ORDER BY id;
SELECT * FROM sc.b WHERE id BETWEEN 3 AND 8 ORDER BY id;
SELECT leapfrog.remaining('step_copy'), public.regress_rows(:old_oid) AS retired_rows;
-- A row the eager INSERT would refuse fails the statement with the eager
-- error, and stays unmigrated.
\set VERBOSITY sqlstate
SELECT * FROM sc.a WHERE id = 13;
SELECT * FROM sc.a WHERE id = 14;
SELECT * FROM sc.a WHERE id = 15;
SELECT * FROM sc.a WHERE id = 16;
SELECT * FROM sc.b WHERE id = 18;
\set VERBOSITY default
-- (the context names the retired table, whose name has OIDs: masked)
CREATE FUNCTION sc.step_error(q text) RETURNS SETOF text LANGUAGE plpgsql AS $f$
DECLARE msg text; det text; ctx text;
BEGIN
  EXECUTE q;
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL, ctx = PG_EXCEPTION_CONTEXT;
  RETURN NEXT msg;
  RETURN NEXT det;
  RETURN NEXT regexp_replace(split_part(ctx, E'\n', 1), 'm[0-9]+_[0-9]+_', 'm<id>_<oid>_');
END $f$;
SELECT sc.step_error('SELECT * FROM sc.a WHERE id = 13');
SELECT sc.step_error('SELECT * FROM sc.a WHERE id = 16');
SELECT sc.step_error('SELECT * FROM sc.b WHERE id = 18');
SELECT leapfrog.remaining('step_copy'), public.regress_rows(:old_oid) AS retired_rows;
RESET leapfrog.read_mode;
-- Corrected, the rows migrate; complete() moves the rest.
SELECT :old_oid::regclass AS retired \gset
SELECT leapfrog.correct_row('step_copy', 'sc.src', (SELECT ctid FROM :retired WHERE id = 13), '{"v": 130}') IS NOT NULL AS corrected;
SELECT leapfrog.correct_row('step_copy', 'sc.src', (SELECT ctid FROM :retired WHERE id = 14), '{"v": 140}') IS NOT NULL AS corrected;
SELECT leapfrog.correct_row('step_copy', 'sc.src', (SELECT ctid FROM :retired WHERE id = 15), '{"note": "n15"}') IS NOT NULL AS corrected;
SELECT leapfrog.correct_row('step_copy', 'sc.src', (SELECT ctid FROM :retired WHERE id = 16), '{"note": "n16"}') IS NOT NULL AS corrected;
SELECT leapfrog.correct_row('step_copy', 'sc.src', (SELECT ctid FROM :retired WHERE id = 18), '{"k": 0}') IS NOT NULL AS corrected;
UPDATE sc.a SET tag = 'upd' WHERE id IN (13, 14, 15, 16);
SELECT * FROM sc.a WHERE id BETWEEN 13 AND 16 ORDER BY id;
SELECT leapfrog.complete('step_copy');
-- The eager INSERTs of the corrected rows, and the same UPDATEs: no
-- difference.
CREATE TABLE sc.src2 (id int PRIMARY KEY, v int, note text, k int);
INSERT INTO sc.src2 SELECT g, g * 10, 'n' || g, g % 3 FROM generate_series(1, 20) g;
CREATE TABLE sc.a2 (LIKE sc.a INCLUDING ALL);
CREATE TABLE sc.b2 (LIKE sc.b INCLUDING ALL, FOREIGN KEY (k) REFERENCES sc.kind);
INSERT INTO sc.a2 (id, v, note) SELECT id, v, note FROM sc.src2;
INSERT INTO sc.b2 SELECT id, v + 1, k FROM sc.src2 WHERE id % 2 = 0;
UPDATE sc.a2 SET tag = 'upd' WHERE id BETWEEN 3 AND 8 OR id IN (13, 14, 15, 16);
SELECT count(*) AS a_rows, (SELECT count(*) FROM sc.b) AS b_rows FROM sc.a;
SELECT 'a' AS t, * FROM ((TABLE sc.a EXCEPT TABLE sc.a2) UNION ALL (TABLE sc.a2 EXCEPT TABLE sc.a)) d;
SELECT 'b' AS t, * FROM ((TABLE sc.b EXCEPT TABLE sc.b2) UNION ALL (TABLE sc.b2 EXCEPT TABLE sc.b)) d;
DROP SCHEMA sc CASCADE;
