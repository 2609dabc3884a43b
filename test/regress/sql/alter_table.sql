--
-- alter_table: ALTER TABLE, CREATE INDEX, renames, COMMENT and DROP INDEX
-- in a script.  On a table holding rows, start() runs an ALTER TABLE as
-- written only when PostgreSQL makes it a catalog change: at_probe checks,
-- for every such command, that the table was neither rewritten (same
-- relfilenode) nor scanned (pg_stat_get_xact_numscans, which counts
-- verification scans and index builds too).  The other commands, and
-- CREATE INDEX, replace the table lazily: at_diff compares each with the
-- eager run of the same script, before and after completion.
--
CREATE SCHEMA at_lazy;
CREATE SCHEMA at_eager;
-- The same tables in both schemas: at_eager for the eager oracle.
SELECT $$
  CREATE TABLE parent (id int PRIMARY KEY);
  INSERT INTO parent SELECT g FROM generate_series(1, 100) g;
  CREATE TABLE t (id int PRIMARY KEY, v int, s varchar(10), n numeric(10,2), p int,
                  k int CHECK (k >= 0), q serial);
  INSERT INTO t SELECT g, g, 's' || g, g / 10.0, g % 100 + 1, g FROM generate_series(1, 1000) g;
  CREATE INDEX t_s ON t (s);
  CREATE INDEX t_n ON t (n);
  GRANT SELECT ON t TO regress_at_reader;
  GRANT UPDATE (v) ON t TO regress_at_reader;
  ALTER TABLE t SET (fillfactor = 90), ALTER COLUMN n SET STATISTICS 200;
  COMMENT ON TABLE t IS 'the table';
$$ AS setup \gset
CREATE ROLE regress_at_reader;
SET search_path = at_eager;
SELECT public.regress_eager(:'setup');
SET search_path = at_lazy;
SELECT public.regress_eager(:'setup');
CREATE DOMAIN public.posint AS int CHECK (VALUE > 0);
-- Runs start(name, script) and reports what happened to table rel.
CREATE FUNCTION public.at_probe(name text, script text, relname text = 'at_lazy.t')
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    rel oid := relname::regclass;
    node0 oid := (SELECT relfilenode FROM pg_class WHERE oid = rel);
    scans0 bigint := pg_stat_get_xact_numscans(rel);
BEGIN
    PERFORM leapfrog.start(name, script);
    RETURN format('rewritten: %s, scanned: %s, state: %s',
                  (SELECT relfilenode FROM pg_class WHERE oid = rel) <> node0,
                  pg_stat_get_xact_numscans(rel) > scans0,
                  (SELECT state FROM leapfrog.migrations m WHERE m.name = at_probe.name));
END $$;

-- Accepted: each runs as written, without reading the table.  Each runs in
-- a transaction rolled back afterwards, on the same 1,000 rows.
BEGIN;
SELECT public.at_probe('a1', 'ALTER TABLE t ADD COLUMN w int');
SELECT public.at_probe('a2', 'ALTER TABLE t ADD COLUMN w2 int NOT NULL DEFAULT 0');
SELECT public.at_probe('a3', 'ALTER TABLE t ADD COLUMN created timestamptz DEFAULT now()');
SELECT public.at_probe('a4', 'ALTER TABLE t ADD COLUMN label text COLLATE "C" DEFAULT ''x''');
SELECT public.at_probe('a5', 'ALTER TABLE t ADD COLUMN parent_id int REFERENCES parent');
-- Every row gets the value eager gives: the default, evaluated once.
SELECT count(*) AS rows, count(DISTINCT created) AS created_values,
       bool_and(created = now()) AS at_start, sum(w2) AS w2_sum
  FROM t;
ROLLBACK;
BEGIN;
SELECT public.at_probe('b1', 'ALTER TABLE t DROP COLUMN k');
SELECT public.at_probe('b2', 'ALTER TABLE t RENAME COLUMN s TO label');
SELECT public.at_probe('b3', 'ALTER TABLE t ALTER COLUMN v SET DEFAULT 3, ALTER COLUMN n DROP DEFAULT');
SELECT public.at_probe('b4', 'ALTER TABLE t ALTER COLUMN v DROP NOT NULL');
SELECT public.at_probe('b5', 'ALTER TABLE t RENAME CONSTRAINT t_pkey TO t_pk');
SELECT public.at_probe('b6', 'ALTER INDEX t_n RENAME TO t_n2');
SELECT public.at_probe('b7', 'DROP INDEX t_n2');
SELECT public.at_probe('b8', 'ALTER TABLE t ALTER COLUMN label SET STATISTICS 500, SET (fillfactor = 90)');
SELECT public.at_probe('b9', 'COMMENT ON COLUMN t.v IS ''the value''');
SELECT label FROM t WHERE id = 7;
ROLLBACK;
BEGIN;
SELECT public.at_probe('c1', 'ALTER TABLE t ADD CONSTRAINT v_pos CHECK (v > 0) NOT VALID');
SELECT public.at_probe('c2', 'ALTER TABLE t ADD CONSTRAINT t_p_fk FOREIGN KEY (p) REFERENCES parent NOT VALID');
SELECT public.at_probe('c3', 'ALTER TABLE t DROP CONSTRAINT t_k_check');
-- ALTER COLUMN TYPE that only relabels: wider varchar and numeric, varchar to text.
SELECT public.at_probe('c4', 'ALTER TABLE t ALTER COLUMN s TYPE varchar(20)');
SELECT public.at_probe('c5', 'ALTER TABLE t ALTER COLUMN n TYPE numeric(12,2)');
SELECT public.at_probe('c6', 'ALTER TABLE t ALTER COLUMN s TYPE text');
SELECT conname, convalidated FROM pg_constraint
 WHERE conrelid = 't'::regclass ORDER BY conname;
