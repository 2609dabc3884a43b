--
-- privileges: only the owner of the tables a script touches may start()
-- it (42501 otherwise, nothing changed).  An application role with only
-- SELECT and UPDATE on the new table queries it and so migrates rows,
-- without any access to leapfrog_retired.
--
CREATE ROLE regress_lf_owner;
CREATE ROLE regress_lf_other;
CREATE ROLE regress_lf_app;
CREATE ROLE regress_lf_nobody;
CREATE SCHEMA pv AUTHORIZATION regress_lf_owner;
GRANT USAGE, CREATE ON SCHEMA pv TO regress_lf_other;
GRANT USAGE ON SCHEMA pv TO regress_lf_app, regress_lf_nobody;
SET ROLE regress_lf_owner;
CREATE TABLE pv.acct (id int PRIMARY KEY, owner text NOT NULL, bal int NOT NULL);
INSERT INTO pv.acct SELECT g, 'owner' || g, g * 10 FROM generate_series(1, 20) g;
-- Tables regress_lf_owner creates in pv are readable and updatable by the
-- application role.
ALTER DEFAULT PRIVILEGES IN SCHEMA pv GRANT SELECT, UPDATE ON TABLES TO regress_lf_app;
RESET ROLE;
SELECT 'pv.acct'::regclass::oid AS old_oid \gset
SELECT $$
  CREATE TABLE pv.acct2 (id int PRIMARY KEY, owner text NOT NULL, bal bigint NOT NULL);
  INSERT INTO pv.acct2 SELECT id, owner, bal FROM pv.acct;
  DROP TABLE pv.acct;
  ALTER TABLE pv.acct2 RENAME TO acct;
$$ AS script \gset

-- A role that does not own pv.acct (but may create tables in pv).
SET ROLE regress_lf_other;
\set VERBOSITY sqlstate
SELECT leapfrog.start('privileges_denied', :'script');
\set VERBOSITY default
RESET ROLE;
SELECT to_regclass('pv.acct') = :old_oid AS in_place, to_regclass('pv.acct2') AS acct2,
       (SELECT count(*) FROM pv.acct) AS rows,
       (SELECT count(*) FROM leapfrog.migrations WHERE name = 'privileges_denied') AS migrations;

-- The owner, who is not a superuser.
SET ROLE regress_lf_owner;
SELECT leapfrog.start('privileges', :'script');
RESET ROLE;
-- The new table belongs to the caller and got the default privileges.
SELECT c.relowner::regrole AS owner
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'pv' AND c.relname = 'acct';
SELECT has_table_privilege('regress_lf_app', 'pv.acct', 'SELECT') AS app_select,
       has_table_privilege('regress_lf_app', 'pv.acct', 'UPDATE') AS app_update,
       has_table_privilege('regress_lf_app', 'pv.acct', 'INSERT') AS app_insert,
       has_schema_privilege('regress_lf_app', 'leapfrog_retired', 'USAGE') AS app_retired_usage;
SELECT leapfrog.remaining('privileges');

-- The application role reads and writes; rows migrate on its behalf.
SET ROLE regress_lf_app;
SELECT * FROM pv.acct WHERE id = 3;
UPDATE pv.acct SET bal = bal + 1 WHERE id = 4;
SELECT id, bal FROM pv.acct WHERE id BETWEEN 5 AND 6 ORDER BY id FOR UPDATE;
SELECT name, state FROM leapfrog.migrations WHERE name = 'privileges';
\set VERBOSITY sqlstate
-- What its privileges do not allow still fails.
INSERT INTO pv.acct VALUES (100, 'x', 0);
SELECT public.regress_rows(:old_oid);
\set VERBOSITY default
RESET ROLE;
SELECT leapfrog.remaining('privileges');
-- A role without privileges on the table gets 42501 and migrates nothing.
SET ROLE regress_lf_nobody;
\set VERBOSITY sqlstate
SELECT * FROM pv.acct WHERE id = 7;
UPDATE pv.acct SET bal = 0 WHERE id = 8;
\set VERBOSITY default
RESET ROLE;
SELECT leapfrog.remaining('privileges');

