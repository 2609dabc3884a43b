"""What the Python tests share (imported as a module, not from conftest).

The clusters themselves come from python/leapfrog_cluster.py, the module the
benchmarks and the demo use too; the fixtures that make them are in
conftest.py.

Environment knobs:
  LEAPFROG_TEST_KEEP=1   keep the clusters' directories (printed at the end).
  LEAPFROG_TEST_CORES=1  start servers with pg_ctl -c (core files, see
                         /proc/sys/kernel/core_pattern).
  LEAPFROG_TEST_MOCK=1   harness self-check: no preload, and a PL/pgSQL
                         stand-in for the extension that runs scripts eagerly
                         (tests that need the real worker skip themselves).
"""

import os
import random
import signal
import threading
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from leapfrog_cluster import Cluster, wait_until  # noqa: F401  (wait_until: for the tests)

HERE = Path(__file__).resolve().parent
MOCK = os.environ.get("LEAPFROG_TEST_MOCK") == "1"
KEEP = os.environ.get("LEAPFROG_TEST_KEEP") == "1"

# Settings of every test cluster, before the test's own.
TEST_SETTINGS = {
    "fsync": "off",
    # synchronous_commit must stay on: with it off, a crash restart loses
    # commits still in the WAL buffers, which the crash tests would rightly
    # report as lost updates.  fsync off is safe, as the OS page cache
    # survives a kill -9 of every server process.
    "full_page_writes": "off",
    "max_connections": 60,
    "shared_buffers": "64MB",
    "max_worker_processes": 16,
    "restart_after_crash": "on",
    "log_min_messages": "warning",
    "log_line_prefix": "%m [%p] %b ",
    "timezone": "UTC",
    "deadlock_timeout": "100ms",
}

RETIRED_SQL = ("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
               "WHERE n.nspname = 'leapfrog_retired' ORDER BY 1")


def install_extension(conn):
    """CREATE EXTENSION leapfrog (or the eager stand-in under LEAPFROG_TEST_MOCK)."""
    if MOCK:
        conn.execute((HERE / "mock_leapfrog.sql").read_text())
    else:
        conn.execute("CREATE EXTENSION leapfrog")


class TestCluster(Cluster):
    """A cluster with the test settings, whose databases get the extension."""

    __test__ = False        # not a test class for pytest

    def __init__(self, template, gucs, name="lf"):
        super().__init__(settings={**TEST_SETTINGS, **gucs}, preload=not MOCK,
                         template=template, name=name, keep=KEEP)
        self.init()

    def create_database(self, dbname, extension=True):
        super().create_database(dbname, setup=install_extension if extension else None)

    def set_gucs(self, **gucs):
        self.set_settings(**gucs)


def needs_real_extension():
    if MOCK:
        pytest.skip("needs the real extension (LEAPFROG_TEST_MOCK=1)")


