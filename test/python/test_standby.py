"""Reads of tables under migration on a hot standby.

A standby cannot migrate rows: a read there of a table under migration must
compute the eager state from the new tables and the retired ones, at the
standby's snapshot.  The module's primary runs with leapfrog.background off
(rows move only when statements need them); its standby is a base backup of
it (pg_basebackup -R) that preloads leapfrog too and streams the primary's
WAL.  The primary has two databases, eager (no extension) and lazy, and each
test a schema in both.  For each scenario of support.READ_SCENARIOS
(same-name replacement, ALTER COLUMN TYPE, split, GROUP BY with its input
dropped or live, two-table join), the script runs eagerly in eager and
through leapfrog.start() in lazy, the same writes follow in both (they
migrate some rows of lazy), and once the standby has replayed the primary's
WAL its answers to the scenario's reads (point lookups, ranges, aggregates,
whole tables in order, joins of new tables) must be the eager database's,
autocommitted and in one REPEATABLE READ transaction; the retired tables on
the primary hold the same rows before and after.  A standby snapshot taken
before further writes on the primary (which migrate rows) must keep giving
the answers as of that snapshot.  test_standby_after_complete:
the same during the migration, and again after leapfrog.complete() on the
primary.  test_standby_differential: cases of the differential generator
(test_differential.gen_case), their workload run on the primary, then every
table of the case and every pure read of the workload on the standby.
"""

import psycopg
import pytest

from support import (MOCK, READ_SCENARIO_IDS, READ_SCENARIOS, answers, assert_answers,
                     assert_reads_equal, assert_rows_left, needs_real_extension,
                     retired_row_counts, run_scenario, same_writes, session)
from test_differential import (COMPLETE, _short, gen_case, load_source, public_tables, run_stmt,
                               table_state)

EAGER_DB, LAZY_DB = "eager", "lazy"


@pytest.fixture(scope="module")
def pair(module_cluster_factory, module_standby_factory):
    """(primary, standby): background off on the primary, so that rows stay
    unmigrated until a statement needs them; hot_standby_feedback, so that
    no standby query is cancelled by the primary's clean-up."""
    primary = module_cluster_factory(**{"leapfrog.background": "off"})
    primary.create_database(EAGER_DB, extension=False)
    primary.create_database(LAZY_DB)
    standby = module_standby_factory(primary, hot_standby_feedback="on")
    return primary, standby


def _start_scenario(primary, sc, schema, migration):
    """The scenario in schema of both databases: (eager, lazy) sessions."""
    for db in (EAGER_DB, LAZY_DB):
        primary.sql("CREATE SCHEMA %s" % schema, dbname=db)
    eager, lazy = session(primary, EAGER_DB, schema), session(primary, LAZY_DB, schema)
    try:
        want = run_scenario(eager, sc)
        got = run_scenario(lazy, sc, migration)
        assert got == want, "%s: the writes' outcomes on the primary: lazy %s, eager %s" % (
            sc.name, _short(got), _short(want))
    except BaseException:
        eager.close()
        lazy.close()
        raise
    return eager, lazy


def _standby_reads(primary, standby, eager, schema, migration, queries, what):
    """The queries on the standby's lazy database, autocommitted and in one
    REPEATABLE READ transaction, against the eager database; the primary's
    retired tables hold the same rows before and after."""
    with session(primary, LAZY_DB) as lazy:
        before = assert_rows_left(lazy, migration, what)
    standby.wait_replay(primary)
    with session(standby, LAZY_DB, schema) as s:
        assert s.execute("SELECT pg_is_in_recovery()").fetchone()[0]
        # The standby sees the migration running, its rows unmigrated.
        assert s.execute("SELECT state FROM leapfrog.migrations WHERE name = %s",
                         [migration]).fetchall() == [("running",)]
        assert retired_row_counts(s, migration) == before, "%s: the standby is behind" % what
        assert_reads_equal(eager, s, queries, "%s, standby, autocommit" % what)
    with session(standby, LAZY_DB, schema) as s:
        s.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        assert_reads_equal(eager, s, queries, "%s, standby, REPEATABLE READ" % what)
        s.execute("ROLLBACK")
    with session(primary, LAZY_DB) as lazy:
        after = retired_row_counts(lazy, migration)
    assert after == before, "%s: retired rows %r before the standby's reads, %r after" % (
        what, before, after)