-- The new constraints hold for new writes at once.
\set VERBOSITY terse
SAVEPOINT w;
INSERT INTO t (id, v, p) VALUES (5000, -1, 1);
ROLLBACK TO w;
INSERT INTO t (id, v, p) VALUES (5001, 1, 999);
\set VERBOSITY default
ROLLBACK;
-- UNIQUE and PRIMARY KEY on an index built beforehand.
CREATE UNIQUE INDEX t_v_key ON t (v);
BEGIN;
SELECT public.at_probe('d1', 'ALTER TABLE t ADD CONSTRAINT t_v_key UNIQUE USING INDEX t_v_key');
ROLLBACK;
DROP INDEX t_v_key;

-- Replaced lazily: the commands PostgreSQL carries out by reading the
-- table.  at_diff runs the script eagerly on at_eager and through start()
-- on at_lazy, runs the statements given on both before completing (their
-- rows, row counts or SQLSTATEs must be equal), completes, and reports any
-- difference of definition, storage parameters, privileges, comment or
-- rows.  Each runs in a transaction rolled back afterwards.
CREATE FUNCTION public.at_outcome(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    res text;
    n bigint;
BEGIN
    IF stmt ~* '^\s*SELECT' THEN
        EXECUTE format('SELECT pg_catalog.string_agg(lf_row::text, '' '' ORDER BY lf_row::text) FROM (%s) lf_row', stmt)
            INTO res;
        RETURN coalesce(res, '(none)');
    END IF;
    EXECUTE stmt;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n || ' rows';
EXCEPTION WHEN others THEN
    RETURN 'error ' || SQLSTATE;
END $$;
CREATE FUNCTION public.at_diff(name text, script text, stmts text[] = '{}', rel text = 't')
RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
    st text;
    e text;
    l text;
    props text := 'SELECT c.relacl::text, c.reloptions::text, c.relreplident,
                          pg_catalog.obj_description(c.oid, ''pg_class''),
                          (SELECT pg_catalog.string_agg(a.attname || '' '' || a.attstattarget || '' '' ||
                                  coalesce(a.attacl::text, ''-''), '', '' ORDER BY a.attnum)
                             FROM pg_catalog.pg_attribute a
                            WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
                     FROM pg_catalog.pg_class c WHERE c.oid = $1::regclass';
BEGIN
    -- sequences are not transactional: earlier tests moved one of them
    PERFORM pg_catalog.setval('at_eager.t_q_seq', 1000);
    PERFORM pg_catalog.setval('at_lazy.t_q_seq', 1000);
    PERFORM pg_catalog.set_config('search_path', 'at_eager', true);
    EXECUTE script;
    PERFORM pg_catalog.set_config('search_path', 'at_lazy', true);
    PERFORM leapfrog.start(name, script);
    RETURN NEXT pg_catalog.format('after start: %s, %s rows to migrate',
        (SELECT m.state FROM leapfrog.migrations m WHERE m.name = at_diff.name),
        leapfrog.remaining(name));
    FOREACH st IN ARRAY stmts LOOP
        PERFORM pg_catalog.set_config('search_path', 'at_eager', true);
        e := public.at_outcome(st);
        PERFORM pg_catalog.set_config('search_path', 'at_lazy', true);
        l := public.at_outcome(st);
        RETURN NEXT pg_catalog.format('%s: %s', st,
            CASE WHEN e IS NOT DISTINCT FROM l THEN 'same, ' || l
                 ELSE pg_catalog.format('eager %s, lazy %s', e, l) END);
    END LOOP;
    PERFORM leapfrog.complete(name);
    PERFORM pg_catalog.set_config('search_path', 'at_eager', true);
    EXECUTE props INTO e USING rel;
    PERFORM pg_catalog.set_config('search_path', 'at_lazy', true);
    EXECUTE props INTO l USING rel;
    IF e IS DISTINCT FROM l THEN
        RETURN NEXT pg_catalog.format('properties: eager %s, lazy %s', e, l);
    END IF;
    RETURN QUERY SELECT 'only lazy: ' || x
                   FROM (SELECT public.regress_shape('at_lazy.' || rel)
                         EXCEPT SELECT public.regress_shape('at_eager.' || rel)) d(x);
    RETURN QUERY SELECT 'only eager: ' || x
                   FROM (SELECT public.regress_shape('at_eager.' || rel)
                         EXCEPT SELECT public.regress_shape('at_lazy.' || rel)) d(x);
    RETURN QUERY SELECT pg_catalog.format('after complete: %s rows, %s only lazy, %s only eager',
                                          c.lazy_rows, c.lazy_only, c.eager_only)
                   FROM public.regress_compare('at_lazy.' || rel, 'at_eager.' || rel) c;
END $$;
BEGIN;
SELECT public.at_diff('r1', 'ALTER TABLE t ALTER COLUMN v TYPE bigint',
    ARRAY['SELECT * FROM t WHERE id IN (7, 8)',
          'UPDATE t SET v = v * 2 WHERE s = ''s9''',
          'INSERT INTO t (id, v) VALUES (10, 1)',
          'INSERT INTO t (id, v) VALUES (5000, 1)',
          'SELECT id, q FROM t WHERE id = 5000',
          'SELECT count(*), sum(v) FROM t']);
ROLLBACK;
BEGIN;
SELECT public.at_diff('r2', 'ALTER TABLE t ALTER COLUMN s TYPE varchar(5)',
    ARRAY['SELECT * FROM t WHERE s = ''s1000''']);
ROLLBACK;
BEGIN;
SELECT public.at_diff('r3', 'ALTER TABLE t ALTER COLUMN s TYPE varchar(20) USING upper(s) || ''!''',
    ARRAY['SELECT s FROM t WHERE id = 3', 'SELECT id FROM t WHERE s = ''S4!''']);
ROLLBACK;
BEGIN;
SELECT public.at_diff('r4', 'ALTER TABLE t ALTER COLUMN s SET NOT NULL',
    ARRAY['INSERT INTO t (id, v) VALUES (5000, 1)', 'SELECT * FROM t WHERE id = 1']);
ROLLBACK;
BEGIN;
SELECT public.at_diff('r5', 'ALTER TABLE t ADD CONSTRAINT v_pos CHECK (v > 0), ADD CONSTRAINT t_p_fk FOREIGN KEY (p) REFERENCES parent',
    ARRAY['UPDATE t SET v = -1 WHERE id = 3', 'UPDATE t SET p = 999 WHERE id = 4',
          'DELETE FROM parent WHERE id = 50', 'SELECT count(*) FROM t WHERE p = 50']);
ROLLBACK;
BEGIN;
SELECT public.at_diff('r6', 'ALTER TABLE t ADD CONSTRAINT t_v_key UNIQUE (v)',
    ARRAY['INSERT INTO t (id, v) VALUES (5000, 77)', 'INSERT INTO t (id, v) VALUES (5001, 5001)']);
ROLLBACK;
BEGIN;
SELECT public.at_diff('r7', 'ALTER TABLE t ADD COLUMN w int, ALTER COLUMN v TYPE bigint, ADD COLUMN r int DEFAULT 1 CHECK (r > 0), ADD COLUMN z text DEFAULT ''z''',
    ARRAY['SELECT * FROM t WHERE id = 12']);
ROLLBACK;
BEGIN;
SELECT public.at_diff('r8', 'ALTER TABLE t ADD COLUMN r int DEFAULT 1 REFERENCES parent, ADD COLUMN d public.posint',
    ARRAY['SELECT r, d FROM t WHERE id = 12', 'UPDATE t SET d = 0 WHERE id = 12']);
ROLLBACK;
-- VALIDATE CONSTRAINT of a constraint added NOT VALID earlier (the safe
-- two-step of migration linters): the rows are checked as they move.  Type
-- changes in one statement: every USING reads the old row, as eagerly.
BEGIN;
ALTER TABLE at_eager.t ADD CONSTRAINT v_pos CHECK (v > 0) NOT VALID;
ALTER TABLE at_lazy.t ADD CONSTRAINT v_pos CHECK (v > 0) NOT VALID;
ALTER TABLE at_eager.t ADD CONSTRAINT t_p_fk FOREIGN KEY (p) REFERENCES at_eager.parent NOT VALID;
ALTER TABLE at_lazy.t ADD CONSTRAINT t_p_fk FOREIGN KEY (p) REFERENCES at_lazy.parent NOT VALID;
SELECT public.at_diff('r13', 'ALTER TABLE t VALIDATE CONSTRAINT v_pos, VALIDATE CONSTRAINT t_p_fk',
    ARRAY['UPDATE t SET v = -1 WHERE id = 3', 'SELECT * FROM t WHERE id = 3',
          'INSERT INTO t (id, v, p) VALUES (5000, 1, 999)']);
ROLLBACK;
BEGIN;
SELECT public.at_diff('r14', 'ALTER TABLE t ALTER COLUMN n TYPE int, ALTER COLUMN v TYPE numeric USING v + n',
    ARRAY['SELECT v, n FROM t WHERE id = 15']);
ROLLBACK;
-- A table that other tables' foreign keys reference: the keys move to the
-- copy, valid.  The referencing tables' checks and the actions of the
-- copy's deletes behave as eagerly, before and after completion.
SELECT $$
  CREATE TABLE acct (id int PRIMARY KEY, name text);
  INSERT INTO acct SELECT g, 'n' || g FROM generate_series(1, 1000) g;
  CREATE TABLE ord (id int PRIMARY KEY, acct_id int REFERENCES acct ON DELETE CASCADE);
  INSERT INTO ord SELECT g, g % 1000 + 1 FROM generate_series(1, 3000) g;
  CREATE TABLE hold (id int PRIMARY KEY, acct_id int CONSTRAINT hold_acct REFERENCES acct);
  INSERT INTO hold VALUES (1, 8);
$$ AS fk_setup \gset
SET search_path = at_eager;
SELECT public.regress_eager(:'fk_setup');
SET search_path = at_lazy;
SELECT public.regress_eager(:'fk_setup');
BEGIN;
SELECT public.at_diff('r15', 'CREATE INDEX ON acct (name); ALTER TABLE acct ALTER COLUMN name SET NOT NULL',
    ARRAY['INSERT INTO ord VALUES (5000, 5)', 'INSERT INTO ord VALUES (5001, 99999)',
          'UPDATE ord SET acct_id = 9 WHERE id = 3', 'DELETE FROM acct WHERE id = 7',
          'SELECT count(*) FROM ord WHERE acct_id = 7', 'DELETE FROM acct WHERE id = 8',
          'UPDATE acct SET id = 5555 WHERE id = 11', 'SELECT count(*) FROM acct'], 'acct');
SELECT * FROM public.regress_compare('at_lazy.ord', 'at_eager.ord');
SELECT conrelid::regclass, conname, confrelid::regclass, convalidated
  FROM pg_constraint WHERE contype = 'f' AND connamespace = 'at_lazy'::regnamespace
   AND confrelid = 'acct'::regclass ORDER BY 1;
-- After completion, the keys act from the copy.
DELETE FROM acct WHERE id = 12;
SELECT count(*) FROM ord WHERE acct_id = 12;
ROLLBACK;
SELECT public.at_probe('x19', 'ALTER TABLE acct ALTER COLUMN id TYPE bigint', 'acct');
-- CREATE INDEX on a table holding rows, unique or not, and several
-- statements on one replaced table: the later ones run on its copy.
BEGIN;
SELECT public.at_diff('r9', $$CREATE INDEX t_v ON t (v);
  CREATE UNIQUE INDEX t_s_key ON t (s) WHERE s IS NOT NULL;
  ALTER TABLE t ADD COLUMN created timestamptz NOT NULL DEFAULT now();
  ALTER TABLE t RENAME COLUMN s TO label;
  ALTER TABLE t ALTER COLUMN n TYPE numeric(12,3), ALTER COLUMN v SET NOT NULL;
  COMMENT ON COLUMN t.label IS 'the label';$$,
    ARRAY['SELECT id, label, n FROM t WHERE label = ''s77''',
          'INSERT INTO t (id, v, label) VALUES (5000, 1, ''s78'')',
          'SELECT count(*) FROM t WHERE created = now()']);
ROLLBACK;
BEGIN;
SELECT public.at_diff('r10', 'ALTER TABLE t ALTER COLUMN s TYPE varchar(20) COLLATE "C"',
    ARRAY['SELECT min(s), max(s) FROM t']);
ROLLBACK;
-- The index rebuilt by a relabelling type change (an expression index) and
-- a constraint checked again make a replacement too.
BEGIN;
CREATE INDEX t_lower_s ON at_eager.t (lower(s));
CREATE INDEX t_lower_s ON at_lazy.t (lower(s));
SELECT public.at_diff('r11', 'ALTER TABLE t ALTER COLUMN s TYPE varchar(20), ALTER COLUMN k TYPE int');
ROLLBACK;
-- An old row that breaks the new schema: eager fails at start(); the lazy
-- run fails when the row moves, naming it, and loses nothing.
BEGIN;
SELECT 't'::regclass::oid AS old_oid \gset
SELECT leapfrog.start('r12', 'CREATE UNIQUE INDEX t_p_key ON t (p)');
SELECT * FROM t WHERE id = 1;
SELECT public.regress_error('SELECT * FROM t WHERE id = 101');
SELECT public.regress_error($$SELECT leapfrog.complete('r12')$$);
SELECT public.regress_rows(:old_oid) AS rows_left;
ROLLBACK;

-- Refused: what a replacement cannot carry yet, volatile values for the
-- existing rows, and subcommands that are neither catalog changes nor
-- replaceable.
SELECT public.at_probe('x1', 'ALTER TABLE t ADD COLUMN r float8 DEFAULT random()');
SELECT public.at_probe('x2', 'ALTER TABLE t ADD COLUMN r serial');
SELECT public.at_probe('x3', 'ALTER TABLE t ADD COLUMN r int GENERATED ALWAYS AS IDENTITY');
SELECT public.at_probe('x4', 'ALTER TABLE t ADD COLUMN r int GENERATED ALWAYS AS (v * 2) STORED');
SELECT public.at_probe('x5', 'ALTER TABLE t SET TABLESPACE pg_default');
SELECT public.at_probe('x7', $$ALTER TABLE t ALTER COLUMN v TYPE bigint;
  ALTER TABLE t ALTER COLUMN v TYPE numeric$$);
SELECT public.at_probe('x8', $$ALTER TABLE t ALTER COLUMN v TYPE bigint;
  ALTER TABLE t RENAME COLUMN s TO label;
  ALTER TABLE t ALTER COLUMN n TYPE int USING round(n)$$);
SELECT public.at_probe('x9', $$CREATE INDEX ON t (v);
  CREATE TABLE t2 (id int, v int); INSERT INTO t2 SELECT id, 1 FROM parent; DROP TABLE parent;
  INSERT INTO t (id, v) SELECT id, v FROM t2$$);
SELECT public.at_probe('x10', $$CREATE INDEX ON t (v); DROP TABLE t$$);
BEGIN;
CREATE TABLE child (id int REFERENCES t) PARTITION BY RANGE (id);
SELECT public.at_probe('x11', 'CREATE INDEX ON t (v)');
ROLLBACK;
BEGIN;
CREATE VIEW tv AS SELECT id FROM t;
SELECT public.at_probe('x12', 'CREATE INDEX ON t (v)');
ROLLBACK;
BEGIN;
CREATE FUNCTION public.at_trig() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE TRIGGER tt BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION public.at_trig();
SELECT public.at_probe('x13', 'CREATE INDEX ON t (v)');
ROLLBACK;
BEGIN;
ALTER TABLE t ENABLE ROW LEVEL SECURITY;
SELECT public.at_probe('x14', 'CREATE INDEX ON t (v)');
ROLLBACK;
BEGIN;
ALTER TABLE t ADD CONSTRAINT v_pos CHECK (v > 0) NOT VALID;
SELECT public.at_probe('x15', 'CREATE INDEX ON t (v)');
ROLLBACK;
-- A NOT VALID constraint on a replaced table: the rows would be checked
-- against it as they move, eagerly they are not.
SELECT public.at_probe('x16', $$ALTER TABLE t ALTER COLUMN v TYPE bigint;
  ALTER TABLE t ADD CONSTRAINT v_pos CHECK (v > 0) NOT VALID$$);
-- USING that reads a column an earlier statement retyped: eagerly it reads
-- the new value, the mapping would read the old one.
SELECT public.at_probe('x17', $$ALTER TABLE t ALTER COLUMN n TYPE int;
  ALTER TABLE t ALTER COLUMN v TYPE numeric USING v + n$$);
SELECT public.at_probe('x18', $$ALTER TABLE t ALTER COLUMN n TYPE int;
  ALTER TABLE t ALTER COLUMN v TYPE text USING t::text$$);
-- Nothing of a refused script stays.
SELECT count(*) AS columns FROM pg_attribute WHERE attrelid = 't'::regclass AND attnum > 0;
SELECT count(*) AS migrations FROM leapfrog.migrations;
\set VERBOSITY sqlstate
SELECT leapfrog.start('r21', 'ALTER INDEX t_s SET (fillfactor = 50)');
SELECT leapfrog.start('r22', 'ALTER SEQUENCE IF EXISTS nosuch RENAME TO other');
SELECT leapfrog.start('r23', 'COMMIT');
SELECT leapfrog.start('r24', 'BEGIN; ALTER TABLE t ADD COLUMN w int');
\set VERBOSITY default

-- With a migration: the ALTER TABLE runs in order with the other statements,
-- and the final state is the eager run's.  On a new table before its mapping
-- any ALTER TABLE is instant (the table is empty); after it, the mapping is
-- fixed and the ALTER TABLE is refused.
SELECT $$
  ALTER TABLE t RENAME COLUMN s TO label;
  ALTER TABLE t ADD COLUMN flag bool NOT NULL DEFAULT true;
  CREATE TABLE t2 (id bigint, v int, label varchar(10), flag bool, n numeric(10,2), p int, k int);
  ALTER TABLE t2 ADD PRIMARY KEY (id), ALTER COLUMN label TYPE text,
                 ADD CONSTRAINT t2_v_pos CHECK (v > 0);
  INSERT INTO t2 SELECT id, v, label, flag, n, p, k FROM t;
  DROP TABLE t;
  ALTER TABLE t2 RENAME TO t;
  ALTER TABLE parent ADD COLUMN note text DEFAULT 'p';
$$ AS script \gset
SET search_path = at_eager;
SELECT public.regress_eager(:'script');
SET search_path = at_lazy;
SELECT 't'::regclass::oid AS old_oid \gset
SELECT leapfrog.start('m1', :'script');
SELECT relnamespace::regnamespace AS old_table_schema FROM pg_class WHERE oid = :old_oid;
SELECT * FROM t WHERE id IN (7, 8) ORDER BY id;
SELECT 1000 - public.regress_rows(:old_oid) AS migrated;
SELECT public.regress_shape('at_lazy.t') EXCEPT SELECT public.regress_shape('at_eager.t');
SELECT public.regress_shape('at_eager.t') EXCEPT SELECT public.regress_shape('at_lazy.t');
SELECT leapfrog.complete('m1');
SELECT * FROM public.regress_compare('at_lazy.t', 'at_eager.t');
SELECT * FROM public.regress_compare('at_lazy.parent', 'at_eager.parent');
-- A table an earlier migration still fills takes an ALTER TABLE in a
-- script: replaced lazily, chained after that migration.
SELECT leapfrog.start('m2', $$CREATE TABLE u (id int PRIMARY KEY);
  INSERT INTO u SELECT id FROM t; DROP TABLE t;$$);
SELECT leapfrog.start('m3', 'ALTER TABLE u ADD COLUMN w int');
SELECT count(*), count(w), sum(id) FROM u;
-- Outside a script, DDL on it is still refused.
ALTER TABLE u ADD COLUMN x int;
SELECT leapfrog.start('m4', $$CREATE TABLE u2 (id int);
  INSERT INTO u2 SELECT id FROM parent;
  ALTER TABLE u2 ADD COLUMN w int;
  DROP TABLE parent;$$);
SELECT leapfrog.start('m5', $$CREATE TABLE u2 (id int);
  INSERT INTO u2 SELECT id FROM parent;
  ALTER TABLE parent DROP COLUMN note;
  DROP TABLE parent;$$);
-- Completing m3 completes m2, which fills its input, first.
SELECT leapfrog.complete('m3');
SELECT name, state FROM leapfrog.migrations WHERE name IN ('m2', 'm3') ORDER BY name;
SELECT count(*), count(w), sum(id) FROM u;

-- Framework-generated migrations, as the tools print them.
CREATE TABLE shop_item (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                        name varchar(50) NOT NULL, price numeric(8,2), legacy text);
INSERT INTO shop_item (name, price, legacy) SELECT 'item' || g, g, 'l' FROM generate_series(1, 500) g;
-- Django 4.2 sqlmigrate: AddField (IntegerField, default=0), AlterField
-- (max_length 50 to 100), RenameField, RemoveField, in one migration.
BEGIN;
SELECT public.at_probe('dj1', $$BEGIN;
--
-- Add field stock to item
--
ALTER TABLE "shop_item" ADD COLUMN "stock" integer DEFAULT 0 NOT NULL;
ALTER TABLE "shop_item" ALTER COLUMN "stock" DROP DEFAULT;
--
-- Alter field name on item
--
ALTER TABLE "shop_item" ALTER COLUMN "name" TYPE varchar(100);
--
-- Rename field legacy on item to notes
--
ALTER TABLE "shop_item" RENAME COLUMN "legacy" TO "notes";
--
-- Remove field notes from item
--
ALTER TABLE "shop_item" DROP COLUMN "notes" CASCADE;
COMMIT;
$$, 'shop_item');
SELECT public.regress_shape('shop_item');
SELECT * FROM shop_item WHERE id = 3;
ROLLBACK;
-- Django 4.2 sqlmigrate: AddField of a ForeignKey (an inline REFERENCES,
-- deferrable, then SET CONSTRAINTS ... IMMEDIATE, and its index), then
-- RemoveField of it (SET CONSTRAINTS again before the DROP).
CREATE TABLE shop_category (id bigint PRIMARY KEY);
INSERT INTO shop_category SELECT g FROM generate_series(1, 10) g;
BEGIN;
SELECT public.at_probe('dj3', $$BEGIN;
--
-- Add field category to item
--
ALTER TABLE "shop_item" ADD COLUMN "category_id" bigint DEFAULT 1 NOT NULL CONSTRAINT "shop_item_category_id_fk_shop_category_id" REFERENCES "shop_category"("id") DEFERRABLE INITIALLY DEFERRED; SET CONSTRAINTS "shop_item_category_id_fk_shop_category_id" IMMEDIATE;
ALTER TABLE "shop_item" ALTER COLUMN "category_id" DROP DEFAULT;
CREATE INDEX "shop_item_category_id_1ac2c5a4" ON "shop_item" ("category_id");
COMMIT;
$$, 'shop_item');
SELECT public.at_outcome('INSERT INTO shop_item (name, category_id) VALUES (''new'', 99)');
SELECT public.at_outcome('INSERT INTO shop_item (name, category_id) VALUES (''new'', 2)');
SELECT id, name, category_id FROM shop_item WHERE id = 3;
SELECT public.at_outcome('DELETE FROM shop_category WHERE id = 1');
SELECT leapfrog.complete('dj3');
SELECT count(*), sum(category_id) FROM shop_item;
SELECT public.at_probe('dj4', $$BEGIN;
--
-- Remove field category from item
--
SET CONSTRAINTS "shop_item_category_id_fk_shop_category_id" IMMEDIATE; ALTER TABLE "shop_item" DROP CONSTRAINT "shop_item_category_id_fk_shop_category_id";
ALTER TABLE "shop_item" DROP COLUMN "category_id" CASCADE;
COMMIT;
$$, 'shop_item');
ROLLBACK;
-- Rails 7 (add_column with a default, change_column to a longer string,
-- rename_column, remove_column).
BEGIN;
SELECT public.at_probe('rails1', $$
ALTER TABLE "shop_item" ADD "active" boolean DEFAULT TRUE NOT NULL;
ALTER TABLE "shop_item" ALTER COLUMN "name" TYPE character varying(255);
ALTER TABLE "shop_item" RENAME COLUMN "price" TO "unit_price";
ALTER TABLE "shop_item" DROP COLUMN "legacy";
$$, 'shop_item');
SELECT * FROM shop_item WHERE id = 3;
ROLLBACK;
-- Rails' add_index with algorithm: :concurrently (strong_migrations'
-- advice): CONCURRENTLY cannot run in a transaction; the index is built
-- on the copy, which never blocks writes anyway.  remove_index likewise.
BEGIN;
SELECT public.at_probe('rails2', $$
CREATE INDEX CONCURRENTLY "index_shop_item_on_price" ON "shop_item" ("price");
$$, 'shop_item');
SELECT indexrelid::regclass FROM pg_index WHERE indrelid = 'shop_item'::regclass ORDER BY 1;
SELECT leapfrog.complete('rails2');
SELECT public.at_probe('rails3', $$DROP INDEX CONCURRENTLY "index_shop_item_on_price";$$, 'shop_item');
ROLLBACK;
-- Prisma migrate (a migration.sql): an enum type, columns, a unique index
-- and a foreign key.
BEGIN;
SELECT public.at_probe('prisma1', $$-- CreateEnum
CREATE TYPE "Role" AS ENUM ('USER', 'ADMIN');

-- AlterTable
ALTER TABLE "shop_item" ADD COLUMN "role" "Role" NOT NULL DEFAULT 'USER',
ADD COLUMN "categoryId" BIGINT;

-- CreateIndex
CREATE UNIQUE INDEX "shop_item_name_key" ON "shop_item"("name");

-- AddForeignKey
ALTER TABLE "shop_item" ADD CONSTRAINT "shop_item_categoryId_fkey" FOREIGN KEY ("categoryId") REFERENCES "shop_category"("id") ON DELETE SET NULL ON UPDATE CASCADE;
$$, 'shop_item');
SELECT id, name, role, "categoryId" FROM shop_item WHERE id = 3;
SELECT public.at_outcome('INSERT INTO shop_item (name, price) VALUES (''item3'', 1)');
SELECT leapfrog.complete('prisma1');
SELECT role, count(*) FROM shop_item GROUP BY role;
ROLLBACK;
-- Alembic offline mode (alembic upgrade --sql): the version table is
-- updated by an UPDATE, which runs as written.  Data statements on tables
-- outside the mappings run where they stand; before a mapping they may
-- change its input, after it they may not touch its input or target.
CREATE TABLE alembic_version (version_num varchar(32) NOT NULL,
                              CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num));
