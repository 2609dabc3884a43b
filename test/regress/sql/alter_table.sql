--
-- alter_table: ALTER TABLE, renames, COMMENT and DROP INDEX in a script.
-- On a table holding rows, start() runs an ALTER TABLE only when PostgreSQL
-- makes it a catalog change: at_probe checks, for every accepted command,
-- that the table was neither rewritten (same relfilenode) nor scanned
-- (pg_stat_get_xact_numscans, which counts verification scans and index
-- builds too).  Everything else is refused with 0A000 before its work.
--
CREATE SCHEMA at_lazy;
CREATE SCHEMA at_eager;
-- The same tables in both schemas: at_eager for the eager oracle.
SELECT $$
  CREATE TABLE parent (id int PRIMARY KEY);
  INSERT INTO parent SELECT g FROM generate_series(1, 100) g;
  CREATE TABLE t (id int PRIMARY KEY, v int, s varchar(10), n numeric(10,2), p int,
                  k int CHECK (k >= 0));
  INSERT INTO t SELECT g, g, 's' || g, g / 10.0, g % 100 + 1, g FROM generate_series(1, 1000) g;
  CREATE INDEX t_s ON t (s);
  CREATE INDEX t_n ON t (n);
$$ AS setup \gset
SET search_path = at_eager;
SELECT public.regress_eager(:'setup');
SET search_path = at_lazy;
SELECT public.regress_eager(:'setup');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
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

-- Refused, with the table pass they would need and a way to get there.
SELECT public.at_probe('r1', 'ALTER TABLE t ALTER COLUMN v TYPE bigint');
SELECT public.at_probe('r2', 'ALTER TABLE t ALTER COLUMN s TYPE varchar(5)');
SELECT public.at_probe('r3', 'ALTER TABLE t ALTER COLUMN s TYPE varchar(20) USING s');
SELECT public.at_probe('r4', 'ALTER TABLE t ALTER COLUMN s SET NOT NULL');
SELECT public.at_probe('r5', 'ALTER TABLE t ADD CONSTRAINT v_pos CHECK (v > 0)');
SELECT public.at_probe('r6', 'ALTER TABLE t ADD CONSTRAINT t_p_fk FOREIGN KEY (p) REFERENCES parent');
SELECT public.at_probe('r7', 'ALTER TABLE t ADD CONSTRAINT t_v_key UNIQUE (v)');
SELECT public.at_probe('r8', 'ALTER TABLE t ADD COLUMN r float8 DEFAULT random()');
SELECT public.at_probe('r9', 'ALTER TABLE t ADD COLUMN r serial');
SELECT public.at_probe('r10', 'ALTER TABLE t ADD COLUMN r int GENERATED ALWAYS AS IDENTITY');
SELECT public.at_probe('r11', 'ALTER TABLE t ADD COLUMN r int GENERATED ALWAYS AS (v * 2) STORED');
SELECT public.at_probe('r12', 'ALTER TABLE t ADD COLUMN r posint');
SELECT public.at_probe('r13', 'ALTER TABLE t ADD COLUMN r int DEFAULT 1 CHECK (r > 0)');
SELECT public.at_probe('r14', 'ALTER TABLE t ADD COLUMN r int UNIQUE');
SELECT public.at_probe('r15', 'ALTER TABLE t ADD COLUMN r int DEFAULT 1 REFERENCES parent');
SELECT public.at_probe('r16', 'ALTER TABLE t VALIDATE CONSTRAINT t_k_check');
SELECT public.at_probe('r17', 'ALTER TABLE t SET TABLESPACE pg_default');
-- A relabelling type change that rebuilds an index (a new collation, an
-- expression index) or checks a constraint again.
SELECT public.at_probe('r18', 'ALTER TABLE t ALTER COLUMN s TYPE varchar(20) COLLATE "C"');
BEGIN;
CREATE INDEX t_lower_s ON t (lower(s));
SELECT public.at_probe('r19', 'ALTER TABLE t ALTER COLUMN s TYPE varchar(20)');
ROLLBACK;
SELECT public.at_probe('r19b', 'ALTER TABLE t ALTER COLUMN k TYPE int');
-- One refused subcommand refuses the statement; nothing of it ran.
SELECT public.at_probe('r20', 'ALTER TABLE t ADD COLUMN w int, ALTER COLUMN v TYPE bigint');
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
-- A table under migration takes no DDL until the migration is done.
SELECT leapfrog.start('m2', $$CREATE TABLE u (id int PRIMARY KEY);
  INSERT INTO u SELECT id FROM t; DROP TABLE t;$$);
SELECT leapfrog.start('m3', 'ALTER TABLE u ADD COLUMN w int');
SELECT leapfrog.start('m4', $$CREATE TABLE u2 (id int);
  INSERT INTO u2 SELECT id FROM parent;
  ALTER TABLE u2 ADD COLUMN w int;
  DROP TABLE parent;$$);
SELECT leapfrog.start('m5', $$CREATE TABLE u2 (id int);
  INSERT INTO u2 SELECT id FROM parent;
  ALTER TABLE parent DROP COLUMN note;
  DROP TABLE parent;$$);
SELECT leapfrog.complete('m2');
SELECT leapfrog.start('m3', 'ALTER TABLE u ADD COLUMN w int');

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
-- Refused until lazy validation and background index builds exist: Django's
-- PositiveIntegerField (an inline CHECK), Rails' change_column_null and
-- add_index.
SELECT public.at_probe('dj2', $$BEGIN;
ALTER TABLE "shop_item" ADD COLUMN "qty" integer DEFAULT 0 NOT NULL CHECK ("qty" >= 0);
COMMIT;$$, 'shop_item');
SELECT public.at_probe('rails2', 'ALTER TABLE "shop_item" ALTER COLUMN "price" SET NOT NULL', 'shop_item');
SELECT public.at_probe('rails3', 'CREATE INDEX "index_shop_item_on_name" ON "shop_item" ("name")', 'shop_item');
