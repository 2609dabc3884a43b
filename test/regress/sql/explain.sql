--
-- explain: EXPLAIN of a statement on a table under migration shows a
-- Custom Scan (LeapfrogMigrate) node at the top, with a "Migrates:" line;
-- EXPLAIN alone migrates nothing; no such node once the migration is done
-- or for statements on other tables.
--
CREATE SCHEMA ex;
CREATE TABLE ex.acct (id int PRIMARY KEY, bal int NOT NULL);
INSERT INTO ex.acct SELECT g, g * 10 FROM generate_series(1, 20) g;
CREATE TABLE ex.note (id int PRIMARY KEY, acct_id int NOT NULL, body text);
INSERT INTO ex.note SELECT g, g, 'note' || g FROM generate_series(1, 5) g;
-- Whether the top plan node (the first line) is the LeapfrogMigrate custom
-- scan, and whether a "Migrates:" line is shown.  The rest of the plan is
-- not part of the contract.
CREATE FUNCTION ex.explain_top(q text, OUT leapfrog_on_top bool, OUT has_migrates bool)
LANGUAGE plpgsql AS $$
DECLARE line text;
BEGIN
    has_migrates := false;
    FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
        IF leapfrog_on_top IS NULL THEN
            leapfrog_on_top := line LIKE 'Custom Scan (LeapfrogMigrate)%';
        END IF;
        IF line ~ '^\s*Migrates:' THEN
            has_migrates := true;
        END IF;
    END LOOP;
END $$;

SELECT leapfrog.start('explain', $$
  CREATE TABLE ex.acct2 (id int PRIMARY KEY, bal bigint NOT NULL);
  INSERT INTO ex.acct2 SELECT id, bal FROM ex.acct;
  DROP TABLE ex.acct;
  ALTER TABLE ex.acct2 RENAME TO acct;
$$);
SELECT * FROM ex.explain_top('SELECT * FROM ex.acct WHERE id = 3');
SELECT * FROM ex.explain_top('SELECT count(*) FROM ex.acct');
SELECT * FROM ex.explain_top('SELECT n.body, a.bal FROM ex.note n JOIN ex.acct a ON a.id = n.acct_id WHERE n.id = 2');
SELECT * FROM ex.explain_top('UPDATE ex.acct SET bal = 0 WHERE id = 4');
SELECT * FROM ex.explain_top('DELETE FROM ex.acct WHERE id = 5');
SELECT * FROM ex.explain_top('INSERT INTO ex.acct VALUES (6, 1) ON CONFLICT (id) DO NOTHING');
-- A statement on another table only.
SELECT * FROM ex.explain_top('SELECT * FROM ex.note WHERE id = 1');
-- EXPLAIN migrated nothing.
SELECT leapfrog.remaining('explain');
-- A prepared statement's generic plan carries the node.
PREPARE ex_q(int) AS SELECT * FROM ex.acct WHERE id = $1;
SET plan_cache_mode = force_generic_plan;
SELECT * FROM ex.explain_top('EXECUTE ex_q(7)');
EXECUTE ex_q(7);
RESET plan_cache_mode;
DEALLOCATE ex_q;
SELECT leapfrog.remaining('explain');

SELECT leapfrog.complete('explain');
SELECT * FROM ex.explain_top('SELECT * FROM ex.acct WHERE id = 3');
SELECT * FROM ex.explain_top('UPDATE ex.acct SET bal = 0 WHERE id = 4');

DROP SCHEMA ex CASCADE;
