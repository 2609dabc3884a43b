--
-- join: two-table join mappings (n:n).  The unit that migrates is a join
-- key: every row of both inputs that shares it.  Inner, left and right
-- joins, one or two key columns, fan-out on both sides, NULL keys; every
-- statement and the final state compared with the eager run (jn_eager).
--
CREATE SCHEMA jn_eager;
CREATE SCHEMA jn_lazy;
SELECT $$
  CREATE TABLE stock (w int, i int, qty int, PRIMARY KEY (w, i));
  INSERT INTO stock SELECT w, i, w * 100 + i FROM generate_series(1, 3) w, generate_series(1, 30) i;
  INSERT INTO stock VALUES (4, 1, 401), (5, 1, 501);   -- (5, 1): no line
  CREATE TABLE line (id int PRIMARY KEY, sw int, si int, amount int);
  INSERT INTO line SELECT g, g % 5, g % 33, g FROM generate_series(1, 400) g;
  INSERT INTO line VALUES (1000, NULL, 3, 1), (1001, 1, NULL, 2), (1002, NULL, NULL, 3);
  CREATE INDEX line_supply ON line (si, sw);
  CREATE TABLE city (name text PRIMARY KEY, country text);
  INSERT INTO city VALUES ('Oslo', 'NO'), ('Lima', 'PE'), ('Pune', 'IN'), ('Nice', 'FR');
  CREATE TABLE person (id int PRIMARY KEY, name text, city text);
  INSERT INTO person SELECT g, 'p' || g, (ARRAY['Oslo', 'Lima', 'Pune', 'Rome', NULL])[g % 5 + 1]
    FROM generate_series(1, 50) g;
  CREATE INDEX person_by_city ON person (city);
$$ AS setup \gset
SET search_path = jn_eager;
SELECT public.regress_eager(:'setup');
SET search_path = jn_lazy;
SELECT public.regress_eager(:'setup');

