--
-- writes: UPDATE, DELETE, INSERT (conflicts with unmigrated keys, ON
-- CONFLICT), MERGE, transactions and subtransactions that abort.  Each
-- statement migrates the rows it needs, inside its own transaction; the
-- same statements on the eager copy give the same results and final state.
--
CREATE SCHEMA wr_eager;
CREATE SCHEMA wr_lazy;
SET search_path = wr_eager;
CREATE TABLE acct (id int PRIMARY KEY, owner text NOT NULL, bal int NOT NULL);
INSERT INTO acct SELECT g, 'owner' || g, g * 10 FROM generate_series(1, 100) g;
CREATE TABLE ops (id int PRIMARY KEY, acct_id int NOT NULL, amount int NOT NULL);
INSERT INTO ops VALUES (1, 30, 7), (2, 32, 8), (3, 34, 9), (4, 2000, 10), (5, 35, 11);
SET search_path = wr_lazy;
CREATE TABLE acct (id int PRIMARY KEY, owner text NOT NULL, bal int NOT NULL);
INSERT INTO acct SELECT * FROM wr_eager.acct;
CREATE TABLE ops (id int PRIMARY KEY, acct_id int NOT NULL, amount int NOT NULL);
INSERT INTO ops SELECT * FROM wr_eager.ops;
SELECT $$
  CREATE TABLE acct_new (id int PRIMARY KEY, owner text NOT NULL, bal bigint NOT NULL);
  INSERT INTO acct_new SELECT id, owner, bal FROM acct;
  DROP TABLE acct;
  ALTER TABLE acct_new RENAME TO acct;
$$ AS script \gset

SET search_path = wr_lazy;
SELECT leapfrog.start('writes', :'script');
SELECT public.regress_migrated('writes') AS migrated;
\set VERBOSITY sqlstate
-- UPDATE by key
UPDATE acct SET bal = bal + 5 WHERE id = 10;
SELECT public.regress_migrated('writes') AS migrated;
-- UPDATE by a non-key predicate
UPDATE acct SET owner = owner || '!' WHERE owner = 'owner20';
SELECT public.regress_migrated('writes') AS migrated;
-- UPDATE ... FROM another table (ops 1 is account 30)
UPDATE acct a SET bal = a.bal + o.amount FROM ops o WHERE o.acct_id = a.id AND o.id = 1;
SELECT public.regress_migrated('writes') AS migrated;
-- UPDATE ... RETURNING
UPDATE acct SET bal = 0 WHERE id = 31 RETURNING id, bal;
SELECT public.regress_migrated('writes') AS migrated;
-- DELETE by key; the row is gone, nothing left to migrate
DELETE FROM acct WHERE id = 11;
SELECT public.regress_migrated('writes') AS migrated;
SELECT * FROM acct WHERE id = 11;
SELECT public.regress_migrated('writes') AS migrated;
-- DELETE ... USING (ops 2 is account 32)
DELETE FROM acct a USING ops o WHERE o.acct_id = a.id AND o.id = 2;
SELECT public.regress_migrated('writes') AS migrated;
-- DELETE ... RETURNING
DELETE FROM acct WHERE id = 33 RETURNING owner;
SELECT public.regress_migrated('writes') AS migrated;
-- INSERT of a key held by an unmigrated row: unique violation, as eager;
-- the statement fails, so its migration is undone
INSERT INTO acct VALUES (12, 'dup', 1);
SELECT public.regress_migrated('writes') AS migrated;
SELECT * FROM acct WHERE id = 12;
SELECT public.regress_migrated('writes') AS migrated;
-- INSERT of a new key migrates nothing
INSERT INTO acct VALUES (1000, 'new', 1);
SELECT public.regress_migrated('writes') AS migrated;
-- multi-row INSERT with one conflicting key: nothing inserted
INSERT INTO acct VALUES (1001, 'n', 1), (13, 'dup', 1);
SELECT public.regress_migrated('writes') AS migrated;
SELECT * FROM acct WHERE id = 1001;
SELECT public.regress_migrated('writes') AS migrated;
-- ON CONFLICT DO UPDATE against an unmigrated key
INSERT INTO acct VALUES (14, 'upsert', 1)
  ON CONFLICT (id) DO UPDATE SET bal = acct.bal + excluded.bal, owner = excluded.owner
  RETURNING *;
