--
-- migrations_view: leapfrog.migrations (states and counts), wait(),
-- remaining(), and complete() inside a transaction that rolls back.
--
CREATE SCHEMA mv;
CREATE TABLE mv.a (id int PRIMARY KEY, v text NOT NULL);
INSERT INTO mv.a SELECT g, 'a' || g FROM generate_series(1, 10) g;
CREATE TABLE mv.b (id int PRIMARY KEY, v text NOT NULL, keep bool NOT NULL);
INSERT INTO mv.b SELECT g, 'b' || g, g % 3 <> 0 FROM generate_series(1, 6) g;

SELECT leapfrog.start('mv_one', $$
  CREATE TABLE mv.a2 (id int PRIMARY KEY, v text NOT NULL);
  INSERT INTO mv.a2 SELECT id, v FROM mv.a;
  DROP TABLE mv.a;
  ALTER TABLE mv.a2 RENAME TO a;
$$);
SELECT name, state, tuples_total, tuples_migrated, error,
       started_at IS NOT NULL AS started, finished_at IS NULL AS unfinished
  FROM leapfrog.migrations WHERE name = 'mv_one';
SELECT started_at <= now() AS started_before_now
  FROM leapfrog.migrations WHERE name = 'mv_one';
SELECT * FROM mv.a WHERE id IN (1, 2, 3) ORDER BY id;
SELECT name, state, tuples_total, tuples_migrated
  FROM leapfrog.migrations WHERE name = 'mv_one';
SELECT leapfrog.remaining('mv_one');
-- Not done, and nothing migrates in the background here: wait() times out.
SELECT leapfrog.wait('mv_one', 0.2);
-- Reading the view without tuples_total does not count the inputs: with
-- leapfrog.remaining() STABLE the view is flattened and the unread column
-- is not computed (monitoring polls the view).
CREATE FUNCTION mv.plan_calls_remaining(q text) RETURNS bool LANGUAGE plpgsql AS $f$
DECLARE
  l text;
  hit bool := false;
BEGIN
  FOR l IN EXECUTE 'EXPLAIN (VERBOSE, COSTS OFF) ' || q LOOP
    hit := hit OR l LIKE '%remaining%';
  END LOOP;
  RETURN hit;
END $f$;
SELECT mv.plan_calls_remaining('SELECT state, tuples_migrated, error FROM leapfrog.migrations') AS without_total,
       mv.plan_calls_remaining('SELECT tuples_total FROM leapfrog.migrations') AS with_total;

-- A second migration, with a filter (2 of its 6 rows have no image).
SELECT leapfrog.start('mv_two', $$
  CREATE TABLE mv.b2 (id int PRIMARY KEY, v text NOT NULL);
  INSERT INTO mv.b2 SELECT id, v FROM mv.b WHERE keep;
  DROP TABLE mv.b;
$$);
SELECT name, state, tuples_total, tuples_migrated
  FROM leapfrog.migrations WHERE name LIKE 'mv\_%' ORDER BY name;

-- complete() runs in the caller's transaction: rolled back, it leaves the
-- migration as it was.
BEGIN;
SELECT leapfrog.complete('mv_two');
SELECT leapfrog.remaining('mv_two');
ROLLBACK;
SELECT name, state, tuples_total, tuples_migrated
  FROM leapfrog.migrations WHERE name = 'mv_two';
SELECT leapfrog.remaining('mv_two');
SELECT * FROM mv.b2 WHERE id = 2;

-- tuples_migrated counts what committed transactions migrated: rows of a
-- subtransaction rolled back are unmigrated again and not counted, a
-- released one counts with its transaction, which counts when it commits.
BEGIN;
SELECT v FROM mv.a WHERE id = 4;
SAVEPOINT s1;
SELECT v FROM mv.a WHERE id IN (5, 6) ORDER BY id;
ROLLBACK TO s1;
SAVEPOINT s2;
SELECT v FROM mv.a WHERE id = 7;
RELEASE s2;
SELECT tuples_migrated FROM leapfrog.migrations WHERE name = 'mv_one';
COMMIT;
SELECT tuples_migrated FROM leapfrog.migrations WHERE name = 'mv_one';
SELECT leapfrog.remaining('mv_one');

-- complete() for real; for mv_one in the transaction that migrated a row
-- before it: every row is counted once, and no progress log is left.
BEGIN;
SELECT v FROM mv.a WHERE id = 8;
SELECT leapfrog.complete('mv_one');
COMMIT;
SELECT leapfrog.complete('mv_two');
SELECT count(*) AS progress_rows_left
  FROM leapfrog.progress p JOIN leapfrog.migration m ON m.id = p.migration_id
 WHERE m.name LIKE 'mv\_%';
SELECT name, state, tuples_total, tuples_migrated, error,
       finished_at IS NOT NULL AS finished, finished_at >= started_at AS ordered
  FROM leapfrog.migrations WHERE name LIKE 'mv\_%' ORDER BY name;
SELECT leapfrog.remaining('mv_one'), leapfrog.remaining('mv_two');
SELECT leapfrog.wait('mv_one'), leapfrog.wait('mv_one', 0), leapfrog.wait('mv_two', 1);
SELECT * FROM mv.b2 ORDER BY id;
SELECT count(*) FROM mv.a;

DROP SCHEMA mv CASCADE;