SELECT leapfrog.complete('privileges');
SELECT name, state, tuples_total, tuples_migrated FROM leapfrog.migrations WHERE name = 'privileges';
SELECT * FROM pv.acct WHERE id BETWEEN 3 AND 8 ORDER BY id;
SELECT count(*), sum(bal) FROM pv.acct;

-- 42501: a mapping that calls a function a role other than a superuser owns
-- (it would run later as whoever reads the new table, pg_dump's superuser
-- included).  A superuser's function may be called.
SET ROLE regress_lf_owner;
CREATE TABLE pv.num (id int PRIMARY KEY, v int NOT NULL);
INSERT INTO pv.num VALUES (1, 1), (2, 2);
CREATE FUNCTION pv.mine(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 2';
\set VERBOSITY sqlstate
SELECT leapfrog.start('privileges_func', $$
  CREATE TABLE pv.num2 (id int PRIMARY KEY, v int NOT NULL);
  INSERT INTO pv.num2 SELECT id, pv.mine(v) FROM pv.num;
  DROP TABLE pv.num;
$$);
-- ... and so is a column type whose domain CHECK calls one (a computing read
-- coerces to the column's type: the CHECK runs as the reader)
CREATE FUNCTION pv.positive(int) RETURNS bool IMMUTABLE LANGUAGE plpgsql AS
'BEGIN RETURN $1 > 0; END';
CREATE DOMAIN pv.pos AS int CHECK (pv.positive(VALUE));
SELECT leapfrog.start('privileges_func', $$
  CREATE TABLE pv.num2 (id int PRIMARY KEY, v pv.pos NOT NULL);
  INSERT INTO pv.num2 SELECT id, v FROM pv.num;
  DROP TABLE pv.num;
$$);
\set VERBOSITY default
RESET ROLE;
CREATE FUNCTION pv.trusted(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 3';
SET ROLE regress_lf_owner;
SELECT leapfrog.start('privileges_func', $$
  CREATE TABLE pv.num2 (id int PRIMARY KEY, v int NOT NULL);
  INSERT INTO pv.num2 SELECT id, pv.trusted(v) FROM pv.num;
  DROP TABLE pv.num;
$$);
SELECT leapfrog.complete('privileges_func');
SELECT * FROM pv.num2 ORDER BY id;
RESET ROLE;

-- A mapping that leaves rows out is a security barrier: the application
-- role, which may read the new table but not the old one, gets no look at
-- the rows left out through a leaky function in its WHERE clause (eagerly
-- they are not in the new table at all).
SET ROLE regress_lf_owner;
CREATE TABLE pv.post (id int PRIMARY KEY, published bool NOT NULL, body text NOT NULL);
INSERT INTO pv.post VALUES (1, true, 'public one'), (2, false, 'secret draft'),
                           (3, true, 'public two');
SELECT leapfrog.start('privileges_filter', $$
  CREATE TABLE pv.public_post (id int PRIMARY KEY, body text NOT NULL);
  INSERT INTO pv.public_post SELECT id, body FROM pv.post WHERE published;
  DROP TABLE pv.post;
$$);
RESET ROLE;
CREATE FUNCTION pv.leak(t text) RETURNS bool LANGUAGE plpgsql COST 0.0000001 AS
$$BEGIN RAISE NOTICE 'saw: %', t; RETURN true; END$$;
GRANT EXECUTE ON FUNCTION pv.leak(text) TO regress_lf_app;
SET ROLE regress_lf_app;
SET leapfrog.read_mode = compute;
SELECT id, body FROM pv.public_post WHERE pv.leak(body) ORDER BY id;
SET leapfrog.read_mode = migrate;
SELECT id, body FROM pv.public_post WHERE pv.leak(body) ORDER BY id;
RESET leapfrog.read_mode;
RESET ROLE;
SELECT leapfrog.complete('privileges_filter');

-- A script that keeps a table a mapping reads needs the table's owner: the
-- table gets a trigger (or a copy takes its place) until the migration
-- completes.  Before, a role that could only read it could start such a
-- migration, and the owner's ALTER TABLE and complete() were refused.
SET ROLE regress_lf_owner;
CREATE TABLE pv.kept (id int PRIMARY KEY, v int);
INSERT INTO pv.kept SELECT g, g FROM generate_series(1, 5) g;
GRANT SELECT ON pv.kept TO regress_lf_other;
RESET ROLE;
SET ROLE regress_lf_other;
SELECT leapfrog.start('privileges_kept', 'CREATE TABLE pv.kept_copy AS SELECT id, v FROM pv.kept');
RESET ROLE;
SELECT count(*) AS triggers FROM pg_trigger WHERE tgrelid = 'pv.kept'::regclass;

-- Forced row security filters its owner's own reads: refused.
SET ROLE regress_lf_owner;
CREATE POLICY only_two ON pv.kept USING (id <= 2);
ALTER TABLE pv.kept ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
SELECT leapfrog.start('privileges_forced', 'CREATE TABLE pv.kept_copy AS SELECT id, v FROM pv.kept; DROP TABLE pv.kept');
ALTER TABLE pv.kept NO FORCE ROW LEVEL SECURITY;

-- A table the script replaces lazily keeps its privileges exactly: the
-- copy that takes its name does not get default privileges granted since
-- the table was made, as ALTER TABLE never grants them.
RESET ROLE;
CREATE SCHEMA pv2 AUTHORIZATION regress_lf_owner;
GRANT USAGE ON SCHEMA pv2 TO regress_lf_app;
SET ROLE regress_lf_owner;
CREATE TABLE pv2.plain (id int PRIMARY KEY, v int);
ALTER DEFAULT PRIVILEGES IN SCHEMA pv2 GRANT SELECT ON TABLES TO regress_lf_app;
SELECT relacl FROM pg_class WHERE oid = 'pv2.plain'::regclass;
-- An identity sequence alike: its own grant stays, and the default
-- privileges on sequences do not come with the copy's new sequence.
CREATE TABLE pv2.ident (id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, v int);
INSERT INTO pv2.ident (v) VALUES (1), (2);
GRANT SELECT ON SEQUENCE pv2.ident_id_seq TO regress_lf_other;
ALTER DEFAULT PRIVILEGES IN SCHEMA pv2 GRANT USAGE ON SEQUENCES TO regress_lf_app;
SELECT relacl FROM pg_class WHERE oid = 'pv2.ident_id_seq'::regclass;
SELECT leapfrog.start('privileges_acl', $$
  ALTER TABLE pv2.plain ADD CONSTRAINT v_pos CHECK (v > 0);
  ALTER TABLE pv2.ident ADD CONSTRAINT v_pos CHECK (v > 0);
$$);
SELECT relacl FROM pg_class WHERE oid = 'pv2.plain'::regclass;
SELECT relacl FROM pg_class WHERE oid = 'pv2.ident_id_seq'::regclass;
SELECT has_sequence_privilege('regress_lf_app', 'pv2.ident_id_seq', 'USAGE') AS app_usage,
       has_sequence_privilege('regress_lf_other', 'pv2.ident_id_seq', 'SELECT') AS other_select;
SET ROLE regress_lf_app;
\set VERBOSITY sqlstate
SELECT count(*) FROM pv2.plain;
\set VERBOSITY default
RESET ROLE;

-- REASSIGN OWNED BY the owner of a running migration is refused: its steps
-- run as that role.
RESET ROLE;
\set VERBOSITY sqlstate
REASSIGN OWNED BY regress_lf_owner TO regress_lf_other;
\set VERBOSITY default
SELECT leapfrog.complete('privileges_acl');
SELECT relacl FROM pg_class WHERE oid = 'pv2.plain'::regclass;
SELECT relacl FROM pg_class WHERE oid = 'pv2.ident_id_seq'::regclass;

DROP SCHEMA pv2 CASCADE;
DROP SCHEMA pv CASCADE;
DROP OWNED BY regress_lf_owner, regress_lf_other, regress_lf_app, regress_lf_nobody;
DROP ROLE regress_lf_owner, regress_lf_other, regress_lf_app, regress_lf_nobody;
