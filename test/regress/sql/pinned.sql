--
-- pinned: a read that computes (compute.c) and pins one join unit of a
-- retired input (its conditions give the leading columns of an input
-- index, copied unchanged, a value) runs the statement as written on the
-- new table alone where its snapshot sees that unit migrated (probe.c,
-- lf_retired_pin; compute.c, lf_compute_plan and lf_compute_shortcut),
-- and computes it otherwise.  Values known as it is planned (literals, a
-- custom plan's parameters) let the planning snapshot choose the one plan
-- to make; a generic plan carries both.  Each read is compared with the
-- eager copy; computes() says whether the plan that ran computed.  Units by
-- either input's key, a key prefix, secondary indexes, a collation, the
-- writer's own transaction (and its rollback), a plain plan kept past the
-- rollback of the migration it saw, custom and generic plans and the plan
-- cache's choice, NULL, conditions that pin nothing, a read of two
-- occurrences; and rows of a split, pinned by literals only.
--
CREATE SCHEMA pn_eager;
CREATE SCHEMA pn_lazy;
SELECT $$
  CREATE TABLE stock (w int, i int, qty int, tag text, PRIMARY KEY (w, i));
  INSERT INTO stock SELECT w, i, w * 100 + i, 's' || w || '_' || i
    FROM generate_series(1, 3) w, generate_series(1, 30) i;
  CREATE INDEX stock_tag ON stock (tag);
  CREATE TABLE line (id int PRIMARY KEY, sw int, si int, amount int);
  -- line g: warehouse g % 3 + 1, item (g / 3) % 30 + 1; lines 19, 109, 199 are (2, 7)'s
  INSERT INTO line SELECT g, g % 3 + 1, (g / 3) % 30 + 1, g FROM generate_series(1, 200) g;
  CREATE INDEX line_supply ON line (sw, si);
  CREATE INDEX line_amount ON line (amount);
  CREATE TABLE cust (w int, d int, c int, name text, bal int, PRIMARY KEY (w, d, c));
  INSERT INTO cust SELECT w, d, c, 'n' || c, c FROM generate_series(1, 2) w, generate_series(1, 3) d,
    generate_series(1, 20) c;
  CREATE INDEX cust_name ON cust (name);
  ANALYZE stock, line, cust;
$$ AS setup \gset
SELECT $$
  CREATE TABLE line_stock (w int, i int, qty int, tag text, id int, amount int);
  INSERT INTO line_stock
  SELECT s.w, s.i, s.qty, s.tag, l.id, l.amount FROM stock s LEFT JOIN line l ON l.sw = s.w AND l.si = s.i;
  CREATE INDEX line_stock_wi ON line_stock (w, i);
  CREATE UNIQUE INDEX line_stock_id ON line_stock (id);
  CREATE TABLE cust_pub (w int, d int, c int, name text, PRIMARY KEY (w, d, c));
  INSERT INTO cust_pub SELECT w, d, c, name FROM cust;
  CREATE INDEX cust_pub_name ON cust_pub (name);
  CREATE TABLE cust_priv (w int, d int, c int, bal bigint, PRIMARY KEY (w, d, c));
  INSERT INTO cust_priv SELECT w, d, c, bal FROM cust;
  DROP TABLE line;
  DROP TABLE stock;
  DROP TABLE cust;
$$ AS script \gset
SET search_path = pn_eager;
SELECT public.regress_eager(:'setup');
SELECT public.regress_eager(:'script');
SET search_path = pn_lazy;
SELECT public.regress_eager(:'setup');
SELECT leapfrog.start('pinned', :'script');
SET leapfrog.read_mode = compute;

-- q prepared and run with args under EXPLAIN ANALYZE (its first run: a
-- custom plan, unless plan_cache_mode says otherwise): did the plan that
-- ran compute?  ran_computing(s): the same for statement s itself.
CREATE FUNCTION pn_lazy.ran_computing(s text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE l text; c boolean := false;
BEGIN
  FOR l IN EXECUTE 'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ' || s LOOP
    c := c OR l LIKE '%Computes:%';
  END LOOP;
  RETURN c;
END $$;
CREATE FUNCTION pn_lazy.regress_lines(s text) RETURNS SETOF text
LANGUAGE plpgsql AS $$ BEGIN RETURN QUERY EXECUTE s; END $$;
CREATE FUNCTION pn_lazy.computes(q text, VARIADIC args text[] DEFAULT '{}') RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE c boolean;
BEGIN
  EXECUTE 'PREPARE pn_q AS ' || q;
  c := ran_computing('EXECUTE pn_q' || CASE WHEN cardinality(args) = 0 THEN '' ELSE
        '(' || (SELECT string_agg(coalesce(quote_literal(a), 'NULL'), ', ') FROM unnest(args) a) || ')' END);
  DEALLOCATE pn_q;
  RETURN c;
END $$;
-- q (with %s for the schema) in both schemas: rows that differ, and rows
CREATE FUNCTION pn_lazy.differ(q text) RETURNS TABLE (differ bigint, n bigint)
LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY EXECUTE format('SELECT count(*) FILTER (WHERE lf_d), count(*) FILTER (WHERE NOT lf_d) FROM
    ((SELECT true AS lf_d, * FROM ((%1$s) EXCEPT ALL (%2$s)) a) UNION ALL
     (SELECT true, * FROM ((%2$s) EXCEPT ALL (%1$s)) b) UNION ALL
     (SELECT false, * FROM (%2$s) c)) x',
    format(q, 'pn_eager'), format(q, 'pn_lazy'));
END $$;
CREATE FUNCTION pn_lazy.run_both(stmt text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format(stmt, 'pn_eager');
  EXECUTE format(stmt, 'pn_lazy');
END $$;

-- A join unit by its key: computed while retired, the plain plan once
-- an UPDATE migrated it; the rows are the eager ones either way.
SELECT computes('SELECT * FROM line_stock WHERE w = $1 AND i = $2', '2', '7');
SELECT * FROM differ('SELECT * FROM %s.line_stock WHERE w = 2 AND i = 7');
SELECT run_both('UPDATE %s.line_stock SET qty = qty + 1 WHERE w = 2 AND i = 7');
SELECT computes('SELECT * FROM line_stock WHERE w = $1 AND i = $2', '2', '7');
SELECT * FROM differ('SELECT * FROM %s.line_stock WHERE w = 2 AND i = 7');
SELECT computes('SELECT * FROM line_stock WHERE i = $2 AND $1 = w', '2', '7');
SELECT computes('SELECT count(*) FROM line_stock WHERE w = $1 AND i = $2', '2', '7');
-- literals, prepared or run as they are, and a literal beside a parameter
SELECT computes('SELECT * FROM line_stock WHERE w = 2 AND i = $1', '7');
SELECT computes('SELECT * FROM line_stock WHERE w = 2 AND i = 7');
SELECT ran_computing('SELECT * FROM line_stock WHERE w = 2 AND i = 7');
SELECT ran_computing('SELECT * FROM line_stock WHERE w = 2 AND i = 8');
SELECT * FROM differ('SELECT * FROM %s.line_stock WHERE w = 2 AND i IN (7, 8)');
-- the key's first column alone: other units of warehouse 2 are retired
SELECT computes('SELECT * FROM line_stock WHERE w = $1', '2');
SELECT * FROM differ('SELECT * FROM %s.line_stock WHERE w = 2');
-- by the nullable side's key: line 19 is (2, 7)'s, line 22 (2, 8)'s
SELECT computes('SELECT * FROM line_stock WHERE id = $1', '19');
SELECT computes('SELECT * FROM line_stock WHERE id = $1', '22');
SELECT * FROM differ('SELECT * FROM %s.line_stock WHERE id IN (19, 22)');
-- conditions that pin nothing: a range, an OR, another operator
SELECT computes('SELECT * FROM line_stock WHERE w = $1 AND i BETWEEN $2 AND $2', '2', '7');
SELECT computes('SELECT * FROM line_stock WHERE (w = $1 AND i = $2) OR false', '2', '7');
SELECT computes('SELECT * FROM line_stock WHERE w = $1 AND i::bigint = $2', '2', '7');

-- Generic plans: the look-up runs as the executor starts, with the values.
SET plan_cache_mode = force_generic_plan;
PREPARE unit(int, int) AS SELECT w, i, qty, id FROM line_stock WHERE w = $1 AND i = $2 ORDER BY id;
SELECT computes('SELECT w, i, qty, id FROM line_stock WHERE w = $1 AND i = $2', '2', '7');
SELECT computes('SELECT w, i, qty, id FROM line_stock WHERE w = $1 AND i = $2', '2', '9');
SELECT computes('SELECT w, i, qty, id FROM line_stock WHERE w = $1 AND i = $2', NULL, '7');
EXECUTE unit(2, 7);
EXECUTE unit(2, 9);
EXECUTE unit(NULL, 7);
RESET plan_cache_mode;

-- Custom plans decide as they are planned; the plan cache still settles on
-- the generic plan (which costs what the plain plan costs) after five.
SET plan_cache_mode = force_custom_plan;
SELECT computes('SELECT w, i, qty, id FROM line_stock WHERE w = $1 AND i = $2', '2', '7');
SELECT computes('SELECT w, i, qty, id FROM line_stock WHERE w = $1 AND i = $2', '2', '9');
RESET plan_cache_mode;
PREPARE auto5(int, int) AS SELECT w, i, qty, id FROM line_stock WHERE w = $1 AND i = $2;
DO $$ BEGIN FOR k IN 1..6 LOOP EXECUTE 'EXECUTE auto5(2, 7)'; END LOOP; END $$;
SELECT bool_or(l LIKE '%(w = $1) AND (i = $2)%') AS generic
  FROM regress_lines('EXPLAIN (COSTS OFF) EXECUTE auto5(2, 7)') l;
DEALLOCATE auto5;

-- The writer's own transaction sees its migration; after a rollback the
-- unit is retired again.
BEGIN;
SELECT run_both('UPDATE %s.line_stock SET qty = qty + 1 WHERE w = 3 AND i = 3');
SELECT computes('SELECT * FROM line_stock WHERE w = $1 AND i = $2', '3', '3');
SELECT * FROM differ('SELECT * FROM %s.line_stock WHERE w = 3 AND i = 3');
ROLLBACK;
SELECT computes('SELECT * FROM line_stock WHERE w = $1 AND i = $2', '3', '3');
SELECT * FROM differ('SELECT * FROM %s.line_stock WHERE w = 3 AND i = 3');

-- A plain plan made where the unit was migrated, kept past the rollback of
-- the migration (or of its savepoint): planned again as it runs, computing.
BEGIN;
SELECT run_both('UPDATE %s.line_stock SET qty = qty + 1 WHERE w = 3 AND i = 4');
PREPARE kept AS SELECT w, i, qty, id FROM line_stock WHERE w = 3 AND i = 4 ORDER BY id;
SELECT ran_computing('EXECUTE kept');
EXECUTE kept;
ROLLBACK;
SELECT ran_computing('EXECUTE kept');
EXECUTE kept;
SELECT w, i, qty, id FROM pn_eager.line_stock WHERE w = 3 AND i = 4 ORDER BY id;
DEALLOCATE kept;
BEGIN;
SAVEPOINT s;
SELECT run_both('UPDATE %s.line_stock SET qty = qty + 1 WHERE w = 3 AND i = 5');
PREPARE kept AS SELECT w, i, qty, id FROM line_stock WHERE w = 3 AND i = 5 ORDER BY id;
SELECT ran_computing('EXECUTE kept');
ROLLBACK TO s;
SELECT ran_computing('EXECUTE kept');
EXECUTE kept;
SELECT w, i, qty, id FROM pn_eager.line_stock WHERE w = 3 AND i = 5 ORDER BY id;
COMMIT;
DEALLOCATE kept;

-- Secondary indexes of either input, and a collation other than the
-- index's: lines 19 and 22 have amounts 19 and 22
SELECT computes('SELECT * FROM line_stock WHERE amount = $1', '19');
SELECT computes('SELECT * FROM line_stock WHERE amount = $1', '22');
SELECT computes('SELECT * FROM line_stock WHERE tag = $1', 's2_7');
SELECT computes('SELECT * FROM line_stock WHERE tag = $1', 's2_8');
SELECT computes('SELECT * FROM line_stock WHERE tag = $1 COLLATE "C"', 's2_7');
SELECT * FROM differ('SELECT * FROM %s.line_stock WHERE amount IN (19, 22) OR tag IN (''s2_7'', ''s2_8'')');

-- Two occurrences, both pinned: computed while either unit is retired;
-- under a JOIN clause the conditions are not the occurrence's own
-- (relevance.c, lf_own_conjuncts), so nothing is pinned
SELECT computes('SELECT * FROM line_stock a, line_stock b
                 WHERE a.w = $1 AND a.i = $2 AND b.w = $1 AND b.i = $3', '2', '7', '7');
SELECT computes('SELECT * FROM line_stock a, line_stock b
                 WHERE a.w = $1 AND a.i = $2 AND b.w = $1 AND b.i = $3', '2', '7', '8');
SELECT computes('SELECT * FROM line_stock a JOIN line_stock b USING (w, i)
                 WHERE a.w = $1 AND a.i = $2 AND b.w = $1 AND b.i = $3', '2', '7', '7');
SELECT * FROM differ('SELECT a.id, b.id FROM %1$s.line_stock a, %1$s.line_stock b
                      WHERE a.w = 2 AND a.i = 7 AND b.w = 2 AND b.i IN (7, 8)');

-- Rows of a split are pinned by literals only (probe.c says why): with
-- parameters computed even once migrated; with literals the plain plan
-- where the row is migrated, by its key or a secondary index's; the eager
-- rows either way.
SELECT computes('SELECT * FROM cust_pub WHERE w = $1 AND d = $2 AND c = $3', '1', '2', '3');
SELECT run_both('UPDATE %s.cust_pub SET name = name || ''x'' WHERE w = 1 AND d = 2 AND c = 3');
SELECT computes('SELECT * FROM cust_pub WHERE w = $1 AND d = $2 AND c = $3', '1', '2', '3');
SELECT ran_computing('SELECT * FROM cust_pub WHERE w = 1 AND d = 2 AND c = 3');
SELECT ran_computing('SELECT * FROM cust_priv WHERE w = 1 AND d = 2 AND c = 3');
SELECT ran_computing('SELECT * FROM cust_pub WHERE w = 1 AND d = 2 AND c = 4');
SELECT computes('SELECT * FROM cust_pub WHERE w = 1 AND d = 2 AND c = 3 AND name = $1', 'n3x');
SELECT ran_computing('SELECT * FROM cust_pub WHERE name = ''n3''');
SELECT ran_computing('SELECT * FROM cust_pub WHERE name = ''n3x''');
SELECT * FROM differ('SELECT * FROM %s.cust_pub WHERE w = 1 AND d = 2 AND c IN (3, 4)');
SELECT * FROM differ('SELECT * FROM %s.cust_priv WHERE w = 1 AND d = 2 AND c IN (3, 4)');
SELECT * FROM differ('SELECT * FROM %s.cust_pub WHERE name IN (''n3'', ''n3x'')');

-- Everything equal at the end.
SELECT * FROM differ('SELECT * FROM %s.line_stock');
SELECT * FROM differ('SELECT * FROM %s.cust_pub');
SELECT * FROM differ('SELECT * FROM %s.cust_priv');
RESET leapfrog.read_mode;
SELECT leapfrog.complete('pinned');
SET search_path = public;
DROP SCHEMA pn_eager CASCADE;
DROP SCHEMA pn_lazy CASCADE;
