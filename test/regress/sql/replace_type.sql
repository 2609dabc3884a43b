--
-- replace_type: a same-name replacement that changes column types
-- (CREATE TABLE acct2, INSERT INTO acct2 SELECT ... FROM acct, DROP TABLE
-- acct, ALTER TABLE acct2 RENAME TO acct).  Point queries migrate only the
-- rows they need; the final state equals the eager run of the same script
-- on an identical copy.
--
CREATE SCHEMA rt_eager;
CREATE SCHEMA rt_lazy;
CREATE TABLE rt_eager.acct (id int PRIMARY KEY, owner text NOT NULL, bal int NOT NULL);
INSERT INTO rt_eager.acct SELECT g, 'owner' || g, g * 10 FROM generate_series(1, 100) g;
CREATE TABLE rt_lazy.acct (id int PRIMARY KEY, owner text NOT NULL, bal int NOT NULL);
INSERT INTO rt_lazy.acct SELECT * FROM rt_eager.acct;
SELECT $$
  CREATE TABLE acct2 (id bigint PRIMARY KEY, owner varchar(20) NOT NULL,
                      bal numeric(12,2) NOT NULL);
  INSERT INTO acct2 SELECT id, owner, bal FROM acct;
  DROP TABLE acct;
  ALTER TABLE acct2 RENAME TO acct;
$$ AS script \gset

-- The eager oracle.
SET search_path = rt_eager;
SELECT public.regress_eager(:'script');

-- The lazy run.
SET search_path = rt_lazy;
SELECT 'acct'::regclass::oid AS old_oid \gset
SELECT leapfrog.start('replace_type', :'script');
-- The new table starts empty: the data stays in the old table, which moved
-- to schema leapfrog_retired.
SELECT pg_relation_size(c.oid) AS new_table_bytes
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'rt_lazy' AND c.relname = 'acct';
SELECT relnamespace::regnamespace AS old_table_schema FROM pg_class WHERE oid = :old_oid;
SELECT leapfrog.remaining('replace_type');
SELECT public.regress_rows(:old_oid) AS retired_rows;

-- A point query migrates exactly the row it needs.
SELECT * FROM acct WHERE id = 5;
SELECT leapfrog.remaining('replace_type');
SELECT public.regress_rows(:old_oid) AS retired_rows;
-- Once migrated, a row is not migrated again.
SELECT * FROM acct WHERE id = 5;
SELECT leapfrog.remaining('replace_type');
-- A key that does not exist migrates nothing.
SELECT * FROM acct WHERE id = 1000;
SELECT leapfrog.remaining('replace_type');
-- Several keys.
SELECT * FROM acct WHERE id = 6 OR id = 7 ORDER BY id;
SELECT leapfrog.remaining('replace_type');
SELECT * FROM acct WHERE id IN (5, 8, 9, 10) ORDER BY id;
SELECT leapfrog.remaining('replace_type');
SELECT owner, bal FROM acct WHERE id BETWEEN 11 AND 15 ORDER BY id;
SELECT leapfrog.remaining('replace_type');
-- A predicate on a column without index.
SELECT id, bal FROM acct WHERE owner = 'owner42';
SELECT leapfrog.remaining('replace_type');
-- The new types apply to what is read.
SELECT id, bal, pg_typeof(id) AS id_type, pg_typeof(bal) AS bal_type FROM acct WHERE id = 50;
SELECT leapfrog.remaining('replace_type');

-- Statements that name the new table without reading it (a catalog query,
-- a size function) need none of its rows: nothing migrates.
SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute
 WHERE attrelid = 'rt_lazy.acct'::regclass AND attnum > 0 ORDER BY attnum;
SELECT leapfrog.remaining('replace_type');
SELECT pg_relation_size('rt_lazy.acct') > 0 AS has_data;
SELECT leapfrog.remaining('replace_type');

-- complete() migrates the rest and finishes: the retired table is dropped.
SELECT leapfrog.complete('replace_type');
-- The definition of the new table, the same as the eager one's.
SELECT * FROM public.regress_shape('rt_lazy.acct');
SELECT (SELECT array_agg(s) FROM public.regress_shape('rt_lazy.acct') s)
     = (SELECT array_agg(s) FROM public.regress_shape('rt_eager.acct') s) AS same_shape;
SELECT leapfrog.remaining('replace_type');
SELECT name, state, tuples_total, tuples_migrated, error
  FROM leapfrog.migrations WHERE name = 'replace_type';
SELECT count(*) AS old_table_left FROM pg_class WHERE oid = :old_oid;
-- Same final content as the eager run.
SELECT * FROM public.regress_compare('rt_lazy.acct', 'rt_eager.acct');
SELECT count(*), sum(bal), sum(id) FROM rt_lazy.acct;

-- Extended statistics keep their names: a table replaced lazily gives its
-- statistics objects' names to the copy's (LIKE names them after the
-- copy), and a retired table's are dropped, as eagerly, so that the new
-- table may take the name.
SET search_path = rt_lazy;
CREATE TABLE st (a int, b int, c int);
CREATE STATISTICS st_ab ON a, b FROM st;
CREATE STATISTICS st_bc (ndistinct) ON b, c FROM st;
INSERT INTO st SELECT g, g, g FROM generate_series(1, 10) g;
-- (one in another schema, whose name an object of the table's schema has)
CREATE SCHEMA rt_stx;
CREATE STATISTICS rt_stx.st_x ON b, c FROM st;
CREATE TABLE stother (b int, c int);
CREATE STATISTICS st_x ON b, c FROM stother;
-- (and what else ALTER TABLE keeps: a column's options, the CLUSTER mark)
ALTER TABLE st ALTER COLUMN b SET (n_distinct = 42);
CREATE INDEX st_c ON st (c);
ALTER TABLE st CLUSTER ON st_c;
CREATE TABLE st2src (a int, c int);
CREATE STATISTICS st_ac ON a, c FROM st2src;
INSERT INTO st2src SELECT g, g FROM generate_series(1, 10) g;
SELECT leapfrog.start('rt_stats', $$
  ALTER TABLE st ALTER COLUMN a TYPE bigint;
  CREATE TABLE st2 (a int, c int);
  INSERT INTO st2 SELECT a, c FROM st2src;
  DROP TABLE st2src;
$$);
SELECT stxnamespace::regnamespace, stxname, stxrelid::regclass FROM pg_statistic_ext
 WHERE stxnamespace IN ('rt_lazy'::regnamespace, 'rt_stx'::regnamespace) ORDER BY 1, 2;
CREATE STATISTICS st_ac ON a, c FROM st2;
SELECT attname, o FROM pg_attribute, unnest(attoptions) o
 WHERE attrelid = 'st'::regclass AND o LIKE 'n\_distinct%';
SELECT indexrelid::regclass FROM pg_index WHERE indrelid = 'st'::regclass AND indisclustered;
SELECT leapfrog.complete('rt_stats');
SELECT stxnamespace::regnamespace, stxname, stxrelid::regclass FROM pg_statistic_ext
 WHERE stxnamespace IN ('rt_lazy'::regnamespace, 'rt_stx'::regnamespace) ORDER BY 1, 2;

RESET search_path;
DROP SCHEMA rt_eager CASCADE;
DROP SCHEMA rt_lazy CASCADE;
DROP SCHEMA rt_stx CASCADE;
