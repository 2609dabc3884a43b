--
-- ctas: CREATE TABLE ... AS SELECT with a filter and computed columns, an
-- index created by the script, and a rename.
--
CREATE SCHEMA ct_eager;
CREATE SCHEMA ct_lazy;
CREATE TABLE ct_eager.item (id int PRIMARY KEY, name text NOT NULL,
                            price numeric(8,2) NOT NULL, discontinued bool NOT NULL);
INSERT INTO ct_eager.item SELECT g, 'item' || g, g * 2.5, g % 10 = 0 FROM generate_series(1, 40) g;
CREATE TABLE ct_lazy.item (id int PRIMARY KEY, name text NOT NULL,
                           price numeric(8,2) NOT NULL, discontinued bool NOT NULL);
INSERT INTO ct_lazy.item SELECT * FROM ct_eager.item;
SELECT $$
  CREATE TABLE item_v2 AS
    SELECT id, upper(name) AS name, (price * 100)::int AS price_cents
      FROM item WHERE NOT discontinued;
  CREATE UNIQUE INDEX item_v2_id ON item_v2 (id);
  DROP TABLE item;
  ALTER TABLE item_v2 RENAME TO item;
$$ AS script \gset

SET search_path = ct_eager;
SELECT public.regress_eager(:'script');
INSERT INTO item VALUES (10, 'NEW10', 1);
\set VERBOSITY sqlstate
INSERT INTO item VALUES (11, 'DUP11', 1);
\set VERBOSITY default

SET search_path = ct_lazy;
SELECT leapfrog.start('ctas', :'script');
SELECT leapfrog.remaining('ctas');
SELECT * FROM item WHERE id = 3;
SELECT leapfrog.remaining('ctas');
-- Row 10 is discontinued: it is not in the new table, nothing to migrate.
SELECT * FROM item WHERE id = 10;
SELECT leapfrog.remaining('ctas');
-- Predicates on computed columns.
SELECT id, name FROM item WHERE price_cents = 1250;
SELECT leapfrog.remaining('ctas');
SELECT count(*) FROM item WHERE price_cents > 9000;
SELECT leapfrog.remaining('ctas');
SELECT id FROM item WHERE name = 'ITEM17';
SELECT leapfrog.remaining('ctas');
-- Key 10 is free in the new table (as in the eager run); key 11 is not.
INSERT INTO item VALUES (10, 'NEW10', 1);
\set VERBOSITY sqlstate
INSERT INTO item VALUES (11, 'DUP11', 1);
\set VERBOSITY default
SELECT leapfrog.remaining('ctas');
SELECT * FROM item WHERE id IN (10, 11) ORDER BY id;
SELECT leapfrog.remaining('ctas');

SELECT leapfrog.complete('ctas');
-- The definition of the new table.
SELECT * FROM public.regress_shape('ct_lazy.item');
SELECT name, state, tuples_total, tuples_migrated, error
  FROM leapfrog.migrations WHERE name = 'ctas';
SELECT * FROM public.regress_compare('ct_lazy.item', 'ct_eager.item');
SELECT count(*), sum(price_cents) FROM item;

RESET search_path;
DROP SCHEMA ct_eager CASCADE;
DROP SCHEMA ct_lazy CASCADE;
