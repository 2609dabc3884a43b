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

-- Tables that one step fills, one referencing another: the per-customer
-- totals of the orders (a GROUP BY), an archive of the orders referencing
-- them (a row mapping, whose rows move with their customer's group), and a
-- split of the orders whose second half references the first with a
-- DEFERRABLE INITIALLY DEFERRED key, as Django declares every foreign key.
-- A step fills the referenced tables first (order_by_foreign_keys), and
-- checks a deferrable key as its INSERT ends, as a deferred check cannot
-- outlive its security-restricted operation (check_constraints_now).
-- Before, the archive's rows went in before their total (23503), and the
-- deferred key failed every step (42501); complete() failed alike.
SELECT $$
  CREATE TABLE ord (id int PRIMARY KEY, cust int NOT NULL, amt int NOT NULL);
  CREATE INDEX ON ord (cust);
  INSERT INTO ord SELECT g, g % 5, g FROM generate_series(1, 20) g;
$$ AS setup2 \gset
SELECT $$
  CREATE TABLE tot (cust int PRIMARY KEY, n bigint, s bigint);
  CREATE TABLE arch (id int PRIMARY KEY, cust int REFERENCES tot, amt int);
  CREATE TABLE pub (id int PRIMARY KEY, cust int);
  CREATE TABLE priv (id int PRIMARY KEY REFERENCES pub DEFERRABLE INITIALLY DEFERRED,
                     amt int);
  INSERT INTO tot SELECT cust, count(*), sum(amt) FROM ord GROUP BY cust;
  INSERT INTO arch SELECT id, cust, amt FROM ord;
  INSERT INTO pub SELECT id, cust FROM ord;
  INSERT INTO priv SELECT id, amt FROM ord;
$$ AS script2 \gset
CREATE PROCEDURE public.fk_app(s text) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_catalog.set_config('search_path', s, true);
  -- the check migrates customer 3's group, its archive and its split rows
  INSERT INTO arch VALUES (100, 3, 1);
  -- a write of the live input migrates customer 4's
  UPDATE ord SET amt = 0 WHERE id = 4;
  -- the application's own deferred check waits for its commit, a step
  -- (customer 1's, by the update of ord) in between
  INSERT INTO priv VALUES (200, 1);
  UPDATE ord SET amt = amt + 1 WHERE id = 6;
  INSERT INTO pub VALUES (200, 0);
  BEGIN
    DELETE FROM tot WHERE cust = 2;
  EXCEPTION WHEN foreign_key_violation THEN
    RAISE NOTICE 'tot 2 is referenced';
  END;
END $$;
SET search_path = fk_eager;
SELECT public.regress_eager(:'setup2');
SELECT public.regress_eager(:'script2');
CALL public.fk_app('fk_eager');
SET search_path = fk_lazy;
SELECT public.regress_eager(:'setup2');
SELECT leapfrog.start('fkey2', :'script2');
CALL public.fk_app('fk_lazy');
SELECT count(*) AS arch, (SELECT count(*) FROM priv) AS priv FROM arch;
SELECT leapfrog.complete('fkey2');
SELECT * FROM public.regress_compare('fk_lazy.tot', 'fk_eager.tot');
SELECT * FROM public.regress_compare('fk_lazy.arch', 'fk_eager.arch');
SELECT * FROM public.regress_compare('fk_lazy.pub', 'fk_eager.pub');
SELECT * FROM public.regress_compare('fk_lazy.priv', 'fk_eager.priv');
DROP PROCEDURE public.fk_app(text);

-- One step's rows referencing each other the other way round: a
-- self-referencing table filled by two INSERTs, children first, and two
-- tables referencing each other, all DEFERRABLE INITIALLY DEFERRED (checked
-- at commit eagerly, after both INSERTs).  A step's checks run as the step
-- ends, not as each INSERT does (migrate.c, check_constraints_now): before,
-- the first INSERT's check looked for a row the same step had claimed but
-- not yet copied, and every step failed with 23503.
SELECT $$
  CREATE TABLE src (id int PRIMARY KEY, v int NOT NULL);
  INSERT INTO src SELECT g, g * 10 FROM generate_series(1, 20) g;
$$ AS setup3 \gset
SELECT $$
  CREATE TABLE node (id int PRIMARY KEY,
                     parent int REFERENCES node DEFERRABLE INITIALLY DEFERRED);
  CREATE TABLE pa (id int PRIMARY KEY, b_id int, v int);
  CREATE TABLE pb (id int PRIMARY KEY, a_id int REFERENCES pa DEFERRABLE INITIALLY DEFERRED);
  ALTER TABLE pa ADD FOREIGN KEY (b_id) REFERENCES pb DEFERRABLE INITIALLY DEFERRED;
  INSERT INTO node SELECT 2 * id + 1, 2 * id FROM src;
  INSERT INTO node SELECT 2 * id, NULL FROM src;
  INSERT INTO pa SELECT id, id, v FROM src;
  INSERT INTO pb SELECT id, id FROM src;
  DROP TABLE src;
$$ AS script3 \gset
SET search_path = fk_eager;
SELECT public.regress_eager(:'setup3');
SELECT public.regress_eager(:'script3');
UPDATE node SET parent = parent WHERE id = 11;
UPDATE pa SET v = v + 1 WHERE id = 7;
SET search_path = fk_lazy;
SELECT public.regress_eager(:'setup3');
SELECT leapfrog.start('fkey3', :'script3');
UPDATE node SET parent = parent WHERE id = 11;
UPDATE pa SET v = v + 1 WHERE id = 7;
SELECT leapfrog.remaining('fkey3');
SELECT leapfrog.complete('fkey3');
SELECT * FROM public.regress_compare('fk_lazy.node', 'fk_eager.node');
SELECT * FROM public.regress_compare('fk_lazy.pa', 'fk_eager.pa');
SELECT * FROM public.regress_compare('fk_lazy.pb', 'fk_eager.pb');

-- A NOT DEFERRABLE key whose table the script fills before the table it
-- references: eagerly the first INSERT fails (23503); lazily each step's
-- check would find (migrate) the row it references, so start() refuses it.
-- Filled the other way round, or with the key DEFERRABLE, it is accepted.
SET search_path = fk_eager;
SELECT public.regress_eager(:'setup3');
DO $$ BEGIN
  PERFORM public.regress_eager($s$
    CREATE TABLE p2 (id int PRIMARY KEY);
    CREATE TABLE c2 (id int PRIMARY KEY, pid int REFERENCES p2);
    INSERT INTO c2 SELECT id, id FROM src;
    INSERT INTO p2 SELECT id FROM src;
    DROP TABLE src;
  $s$);
EXCEPTION WHEN foreign_key_violation THEN
  RAISE NOTICE 'eagerly: %', SQLERRM;
END $$;
SET search_path = fk_lazy;
SELECT public.regress_eager(:'setup3');
SELECT leapfrog.start('fkey4', $$
  CREATE TABLE p2 (id int PRIMARY KEY);
  CREATE TABLE c2 (id int PRIMARY KEY, pid int REFERENCES p2);
  INSERT INTO c2 SELECT id, id FROM src;
  INSERT INTO p2 SELECT id FROM src;
  DROP TABLE src;
$$);
SELECT leapfrog.start('fkey4', $$
  CREATE TABLE p2 (id int PRIMARY KEY);
  CREATE TABLE c2 (id int PRIMARY KEY, pid int REFERENCES p2 DEFERRABLE);
  INSERT INTO c2 SELECT id, id FROM src;
  INSERT INTO p2 SELECT id FROM src;
  DROP TABLE src;
$$);
SELECT count(*) FROM c2 WHERE pid = 5;
SELECT leapfrog.complete('fkey4');
SELECT count(*) AS c2, (SELECT count(*) FROM p2) AS p2 FROM c2;

RESET search_path;
DROP SCHEMA fk_eager CASCADE;
DROP SCHEMA fk_lazy CASCADE;