SELECT public.regress_migrated('writes') AS migrated;
-- ON CONFLICT DO NOTHING against an unmigrated key
INSERT INTO acct VALUES (15, 'nothing', 1) ON CONFLICT DO NOTHING;
SELECT public.regress_migrated('writes') AS migrated;
-- ON CONFLICT DO UPDATE ... WHERE false against an unmigrated key
INSERT INTO acct VALUES (16, 'x', 1) ON CONFLICT (id) DO UPDATE SET bal = -1 WHERE acct.bal > 1000000;
SELECT public.regress_migrated('writes') AS migrated;
SELECT * FROM acct WHERE id IN (15, 16) ORDER BY id;
SELECT public.regress_migrated('writes') AS migrated;
-- INSERT ... SELECT ... ON CONFLICT: account 34 exists (unmigrated), 2000 does not
INSERT INTO acct SELECT acct_id, 'ops', amount FROM ops WHERE id IN (3, 4) ON CONFLICT (id) DO NOTHING;
SELECT public.regress_migrated('writes') AS migrated;
-- A rolled back transaction leaves its rows unmigrated
BEGIN;
UPDATE acct SET bal = -1 WHERE id = 17;
ROLLBACK;
SELECT public.regress_migrated('writes') AS migrated;
SELECT bal FROM acct WHERE id = 17;
SELECT public.regress_migrated('writes') AS migrated;
-- So does a rolled back subtransaction: row 18 is migrated again, by the
-- SELECT, in the same transaction
BEGIN;
SAVEPOINT s;
UPDATE acct SET bal = -1 WHERE id = 18;
ROLLBACK TO SAVEPOINT s;
SELECT bal FROM acct WHERE id = 18;
COMMIT;
SELECT public.regress_migrated('writes') AS migrated;
-- A released subtransaction keeps them
BEGIN;
SAVEPOINT s;
UPDATE acct SET bal = bal + 1 WHERE id = 21;
RELEASE SAVEPOINT s;
COMMIT;
SELECT public.regress_migrated('writes') AS migrated;
-- A transaction that fails after migrating rows
BEGIN;
SELECT bal FROM acct WHERE id = 22;
SELECT 1 / 0;
ROLLBACK;
SELECT public.regress_migrated('writes') AS migrated;
-- Data-modifying CTE
WITH up AS (UPDATE acct SET bal = bal * 2 WHERE id = 23 RETURNING id, bal)
SELECT * FROM up;
SELECT public.regress_migrated('writes') AS migrated;
-- UPDATE of the key to a key held by an unmigrated row: unique violation
UPDATE acct SET id = 24 WHERE id = 25;
SELECT public.regress_migrated('writes') AS migrated;
UPDATE acct SET id = 5000 WHERE id = 25;
SELECT public.regress_migrated('writes') AS migrated;
-- UPDATE of ten rows (91 to 100)
UPDATE acct SET bal = bal + 1 WHERE bal > 900;
SELECT public.regress_migrated('writes') AS migrated;
-- DELETE with a sub-query (accounts 80 and 82)
DELETE FROM acct WHERE id IN (SELECT acct_id + 50 FROM ops WHERE id <= 2);
SELECT public.regress_migrated('writes') AS migrated;
-- MERGE: 30, 34 and 2000 are migrated or new, 32 was deleted, 35 is
-- unmigrated (matched: updated, not inserted).  It needs row 35; it may
-- migrate more (up to the 71 rows left), the data shows it is right.
MERGE INTO acct a USING ops o ON a.id = o.acct_id
  WHEN MATCHED THEN UPDATE SET bal = a.bal + o.amount
  WHEN NOT MATCHED THEN INSERT VALUES (o.acct_id, 'merged', o.amount);