def test_standby_streams(pair):
    """The harness: the standby is in recovery, read-only, preloads leapfrog,
    and replays what the primary commits."""
    primary, standby = pair
    primary.sql("CREATE SCHEMA streams", dbname=LAZY_DB)
    with session(primary, LAZY_DB, "streams") as p:
        p.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        p.execute("INSERT INTO t VALUES (1, 'one'), (2, 'two')")
    standby.wait_replay(primary)
    with session(standby, LAZY_DB, "streams") as s:
        assert s.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
        assert s.execute("SHOW transaction_read_only").fetchone()[0] == "on"
        if not MOCK:
            assert "leapfrog" in s.execute("SHOW shared_preload_libraries").fetchone()[0]
            assert s.execute("SELECT extname FROM pg_extension WHERE extname = 'leapfrog'"
                             ).fetchall() == [("leapfrog",)]
        assert s.execute("SELECT * FROM t ORDER BY id").fetchall() == [(1, "one"), (2, "two")]
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            s.execute("INSERT INTO t VALUES (3, 'three')")
    with session(primary, LAZY_DB, "streams") as p:
        p.execute("INSERT INTO t VALUES (3, 'three')")
        p.execute("DELETE FROM t WHERE id = 1")
    standby.wait_replay(primary)
    with session(standby, LAZY_DB, "streams") as s:
        assert s.execute("SELECT * FROM t ORDER BY id").fetchall() == [(2, "two"), (3, "three")]


@pytest.mark.parametrize("sc", READ_SCENARIOS, ids=READ_SCENARIO_IDS)
def test_standby_reads_equal_eager(pair, sc):
    """The scenario's reads on the standby, mid-migration: eager's answers."""
    needs_real_extension()
    primary, standby = pair
    schema, migration = "r_" + sc.name, "r_" + sc.name
    eager, lazy = _start_scenario(primary, sc, schema, migration)
    with eager, lazy:
        _standby_reads(primary, standby, eager, schema, migration, sc.reads, sc.name)


@pytest.mark.parametrize("sc", READ_SCENARIOS, ids=READ_SCENARIO_IDS)
def test_standby_snapshot_older_than_migrating_writes(pair, sc):
    """A REPEATABLE READ transaction on the standby takes its snapshot; then
    the primary runs more writes, which migrate rows the snapshot read as
    unmigrated; once they are replayed, the transaction's reads still give
    the eager answers as of its snapshot, and a new one the answers after
    the writes."""
    needs_real_extension()
    primary, standby = pair
    schema = migration = "o_" + sc.name
    eager, lazy = _start_scenario(primary, sc, schema, migration)
    with eager, lazy:
        before = assert_rows_left(lazy, migration, sc.name)
        then = answers(eager, sc.reads)
        standby.wait_replay(primary)
        with session(standby, LAZY_DB, schema) as old:
            old.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            old.execute("SELECT 1")                     # takes the snapshot
            same_writes(eager, lazy, sc.late, sc.name + ", late writes")
            assert retired_row_counts(lazy, migration) != before, \
                "%s: the late writes migrated nothing" % sc.name
            standby.wait_replay(primary)
            assert_answers(then, old, sc.reads,
                           "%s, standby, snapshot older than the late writes" % sc.name)
            old.execute("ROLLBACK")
        _standby_reads(primary, standby, eager, schema, migration, sc.reads,
                       sc.name + ", after the late writes")


