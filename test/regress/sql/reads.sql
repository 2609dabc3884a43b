--
-- reads: queries on a table under migration migrate the input rows they
-- need, and only those: point queries, joins with other tables,
-- sub-queries, CTEs, set operations, locking reads, read-only transactions.
-- Each result is the eager one (the same queries run on the eager copy).
-- The number of rows each query migrated is printed as "migrated".
--
CREATE SCHEMA rd_eager;
CREATE SCHEMA rd_lazy;
SET search_path = rd_eager;
CREATE TABLE branch (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO branch VALUES (1, 'north'), (2, 'south'), (3, 'east'), (4, 'west');
CREATE TABLE txn (id int PRIMARY KEY, acct_id int NOT NULL, amount int NOT NULL);
INSERT INTO txn SELECT g, (g * 7) % 200 + 1, g * 100 FROM generate_series(1, 30) g;
CREATE TABLE acct (id int PRIMARY KEY, owner text NOT NULL, bal int NOT NULL, branch_id int NOT NULL);
INSERT INTO acct SELECT g, 'owner' || g, g * 10, g % 4 + 1 FROM generate_series(1, 200) g;
SET search_path = rd_lazy;
CREATE TABLE branch (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO branch SELECT * FROM rd_eager.branch;
CREATE TABLE txn (id int PRIMARY KEY, acct_id int NOT NULL, amount int NOT NULL);
INSERT INTO txn SELECT * FROM rd_eager.txn;
CREATE TABLE acct (id int PRIMARY KEY, owner text NOT NULL, bal int NOT NULL, branch_id int NOT NULL);
INSERT INTO acct SELECT * FROM rd_eager.acct;
SELECT $$
  CREATE TABLE acct_new (id int PRIMARY KEY, owner text NOT NULL, bal bigint NOT NULL,
                         branch_id int NOT NULL, tier text NOT NULL);
  INSERT INTO acct_new
    SELECT id, owner, bal, branch_id, CASE WHEN bal >= 1500 THEN 'gold' ELSE 'std' END
      FROM acct;
  DROP TABLE acct;
  ALTER TABLE acct_new RENAME TO acct;
$$ AS script \gset

SET search_path = rd_lazy;
SELECT leapfrog.start('reads', :'script');
SELECT public.regress_migrated('reads') AS migrated;
-- point query
SELECT * FROM acct WHERE id = 42;
SELECT public.regress_migrated('reads') AS migrated;
-- join on the key of another table's row
SELECT t.id, t.amount, a.owner
  FROM txn t JOIN acct a ON a.id = t.acct_id
 WHERE t.id = 3;
SELECT public.regress_migrated('reads') AS migrated;
-- join restricted by a predicate on the other table: the 50 north accounts
SELECT b.name, count(*), sum(a.bal)
  FROM acct a JOIN branch b ON b.id = a.branch_id
 WHERE b.name = 'north'
 GROUP BY b.name;
SELECT public.regress_migrated('reads') AS migrated;
-- uncorrelated IN sub-query: accounts 4 (migrated above), 11 and 197
SELECT id, owner FROM acct
 WHERE id IN (SELECT acct_id FROM txn WHERE amount >= 2800)
 ORDER BY id;
SELECT public.regress_migrated('reads') AS migrated;
-- CTE: accounts 1 to 9 (4 and 8 are north, migrated)
WITH poor AS (SELECT id, bal FROM acct WHERE bal < 100)
SELECT count(*), sum(bal) FROM poor;
SELECT public.regress_migrated('reads') AS migrated;
-- materialized CTE: accounts 100 to 104 (100 and 104 are north, migrated)
WITH x AS MATERIALIZED (SELECT * FROM acct WHERE id BETWEEN 100 AND 104)
SELECT id, tier FROM x ORDER BY id;
SELECT public.regress_migrated('reads') AS migrated;
-- sub-query in FROM: branch 2 below 20 is 1, 5, 9, 13, 17 (1, 5, 9 migrated)
SELECT * FROM (SELECT id, owner FROM acct WHERE branch_id = 2 AND id < 20) s ORDER BY id;
SELECT public.regress_migrated('reads') AS migrated;
-- set operations
SELECT id FROM acct WHERE id = 61 UNION ALL SELECT id FROM acct WHERE id = 62
EXCEPT SELECT id FROM acct WHERE id = 63
ORDER BY id;
SELECT public.regress_migrated('reads') AS migrated;
-- locking read
SELECT id, bal FROM acct WHERE id = 71 FOR UPDATE;
SELECT public.regress_migrated('reads') AS migrated;
-- a read-only transaction reads unmigrated rows as well: it computes them
-- from the retired table and migrates nothing (compute.c)
BEGIN READ ONLY;
SELECT id, owner, tier FROM acct WHERE id = 73;
COMMIT;
SELECT public.regress_migrated('reads') AS migrated;
-- aggregate with a predicate on a computed column: gold accounts with an
-- even id below 160 are 150, 152, ..., 158 (152 and 156 are north)
SELECT count(*), min(id), max(id) FROM acct WHERE tier = 'gold' AND id < 160 AND id % 2 = 0;
SELECT public.regress_migrated('reads') AS migrated;
-- Correlated sub-queries: the rows needed are those of the accounts the
-- outer rows point at; an implementation may migrate more, but not more
-- than the rows that pass the sub-query's own restriction.
-- Gold accounts referenced by a txn: 155, 162, 169, 176, 183, 190, 197;
-- 176 (north) and 197 are migrated, so at least 5 rows; 34 gold accounts
-- are not migrated yet, so at most 34.
SELECT count(*) FROM txn t
 WHERE EXISTS (SELECT 1 FROM acct a WHERE a.id = t.acct_id AND a.tier = 'gold');
SELECT public.regress_migrated('reads') BETWEEN 5 AND 34 AS migrated_5_to_34;
-- scalar sub-query and LATERAL (accounts 29 and 36)
SELECT t.id, (SELECT a.owner FROM acct a WHERE a.id = t.acct_id) AS owner
  FROM txn t WHERE t.id = 4;
SELECT t.id, a.owner FROM txn t
 CROSS JOIN LATERAL (SELECT owner FROM acct a WHERE a.id = t.acct_id) a
 WHERE t.id = 5;
-- A statement that needs every row.
SELECT count(*), sum(bal), count(*) FILTER (WHERE tier = 'gold') AS gold FROM acct;
SELECT leapfrog.remaining('reads');

-- The same queries on the eager copy.
SET search_path = rd_eager;
SELECT public.regress_eager(:'script');
SELECT * FROM acct WHERE id = 42;
SELECT t.id, t.amount, a.owner
  FROM txn t JOIN acct a ON a.id = t.acct_id
 WHERE t.id = 3;
SELECT b.name, count(*), sum(a.bal)
  FROM acct a JOIN branch b ON b.id = a.branch_id
 WHERE b.name = 'north'
 GROUP BY b.name;
SELECT id, owner FROM acct
 WHERE id IN (SELECT acct_id FROM txn WHERE amount >= 2800)
 ORDER BY id;
WITH poor AS (SELECT id, bal FROM acct WHERE bal < 100)
SELECT count(*), sum(bal) FROM poor;
WITH x AS MATERIALIZED (SELECT * FROM acct WHERE id BETWEEN 100 AND 104)
SELECT id, tier FROM x ORDER BY id;
SELECT * FROM (SELECT id, owner FROM acct WHERE branch_id = 2 AND id < 20) s ORDER BY id;
SELECT id FROM acct WHERE id = 61 UNION ALL SELECT id FROM acct WHERE id = 62
EXCEPT SELECT id FROM acct WHERE id = 63
ORDER BY id;
SELECT id, bal FROM acct WHERE id = 71 FOR UPDATE;
BEGIN READ ONLY;
SELECT id, owner, tier FROM acct WHERE id = 73;
COMMIT;
SELECT count(*), min(id), max(id) FROM acct WHERE tier = 'gold' AND id < 160 AND id % 2 = 0;
SELECT count(*) FROM txn t
 WHERE EXISTS (SELECT 1 FROM acct a WHERE a.id = t.acct_id AND a.tier = 'gold');
SELECT t.id, (SELECT a.owner FROM acct a WHERE a.id = t.acct_id) AS owner
  FROM txn t WHERE t.id = 4;
SELECT t.id, a.owner FROM txn t
 CROSS JOIN LATERAL (SELECT owner FROM acct a WHERE a.id = t.acct_id) a
 WHERE t.id = 5;
SELECT count(*), sum(bal), count(*) FILTER (WHERE tier = 'gold') AS gold FROM acct;

SELECT leapfrog.complete('reads');
SELECT * FROM public.regress_compare('rd_lazy.acct', 'rd_eager.acct');

RESET search_path;
DROP SCHEMA rd_eager CASCADE;
DROP SCHEMA rd_lazy CASCADE;
