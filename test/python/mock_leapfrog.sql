-- Eager stand-in for the leapfrog extension, used only to check the test
-- harness itself (LEAPFROG_TEST_MOCK=1): start() runs the script eagerly, so
-- every differential test must pass against it.  Not a product file.
CREATE SCHEMA IF NOT EXISTS leapfrog;
CREATE SCHEMA IF NOT EXISTS leapfrog_retired;
CREATE TABLE leapfrog.migration (
    name text PRIMARY KEY, state text NOT NULL DEFAULT 'done',
    started_at timestamptz DEFAULT now(), finished_at timestamptz DEFAULT now(),
    tuples_total bigint DEFAULT 0, tuples_migrated bigint DEFAULT 0, error text);
CREATE VIEW leapfrog.migrations AS SELECT * FROM leapfrog.migration;

CREATE FUNCTION leapfrog.start(name text, script text) RETURNS void
LANGUAGE plpgsql AS $f$
BEGIN
    IF script IS NULL OR btrim(script) = '' THEN
        RAISE EXCEPTION 'empty script' USING ERRCODE = '22023';
    END IF;
    INSERT INTO leapfrog.migration(name) VALUES (name);
    EXECUTE script;
END $f$;

CREATE FUNCTION leapfrog.complete(name text) RETURNS void
LANGUAGE plpgsql AS $f$
BEGIN
    PERFORM 1 FROM leapfrog.migration m WHERE m.name = complete.name;
    IF NOT FOUND THEN RAISE EXCEPTION 'unknown migration' USING ERRCODE = '42704'; END IF;
END $f$;

CREATE FUNCTION leapfrog.wait(name text, timeout_s float8 DEFAULT NULL) RETURNS boolean
LANGUAGE sql AS $f$ SELECT true $f$;

CREATE FUNCTION leapfrog.remaining(name text) RETURNS bigint
LANGUAGE sql AS $f$ SELECT 0::bigint $f$;