SELECT public.regress_migrated('writes') BETWEEN 1 AND 71 AS migrated_1_to_71;
SELECT * FROM acct WHERE id IN (30, 32, 34, 35, 2000) ORDER BY id;
SELECT public.regress_migrated('writes') AS migrated;
-- A statement that needs every row.
SELECT count(*), sum(bal) FROM acct;
SELECT leapfrog.remaining('writes');
\set VERBOSITY default

-- The same statements on the eager copy.
SET search_path = wr_eager;
SELECT public.regress_eager(:'script');
\set VERBOSITY sqlstate
UPDATE acct SET bal = bal + 5 WHERE id = 10;
UPDATE acct SET owner = owner || '!' WHERE owner = 'owner20';
UPDATE acct a SET bal = a.bal + o.amount FROM ops o WHERE o.acct_id = a.id AND o.id = 1;
UPDATE acct SET bal = 0 WHERE id = 31 RETURNING id, bal;
DELETE FROM acct WHERE id = 11;
SELECT * FROM acct WHERE id = 11;
DELETE FROM acct a USING ops o WHERE o.acct_id = a.id AND o.id = 2;
DELETE FROM acct WHERE id = 33 RETURNING owner;
INSERT INTO acct VALUES (12, 'dup', 1);
SELECT * FROM acct WHERE id = 12;
INSERT INTO acct VALUES (1000, 'new', 1);
INSERT INTO acct VALUES (1001, 'n', 1), (13, 'dup', 1);
SELECT * FROM acct WHERE id = 1001;
INSERT INTO acct VALUES (14, 'upsert', 1)
  ON CONFLICT (id) DO UPDATE SET bal = acct.bal + excluded.bal, owner = excluded.owner
  RETURNING *;
INSERT INTO acct VALUES (15, 'nothing', 1) ON CONFLICT DO NOTHING;
INSERT INTO acct VALUES (16, 'x', 1) ON CONFLICT (id) DO UPDATE SET bal = -1 WHERE acct.bal > 1000000;
SELECT * FROM acct WHERE id IN (15, 16) ORDER BY id;
INSERT INTO acct SELECT acct_id, 'ops', amount FROM ops WHERE id IN (3, 4) ON CONFLICT (id) DO NOTHING;
BEGIN;
UPDATE acct SET bal = -1 WHERE id = 17;
ROLLBACK;
SELECT bal FROM acct WHERE id = 17;
BEGIN;
SAVEPOINT s;
UPDATE acct SET bal = -1 WHERE id = 18;
ROLLBACK TO SAVEPOINT s;
SELECT bal FROM acct WHERE id = 18;
COMMIT;
BEGIN;
SAVEPOINT s;
UPDATE acct SET bal = bal + 1 WHERE id = 21;
RELEASE SAVEPOINT s;
COMMIT;
BEGIN;
SELECT bal FROM acct WHERE id = 22;
SELECT 1 / 0;
ROLLBACK;
WITH up AS (UPDATE acct SET bal = bal * 2 WHERE id = 23 RETURNING id, bal)
SELECT * FROM up;
UPDATE acct SET id = 24 WHERE id = 25;
UPDATE acct SET id = 5000 WHERE id = 25;
UPDATE acct SET bal = bal + 1 WHERE bal > 900;
DELETE FROM acct WHERE id IN (SELECT acct_id + 50 FROM ops WHERE id <= 2);
MERGE INTO acct a USING ops o ON a.id = o.acct_id
  WHEN MATCHED THEN UPDATE SET bal = a.bal + o.amount
  WHEN NOT MATCHED THEN INSERT VALUES (o.acct_id, 'merged', o.amount);
SELECT * FROM acct WHERE id IN (30, 32, 34, 35, 2000) ORDER BY id;
SELECT count(*), sum(bal) FROM acct;
\set VERBOSITY default

SELECT leapfrog.complete('writes');
SELECT name, state, tuples_total, tuples_migrated, error
  FROM leapfrog.migrations WHERE name = 'writes';
SELECT * FROM public.regress_compare('wr_lazy.acct', 'wr_eager.acct');

RESET search_path;
DROP SCHEMA wr_eager CASCADE;
DROP SCHEMA wr_lazy CASCADE;
