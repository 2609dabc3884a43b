-- leapfrog--0.1.sql: catalog and SQL interface of the leapfrog extension.
--
-- The catalog is the durable record of every migration.  The per-tuple
-- progress itself is not stored here: an input row is unmigrated exactly as
-- long as it is still present in its retired table (see docs/design.md).

\echo Use "CREATE EXTENSION leapfrog" to load this file. \quit

-- Retired input tables live here until their migration is done.  Nobody but
-- the extension needs to reach them, so PUBLIC gets no USAGE.
CREATE SCHEMA leapfrog_retired;
REVOKE ALL ON SCHEMA leapfrog_retired FROM PUBLIC;

CREATE TABLE leapfrog.migration (
    id           serial PRIMARY KEY,
    name         text NOT NULL UNIQUE,
    owner        oid NOT NULL,
    state        text NOT NULL DEFAULT 'running'
                 CHECK (state IN ('running', 'done', 'failed')),
    script       text NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    finished_at  timestamptz,
    tuples_total bigint,           -- input rows at start: counted once by the
                                   -- background worker, or at completion
    error        text,             -- why the migration failed
    -- The transactions that started and completed the migration.  A
    -- REPEATABLE READ snapshot that cannot see one of them must not act on
    -- that state (docs/design.md, "Snapshots older than the switch or the
    -- completion").
    start_xid    xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
    done_xid     xid8,
    -- What the background worker does with a row that cannot be migrated:
    -- fail the migration on it, or set it aside into leapfrog_quarantine.
    on_error     text NOT NULL DEFAULT 'fail' CHECK (on_error IN ('fail', 'quarantine'))
);

-- One row per input table: retired, or live and tracked in place (live_keys).
CREATE TABLE leapfrog.input (
    migration_id int NOT NULL REFERENCES leapfrog.migration ON DELETE CASCADE,
    relid        oid NOT NULL PRIMARY KEY,   -- the retired table
    orig_name    text NOT NULL,              -- its qualified name before start()
    -- A table the script altered without a rewrite, replaced lazily:
    -- eagerly, a snapshot older than start() still sees its rows in it
    -- (docs/design.md, "Snapshots older than the switch or the completion").
    in_place     boolean NOT NULL DEFAULT false,
    -- An input the script keeps, read by GROUP BY mappings (and maybe row
    -- mappings, carried by the first one's groups), tracked
    -- in place: relid is the live table itself, and this table holds the
    -- keys of the groups migrated of the first mapping that reads it (each
    -- has one: mapping.done_keys; docs/design.md, "Inputs that stay live").
    live_keys    oid,
    -- Of an input in_place: the copy that took its name, which eagerly is
    -- that table (added after the first release of 0.1: without it, every
    -- new table filled from the input counts as it).
    in_place_copy oid
);

-- One row per INSERT ... SELECT of the script.  query is the analyzed mapping
-- (nodeToString of a Query): SELECT <one expression per column of target,
-- in attribute order>, ctid FROM input WHERE <filter>.  Storing the analyzed
-- tree pins every function and operator at start(), so later search_path
-- settings cannot change what the mapping computes.
CREATE TABLE leapfrog.mapping (
    id           serial PRIMARY KEY,
    migration_id int NOT NULL REFERENCES leapfrog.migration ON DELETE CASCADE,
    input_relid  oid NOT NULL REFERENCES leapfrog.input ON DELETE CASCADE,
    target_relid oid NOT NULL,
    query        text NOT NULL,
    -- A GROUP BY mapping of a live input tracked in place: its table of
    -- the keys of the groups migrated (added after the first release of
    -- 0.1: an older catalog has only input.live_keys, one mapping's).
    done_keys    oid
);
CREATE INDEX ON leapfrog.mapping (target_relid);

-- Insert-only log of migrated input rows: each transaction that migrates
-- rows appends one row per migration when it commits, so concurrent
-- sessions never contend on a counter.  No foreign key:
-- its check would lock the migration's row in every migrating transaction.
-- Completion folds the rows into migration.tuples_total and deletes them.
CREATE TABLE leapfrog.progress (
    migration_id int NOT NULL,
    n            bigint NOT NULL
);
CREATE INDEX ON leapfrog.progress (migration_id);

-- Input rows the background worker could not migrate, and why (the error
-- of migrating that row alone, as the insert into the new table raised it).
-- A row leaves this list when it is corrected, quarantined, or migrated
-- after all; completion empties it.  input_relid is the retired table.
CREATE TABLE leapfrog.failed_row (
    migration_id int NOT NULL REFERENCES leapfrog.migration ON DELETE CASCADE,
    input_relid  oid NOT NULL,
    row_tid      tid NOT NULL,
    sqlstate     text NOT NULL,
    error        text NOT NULL,
    failed_at    timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    PRIMARY KEY (migration_id, input_relid, row_tid)
);

REVOKE ALL ON ALL TABLES IN SCHEMA leapfrog FROM PUBLIC;

-- Rows set aside by leapfrog.quarantine_row() or on_error => 'quarantine':
-- one table per input of a migration, <input>_m<migration id>, owned by the
-- migration's owner, with the input's columns and why the row failed.
CREATE SCHEMA leapfrog_quarantine;
GRANT USAGE ON SCHEMA leapfrog_quarantine TO PUBLIC;

CREATE FUNCTION leapfrog.start(name text, script text, on_error text DEFAULT 'fail')
RETURNS void
AS 'MODULE_PATHNAME', 'leapfrog_start'
LANGUAGE C STRICT VOLATILE;

-- What start() would do with a script, without doing it: it runs the
-- switch in a subtransaction that it always rolls back (the same brief
-- locks as start(), nothing changes).  One row per statement run, in script
-- order (more for a statement that does several things); action is run,
-- mapping, retire, replace, track (a live input tracked in place), or for
-- the last row refused (0A000) / error.
CREATE FUNCTION leapfrog.plan(script text)
RETURNS TABLE (statement int, sql text, action text, kind text, input text,
               target text, input_rows bigint, input_bytes bigint, detail text,
               sqlstate text, hint text)
AS 'MODULE_PATHNAME', 'leapfrog_plan'
LANGUAGE C STRICT VOLATILE;

CREATE FUNCTION leapfrog.complete(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'leapfrog_complete'
LANGUAGE C STRICT VOLATILE;

-- STABLE (it counts through the statement's snapshot), so that the view
-- below can be flattened and a query that does not read tuples_total does
-- not count the inputs: a VOLATILE call in a view's target list is
-- evaluated for every row whether the column is read or not.
CREATE FUNCTION leapfrog.remaining(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'leapfrog_remaining'
LANGUAGE C STRICT STABLE;

CREATE FUNCTION leapfrog.wait(name text, timeout_s float8 DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'leapfrog_wait'
LANGUAGE C VOLATILE;

-- Internal: may the statement's snapshot see the rows a migration's
-- mappings compute?  Reads that compute the eager rows instead of migrating
-- them call it (src/compute.c).  The third argument is not read: a column
-- of the computed rows there makes the call a filter on them, a constant a
-- test before any is read.  As a filter it must come before the
-- statement's own conditions (a snapshot older than start() must not
-- evaluate them on rows it cannot see: a division by zero), and the
-- planner orders a scan's filters by cost: hence the least cost a caller
-- can be expected to declare (its answer is cached per snapshot).
CREATE FUNCTION leapfrog.sees_start(migration_id int, in_place boolean, anchor "any")
RETURNS boolean
AS 'MODULE_PATHNAME', 'leapfrog_sees_start'
LANGUAGE C STABLE PARALLEL SAFE COST 0.0000001;

-- Internal: is the group of these key values migrated in the mapping, to
-- the statement's snapshot?  The gate of a read that pins one group of a
-- mapping tracked by keys (src/live.c); the caller must be allowed to read
-- the mapping's new table.
CREATE FUNCTION leapfrog.group_migrated(mapping_id int, VARIADIC key "any")
RETURNS boolean
AS 'MODULE_PATHNAME', 'leapfrog_group_migrated'
LANGUAGE C STRICT STABLE PARALLEL SAFE;

-- Internal: the row trigger of a live input tracked in place (src/live.c):
-- a write of one of its rows first migrates the row's group, old and new.
CREATE FUNCTION leapfrog.live_input_trigger()
RETURNS trigger
AS 'MODULE_PATHNAME', 'leapfrog_live_input_trigger'
LANGUAGE C;

-- Internal: raises what inserting a computed row would raise when one of
-- the new table's NOT NULL or CHECK constraints is false for it (src/compute.c).
-- Costly on purpose: the planner then tests a statement's own conditions
-- first, so that only the rows the statement needs are checked.
CREATE FUNCTION leapfrog.check_computed(ok boolean, target regclass, name text, not_null boolean)
RETURNS boolean
AS 'MODULE_PATHNAME', 'leapfrog_check_computed'
LANGUAGE C STABLE PARALLEL SAFE COST 1000;

-- Failed rows: the input row as it is now, as jsonb (NULL once it is gone).
-- The caller must have the privileges of the migration's owner.
CREATE FUNCTION leapfrog.retired_row(input regclass, row_tid tid)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'leapfrog_retired_row'
LANGUAGE C STRICT STABLE;

-- Change the named columns of a failed row (changes: {"column": value}); the
-- row keeps waiting for its migration.  Returns its new ctid.
CREATE FUNCTION leapfrog.correct_row(migration text, input text, row_tid tid, changes jsonb)
RETURNS tid
AS 'MODULE_PATHNAME', 'leapfrog_correct_row'
LANGUAGE C STRICT VOLATILE;

-- Move a row out of the migration into its quarantine table, which it
-- returns.  The row is not migrated: the new tables never hold it.
CREATE FUNCTION leapfrog.quarantine_row(migration text, input text, row_tid tid)
RETURNS regclass
AS 'MODULE_PATHNAME', 'leapfrog_quarantine_row'
LANGUAGE C STRICT VOLATILE;

-- A failed migration runs again: the background worker retries the rows
-- left, and fails again on a row still wrong.
CREATE FUNCTION leapfrog.resume(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'leapfrog_resume'
LANGUAGE C STRICT VOLATILE;

-- The failed rows of the migrations the caller may act on (it has the
-- privileges of their owner).  A security barrier: a caller's leaky
-- function in a WHERE clause must not see other owners' rows and errors.
CREATE VIEW leapfrog.failed_rows WITH (security_barrier) AS
SELECT m.name AS migration,
       i.orig_name AS input,
       f.row_tid AS ctid,
       leapfrog.retired_row(f.input_relid::regclass, f.row_tid) AS row,
       f.sqlstate,
       f.error,
       f.failed_at
  FROM leapfrog.failed_row f
  JOIN leapfrog.migration m ON m.id OPERATOR(pg_catalog.=) f.migration_id
  JOIN leapfrog.input i ON i.relid OPERATOR(pg_catalog.=) f.input_relid
 WHERE pg_catalog.pg_has_role(m.owner, 'USAGE');

CREATE VIEW leapfrog.migrations AS
SELECT m.name,
       m.state,
       m.started_at,
       m.finished_at,
       CASE WHEN m.state IN ('running', 'failed')
            THEN COALESCE(m.tuples_total, p.migrated + leapfrog.remaining(m.name))
            ELSE m.tuples_total END AS tuples_total,
       CASE WHEN m.state = 'done' THEN m.tuples_total ELSE p.migrated END AS tuples_migrated,
       -- an error quotes row values: for those with the owner's privileges
       CASE WHEN pg_catalog.pg_has_role(m.owner, 'USAGE') THEN m.error END AS error,
       m.on_error,
       (SELECT pg_catalog.count(*) FROM leapfrog.failed_row f
         WHERE f.migration_id = m.id) AS failed_rows,
       -- chained: the unfinished migrations that fill its inputs
       ARRAY(SELECT DISTINCT u.name
               FROM leapfrog.input i
               JOIN leapfrog.mapping mp ON mp.target_relid OPERATOR(pg_catalog.=) i.relid
               JOIN leapfrog.migration u ON u.id OPERATOR(pg_catalog.=) mp.migration_id
              WHERE i.migration_id OPERATOR(pg_catalog.=) m.id
                AND u.id OPERATOR(pg_catalog.<>) m.id
                AND u.state OPERATOR(pg_catalog.<>) 'done'
              ORDER BY 1) AS after
  FROM leapfrog.migration m
  CROSS JOIN LATERAL (SELECT COALESCE(pg_catalog.sum(g.n), 0)::bigint AS migrated
                        FROM leapfrog.progress g
                       WHERE g.migration_id = m.id) p;

GRANT USAGE ON SCHEMA leapfrog TO PUBLIC;
GRANT SELECT ON leapfrog.migrations TO PUBLIC;
GRANT SELECT ON leapfrog.failed_rows TO PUBLIC;