INSERT INTO alembic_version VALUES ('1975ea83b712');
BEGIN;
SELECT public.at_probe('alembic1', $$BEGIN;

-- Running upgrade 1975ea83b712 -> ae1027a6acf

ALTER TABLE shop_item ADD COLUMN last_transaction_date TIMESTAMP WITHOUT TIME ZONE;

ALTER TABLE shop_item ALTER COLUMN price TYPE NUMERIC(10, 2);

CREATE INDEX ix_shop_item_name ON shop_item (name);

UPDATE alembic_version SET version_num='ae1027a6acf' WHERE alembic_version.version_num = '1975ea83b712';

COMMIT;
$$, 'shop_item');
SELECT * FROM alembic_version;
SELECT * FROM shop_item WHERE id = 3;
SELECT leapfrog.complete('alembic1');
SELECT count(*), count(last_transaction_date), sum(price) FROM shop_item;
ROLLBACK;
BEGIN;
SELECT leapfrog.start('data1', $$
  CREATE TABLE item_status (id int PRIMARY KEY, label text);
  INSERT INTO item_status VALUES (1, 'new'), (2, 'old') RETURNING id;
  UPDATE shop_item SET legacy = 'fixed' WHERE id = 3;
  CREATE TABLE shop_item2 (id bigint PRIMARY KEY, name text, legacy text, status int);
  INSERT INTO shop_item2 SELECT id, name, legacy, 1 FROM shop_item;
  DROP TABLE shop_item;
  DELETE FROM item_status WHERE id = 2;
$$);
SELECT * FROM item_status;
SELECT * FROM shop_item2 WHERE id IN (3, 4) ORDER BY id;
ROLLBACK;
\set VERBOSITY terse
SELECT leapfrog.start('data2', $$CREATE TABLE shop_item2 (id bigint, name text);
  INSERT INTO shop_item2 SELECT id, name FROM shop_item; DROP TABLE shop_item;
  DELETE FROM shop_item2 WHERE id = 1$$);
