--
-- fkey_actions: referential actions of a new table's foreign key, on a
-- parent that stays (live) or is itself replaced by the script (both), for
-- every action, on DELETE and on an UPDATE of the key.  Each statement runs
-- eagerly and lazily, each in a transaction of its own; outcome and final
-- state must be the same.  The parent's statement migrates the child rows
-- that reference the rows it changes before it changes them; before that,
-- every action failed (23503: the children, migrated by the action's own
-- statement, were inserted after their parent row was gone).
--
CREATE TABLE fka_result (layout text, action text, step int, stmt text,
                         eager text, lazy text);
-- The outcome of a statement: "ok <rows>" or "<SQLSTATE>: <message>".
CREATE FUNCTION fka_outcome(q text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
    EXECUTE q;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN 'ok ' || n;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
CREATE PROCEDURE fka_case(layout text, action text)
LANGUAGE plpgsql AS $$
DECLARE
    script text;
    stmts text[] := ARRAY[
        'DELETE FROM users WHERE id = 9',
        'UPDATE users SET id = 100 WHERE id = 10',
        'DELETE FROM users WHERE id IN (SELECT id FROM users WHERE id BETWEEN 20 AND 22)',
        'UPDATE users SET id = id + 1000 WHERE id = 7 RETURNING id',
        'DELETE FROM users WHERE id = 0'];
    s text;
    i int := 0;
    e text;
BEGIN
    IF layout = 'live' THEN
        script := format($s$
            CREATE TABLE orders2 (id int PRIMARY KEY, user_id bigint DEFAULT 0
                REFERENCES users ON DELETE %1$s ON UPDATE %1$s);
            INSERT INTO orders2 SELECT id, user_id FROM orders;
            DROP TABLE orders;
            ALTER TABLE orders2 RENAME TO orders;$s$, action);
    ELSE
        script := format($s$
            CREATE TABLE users2 (id bigint PRIMARY KEY);
            CREATE TABLE orders2 (id int PRIMARY KEY, user_id bigint DEFAULT 0
                REFERENCES users2 ON DELETE %1$s ON UPDATE %1$s);
            INSERT INTO users2 SELECT id FROM users;
            INSERT INTO orders2 SELECT id, user_id FROM orders;
            DROP TABLE orders;
            DROP TABLE users;
            ALTER TABLE users2 RENAME TO users;
            ALTER TABLE orders2 RENAME TO orders;$s$, action);
    END IF;
    FOREACH s IN ARRAY ARRAY['fka_eager', 'fka_lazy'] LOOP
        EXECUTE format('DROP SCHEMA IF EXISTS %1$I CASCADE; CREATE SCHEMA %1$I', s);
        PERFORM set_config('search_path', s, false);
        CREATE TABLE users (id int PRIMARY KEY);
        INSERT INTO users SELECT generate_series(0, 30);
        CREATE TABLE orders (id int PRIMARY KEY, user_id int DEFAULT 0 REFERENCES users);
        INSERT INTO orders SELECT g, g % 30 + 1 FROM generate_series(1, 300) g;
        IF s = 'fka_eager' THEN
            EXECUTE script;
        ELSE
            PERFORM leapfrog.start(format('fka_%s_%s', layout, replace(action, ' ', '_')), script);
        END IF;
        COMMIT;
    END LOOP;
    FOREACH s IN ARRAY stmts LOOP
        i := i + 1;
        PERFORM set_config('search_path', 'fka_eager', false);
        e := public.fka_outcome(s);
        COMMIT;
        PERFORM set_config('search_path', 'fka_lazy', false);
        INSERT INTO public.fka_result VALUES (layout, action, i, s, e, public.fka_outcome(s));
        COMMIT;
    END LOOP;
    PERFORM set_config('search_path', 'public', false);
    PERFORM leapfrog.complete(format('fka_%s_%s', layout, replace(action, ' ', '_')));
    COMMIT;
END $$;

CALL fka_case('live', 'CASCADE');
SELECT * FROM regress_compare('fka_lazy.orders', 'fka_eager.orders');
CALL fka_case('live', 'SET NULL');
SELECT * FROM regress_compare('fka_lazy.orders', 'fka_eager.orders');
CALL fka_case('live', 'SET DEFAULT');
SELECT * FROM regress_compare('fka_lazy.orders', 'fka_eager.orders');
CALL fka_case('live', 'NO ACTION');
SELECT * FROM regress_compare('fka_lazy.orders', 'fka_eager.orders');
CALL fka_case('live', 'RESTRICT');
SELECT * FROM regress_compare('fka_lazy.orders', 'fka_eager.orders');
CALL fka_case('both', 'CASCADE');
SELECT * FROM regress_compare('fka_lazy.orders', 'fka_eager.orders');
SELECT * FROM regress_compare('fka_lazy.users', 'fka_eager.users');
CALL fka_case('both', 'SET NULL');
SELECT * FROM regress_compare('fka_lazy.orders', 'fka_eager.orders');
SELECT * FROM regress_compare('fka_lazy.users', 'fka_eager.users');
CALL fka_case('both', 'SET DEFAULT');
SELECT * FROM regress_compare('fka_lazy.orders', 'fka_eager.orders');
SELECT * FROM regress_compare('fka_lazy.users', 'fka_eager.users');
CALL fka_case('both', 'NO ACTION');
SELECT * FROM regress_compare('fka_lazy.orders', 'fka_eager.orders');
SELECT * FROM regress_compare('fka_lazy.users', 'fka_eager.users');
CALL fka_case('both', 'RESTRICT');
SELECT * FROM regress_compare('fka_lazy.orders', 'fka_eager.orders');
SELECT * FROM regress_compare('fka_lazy.users', 'fka_eager.users');

-- Every outcome, and where lazy and eager differ (none).
SELECT layout, action, step, eager FROM fka_result ORDER BY layout DESC, action, step;
SELECT layout, action, step, stmt, eager, lazy FROM fka_result WHERE eager IS DISTINCT FROM lazy;

-- The parent's statement shows what it migrates.
SET search_path = fka_lazy;
DROP SCHEMA fka_eager CASCADE;
DROP SCHEMA fka_lazy CASCADE;
CREATE SCHEMA fka_lazy;
CREATE TABLE users (id int PRIMARY KEY, name text);
INSERT INTO users SELECT generate_series(0, 30);
CREATE TABLE orders (id int PRIMARY KEY, user_id int REFERENCES users);
INSERT INTO orders SELECT g, g % 30 + 1 FROM generate_series(1, 300) g;
CREATE INDEX ON orders (user_id);
SELECT leapfrog.start('fka_explain', $$
    CREATE TABLE orders2 (id int PRIMARY KEY, user_id int REFERENCES users ON DELETE CASCADE);
    INSERT INTO orders2 SELECT id, user_id FROM orders;
    DROP TABLE orders;
    ALTER TABLE orders2 RENAME TO orders;
$$);
-- EXPLAIN, with the retired table's name (not part of the contract) hidden.
CREATE FUNCTION fka_explain(q text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE line text;
BEGIN
    FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
        RETURN NEXT regexp_replace(line, 'leapfrog_retired\.\S+', 'leapfrog_retired.<input>');
    END LOOP;
END $$;
SELECT fka_explain('DELETE FROM users WHERE id = 9');
-- An UPDATE that does not assign the key does not.
SELECT fka_explain($$UPDATE users SET name = 'x' WHERE id = 9$$);
SELECT public.regress_migrated('fka_explain') AS migrated;
DELETE FROM users WHERE id = 9;
-- The 10 orders of user 9, migrated, then deleted by the cascade.
SELECT public.regress_migrated('fka_explain') AS migrated;
SELECT count(*) FROM orders WHERE user_id = 9;
SELECT leapfrog.complete('fka_explain');
RESET search_path;
DROP SCHEMA fka_lazy CASCADE;
DROP TABLE fka_result;
DROP FUNCTION fka_outcome(text);
DROP PROCEDURE fka_case(text, text);
