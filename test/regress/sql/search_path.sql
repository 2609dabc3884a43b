--
-- search_path: start() and the queries that migrate rows work with an
-- empty search_path and with a hostile one (a schema ahead of pg_catalog
-- whose operators and functions shadow the built-in ones, tables named like
-- the extension's catalogs, temporary tables too).  The mapping is fixed at
-- start(): the functions it calls are those start() resolved.
--
CREATE SCHEMA spx;
CREATE TABLE spx.t (id int PRIMARY KEY, name text NOT NULL, n int NOT NULL);
INSERT INTO spx.t SELECT g, 'name' || g, g FROM generate_series(1, 30) g;
CREATE TABLE spx.u (id int PRIMARY KEY, v text NOT NULL);
INSERT INTO spx.u SELECT g, 'u' || g FROM generate_series(1, 10) g;

CREATE SCHEMA evil;
CREATE FUNCTION evil.upper(text) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT 'evil' $$;
CREATE FUNCTION evil.lower(text) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT 'evil' $$;
CREATE FUNCTION evil.always(int, int) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = int, RIGHTARG = int, FUNCTION = evil.always);
CREATE FUNCTION evil.always(bigint, bigint) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.always);
CREATE FUNCTION evil.always(text, text) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.always);
CREATE FUNCTION evil.always(name, name) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = name, RIGHTARG = name, FUNCTION = evil.always);
CREATE FUNCTION evil.always(oid, oid) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = evil.always);
CREATE FUNCTION evil.always(tid, tid) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = tid, RIGHTARG = tid, FUNCTION = evil.always);
CREATE TABLE evil.t (id int, name text, n int);
INSERT INTO evil.t VALUES (1, 'evil', -1), (2, 'evil', -2);
CREATE TABLE evil.migration (id int, name text, state text);
CREATE TABLE evil.mapping (id int, migration_id int, query text);
CREATE TABLE evil.input (migration_id int, relid oid, orig_name text);
CREATE TABLE evil.progress (migration_id int, n bigint);
CREATE TEMP TABLE migration (id int, name text, state text);
CREATE TEMP TABLE mapping (id int, migration_id int, query text);
CREATE TEMP TABLE input (migration_id int, relid oid, orig_name text);
CREATE TEMP TABLE progress (migration_id int, n bigint);
INSERT INTO evil.migration VALUES (1, 'search_path', 'done');
INSERT INTO pg_temp.migration VALUES (1, 'search_path', 'done');

-- start() with an empty search_path: every name is qualified, upper() is
-- pg_catalog's.
SET search_path = '';
SELECT leapfrog.start('search_path', $$
  CREATE TABLE spx.t2 (id int PRIMARY KEY, name text NOT NULL, n bigint NOT NULL);
  INSERT INTO spx.t2 SELECT id, upper(name), n * 2 FROM spx.t;
  DROP TABLE spx.t;
  ALTER TABLE spx.t2 RENAME TO t;
$$);
SELECT leapfrog.remaining('search_path');
SELECT * FROM spx.t WHERE id = 1;
SELECT leapfrog.remaining('search_path');

-- Hostile: evil ahead of pg_catalog.  The test's own statements use
-- OPERATOR(pg_catalog.=); whatever the extension runs must not pick evil's
-- operators (they match every row) or functions or tables.
SET search_path = evil, pg_catalog;
SELECT * FROM spx.t WHERE id OPERATOR(pg_catalog.=) 2;
SELECT leapfrog.remaining('search_path');
UPDATE spx.t SET n = n + 1 WHERE id OPERATOR(pg_catalog.=) 3;
SELECT leapfrog.remaining('search_path');
INSERT INTO spx.t VALUES (5, 'x', 0) ON CONFLICT DO NOTHING;
SELECT leapfrog.remaining('search_path');
-- a predicate on a computed column: upper() is pg_catalog's, not evil's
SELECT id, name FROM spx.t WHERE name OPERATOR(pg_catalog.=) 'NAME6';
SELECT leapfrog.remaining('search_path');
SELECT name, state FROM leapfrog.migrations WHERE name OPERATOR(pg_catalog.=) 'search_path';
SELECT leapfrog.wait('search_path', 0);

-- start() under the hostile search_path.
SELECT leapfrog.start('search_path_2', $$
  CREATE TABLE spx.u2 (id int PRIMARY KEY, v text NOT NULL);
  INSERT INTO spx.u2 SELECT id, lower(v) FROM spx.u;
  DROP TABLE spx.u;
  ALTER TABLE spx.u2 RENAME TO u;
$$);
SELECT leapfrog.remaining('search_path_2');
SELECT * FROM spx.u WHERE id OPERATOR(pg_catalog.=) 4;
SELECT leapfrog.remaining('search_path_2');
-- Here lower() was resolved by start() under this search_path: evil's, as
-- the eager script would have.
SELECT leapfrog.complete('search_path');
SELECT leapfrog.complete('search_path_2');
SELECT name, state, tuples_total, tuples_migrated
  FROM leapfrog.migrations WHERE name OPERATOR(pg_catalog.~~) 'search\_path%' ORDER BY name;

RESET search_path;
SELECT count(*), sum(n), count(*) FILTER (WHERE name = 'NAME' || id) AS upper_names FROM spx.t;
SELECT * FROM spx.t WHERE id IN (1, 2, 3, 5) ORDER BY id;
SELECT count(*), count(*) FILTER (WHERE v = 'evil') AS evil_values FROM spx.u;
SELECT * FROM evil.t ORDER BY id;
SELECT count(*) FROM evil.migration;
SET client_min_messages = warning;
DROP SCHEMA spx CASCADE;
DROP SCHEMA evil CASCADE;
DROP TABLE pg_temp.migration, pg_temp.mapping, pg_temp.input, pg_temp.progress;
RESET client_min_messages;