SELECT leapfrog.start('data3', $$CREATE TABLE shop_item2 (id bigint, name text);
  INSERT INTO shop_item2 SELECT id, name FROM shop_item;
  UPDATE shop_item SET name = 'x' WHERE id = 1; DROP TABLE shop_item$$);
SELECT leapfrog.start('data4', $$CREATE TABLE shop_item2 (id bigint, name text);
  INSERT INTO shop_item2 SELECT id, name FROM shop_item; DROP TABLE shop_item;
  UPDATE alembic_version SET version_num = (SELECT max(name) FROM shop_item2)$$);
SELECT leapfrog.start('data5', $$ALTER TABLE shop_item ALTER COLUMN price SET NOT NULL;
  UPDATE shop_item SET price = 0 WHERE id = 1$$);
BEGIN;
SELECT leapfrog.start('data6', 'CREATE INDEX ON shop_item (price)');
SELECT leapfrog.start('data7', 'UPDATE alembic_version SET version_num = (SELECT max(name) FROM shop_item)');
ROLLBACK;
\set VERBOSITY default
SELECT * FROM alembic_version;
-- Replaced lazily: Django's PositiveIntegerField (an inline CHECK), then
-- Rails' change_column_null and add_index, in one script.  The identity
-- column keeps its sequence's position.
BEGIN;
SELECT public.at_probe('dj2', $$BEGIN;
ALTER TABLE "shop_item" ADD COLUMN "qty" integer DEFAULT 0 NOT NULL CHECK ("qty" >= 0);
ALTER TABLE "shop_item" ALTER COLUMN "qty" DROP DEFAULT;
ALTER TABLE "shop_item" ALTER COLUMN "price" SET NOT NULL;
CREATE INDEX "index_shop_item_on_name" ON "shop_item" ("name");
COMMIT;$$, 'shop_item');
INSERT INTO shop_item (name, price, legacy, qty) VALUES ('new', 1, 'n', 5) RETURNING id, qty;
SELECT public.regress_shape('shop_item');
SELECT leapfrog.complete('dj2');
SELECT count(*), sum(qty), max(id) FROM shop_item;
ROLLBACK;
-- An int identity column keeps an int sequence through a replacement, as
-- eagerly (LIKE makes it bigint on PostgreSQL 15, with an int's bounds),
-- and a retype of the column itself makes it bigint with a bigint's bounds,
-- as eagerly.
BEGIN;
CREATE TABLE ident (id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, v int);
INSERT INTO ident (v) SELECT g FROM generate_series(1, 3) g;
SELECT leapfrog.start('ident', 'ALTER TABLE ident ALTER COLUMN v TYPE bigint');
SELECT data_type, max_value FROM pg_sequences
 WHERE schemaname = current_schema() AND sequencename = 'ident_id_seq';
INSERT INTO ident (v) VALUES (4) RETURNING id;
SELECT leapfrog.complete('ident');
SELECT leapfrog.start('ident2', 'ALTER TABLE ident ALTER COLUMN id TYPE bigint');
SELECT data_type, max_value FROM pg_sequences
 WHERE schemaname = current_schema() AND sequencename = 'ident_id_seq';
INSERT INTO ident (v) VALUES (5) RETURNING id;
SELECT leapfrog.complete('ident2');
ROLLBACK;

-- A retype whose cast is not immutable (it reads TimeZone) is refused, with
-- a hint for ALTER COLUMN ... TYPE; with USING ... AT TIME ZONE it runs.
BEGIN;
CREATE TABLE stamped (id int PRIMARY KEY, at timestamptz);
INSERT INTO stamped VALUES (1, '2026-01-01 12:00+00');
SAVEPOINT s;
SELECT leapfrog.start('stamped', 'ALTER TABLE stamped ALTER COLUMN at TYPE timestamp');
ROLLBACK TO SAVEPOINT s;
SELECT leapfrog.start('stamped', $$ALTER TABLE stamped ALTER COLUMN at TYPE timestamp USING at AT TIME ZONE 'UTC'$$);
SELECT * FROM stamped;
ROLLBACK;
