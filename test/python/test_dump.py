"""pg_dump, COPY TO and read-only transactions during a migration.

A database in the middle of a migration (leapfrog.background off: the rows
the writes did not need are still in leapfrog_retired) must dump as the
eager state: restored into a fresh database of the same cluster (without
the extension: the dump creates it), it holds the new tables with exactly
the eager database's columns, indexes, constraints and rows, nothing in
leapfrog_retired, no migration in leapfrog.migrations.  Both the custom
format (pg_restore) and the plain one (psql -v ON_ERROR_STOP=1).  pg_dump
only reads: the source keeps its retired rows, and still gives the eager
answers afterwards.  `COPY table TO STDOUT` in a read-write session gives
the eager rows.  Pure reads in read-only transactions (SERIALIZABLE READ
ONLY DEFERRABLE, SERIALIZABLE then SET TRANSACTION READ ONLY, READ ONLY at
READ COMMITTED and REPEATABLE READ, default_transaction_read_only) and with
leapfrog.read_mode = compute give the eager answers; the serializable ones
and compute leave the retired tables' rows where they are.

The scenarios are support.READ_SCENARIOS (same-name replacement, ALTER
COLUMN TYPE, split, GROUP BY with its input dropped or live, two-table
join).  The module's eager database holds each in a schema of its own
(s_<name>), run eagerly once; a lazy database holds them all in the same
schemas, started with leapfrog.start(), with the same writes: one per dump
format (dumped and restored once, then checked scenario by scenario), one
for COPY, one per read-only mode, one for read_mode.
"""

import psycopg
import pytest
from psycopg import sql

from support import (READ_SCENARIO_IDS, READ_SCENARIOS, RETIRED_SQL, answers, assert_answers,
                     assert_reads_equal, assert_rows_left, assert_same_tables,
                     needs_real_extension, outcome, retired_row_counts, run_scenario, session,
                     user_tables, user_tables_state)

EAGER_DB = "eager"


def _schema(sc):
    return "s_" + sc.name


def _migration(sc):
    return "m_" + sc.name


@pytest.fixture(scope="module")
def dump_cluster(module_cluster_factory):
    """Background off; the eager database with every scenario, each in its
    schema; {scenario: outcomes of its writes} as .eager_writes."""
    c = module_cluster_factory(**{"leapfrog.background": "off"})
    c.create_database(EAGER_DB, extension=False)
    c.eager_writes = {}
    for sc in READ_SCENARIOS:
        c.sql("CREATE SCHEMA %s" % _schema(sc), dbname=EAGER_DB)
        with session(c, EAGER_DB, _schema(sc)) as conn:
            c.eager_writes[sc.name] = run_scenario(conn, sc)
    return c


def _lazy_db(c, dbname, scenarios):
    """A new database with the scenarios started (each in its schema) and
    their writes done, with the eager outcomes; rows left unmigrated.
    {scenario name: retired row counts}."""
    c.create_database(dbname)
    left = {}
    for sc in scenarios:
        c.sql("CREATE SCHEMA %s" % _schema(sc), dbname=dbname)
        with session(c, dbname, _schema(sc)) as conn:
            got = run_scenario(conn, sc, _migration(sc))
            assert got == c.eager_writes[sc.name], "%s: the writes' outcomes: lazy %r, eager %r" % (
                sc.name, got, c.eager_writes[sc.name])
            left[sc.name] = assert_rows_left(conn, _migration(sc), sc.name)
    return left


