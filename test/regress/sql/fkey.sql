--
-- fkey: foreign keys.  The script creates, besides the new account table,
-- a payment table that references it; account itself references an
-- existing table (branch).  A foreign-key check from payment migrates the
-- account row it needs.
--
CREATE SCHEMA fk_eager;
CREATE SCHEMA fk_lazy;
SET search_path = fk_eager;
CREATE TABLE branch (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO branch VALUES (1, 'north'), (2, 'south');
CREATE TABLE account (id int PRIMARY KEY, owner text NOT NULL, branch_id int NOT NULL);
INSERT INTO account SELECT g, 'owner' || g, g % 2 + 1 FROM generate_series(1, 50) g;
SET search_path = fk_lazy;
CREATE TABLE branch (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO branch SELECT * FROM fk_eager.branch;
CREATE TABLE account (id int PRIMARY KEY, owner text NOT NULL, branch_id int NOT NULL);
INSERT INTO account SELECT * FROM fk_eager.account;
SELECT $$
  CREATE TABLE account_v2 (id int PRIMARY KEY, owner text NOT NULL,
                           branch_id int NOT NULL REFERENCES branch (id));
  CREATE TABLE payment (id int PRIMARY KEY,
                        account_id int NOT NULL REFERENCES account_v2 (id) ON DELETE CASCADE,
                        amount int NOT NULL);
  INSERT INTO account_v2 SELECT id, owner, branch_id FROM account;
  DROP TABLE account;
  ALTER TABLE account_v2 RENAME TO account;
$$ AS script \gset

SET search_path = fk_lazy;
SELECT leapfrog.start('fkey', :'script');
SELECT * FROM public.regress_shape('fk_lazy.payment');
SELECT public.regress_migrated('fkey') AS migrated;
\set VERBOSITY sqlstate
-- The foreign-key check on account migrates account 5.
INSERT INTO payment VALUES (1, 5, 100);
SELECT public.regress_migrated('fkey') AS migrated;
-- No such account: foreign-key violation.
INSERT INTO payment VALUES (2, 999, 1);
SELECT public.regress_migrated('fkey') AS migrated;
-- Five checks, five accounts.
INSERT INTO payment SELECT g, g, 10 FROM generate_series(10, 14) g;
SELECT public.regress_migrated('fkey') AS migrated;
-- ON DELETE CASCADE from a migrated account.
DELETE FROM account WHERE id = 5;
SELECT public.regress_migrated('fkey') AS migrated;
SELECT count(*) FROM payment WHERE account_id = 5;
SELECT public.regress_migrated('fkey') AS migrated;
-- The check on an update of the referencing column.
UPDATE payment SET account_id = 30 WHERE id = 10;
SELECT public.regress_migrated('fkey') AS migrated;
-- Deleting an unmigrated account.
DELETE FROM account WHERE id = 20;
SELECT public.regress_migrated('fkey') AS migrated;
INSERT INTO payment VALUES (3, 20, 1);
SELECT public.regress_migrated('fkey') AS migrated;
-- Changing a referenced key: violation (payment 11 references account 11).
UPDATE account SET id = 100 WHERE id = 11;
SELECT public.regress_migrated('fkey') AS migrated;
-- The migrated rows themselves are checked against branch.
SELECT * FROM account WHERE id IN (40, 41) ORDER BY id;
SELECT public.regress_migrated('fkey') AS migrated;
\set VERBOSITY default
SELECT leapfrog.complete('fkey');

SET search_path = fk_eager;
SELECT public.regress_eager(:'script');
\set VERBOSITY sqlstate
INSERT INTO payment VALUES (1, 5, 100);
INSERT INTO payment VALUES (2, 999, 1);
INSERT INTO payment SELECT g, g, 10 FROM generate_series(10, 14) g;
DELETE FROM account WHERE id = 5;
SELECT count(*) FROM payment WHERE account_id = 5;
UPDATE payment SET account_id = 30 WHERE id = 10;
DELETE FROM account WHERE id = 20;
INSERT INTO payment VALUES (3, 20, 1);
UPDATE account SET id = 100 WHERE id = 11;
SELECT * FROM account WHERE id IN (40, 41) ORDER BY id;
\set VERBOSITY default

SELECT name, state, tuples_total, tuples_migrated, error
  FROM leapfrog.migrations WHERE name = 'fkey';
SELECT * FROM public.regress_compare('fk_lazy.account', 'fk_eager.account');
SELECT * FROM public.regress_compare('fk_lazy.payment', 'fk_eager.payment');
SELECT * FROM fk_lazy.payment ORDER BY id;

RESET search_path;
DROP SCHEMA fk_eager CASCADE;
DROP SCHEMA fk_lazy CASCADE;