def test_standby_after_complete(pair):
    """Reads on the standby while the migrations run, then after
    leapfrog.complete() on the primary: the eager answers both times (a join
    and a GROUP BY with a live input)."""
    needs_real_extension()
    primary, standby = pair
    scenarios = [sc for sc in READ_SCENARIOS if sc.name in ("join", "group_live")]
    open_ = []
    try:
        for sc in scenarios:
            schema = migration = "c_" + sc.name
            eager, lazy = _start_scenario(primary, sc, schema, migration)
            open_ += [eager, lazy]
            _standby_reads(primary, standby, eager, schema, migration, sc.reads,
                           sc.name + " (running)")
            # complete() and the other writing functions on the standby: 25006,
            # as any write there (it was XX000, on assigning an xid)
            with session(standby, LAZY_DB, schema) as s:
                for call in ("leapfrog.complete(%s)", "leapfrog.resume(%s)"):
                    with pytest.raises(psycopg.Error) as e:
                        s.execute("SELECT " + call, [migration])
                    assert e.value.sqlstate == "25006", (call, e.value.sqlstate, str(e.value))
            lazy.execute("SELECT leapfrog.complete(%s)", [migration])
            assert lazy.execute("SELECT state FROM leapfrog.migrations WHERE name = %s",
                                [migration]).fetchall() == [("done",)]
            standby.wait_replay(primary)
            with session(standby, LAZY_DB, schema) as s:
                assert s.execute("SELECT state FROM leapfrog.migrations WHERE name = %s",
                                 [migration]).fetchall() == [("done",)]
                assert_reads_equal(eager, s, sc.reads, "%s, standby, after complete()" % sc.name)
    finally:
        for conn in open_:
            conn.close()


# Seeds of test_differential's generator: a same-name replacement, an ALTER
# TABLE, a split, GROUP BY and join cases (one of each with a live input),
# each leaving rows unmigrated after its workload (asserted).
DIFF_SEEDS = [9, 60, 49, 0, 48, 35, 31]


def _pure_read(st):
    t = st.text.lstrip().upper()
    return (t.startswith("SELECT") and st.session == 0 and "LF_TOUCH" not in t
            and " FOR UPDATE" not in t and " FOR SHARE" not in t
            and " FOR NO KEY" not in t and " FOR KEY SHARE" not in t)


@pytest.mark.parametrize("seed", DIFF_SEEDS)
def test_standby_differential(pair, seed):
    """A generated case: its workload in both databases on the primary (same
    outcomes), then, on the standby, every table of the case and every pure
    read of the workload must give the eager database's answers."""
    needs_real_extension()
    primary, standby = pair
    case = gen_case(seed)
    schema = case.name = "d_%d" % seed
    for db in (EAGER_DB, LAZY_DB):
        primary.sql("CREATE SCHEMA %s" % schema, dbname=db)
    with session(primary, EAGER_DB, schema) as a, session(primary, LAZY_DB, schema) as b:
        load_source(a, case)
        load_source(b, case)
        with a.transaction():
            a.execute(case.script)
        b.execute("SELECT leapfrog.start(%s, %s)", [case.name, case.script])
        for i, st in enumerate(case.workload):
            assert st.session == 0 and st.text != COMPLETE, st
            ra, rb = run_stmt(a, st), run_stmt(b, st)
            assert ra == rb, "seed %d statement %d %r on the primary: eager %s, lazy %s" % (
                seed, i, st, _short(ra), _short(rb))
        for conn in (a, b):
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.execute("ROLLBACK")
        before = assert_rows_left(b, case.name, "seed %d (%s), after its workload: pick "
                                  "another seed" % (seed, case.kind))
        standby.wait_replay(primary)
        tables = public_tables(a)
        with session(standby, LAZY_DB, schema) as s:
            assert public_tables(s) == tables
            try:
                got, failed = table_state(s, tables), None
            except psycopg.Error as e:
                failed = "SQLSTATE %s: %s" % (e.sqlstate, str(e).strip().splitlines()[0])
            assert failed is None, "seed %d (%s): reading the tables on the standby failed: %s" % (
                seed, case.kind, failed)
            want = table_state(a, tables)
            for name in tables:
                for part in ("columns", "rows"):
                    assert got[name][part] == want[name][part], \
                        "seed %d (%s): %s of %s on the standby: %s, eager %s" % (
                            seed, case.kind, part, name, _short(got[name][part]),
                            _short(want[name][part]))
            reads = [st for st in case.workload if _pure_read(st)]
            assert reads
            for st in reads:
                want, got = run_stmt(a, st), run_stmt(s, st)
                assert got == want, "seed %d (%s): %r on the standby: %s, eager %s" % (
                    seed, case.kind, st, _short(got), _short(want))
        assert retired_row_counts(b, case.name) == before
