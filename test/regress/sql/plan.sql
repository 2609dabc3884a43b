--
-- plan: leapfrog.plan(script) says what start() would do with each
-- statement, and changes nothing.
--
CREATE SCHEMA pl;
CREATE TABLE pl.cust (id int PRIMARY KEY, name text NOT NULL, city text);
INSERT INTO pl.cust SELECT g, 'n' || g, 'c' || (g % 10) FROM generate_series(1, 1000) g;
CREATE TABLE pl.ord (id int PRIMARY KEY, cust int NOT NULL, amount int NOT NULL);
CREATE INDEX ord_cust ON pl.ord (cust);
INSERT INTO pl.ord SELECT g, g % 1000 + 1, g FROM generate_series(1, 5000) g;
CREATE TABLE pl.visit (id int PRIMARY KEY, cust int);
CREATE INDEX visit_cust ON pl.visit (cust);
INSERT INTO pl.visit SELECT g, g % 500 + 1 FROM generate_series(1, 2000) g;
CREATE TABLE pl.version (v int);
ANALYZE pl.cust, pl.ord, pl.visit;
SELECT count(*) AS migrations_before FROM leapfrog.migration \gset
SELECT count(*) AS retired_before FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE nspname = 'leapfrog_retired' \gset

-- Every action: DDL run as written, a split (1:n), an aggregate over a live
-- table (n:1, and the live table replaced lazily), a join (n:n), a data
-- statement, a retirement, a lazy ALTER TABLE; the BEGIN ... COMMIT around
-- the script is left out.
SELECT statement, action, kind, input, target, input_rows, input_bytes > 0 AS has_bytes,
       detail, sqlstate, hint, sql
  FROM leapfrog.plan($$
BEGIN;
CREATE TABLE pl.cust_a (id int PRIMARY KEY, name text NOT NULL);
CREATE TABLE pl.cust_b (id int PRIMARY KEY, city text);
INSERT INTO pl.cust_a SELECT id, name FROM pl.cust;
INSERT INTO pl.cust_b SELECT id, city FROM pl.cust;
CREATE TABLE pl.totals AS SELECT cust, sum(amount) AS total FROM pl.ord GROUP BY cust;
CREATE TABLE pl.named AS SELECT v.id, c.name FROM pl.visit v JOIN pl.cust c ON c.id = v.cust;
DROP TABLE pl.visit;
INSERT INTO pl.version VALUES (2);
DROP TABLE pl.cust;
COMMIT;
$$);

SELECT statement, action, kind, input, target, input_rows, detail
  FROM leapfrog.plan($$
ALTER TABLE pl.ord ALTER COLUMN amount TYPE bigint;
CREATE INDEX ON pl.cust (name);
ALTER TABLE pl.cust ADD COLUMN note text;
$$);

-- Nothing changed: no migration, no new table, the inputs where they were,
-- no row in pl.version, no lock left.
SELECT count(*) - :migrations_before AS new_migrations FROM leapfrog.migration;
SELECT count(*) - :retired_before AS new_retired FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE nspname = 'leapfrog_retired';
SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE nspname = 'pl' AND relkind = 'r' ORDER BY 1;
SELECT count(*) AS version_rows FROM pl.version;
SELECT count(*) AS locks FROM pg_locks
 WHERE relation IN ('pl.cust'::regclass, 'pl.ord'::regclass) AND pid = pg_backend_pid();

-- A refusal ends the plan: the statements before it, then the refused one
-- with its SQLSTATE, message and hint.
SELECT statement, action, kind, input, target, detail, sqlstate, hint
  FROM leapfrog.plan($$
CREATE TABLE pl.x (id int);
INSERT INTO pl.x SELECT id FROM pl.cust;
INSERT INTO pl.x SELECT random()::int FROM pl.cust;
CREATE TABLE pl.never (id int);
$$);
-- A statement start() never accepts is refused before anything runs.
SELECT statement, action, detail, sqlstate FROM leapfrog.plan($$
CREATE TABLE pl.x (id int);
VACUUM pl.cust;
$$);
-- Other errors: action "error".
SELECT statement, action, detail, sqlstate FROM leapfrog.plan('CREATE TABL pl.x (id int)');
SELECT statement, action, detail, sqlstate FROM leapfrog.plan('CREATE TABLE pl.ord (id int)');
SELECT statement, action, detail, sqlstate FROM leapfrog.plan('');

-- In a transaction: the plan leaves it usable, and the caller's own work
-- in it stays.
BEGIN;
INSERT INTO pl.version VALUES (1);
SELECT statement, action FROM leapfrog.plan('CREATE TABLE pl.y (id int); DROP TABLE pl.cust;');
SELECT count(*) AS version_rows FROM pl.version;
ROLLBACK;
SELECT to_regclass('pl.y') IS NULL AS no_y, to_regclass('pl.cust') IS NOT NULL AS cust_kept;

-- The caller's privileges apply: a role that does not own the input is
-- refused as start() would refuse it, when it takes the input's lock (the
-- leading CREATE TABLE has run by then: it runs before the locks).
CREATE ROLE pl_other;
GRANT USAGE, CREATE ON SCHEMA pl TO pl_other;
GRANT SELECT ON pl.cust TO pl_other;
SET ROLE pl_other;
SELECT statement, action, detail, sqlstate FROM leapfrog.plan($$
CREATE TABLE pl.tmp (id int);
INSERT INTO pl.tmp SELECT id FROM pl.cust;
DROP TABLE pl.cust;
$$);
RESET ROLE;
DROP OWNED BY pl_other;
DROP ROLE pl_other;
-- A migration of the same script starts as planned.
SELECT leapfrog.start('pl_split', $$
CREATE TABLE pl.cust_a (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO pl.cust_a SELECT id, name FROM pl.cust;
DROP TABLE pl.cust;
$$);
SELECT name, state FROM leapfrog.migrations WHERE name = 'pl_split';
-- A script over a table the split still fills: chained.
SELECT statement, action, kind, input, target, detail FROM leapfrog.plan($$
CREATE TABLE pl.cust_a2 (id bigint PRIMARY KEY, name text NOT NULL);
INSERT INTO pl.cust_a2 SELECT id, name FROM pl.cust_a;
DROP TABLE pl.cust_a;
$$);
SELECT leapfrog.complete('pl_split');
SELECT count(*) FROM pl.cust_a;
DROP SCHEMA pl CASCADE;