-- stock LEFT JOIN line on two columns (the BullFrog chapter's orderline_stock),
-- and person RIGHT JOIN city on one (a column denormalized, cities kept
-- without people).
SELECT $$
  CREATE TABLE line_stock (w int, i int, qty int, id int, amount int);
  INSERT INTO line_stock
  SELECT s.w, s.i, s.qty, l.id, l.amount
    FROM stock s LEFT JOIN line l ON l.sw = s.w AND l.si = s.i;
  CREATE UNIQUE INDEX line_stock_id ON line_stock (id);
  CREATE INDEX line_stock_wi ON line_stock (w, i);
  CREATE TABLE person_city (id int, name text, city text, country text);
  INSERT INTO person_city
  SELECT p.id, p.name, c.name, c.country
    FROM person p RIGHT JOIN city c ON c.name = p.city
   WHERE c.country <> 'PE';
  CREATE INDEX person_city_id ON person_city (id);
  DROP TABLE line;
  DROP TABLE stock;
  DROP TABLE person;
  DROP TABLE city;
$$ AS script \gset
SET search_path = jn_eager;
SELECT public.regress_eager(:'script');
SET search_path = jn_lazy;
SELECT leapfrog.start('join', :'script');
SELECT leapfrog.remaining('join');

-- A point query by the line's id migrates its key (2, 17): the stock row and
-- its lines, not the table.
SELECT public.regress_explain('SELECT * FROM line_stock WHERE id = 17');
SELECT * FROM line_stock WHERE id = 17;
SELECT leapfrog.remaining('join');
SELECT * FROM line_stock WHERE w = 2 AND i = 17 ORDER BY id;
SELECT * FROM jn_eager.line_stock WHERE w = 2 AND i = 17 ORDER BY id;
SELECT leapfrog.remaining('join');
-- Stock (4, 1): lines with sw = 4 match it.  The statement pins the
-- leading column of stock's primary key, copied unchanged: its relevance
-- query is a look-up of that index (key), which finds stock (4, 1), whose
-- unit migrates whole: the stock row and its 3 lines (4 rows fewer).
SELECT public.regress_explain('SELECT * FROM line_stock WHERE w = 4');
SELECT leapfrog.remaining('join');
SELECT * FROM line_stock WHERE w = 4 ORDER BY id;
SELECT leapfrog.remaining('join');
-- Not pinned: i is not the leading column of an index of stock.
SELECT public.regress_explain('SELECT * FROM line_stock WHERE i = 4');
-- The look-up keeps the statement's other conditions on stock's columns:
-- w = 1 pins, i between 3 and 4 narrows it to two units, not warehouse 1's
-- thirty.
SELECT leapfrog.remaining('join');
SELECT w, i, count(id) FROM line_stock WHERE w = 1 AND i BETWEEN 3 AND 4 GROUP BY w, i ORDER BY i;
SELECT w, i, count(id) FROM jn_eager.line_stock WHERE w = 1 AND i BETWEEN 3 AND 4 GROUP BY w, i ORDER BY i;
SELECT leapfrog.remaining('join');
SELECT * FROM jn_eager.line_stock WHERE w = 4 ORDER BY id;
-- A stock row without lines: one output row, NULL-extended.
SELECT * FROM line_stock WHERE w = 5;
SELECT * FROM jn_eager.line_stock WHERE w = 5;
-- Lines whose key holds a NULL match nothing and are not in a LEFT JOIN
-- from stock; a stock item past the lines' range neither.
SELECT count(*) FROM line_stock WHERE id >= 1000;
SELECT count(*) FROM jn_eager.line_stock WHERE id >= 1000;
-- Writes on the new table.
UPDATE line_stock SET qty = qty - 1 WHERE w = 3 AND i = 20;
UPDATE jn_eager.line_stock SET qty = qty - 1 WHERE w = 3 AND i = 20;
DELETE FROM line_stock WHERE id = 101;
DELETE FROM jn_eager.line_stock WHERE id = 101;
-- An insert meets the unique id of a line not migrated yet, as eagerly.
-- The id it writes pins a line: the rows whose key could conflict are
-- found by a look-up of line's primary key.
SELECT public.regress_explain('INSERT INTO line_stock (w, i, id) VALUES (9, 9, 123) ON CONFLICT (id) DO NOTHING');
INSERT INTO line_stock (w, i, id) VALUES (9, 9, 123) ON CONFLICT (id) DO NOTHING;
INSERT INTO jn_eager.line_stock (w, i, id) VALUES (9, 9, 123) ON CONFLICT (id) DO NOTHING;
SELECT * FROM line_stock WHERE id = 123;
SELECT * FROM jn_eager.line_stock WHERE id = 123;

-- RIGHT JOIN: the preserved side is city; a person with a NULL city or one
-- of no city is in no unit that produces a row.
SELECT * FROM person_city WHERE id = 5;
SELECT * FROM jn_eager.person_city WHERE id = 5;
-- Nice has nobody: one row, NULL-extended.  Pinned by city's key.
SELECT public.regress_explain($q$SELECT * FROM person_city WHERE city = 'Nice'$q$);
SELECT * FROM person_city WHERE city = 'Nice';
SELECT * FROM jn_eager.person_city WHERE city = 'Nice';
-- Lima's unit is found by its key, and computes no row: the mapping leaves
-- PE out.
SELECT * FROM person_city WHERE city = 'Lima' AND id > 0;
SELECT * FROM jn_eager.person_city WHERE city = 'Lima' AND id > 0;
SELECT city, count(*) FROM person_city GROUP BY city ORDER BY city;
SELECT city, count(*) FROM jn_eager.person_city GROUP BY city ORDER BY city;
SELECT leapfrog.remaining('join');

SELECT leapfrog.complete('join');
SELECT name, state, tuples_total, tuples_migrated, error
  FROM leapfrog.migrations WHERE name = 'join';
SELECT * FROM public.regress_compare('jn_lazy.line_stock', 'jn_eager.line_stock');
SELECT * FROM public.regress_compare('jn_lazy.person_city', 'jn_eager.person_city');

-- An inner join written with a comma, migrated by the background workers.
SET search_path = jn_eager;
DROP TABLE line_stock, person_city;
SELECT public.regress_eager(:'setup');
SELECT $$
  CREATE TABLE ls (w int, i int, qty int, id int, amount int);
  INSERT INTO ls SELECT s.w, s.i, s.qty, l.id, l.amount FROM stock s, line l
   WHERE l.sw = s.w AND l.si = s.i AND l.amount % 3 <> 0;
  DROP TABLE line;
  DROP TABLE stock;
$$ AS script2 \gset
SELECT public.regress_eager(:'script2');
SET search_path = jn_lazy;
DROP TABLE line_stock, person_city;
SELECT public.regress_eager(:'setup');
SELECT leapfrog.start('join_background', :'script2');
SELECT * FROM ls WHERE id = 41;
ALTER SYSTEM SET leapfrog.background = on;
ALTER SYSTEM SET leapfrog.background_delay = 0;
ALTER SYSTEM SET leapfrog.batch_size = 40;
SELECT pg_reload_conf();
SELECT leapfrog.wait('join_background', 60);
ALTER SYSTEM RESET leapfrog.background;
ALTER SYSTEM RESET leapfrog.background_delay;
ALTER SYSTEM RESET leapfrog.batch_size;
SELECT pg_reload_conf();
SELECT name, state, tuples_total, tuples_migrated, error
  FROM leapfrog.migrations WHERE name = 'join_background';
SELECT * FROM public.regress_compare('jn_lazy.ls', 'jn_eager.ls');

-- What is refused, with the reason.
CREATE TABLE a (id int PRIMARY KEY, k int, v int);
CREATE TABLE b (id int PRIMARY KEY, k int, v int);
CREATE TABLE c (id int PRIMARY KEY);
INSERT INTO a SELECT g, g % 7, g FROM generate_series(1, 20) g;
INSERT INTO b SELECT g, g % 5, g FROM generate_series(1, 20) g;
SELECT leapfrog.start('bad', $$
  CREATE TABLE d (a int, b int);
  INSERT INTO d SELECT a.v, b.v FROM a JOIN b ON a.k = b.k;
  DROP TABLE a; DROP TABLE b;
$$);
CREATE INDEX a_k ON a (k);
SELECT leapfrog.start('bad', $$
  CREATE TABLE d (a int, b int);
  INSERT INTO d SELECT a.v, b.v FROM a JOIN b ON a.k = b.k;
  DROP TABLE a; DROP TABLE b;
$$);
SELECT leapfrog.start('bad', $$
  CREATE TABLE d (a int, b int);
  INSERT INTO d SELECT a.v, b.v FROM a JOIN b ON a.k < b.k;
  DROP TABLE a; DROP TABLE b;
$$);
-- keys of two types that need a cast (int and numeric): no index of one
-- could find the other's key
SELECT leapfrog.start('bad', $$
  CREATE TABLE d (a int, b int);
  INSERT INTO d SELECT a.v, b.v FROM a JOIN b ON a.k = b.k::numeric;
  DROP TABLE a; DROP TABLE b;
$$);
SELECT leapfrog.start('bad', $$
  CREATE TABLE d (a int, b int);
  INSERT INTO d SELECT a.v, b.v FROM a JOIN b ON a.id = b.id AND a.id = b.k;
  DROP TABLE a; DROP TABLE b;
$$);
SELECT leapfrog.start('bad', $$
  CREATE TABLE d (a int, b int);
  INSERT INTO d SELECT a.v, b.v FROM a FULL JOIN b ON a.id = b.id;
  DROP TABLE a; DROP TABLE b;
$$);
SELECT leapfrog.start('bad', $$
  CREATE TABLE d (a int, b int);
  INSERT INTO d SELECT x.v, y.v FROM a x JOIN a y ON x.id = y.id;
  DROP TABLE a;
$$);
SELECT leapfrog.start('bad', $$
  CREATE TABLE d (a int, b int);
  INSERT INTO d SELECT a.v, b.v FROM a JOIN b ON a.id = b.id JOIN c ON c.id = a.id;
  DROP TABLE a; DROP TABLE b; DROP TABLE c;
$$);
SELECT leapfrog.start('bad', $$
  CREATE TABLE d (a int, s bigint);
  INSERT INTO d SELECT a.k, sum(b.v) FROM a JOIN b ON a.id = b.id GROUP BY a.k;
  DROP TABLE a; DROP TABLE b;
$$);
SELECT count(*) AS no_migration FROM leapfrog.migrations WHERE name = 'bad';

RESET search_path;
DROP SCHEMA jn_eager CASCADE;
DROP SCHEMA jn_lazy CASCADE;
