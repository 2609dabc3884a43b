--
-- create_extension: the extension installs its schemas, its SQL interface
-- and its settings; helpers for the other tests of the suite.
--
CREATE EXTENSION leapfrog;
SELECT extname, extversion, extnamespace::regnamespace AS schema
  FROM pg_extension WHERE extname = 'leapfrog';
SELECT nspname FROM pg_namespace
 WHERE nspname IN ('leapfrog', 'leapfrog_retired') ORDER BY 1;
-- PUBLIC may not reach the retired tables.
SELECT has_schema_privilege('public', 'leapfrog_retired', 'USAGE') AS public_usage;
-- The functions of the contract.
SELECT p.oid::regprocedure AS function, p.prorettype::regtype AS returns
  FROM pg_proc p
 WHERE p.oid IN ('leapfrog.start(text,text,text)'::regprocedure,
                 'leapfrog.complete(text)'::regprocedure,
                 'leapfrog.wait(text,float8)'::regprocedure,
                 'leapfrog.remaining(text)'::regprocedure,
                 'leapfrog.plan(text)'::regprocedure,
                 'leapfrog.correct_row(text,text,tid,jsonb)'::regprocedure,
                 'leapfrog.quarantine_row(text,text,tid)'::regprocedure,
                 'leapfrog.resume(text)'::regprocedure)
 ORDER BY 1::text;
SELECT pg_get_function_arguments('leapfrog.wait(text,float8)'::regprocedure);
SELECT pg_get_function_arguments('leapfrog.start(text,text,text)'::regprocedure);
-- Failed rows, for the owners of their migrations.
SELECT attname, atttypid::regtype AS type
  FROM pg_attribute
 WHERE attrelid = 'leapfrog.failed_rows'::regclass AND attnum > 0
 ORDER BY attnum;
-- The view of the contract.
SELECT attname, atttypid::regtype AS type
  FROM pg_attribute
 WHERE attrelid = 'leapfrog.migrations'::regclass AND attnum > 0
 ORDER BY attnum;
SELECT count(*) AS migrations FROM leapfrog.migrations;
-- The settings of the contract (leapfrog.background is off in the test
-- configuration, test/leapfrog.conf).
SELECT name, setting, unit, context
  FROM pg_settings
 WHERE name IN ('leapfrog.background', 'leapfrog.background_delay',
                'leapfrog.batch_size', 'leapfrog.background_naptime',
                'leapfrog.background_workers', 'leapfrog.background_headroom',
                'leapfrog.background_min_share', 'leapfrog.lock_timeout',
                'leapfrog.lock_retries')
 ORDER BY name;

--
-- Helpers for the other tests (in schema public).  Those that do not run
-- the caller's SQL (regress_eager, regress_sqlstate) run with search_path =
-- pg_catalog, so that the search_path test's hostile settings do not reach
-- them.
--
-- The eager oracle: runs a migration script the plain way, in one statement
-- (so in one transaction).
CREATE FUNCTION regress_eager(script text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE script;
END $$;
-- Compares the contents of two tables: rows of each, and rows of each that
-- the other lacks (EXCEPT ALL both ways: duplicates count).
CREATE FUNCTION regress_compare(lazy regclass, eager regclass,
    OUT lazy_rows bigint, OUT eager_rows bigint,
    OUT lazy_only bigint, OUT eager_only bigint)
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    EXECUTE format('SELECT count(*) FROM %s', lazy) INTO lazy_rows;
    EXECUTE format('SELECT count(*) FROM %s', eager) INTO eager_rows;
    EXECUTE format('SELECT count(*) FROM (SELECT * FROM %s EXCEPT ALL SELECT * FROM %s) d',
                   lazy, eager) INTO lazy_only;
    EXECUTE format('SELECT count(*) FROM (SELECT * FROM %s EXCEPT ALL SELECT * FROM %s) d',
                   eager, lazy) INTO eager_only;
END $$;
-- The definition of a table, without its schema: columns, constraints and
-- indexes, one line each.
CREATE FUNCTION regress_shape(rel regclass) RETURNS SETOF text
LANGUAGE sql SET search_path = pg_catalog AS $$
    SELECT format('column %s %s%s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                  CASE WHEN a.attnotnull THEN ' not null' ELSE '' END,
                  ' default ' || regexp_replace(pg_get_expr(d.adbin, d.adrelid),
                                                '''[a-z_][a-z0-9_]*\.', '''', 'g'))
      FROM pg_attribute a
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT format('constraint %s %s', c.conname,
                  regexp_replace(pg_get_constraintdef(c.oid), '\m\w+\.', '', 'g'))
      FROM pg_constraint c WHERE c.conrelid = rel
    UNION ALL
    SELECT 'index ' || regexp_replace(pg_get_indexdef(i.indexrelid),
                                      '^CREATE (.*) ON \S+ USING ', '\1 USING ')
      FROM pg_index i WHERE i.indrelid = rel
    ORDER BY 1
$$;
-- Rows of a table given by OID (a retired table: its name is not part of
-- the contract, so the tests never print it).
CREATE FUNCTION regress_rows(rel oid) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
DECLARE n bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM %s', rel::regclass) INTO n;
    RETURN n;
END $$;
-- Runs format(cmd, rel::regclass) (DDL on a retired table).
CREATE FUNCTION regress_on_rel(cmd text, rel oid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    EXECUTE format(cmd, rel::regclass);
END $$;
-- Input rows of a migration migrated since the previous call (0 at the
-- first call): leapfrog.remaining() before minus after.
CREATE FUNCTION regress_migrated(migration text) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
DECLARE
    cur bigint := leapfrog.remaining(migration);
    prev bigint := coalesce(nullif(current_setting('regress.remaining_' || migration, true), '')::bigint, cur);
BEGIN
    PERFORM set_config('regress.remaining_' || migration, cur::text, false);
    RETURN prev - cur;
END $$;
-- EXPLAIN (COSTS OFF) of a statement, with the OID-derived names of retired
-- tables and their indexes and the migration ids hidden (they depend on the
-- tests run before).
CREATE FUNCTION regress_explain(q text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE line text;
BEGIN
    FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
        -- a retired table, its indexes, the migration's id
        line := regexp_replace(line, '\mm\d+_\d+_', '', 'g');
        line := regexp_replace(line, '\mm\d+_\d+\M', 'retired_index', 'g');
        line := regexp_replace(line, 'group_migrated\(\d+', 'group_migrated(N', 'g');
        RETURN NEXT regexp_replace(line, 'sees_start\(\d+', 'sees_start(N', 'g');
    END LOOP;
END $$;
-- The error a statement fails with, and the leapfrog lines of its context,
-- with the OID-derived prefix of a retired table's name hidden.
CREATE FUNCTION regress_error(q text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    state text;
    msg text;
    ctx text;
BEGIN
    EXECUTE q;
    RETURN NEXT 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, ctx = PG_EXCEPTION_CONTEXT;
    RETURN NEXT state || ': ' || msg;
    RETURN QUERY SELECT regexp_replace(c, 'm\d+_\d+_', '', 'g')
                   FROM regexp_split_to_table(ctx, '\n') c WHERE c LIKE 'leapfrog migration%';
END $$;
-- The SQLSTATE a statement fails with, or 'ok'.
CREATE FUNCTION regress_sqlstate(q text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;

-- wait() on an unknown migration is an error.
SELECT regress_sqlstate($$SELECT leapfrog.wait('no_such_migration', 0)$$) <> 'ok' AS wait_unknown_fails;