def retired_tables_after_completion(cluster, dbname, timeout=30):
    """Relations left in leapfrog_retired, polled (bounded): per the contract,
    completion drops the retired tables at once only if nobody holds a lock on
    them, otherwise the worker retries every second."""
    left = None
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / 0.2) + 5):
        left = [r[0] for r in cluster.sql(RETIRED_SQL, dbname=dbname)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return left


# ---------------------------------------------------------------------------
# Reads that must not migrate (test_standby.py, test_dump.py).
#
# Each scenario is a migration run eagerly (one transaction) in one database
# and handed to leapfrog.start() in another, then the same writes in both,
# which migrate some of the lazy database's rows and leave the others in
# leapfrog_retired (the cluster runs with leapfrog.background off).  Reads
# of the lazy database (on a standby, in a read-only transaction, with
# leapfrog.read_mode = compute, through pg_dump or COPY) must then give the
# eager database's answers.  The reads fix their order (ORDER BY a unique
# key) and are compared in order; values by repr (numeric scale included).

class ReadScenario:
    def __init__(self, name, setup, script, writes, reads, late):
        self.name = name
        self.setup = setup          # statements run in both databases first
        self.script = script        # the migration
        self.writes = writes        # run in both after the migration started
        self.reads = reads          # compared with the eager database's answers
        self.late = late            # more writes, of rows the writes left unmigrated

    def __repr__(self):
        return "ReadScenario(%s)" % self.name


_GROUP_SETUP = [
    "CREATE TABLE lines (id int PRIMARY KEY, k int NOT NULL, v numeric(10,2) NOT NULL, q int)",
    "INSERT INTO lines SELECT g, g % 300, ((g * 37) % 1000) / 10.0, "
    "  CASE WHEN g % 9 = 0 THEN NULL ELSE g % 5 END FROM generate_series(1, 3000) g",
    "CREATE INDEX lines_k ON lines (k)",
]
_GROUP_SCRIPT = """
CREATE TABLE totals (k int PRIMARY KEY, total numeric, n bigint, q bigint);
INSERT INTO totals SELECT k, sum(v), count(*), sum(q) FROM lines GROUP BY k;
"""
_GROUP_WRITES = [
    "UPDATE totals SET total = total + 1 WHERE k BETWEEN 10 AND 20",
    "DELETE FROM totals WHERE k = 42",
    "INSERT INTO totals VALUES (1000, 0, 0, NULL)",
]
_GROUP_READS = [
    "SELECT * FROM totals WHERE k = 5",
    "SELECT * FROM totals WHERE k = 42",
    "SELECT * FROM totals WHERE k = 1000",
    "SELECT * FROM totals WHERE k IN (7, 8, 9, 10, 400) ORDER BY k",
    "SELECT * FROM totals WHERE k BETWEEN 0 AND 30 ORDER BY k",
    "SELECT count(*), sum(total), sum(n), sum(q) FROM totals",
    "SELECT * FROM totals ORDER BY k",
]

_GROUP_LATE = ["UPDATE totals SET n = n + 100 WHERE k BETWEEN 200 AND 210"]

READ_SCENARIOS = [
    # Same-name replacement: a new table with wider types takes the old name.
    ReadScenario(
        "replace",
        ["CREATE TABLE acct (id int PRIMARY KEY, owner int NOT NULL, bal int NOT NULL, note text)",
         "INSERT INTO acct SELECT g, g % 37, (g * 7919) % 1000 - 300, "
         "  CASE WHEN g % 11 = 0 THEN NULL ELSE 'n' || g END FROM generate_series(1, 2000) g",
         "CREATE INDEX acct_owner ON acct (owner)"],
        """
        CREATE TABLE acct_v2 (id bigint PRIMARY KEY, owner int NOT NULL, bal bigint NOT NULL,
                              note text);
        CREATE INDEX acct_v2_owner ON acct_v2 (owner);
        INSERT INTO acct_v2 SELECT id, owner, bal, note FROM acct;
        DROP TABLE acct;
        ALTER TABLE acct_v2 RENAME TO acct;
        """,
        ["UPDATE acct SET bal = bal + 3000000000 WHERE id BETWEEN 200 AND 260",
         "DELETE FROM acct WHERE id BETWEEN 100 AND 120",
         "INSERT INTO acct VALUES (5001, 7, 4000000000, 'big'), (5002, 3, -1, NULL)",
         "UPDATE acct SET note = 'owner 3' WHERE owner = 3"],
        ["SELECT * FROM acct WHERE id = 42",
         "SELECT * FROM acct WHERE id = 110",
         "SELECT * FROM acct WHERE id = 5001",
         "SELECT * FROM acct WHERE id BETWEEN 190 AND 300 ORDER BY id",
         "SELECT * FROM acct WHERE owner = 3 ORDER BY id",
         "SELECT * FROM acct WHERE owner = 5 AND bal > 0 ORDER BY id",
         "SELECT count(*), sum(bal), count(note), min(id), max(id) FROM acct",
         "SELECT owner, count(*), sum(bal), max(note) FROM acct GROUP BY owner ORDER BY owner",
         "SELECT * FROM acct ORDER BY id"],
        ["UPDATE acct SET bal = -bal WHERE id BETWEEN 1500 AND 1520"]),
    # The same type change as an ALTER TABLE (a lazy replacement in place).
    ReadScenario(
        "alter",
        ["CREATE TABLE item (id int PRIMARY KEY, qty int NOT NULL, tag text)",
         "INSERT INTO item SELECT g, (g * 13) % 1000, "
         "  CASE WHEN g % 97 = 0 THEN NULL ELSE 't' || (g % 40) END "
         "  FROM generate_series(1, 1500) g",
         "CREATE INDEX item_tag ON item (tag)"],
        "ALTER TABLE item ALTER COLUMN qty TYPE bigint;",
        ["UPDATE item SET qty = qty + 5000000000 WHERE id BETWEEN 10 AND 40",
         "DELETE FROM item WHERE tag = 't7'",
         "INSERT INTO item VALUES (9001, 6000000000, 't7'), (9002, 1, NULL)"],
        ["SELECT * FROM item WHERE id = 25",
         "SELECT * FROM item WHERE id = 47",
         "SELECT * FROM item WHERE tag = 't7' ORDER BY id",
         "SELECT * FROM item WHERE tag = 't8' ORDER BY id",
         "SELECT * FROM item WHERE id BETWEEN 30 AND 90 ORDER BY id",
         "SELECT count(*), sum(qty), count(tag) FROM item",
         "SELECT tag, count(*), sum(qty) FROM item GROUP BY tag ORDER BY tag",
         "SELECT * FROM item ORDER BY id"],
        ["UPDATE item SET qty = -qty WHERE id BETWEEN 1200 AND 1230"]),
    # One table split into two (one of them filtered).
    ReadScenario(
        "split",
        ["CREATE TABLE cust (id int PRIMARY KEY, name text NOT NULL, city text, "
         "  balance numeric(12,2) NOT NULL)",
         "INSERT INTO cust SELECT g, 'c' || g, (ARRAY['Oslo', 'Lyon', 'Graz', NULL])[1 + g % 4], "
         "  ((g * 31) % 200 - 100) / 4.0 FROM generate_series(1, 2000) g"],
        """
        CREATE TABLE cust_pub (id int PRIMARY KEY, name text NOT NULL, city text);
        CREATE TABLE cust_priv (id int PRIMARY KEY, balance numeric(12,2) NOT NULL);
        INSERT INTO cust_pub SELECT id, name, city FROM cust;
        INSERT INTO cust_priv SELECT id, balance FROM cust WHERE balance <> 0;
        DROP TABLE cust;
        """,
        ["UPDATE cust_priv SET balance = balance + 10 WHERE id BETWEEN 300 AND 340",
         "DELETE FROM cust_pub WHERE id BETWEEN 500 AND 510",
         "INSERT INTO cust_pub VALUES (3001, 'new', 'Oslo')",
         "INSERT INTO cust_priv VALUES (3001, 5.5)",
         "UPDATE cust_pub SET city = 'Bern' WHERE id = 77"],
        ["SELECT * FROM cust_pub WHERE id = 77",
         "SELECT * FROM cust_priv WHERE id = 77",
         "SELECT * FROM cust_pub WHERE id = 505",
         "SELECT * FROM cust_priv WHERE id BETWEEN 290 AND 350 ORDER BY id",
         "SELECT count(*), count(city) FROM cust_pub",
         "SELECT count(*), sum(balance) FROM cust_priv",
         "SELECT p.id, p.name, p.city, v.balance FROM cust_pub p JOIN cust_priv v USING (id) "
         "  WHERE p.id BETWEEN 250 AND 350 ORDER BY p.id",
         "SELECT p.city, count(*), count(v.id), sum(v.balance) FROM cust_pub p "
         "  LEFT JOIN cust_priv v USING (id) GROUP BY p.city ORDER BY p.city",
         "SELECT * FROM cust_pub ORDER BY id",
         "SELECT * FROM cust_priv ORDER BY id"],
        ["DELETE FROM cust_priv WHERE id BETWEEN 1400 AND 1420",
         "UPDATE cust_pub SET name = upper(name) WHERE id BETWEEN 1600 AND 1610"]),
    # GROUP BY mapping, its input dropped.
    ReadScenario("group", _GROUP_SETUP, _GROUP_SCRIPT + "DROP TABLE lines;\n",
                 _GROUP_WRITES, _GROUP_READS, _GROUP_LATE),
    # GROUP BY mapping whose input stays live (and is written after start()).
    ReadScenario(
        "group_live", _GROUP_SETUP, _GROUP_SCRIPT,
        _GROUP_WRITES + [
            "INSERT INTO lines VALUES (5001, 5, 99.99, 1), (5002, 400, 1.00, 2)",
            "UPDATE lines SET v = v + 1 WHERE k = 7",
            "DELETE FROM lines WHERE k = 8",
            "UPDATE lines SET k = 9 WHERE id = 310"],
        _GROUP_READS + [
            "SELECT * FROM lines WHERE k = 7 ORDER BY id",
            "SELECT * FROM lines WHERE id = 310",
            "SELECT * FROM lines WHERE id BETWEEN 1000 AND 1100 ORDER BY id",
            "SELECT k, count(*), sum(v) FROM lines WHERE k BETWEEN 0 AND 12 GROUP BY k ORDER BY k",
            "SELECT count(*), sum(v), sum(q) FROM lines",
            "SELECT t.k, t.total, t.n, count(l.id), sum(l.v) FROM totals t "
            "  LEFT JOIN lines l USING (k) WHERE t.k BETWEEN 0 AND 30 "
            "  GROUP BY t.k, t.total, t.n ORDER BY t.k",
            "SELECT * FROM lines ORDER BY id"],
        _GROUP_LATE + ["UPDATE lines SET q = 0 WHERE k = 250"]),
    # Two-table join mapping (fan-out on both sides, NULL keys, keys of one
    # side only), both inputs dropped.
    ReadScenario(
        "join",
        ["CREATE TABLE a (id int PRIMARY KEY, k int, x int NOT NULL)",
         "INSERT INTO a SELECT g, CASE WHEN g % 50 = 0 THEN NULL ELSE g % 200 END, g * 3 "
         "  FROM generate_series(1, 800) g",
         "CREATE INDEX a_k ON a (k)",
         "CREATE TABLE b (id int PRIMARY KEY, k int, y text)",
         "INSERT INTO b SELECT g, g % 250, 'y' || g FROM generate_series(1, 500) g",
         "CREATE INDEX b_k ON b (k)"],
        """
        CREATE TABLE j (a_id int NOT NULL, b_id int NOT NULL, k int NOT NULL, x int, y text,
                        PRIMARY KEY (a_id, b_id));
        CREATE INDEX j_k ON j (k);
        INSERT INTO j SELECT a.id, b.id, a.k, a.x, b.y FROM a JOIN b ON a.k = b.k;
        DROP TABLE a;
        DROP TABLE b;
        """,
        ["UPDATE j SET x = -x WHERE k BETWEEN 20 AND 25",
         "DELETE FROM j WHERE k = 30",
         "INSERT INTO j VALUES (9001, 9001, 5, 1, 'new')",
         "UPDATE j SET y = 'changed' WHERE a_id = 101"],
        ["SELECT * FROM j WHERE k = 7 ORDER BY a_id, b_id",
         "SELECT * FROM j WHERE k = 30 ORDER BY a_id, b_id",
         "SELECT * FROM j WHERE a_id = 33 ORDER BY b_id",
         "SELECT * FROM j WHERE b_id = 40 ORDER BY a_id",
         "SELECT * FROM j WHERE k BETWEEN 15 AND 28 ORDER BY a_id, b_id",
         "SELECT count(*), sum(x), count(DISTINCT k) FROM j",
         "SELECT k, count(*), sum(x) FROM j GROUP BY k ORDER BY k",
         "SELECT * FROM j ORDER BY a_id, b_id"],
        ["DELETE FROM j WHERE k BETWEEN 150 AND 155"]),
]

READ_SCENARIO_IDS = [sc.name for sc in READ_SCENARIOS]


def session(cluster, dbname, schema=None):
    """An autocommit connection for the comparisons (transactions: BEGIN ...
    as a statement): UTC, bounded waits (the data sets are small: a
    statement taking seconds is stuck), search_path schema if given."""
    conn = cluster.connect(dbname, autocommit=True)
    conn.execute("SET TimeZone = 'UTC'")
    conn.execute("SET statement_timeout = '20s'")
    conn.execute("SET lock_timeout = '10s'")
    if schema:
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
    return conn


def outcome(conn, query):
    """What a statement gives, comparably: ("rows", columns, rows as reprs
    in the order received) or ("count", rowcount)."""
    cur = conn.execute(query)
    if cur.description is None:
        return ("count", cur.rowcount)
    return ("rows", [(d.name, d.type_code) for d in cur.description],
            [tuple(repr(v) for v in r) for r in cur.fetchall()])


def run_scenario(conn, sc, migration=None):
    """The scenario in the connection's database (and schema): its tables,
    then its script, eagerly in one transaction (migration None) or through
    leapfrog.start(migration, script), then its writes.  Their outcomes."""
    for st in sc.setup:
        conn.execute(st)
    tables = [sql.Identifier(*r) for r in conn.execute(
        "SELECT schemaname, tablename FROM pg_tables WHERE schemaname = current_schema()")]
    conn.execute(sql.SQL("ANALYZE {}").format(sql.SQL(", ").join(tables)))
    if migration is None:
        with conn.transaction():
            conn.execute(sc.script)
    else:
        conn.execute("SELECT leapfrog.start(%s, %s)", [migration, sc.script])
    return [outcome(conn, st) for st in sc.writes]


def same_writes(eager, lazy, stmts, what):
    """Each statement in both databases: the same outcomes."""
    for st in stmts:
        a, b = outcome(eager, st), outcome(lazy, st)
        assert a == b, "%s: %r: eager %r, lazy %r" % (what, st, a, b)


def retired_row_counts(conn, migration=None):
    """{input table: its rows left unmigrated} of the connection's database's
    retired tables, or of one migration's inputs: a retired table's rows, or
    a live input's rows whose group is not in its table of done keys, summed
    over the GROUP BY mappings that read it (tracked in place, src/live.c;
    NULL keys equal).  A join's other input, whose key columns are not the
    ones its table of done keys is named after, counts all its rows (an
    upper bound: its rows move with the join's keys).  Names are
    schema-qualified."""
    if migration is None:
        rels = conn.execute(
            "SELECT c.oid, false FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = 'leapfrog_retired' "
            "AND c.relkind IN ('r', 'p') "
            "AND c.oid NOT IN (SELECT done_keys FROM leapfrog.mapping "
            "                  WHERE done_keys IS NOT NULL) ORDER BY 1").fetchall()
    else:
        rels = conn.execute(
            "SELECT i.relid, i.live_keys IS NOT NULL FROM leapfrog.input i JOIN leapfrog.migration m "
            "ON m.id = i.migration_id WHERE m.name = %s ORDER BY 1", [migration]).fetchall()
    counts = {}
    for relid, live in rels:
        name = conn.execute(
            "SELECT format('%%I.%%I', n.nspname, c.relname) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = %s",
            [relid]).fetchone()[0]
        if not live:
            counts[name] = conn.execute("SELECT count(*) FROM %s" % name).fetchone()[0]
            continue
        counts[name] = 0
        for (keys,) in conn.execute(
                "SELECT done_keys FROM leapfrog.mapping WHERE input_relid = %s "
                "AND done_keys IS NOT NULL ORDER BY id", [relid]).fetchall():
            keys_name, cols = conn.execute(
                "SELECT format('%%I.%%I', n.nspname, c.relname), "
                "       array_agg(quote_ident(a.attname) ORDER BY a.attnum) "
                "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
                "AND NOT a.attisdropped WHERE c.oid = %s GROUP BY 1", [keys]).fetchone()
            mine = conn.execute(
                "SELECT count(*) FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
                "AND NOT attisdropped AND quote_ident(attname) = ANY (%s)",
                [relid, cols]).fetchone()[0] == len(cols)
            if not mine:
                counts[name] += conn.execute("SELECT count(*) FROM %s" % name).fetchone()[0]
                continue
            match = " AND ".join("d.%s IS NOT DISTINCT FROM l.%s" % (col, col) for col in cols)
            counts[name] += conn.execute(
                "SELECT count(*) FROM %s l WHERE NOT EXISTS (SELECT FROM %s d WHERE %s)"
                % (name, keys_name, match)).fetchone()[0]
    return counts


def assert_rows_left(conn, migration, what):
    """The writes left rows unmigrated: else reads of them check nothing.
    The counts, for a later comparison."""
    left = retired_row_counts(conn, migration)
    assert left and sum(left.values()) > 0, \
        "%s: no row left unmigrated (%r): nothing to check" % (what, left)
    return left


def _short(x, n=600):
    s = repr(x)
    return s if len(s) <= n else s[:n] + "...(%d chars)" % len(s)


def _describe_diff(want, got):
    if want[0] != got[0] or want[0] == "count" or want[1] != got[1]:
        return "eager %s\n      got   %s" % (_short(want), _short(got))
    a, b = want[2], got[2]
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return ("%d rows eager, %d got; first difference at row %d:\n      eager %s\n"
                    "      got   %s" % (len(a), len(b), i, _short(x), _short(y)))
    i = min(len(a), len(b))
    return ("%d rows eager, %d got; first extra row: %s"
            % (len(a), len(b), _short((a if len(a) > len(b) else b)[i])))


def answers(conn, queries):
    """The outcomes of the queries on conn, in order."""
    return [outcome(conn, q) for q in queries]


def read_mismatches(want, other, queries):
    """The queries whose answer on `other` is not the one in want (their
    answers in the eager database, compared in order), each with what
    differs; a failed query is one (with its SQLSTATE and message), and
    inside an aborted transaction the last."""
    bad = []
    for q, w in zip(queries, want):
        try:
            got = outcome(other, q)
        except psycopg.Error as e:
            bad.append("%s\n      failed: SQLSTATE %s: %s"
                       % (q, e.sqlstate, str(e).strip().splitlines()[0]))
            if (other.info.transaction_status
                    == psycopg.pq.TransactionStatus.INERROR):
                break
            continue
        if got != w:
            bad.append("%s\n      %s" % (q, _describe_diff(w, got)))
    return bad


def assert_answers(want, other, queries, what):
    """The queries on other give the answers want (see answers())."""
    bad = read_mismatches(want, other, queries)
    assert not bad, "%s: %d of %d reads differ from the eager database's:\n  %s" % (
        what, len(bad), len(queries), "\n  ".join(bad))


def assert_reads_equal(eager, other, queries, what):
    """The queries give the same answers on other as on eager, now."""
    assert_answers(answers(eager, queries), other, queries, what)


USER_TABLES_SQL = (
    "SELECT c.oid, n.nspname, c.relname FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN "
    "('pg_catalog', 'information_schema', 'leapfrog', 'leapfrog_retired') "
    "AND n.nspname !~ '^pg_(toast|temp)' ORDER BY 2, 3")


def user_tables(conn):
    """schema.table of every table outside the system schemas and Leapfrog's."""
    return ["%s.%s" % (nsp, rel) for _, nsp, rel in conn.execute(USER_TABLES_SQL).fetchall()]


def user_tables_state(conn, schemas=None):
    """{schema.table: {"columns": [(name, type, not null)], "indexes",
    "constraints": their definitions, "rows": sorted reprs}} of every table
    outside the system schemas and Leapfrog's (of the given schemas only)."""
    state = {}
    for oid, nsp, rel in conn.execute(USER_TABLES_SQL).fetchall():
        if schemas is not None and nsp not in schemas:
            continue
        cols = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute "
            "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            [oid]).fetchall()
        idx = conn.execute(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s ORDER BY 1",
            [oid]).fetchall()
        cons = conn.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = %s ORDER BY 1", [oid]).fetchall()
        rows = sorted(tuple(repr(v) for v in r) for r in conn.execute(
            sql.SQL("SELECT * FROM {}").format(sql.Identifier(nsp, rel))).fetchall())
        state["%s.%s" % (nsp, rel)] = {"columns": cols, "indexes": idx, "constraints": cons,
                                       "rows": rows}
    return state


def assert_same_tables(want, got, what):
    """Two user_tables_state results: the same tables, columns, indexes,
    constraints and rows."""
    assert sorted(got) == sorted(want), "%s: tables %r, eager has %r" % (
        what, sorted(got), sorted(want))
    for name in sorted(want):
        for part in ("columns", "indexes", "constraints"):
            assert got[name][part] == want[name][part], "%s: %s of %s: %r, eager %r" % (
                what, part, name, got[name][part], want[name][part])
        a, b = want[name]["rows"], got[name]["rows"]
        if a != b:
            sa, sb = set(a), set(b)
            raise AssertionError(
                "%s: rows of %s differ: %d, eager %d; %d only here, e.g. %s; %d only in "
                "eager, e.g. %s" % (what, name, len(b), len(a), len(sb - sa),
                                    _short(sorted(sb - sa)[:3]), len(sa - sb),
                                    _short(sorted(sa - sb)[:3])))


class ClientThreads:
    """Threads each running `one(conn, rnd)` in a loop until stopped, on a
    connection to dbname of cluster c (`setup(conn)` runs on each new one).
    A connection error (a crash, a restart) makes a thread reconnect; the
    `tolerated` errors (a conflict the workload can meet) are skipped; any
    other is recorded in errors_seen and the thread reconnects."""

    def __init__(self, c, dbname, n, seed, one, setup=None, tolerated=()):
        self.c, self.dbname, self.one, self.setup = c, dbname, one, setup
        self.tolerated = tuple(tolerated)
        self.stop_ev = threading.Event()
        self.committed, self.errors_seen = 0, []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(seed + i,), daemon=True)
                        for i in range(n)]

    def _run(self, seed):
        rnd = random.Random(seed)
        conn = None
        while not self.stop_ev.is_set():
            try:
                if conn is None:
                    conn = self.c.connect(self.dbname)
                    if self.setup:
                        self.setup(conn)
                self.one(conn, rnd)
                with self.lock:
                    self.committed += 1
            except (psycopg.OperationalError, psycopg.errors.AdminShutdown,
                    psycopg.errors.CrashShutdown, psycopg.errors.CannotConnectNow):
                conn = None
                time.sleep(0.1)
            except self.tolerated:
                pass
            except psycopg.Error as e:
                with self.lock:
                    self.errors_seen.append(repr(e))
                conn = None
        if conn is not None:
            conn.close()

    def start(self):
        for t in self.threads:
            t.start()

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(30)

    def wait_committed(self, n, timeout):
        """Whether n more transactions committed within timeout seconds."""
        target = self.committed + n
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.committed >= target:
                return True
            time.sleep(0.05)
        return False


