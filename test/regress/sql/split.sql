--
-- split: two mappings read one table (customer split into a private and a
-- public table, with an index created by the script).  One input row is
-- migrated for both mappings at once.
--
CREATE SCHEMA sp_eager;
CREATE SCHEMA sp_lazy;
CREATE TABLE sp_eager.customer (c_id int PRIMARY KEY, c_name text NOT NULL,
                                c_city text, c_balance numeric(12,2));
INSERT INTO sp_eager.customer
  SELECT g, 'cust' || g, (ARRAY['Oslo', 'Lima', 'Pune', 'Kobe'])[g % 4 + 1], g * 1.5
    FROM generate_series(1, 60) g;
CREATE TABLE sp_lazy.customer (c_id int PRIMARY KEY, c_name text NOT NULL,
                               c_city text, c_balance numeric(12,2));
INSERT INTO sp_lazy.customer SELECT * FROM sp_eager.customer;
SELECT $$
  CREATE TABLE customer_private (c_id int PRIMARY KEY, c_balance numeric(12,2));
  CREATE TABLE customer_public (c_id int PRIMARY KEY, c_name text NOT NULL, c_city text);
  CREATE INDEX customer_public_city ON customer_public (c_city);
  INSERT INTO customer_private SELECT c_id, c_balance FROM customer;
  INSERT INTO customer_public SELECT c_id, c_name, c_city FROM customer;
  DROP TABLE customer;
$$ AS script \gset

SET search_path = sp_eager;
SELECT public.regress_eager(:'script');
-- The same statements as the lazy run below, on the eager result.
UPDATE customer_public SET c_city = 'Rome' WHERE c_id = 8;

SET search_path = sp_lazy;
SELECT 'customer'::regclass::oid AS old_oid \gset
SELECT leapfrog.start('split', :'script');
SELECT to_regclass('customer') AS customer;
SELECT relnamespace::regnamespace AS old_table_schema FROM pg_class WHERE oid = :old_oid;
SELECT leapfrog.remaining('split');

-- Reading one table migrates the row into both.
SELECT * FROM customer_private WHERE c_id = 7;
SELECT leapfrog.remaining('split');
SELECT * FROM customer_public WHERE c_id = 7;
SELECT leapfrog.remaining('split');
-- A write to one, then a read of the other.
UPDATE customer_public SET c_city = 'Rome' WHERE c_id = 8;
SELECT leapfrog.remaining('split');
SELECT * FROM customer_private WHERE c_id = 8;
SELECT leapfrog.remaining('split');
-- A join of the two new tables.
SELECT pu.c_name, pr.c_balance
  FROM customer_public pu JOIN customer_private pr USING (c_id)
 WHERE c_id = 9;
SELECT leapfrog.remaining('split');
-- A predicate on the indexed column: migrates the Oslo rows not yet
-- migrated (4, 12, ..., 60; row 8 was Oslo but is migrated and now Rome).
SELECT c_id, c_name FROM customer_public WHERE c_city = 'Oslo' ORDER BY c_id;
SELECT leapfrog.remaining('split');
SELECT c_id FROM customer_public WHERE c_city = 'Rome';
SELECT leapfrog.remaining('split');
-- A join of both halves with a system column or a whole row of the other
-- half: relevance falls back to each occurrence's own filter (the ctid used
-- to fail to plan, and the whole row got the mapping's extra columns).  A
-- filter on the new table's ctid says nothing of the input's rows: the
-- first statement migrates every row left.
SELECT pub.c_id, pub.c_name FROM customer_public pub JOIN customer_private pri USING (c_id)
 WHERE pub.c_id = 10 AND pri.ctid IS NOT NULL;
SELECT pub.c_id, (pri).c_balance FROM customer_public pub JOIN customer_private pri USING (c_id)
 WHERE pub.c_id = 11 AND (pri).c_id = 11;
SELECT leapfrog.remaining('split');
-- A statement that needs every row migrates the rest.
SELECT count(*), sum(c_balance) FROM customer_private;
SELECT leapfrog.remaining('split');
SELECT public.regress_rows(:old_oid) AS retired_rows;

SELECT leapfrog.complete('split');
-- The definition of the new table.
SELECT * FROM public.regress_shape('sp_lazy.customer_public');
SELECT name, state, tuples_total, tuples_migrated, error
  FROM leapfrog.migrations WHERE name = 'split';
SELECT count(*) AS old_table_left FROM pg_class WHERE oid = :old_oid;
SELECT * FROM public.regress_compare('sp_lazy.customer_private', 'sp_eager.customer_private');
SELECT * FROM public.regress_compare('sp_lazy.customer_public', 'sp_eager.customer_public');

RESET search_path;
DROP SCHEMA sp_eager CASCADE;
DROP SCHEMA sp_lazy CASCADE;