# How each format is dumped and restored into a fresh database.
FORMATS = {
    "custom": (["-Fc"], ".dump", lambda f: ("pg_restore", ["--exit-on-error", f])),
    "plain": (["-Fp"], ".sql", lambda f: ("psql", ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", f])),
}


@pytest.fixture(scope="module")
def dumped(dump_cluster):
    """dumped(fmt) -> (source, restored, retired rows before the dump): a
    database with every scenario running, dumped in that format (once per
    module) and restored into a fresh database without the extension."""
    made = {}

    def get(fmt):
        if fmt not in made:
            c = dump_cluster
            opts, ext, restore = FORMATS[fmt]
            db, restored = "src_" + fmt, "restored_" + fmt
            left = _lazy_db(c, db, READ_SCENARIOS)
            dump = c.base / (db + ext)
            c.run_client("pg_dump", opts + ["-f", dump], dbname=db)
            c.create_database(restored, extension=False)
            program, args = restore(dump)
            c.run_client(program, args, dbname=restored)
            made[fmt] = (db, restored, left)
        return made[fmt]
    return get


@pytest.mark.parametrize("sc", READ_SCENARIOS, ids=READ_SCENARIO_IDS)
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_dump_restores_eager_state(dump_cluster, dumped, fmt, sc):
    """The restored database: the scenario's tables as eagerly (columns,
    indexes, constraints, rows; and the reads' answers), the extension
    created by the dump, nothing retired, no migration.  The source: its
    retired rows where they were, its migration running, its reads eager's."""
    needs_real_extension()
    c = dump_cluster
    db, restored, left = dumped(fmt)
    what = "%s, %s dump restored" % (sc.name, fmt)
    with session(c, EAGER_DB) as eager, session(c, restored) as r:
        assert user_tables(r) == user_tables(eager), what
        assert_same_tables(user_tables_state(eager, [_schema(sc)]),
                           user_tables_state(r, [_schema(sc)]), what)
        assert r.execute(RETIRED_SQL).fetchall() == [], "%s: relations in leapfrog_retired" % what
        assert r.execute("SELECT extname FROM pg_extension ORDER BY 1").fetchall() == [
            ("leapfrog",), ("plpgsql",)]
        assert r.execute("SELECT * FROM leapfrog.migrations").fetchall() == [], \
            "%s: a migration came along" % what
        eager.execute("SET search_path = %s" % _schema(sc))
        r.execute("SET search_path = %s" % _schema(sc))
        assert_reads_equal(eager, r, sc.reads, what + ", reads")
    # pg_dump only read the source.
    with session(c, db, _schema(sc)) as lazy, session(c, EAGER_DB, _schema(sc)) as eager:
        assert retired_row_counts(lazy, _migration(sc)) == left[sc.name], \
            "%s: pg_dump moved rows out of the retired tables" % what
        assert lazy.execute("SELECT state FROM leapfrog.migrations WHERE name = %s",
                            [_migration(sc)]).fetchall() == [("running",)]
        assert_reads_equal(eager, lazy, sc.reads, what + ", the source's reads")


def _copy_lines(conn, qualified):
    with conn.cursor() as cur:
        with cur.copy(sql.SQL("COPY {} TO STDOUT").format(
                sql.Identifier(*qualified.split(".")))) as cp:
            data = b"".join(bytes(b) for b in cp)
    return sorted(data.decode().splitlines())


def test_copy_to_stdout(dump_cluster):
    """COPY of every table of the scenarios, in a read-write autocommit
    session of the migrating database: the eager rows (text format, in any
    order)."""
    needs_real_extension()
    c = dump_cluster
    _lazy_db(c, "copy", READ_SCENARIOS)
    bad = []
    with session(c, EAGER_DB) as eager, session(c, "copy") as lazy:
        tables = user_tables(eager)
        assert len(tables) >= len(READ_SCENARIOS)
        for t in tables:
            want = _copy_lines(eager, t)
            try:
                got = _copy_lines(lazy, t)
            except psycopg.Error as e:
                bad.append("COPY %s TO STDOUT failed: SQLSTATE %s: %s"
                           % (t, e.sqlstate, str(e).strip().splitlines()[0]))
                continue
            if got != want:
                bad.append("COPY %s TO STDOUT: %d lines, eager %d; %d lines only here, "
                           "%d only in eager" % (t, len(got), len(want), len(set(got) - set(want)),
                                                 len(set(want) - set(got))))
    assert not bad, "%d of %d tables:\n  %s" % (len(bad), len(tables), "\n  ".join(bad))


def test_copy_to_after_a_completion_the_snapshot_cannot_see(dump_cluster):
    """A REPEATABLE READ snapshot taken after start() and before complete()
    (pg_dump's, exported to pg_dump -j's workers; a logical replica's first
    sync): COPY of the new table fails with 40001, as a SELECT does.  The
    rows the completion moved are invisible to it, and their retired table
    is gone; a table COPY bypassed the executor's check and gave the table
    without them, with no error (0 rows of 10).  A later snapshot copies
    every row."""
    needs_real_extension()
    c = dump_cluster
    c.create_database("copydone")
    with session(c, "copydone") as a, session(c, "copydone") as b:
        a.execute("CREATE TABLE other (x int)")
        a.execute("CREATE TABLE old (id int PRIMARY KEY, v int)")
        a.execute("INSERT INTO old SELECT g, g FROM generate_series(1, 10) g")
        a.execute("""SELECT leapfrog.start('copydone', $$
            CREATE TABLE new (id int PRIMARY KEY, v int);
            INSERT INTO new SELECT id, v * 10 FROM old;
            DROP TABLE old; $$)""")
        a.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        a.execute("SELECT 1")
        b.execute("SELECT leapfrog.complete('copydone')")
        a.execute("SELECT count(*) FROM other")  # a new lock: the completion's invalidation
        with pytest.raises(psycopg.errors.SerializationFailure):
            _copy_lines(a, "public.new")
        a.execute("ROLLBACK")
        assert _copy_lines(a, "public.new") == sorted("%d\t%d" % (i, i * 10)
                                                       for i in range(1, 11))


# Read-only transactions: how each begins, and whether its reads must leave
# the retired rows alone (a serializable read-only transaction cannot
# migrate rows without breaking its guarantees).
READ_ONLY_MODES = {
    "serializable_deferrable": (["BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY DEFERRABLE"], True),
    "serializable_set_read_only": (["BEGIN ISOLATION LEVEL SERIALIZABLE",
                                    "SET TRANSACTION READ ONLY"], True),
    "read_committed_read_only": (["BEGIN READ ONLY"], False),
    "repeatable_read_read_only": (["BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"], False),
    # (autocommitted statements)
    "default_transaction_read_only": (["SET default_transaction_read_only = on"], False),
}


@pytest.mark.parametrize("mode", sorted(READ_ONLY_MODES))
def test_read_only_transaction_reads_equal_eager(dump_cluster, mode):
    """Every scenario's reads in one read-only transaction each: the eager
    answers (and, serializable, no row leaves the retired tables)."""
    needs_real_extension()
    c = dump_cluster
    begin, unchanged = READ_ONLY_MODES[mode]
    db = "ro_" + mode
    left = _lazy_db(c, db, READ_SCENARIOS)
    bad = []
    for sc in READ_SCENARIOS:
        with session(c, EAGER_DB, _schema(sc)) as eager, session(c, db, _schema(sc)) as lazy:
            want = answers(eager, sc.reads)
            for st in begin:
                lazy.execute(st)
            assert lazy.execute("SHOW transaction_read_only").fetchone()[0] == "on"
            try:
                assert_answers(want, lazy, sc.reads, "%s, %s" % (sc.name, mode))
            except AssertionError as e:
                bad.append(str(e))
            if lazy.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                lazy.execute("ROLLBACK")
            lazy.execute("RESET default_transaction_read_only")
            now = retired_row_counts(lazy, _migration(sc))
            if unchanged and now != left[sc.name]:
                bad.append("%s, %s: retired rows %r before the reads, %r after"
                           % (sc.name, mode, left[sc.name], now))
    assert not bad, "\n".join(bad)


def test_read_mode_compute(dump_cluster):
    """leapfrog.read_mode = compute (the default) in a read-write session:
    every scenario's reads give the eager answers and leave the retired rows
    alone, autocommitted, and inside a transaction after writes of its own
    that migrated rows (rolled back in both databases); then, with
    read_mode = migrate, the same reads migrate rows and still give the
    eager answers."""
    needs_real_extension()
    c = dump_cluster
    db = "compute"
    left = _lazy_db(c, db, READ_SCENARIOS)
    bad = []
    for sc in READ_SCENARIOS:
        what = "%s, read_mode = compute" % sc.name
        with session(c, EAGER_DB, _schema(sc)) as eager, session(c, db, _schema(sc)) as lazy:
            assert lazy.execute("SHOW leapfrog.read_mode").fetchone()[0] == "compute"
            with pytest.raises(psycopg.errors.InvalidParameterValue):
                lazy.execute("SET leapfrog.read_mode = 'bogus'")
            assert lazy.execute("SHOW transaction_read_only").fetchone()[0] == "off"
            try:
                assert_reads_equal(eager, lazy, sc.reads, what + ", autocommit")
            except AssertionError as e:
                bad.append(str(e))
            if retired_row_counts(lazy, _migration(sc)) != left[sc.name]:
                bad.append("%s: reads moved rows out of the retired tables" % what)
            # Writes of the transaction's own, then reads in it.
            with eager.transaction(force_rollback=True), lazy.transaction(force_rollback=True):
                for st in sc.late:
                    a, b = outcome(eager, st), outcome(lazy, st)
                    assert a == b, "%s: %r: eager %r, lazy %r" % (what, st, a, b)
                assert retired_row_counts(lazy, _migration(sc)) != left[sc.name], \
                    "%s: the late writes migrated nothing" % what
                try:
                    assert_reads_equal(eager, lazy, sc.reads, what + ", after own writes")
                except AssertionError as e:
                    bad.append(str(e))
            if retired_row_counts(lazy, _migration(sc)) != left[sc.name]:
                bad.append("%s: the rolled back transaction moved rows" % what)
            # read_mode = migrate migrates what the reads need, with the same answers.
            lazy.execute("SET leapfrog.read_mode = migrate")
            try:
                assert_reads_equal(eager, lazy, sc.reads, "%s, read_mode = migrate" % sc.name)
            except AssertionError as e:
                bad.append(str(e))
            now = retired_row_counts(lazy, _migration(sc))
            if sum(now.values()) >= sum(left[sc.name].values()):
                bad.append("%s, read_mode = migrate: the reads migrated nothing (%r)"
                           % (sc.name, now))
    assert not bad, "\n".join(bad)