def kill_workers(c, dbname):
    """SIGKILL every leapfrog worker running in dbname; how many were found.
    The postmaster answers the first kill by ending every other backend
    (crash restart), so a later worker may be gone before its own kill."""
    pids = c.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'leapfrog worker'",
                 dbname=dbname)
    assert pids, "no worker running"
    for i, (pid,) in enumerate(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            if i == 0:
                raise
    return len(pids)


def kill_midway(c, dbname, clients, rows_left, check, start_left, first=0.2):
    """The crash sequence of the kill tests: once a share `first` of
    start_left rows are migrated (rows_left() says what is left) with the clients
    committing, check(); SIGKILL the postmaster (restarted), wait for the
    clients to commit again, check(); then SIGKILL every running worker,
    wait, check().  Each kill must find rows left, or it tested nothing."""
    assert clients.wait_committed(50, 60), clients.errors_seen[:5]
    wait_until(lambda: rows_left() <= start_left * (1 - first), 120, interval=0.05,
               what="%d%% of the rows migrated" % (100 * first))
    check()
    before = rows_left()
    assert before > 0, "migrated before the crash: nothing to test"
    c.kill_postmaster(restart=True)
    print("postmaster killed with %d of %d rows left" % (before, start_left))
    assert clients.wait_committed(50, 120), clients.errors_seen[:5]
    check()
    wait_until(lambda: c.sql("SELECT count(*) FROM pg_stat_activity WHERE backend_type "
                             "= 'leapfrog worker'", dbname=dbname)[0][0] > 0, 60,
               what="a worker running again")
    before = rows_left()
    assert before > 0, "migrated before the worker's kill: nothing to test"
    kill_workers(c, dbname)
    print("worker killed with %d rows left" % before)
    time.sleep(1)
    assert clients.wait_committed(50, 120), clients.errors_seen[:5]
    check()
