"""Concurrent stress with invariants, background workers on (three).

A bank table is replaced by a new version (same name, new types, a new
column) with leapfrog.start, written as CREATE TABLE + INSERT ... SELECT +
DROP + RENAME, or as ALTER TABLE and CREATE INDEX (a lazy replacement);
then client threads run, at mixed isolation
levels, transfers between random accounts, increments of a counter column,
upserts on existing keys, inserts and deletes of their own zero-balance rows
and point reads, while the background worker migrates the rest.  Invariants:
  - the sum of balances never changes (checked mid-run and at the end);
  - the growth of sum(hits) equals the increments the clients committed;
  - at the end every key exists exactly once: the original ids plus the
    committed inserts minus the committed deletes;
  - every point read of an original id finds exactly one row.
40001 and 40P01 are retried, counted and reported.
Duration: LEAPFROG_STRESS_SECONDS (default 35).
"""

import datetime
import os
import random
import re
import threading
import time
from decimal import Decimal

import psycopg
import pytest

from support import MOCK, needs_real_extension, retired_tables_after_completion

N = 100_000
GROUP = 100            # transfers stay within a group of 100 consecutive ids
NCLIENTS = 6
DURATION = float(os.environ.get("LEAPFROG_STRESS_SECONDS", "35"))
RETRYABLE = ("40001", "40P01")

MIGRATION = """
CREATE TABLE bank_v2 (id int PRIMARY KEY, branch int NOT NULL, balance numeric(18,2),
                      hits bigint NOT NULL, tier text);
CREATE INDEX ON bank_v2 (branch);
INSERT INTO bank_v2 SELECT id, branch, balance, hits,
       CASE WHEN balance > 1500 THEN 'gold' ELSE 'std' END FROM bank;
DROP TABLE bank;
ALTER TABLE bank_v2 RENAME TO bank;
"""

# The same change written as ALTER TABLE, which Leapfrog replaces lazily
# (a type change that rewrites, a CHECK that scans, an index).
ALTER_MIGRATION = """
ALTER TABLE bank ALTER COLUMN branch TYPE bigint, ALTER COLUMN balance TYPE numeric(18,2),
  ADD COLUMN tier text DEFAULT 'std', ADD CONSTRAINT bank_balance_known CHECK (balance IS NOT NULL);
CREATE INDEX ON bank (branch);
"""


class Client(threading.Thread):
    def __init__(self, cluster, cid, deadline):
        super().__init__(daemon=True, name="client-%d" % cid)
        self.cluster = cluster
        self.cid = cid
        self.deadline = deadline
        self.rng = random.Random(1000 + cid)
        self.increments = 0
        self.inserted = set()
        self.deleted = set()
        self.commits = {}
        self.retries = {"40001": 0, "40P01": 0}
        self.gave_up = 0
        self.errors = []
        self.next_id = 10_000_000 * (cid + 1)

    def run(self):
        try:
            conn = self.cluster.connect("app", application_name="lf-stress-%d" % self.cid)
            conn.execute("SET statement_timeout = '30s'")
        except psycopg.Error as e:
            self.errors.append(("connect", repr(e)))
            return
        try:
            for _ in range(10 ** 7):
                if time.monotonic() > self.deadline or len(self.errors) > 20:
                    break
                self._one(conn)
        finally:
            conn.close()

    def _one(self, conn):
        r = self.rng.random()
        kind = ("transfer" if r < 0.55 else "increment" if r < 0.75 else "upsert" if r < 0.82
                else "insert" if r < 0.87 else "delete" if r < 0.90 else "read")
        iso = self.rng.choice(["READ COMMITTED"] * 3 + ["REPEATABLE READ"] * 2 + ["SERIALIZABLE"])
        plan = self._plan(kind)
        if plan is None:
            return
        for attempt in range(100):
            try:
                conn.execute("BEGIN ISOLATION LEVEL " + iso)
                effect = plan(conn)
                conn.execute("COMMIT")
            except psycopg.Error as e:
                try:
                    conn.execute("ROLLBACK")
                except psycopg.Error:
                    pass
                if e.sqlstate in RETRYABLE:
                    self.retries[e.sqlstate] += 1
                    time.sleep(0.001 * self.rng.randint(0, 10))
                    continue
                self.errors.append((kind, iso, e.sqlstate, str(e).strip()[:500]))
                if conn.broken:
                    raise
                return
            except AssertionError as e:
                try:
                    conn.execute("ROLLBACK")
                except psycopg.Error:
                    pass
                self.errors.append((kind, iso, "assert", str(e)))
                return
            self._commit(kind, effect)
            return
        self.gave_up += 1

    def _commit(self, kind, effect):
        self.commits[kind] = self.commits.get(kind, 0) + 1
        if kind in ("increment", "upsert"):
            self.increments += effect
        elif kind == "insert":
            self.inserted.add(effect)
        elif kind == "delete":
            self.deleted.add(effect)

    def _plan(self, kind):
        rng = self.rng
        if kind == "transfer":
            g = rng.randrange(N // GROUP)
            a, b = rng.sample(range(g * GROUP + 1, g * GROUP + GROUP + 1), 2)
            amt = Decimal(rng.randint(1, 5000)) / 100
            if rng.random() < 0.5:
                def plan(conn):
                    c1 = conn.execute("UPDATE bank SET balance = balance - %s WHERE id = %s",
                                      [amt, a]).rowcount
                    c2 = conn.execute("UPDATE bank SET balance = balance + %s WHERE id = %s",
                                      [amt, b]).rowcount
                    assert (c1, c2) == (1, 1), "transfer %d->%d updated %r rows" % (a, b, (c1, c2))
            else:
                def plan(conn):
                    c = conn.execute(
                        "UPDATE bank SET balance = balance + CASE WHEN id = %s THEN -%s "
                        "ELSE %s END WHERE id IN (%s, %s)", [a, amt, amt, a, b]).rowcount
                    assert c == 2, "transfer %d->%d updated %d rows" % (a, b, c)
            return plan
        if kind == "increment":
            if rng.random() < 0.6:
                i = rng.randint(1, N)

                def plan(conn):
                    c = conn.execute("UPDATE bank SET hits = hits + 1 WHERE id = %s", [i]).rowcount
                    assert c == 1, "increment of %d updated %d rows" % (i, c)
                    return c
            else:
                br, lo = rng.randint(0, 9), rng.randint(1, N - 200)

                def plan(conn):
                    c = conn.execute("UPDATE bank SET hits = hits + 1 WHERE branch = %s "
                                     "AND id BETWEEN %s AND %s", [br, lo, lo + 199]).rowcount
                    want = sum(1 for k in range(lo, lo + 200) if k % 10 == br)
                    assert c == want, "range increment updated %d rows, want %d" % (c, want)
                    return c
            return plan
        if kind == "upsert":
            i = rng.randint(1, N)

            def plan(conn):
                r = conn.execute(
                    "INSERT INTO bank (id, branch, balance, hits, tier) VALUES (%s, 0, 0, 0, 'new') "
                    "ON CONFLICT (id) DO UPDATE SET hits = bank.hits + 1 "
                    "RETURNING (xmax <> 0) AS updated", [i]).fetchall()
                assert r == [(True,)], "upsert on existing id %d inserted: %r" % (i, r)
                return 1
            return plan
        if kind == "insert":
            self.next_id += 1
            i = self.next_id

            def plan(conn):
                conn.execute("INSERT INTO bank (id, branch, balance, hits, tier) "
                             "VALUES (%s, %s, 0, 0, 'new')", [i, i % 10])
                return i
            return plan
        if kind == "delete":
            mine = sorted(self.inserted - self.deleted)
            if not mine:
                return None
            i = rng.choice(mine)

            def plan(conn):
                c = conn.execute("DELETE FROM bank WHERE id = %s AND balance = 0", [i]).rowcount
                assert c == 1, "delete of own row %d removed %d rows" % (i, c)
                return i
            return plan
        i = rng.randint(1, N)

        def plan(conn):
            rows = conn.execute("SELECT id, branch FROM bank WHERE id = %s", [i]).fetchall()
            assert rows == [(i, i % 10)], "point read of %d: %r" % (i, rows)
        return plan


def initial_balance(i):
    return 1000 + (i * 7919) % 1000


class InvariantReader(threading.Thread):
    """Checks the sum of a random group of accounts (invariant under the
    group-local transfers) all along, and the sum of all balances from
    full_at on (a full read migrates every remaining row at once)."""

    def __init__(self, cluster, full_at, deadline, total):
        super().__init__(daemon=True, name="invariant-reader")
        self.cluster = cluster
        self.full_at = full_at
        self.deadline = deadline
        self.total = total
        self.rng = random.Random(7)
        self.group_checks = 0
        self.full_checks = 0
        self.retries = 0
        self.errors = []

    def run(self):
        with self.cluster.connect("app", application_name="lf-stress-reader") as conn:
            conn.execute("SET statement_timeout = '60s'")
            for _ in range(10 ** 6):
                now = time.monotonic()
                if now > self.deadline or len(self.errors) > 10:
                    return
                full = now >= self.full_at and self.rng.random() < 0.1
                iso = self.rng.choice(["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"])
                try:
                    conn.execute("BEGIN ISOLATION LEVEL " + iso)
                    if full:
                        s, n, d = conn.execute("SELECT sum(balance), count(*), count(DISTINCT id) "
                                               "FROM bank").fetchone()
                        want = self.total
                    else:
                        g = self.rng.randrange(N // GROUP)
                        lo, hi = g * GROUP + 1, g * GROUP + GROUP
                        s, n, d = conn.execute(
                            "SELECT sum(balance), count(*), count(DISTINCT id) FROM bank "
                            "WHERE id BETWEEN %s AND %s", [lo, hi]).fetchone()
                        want = sum(initial_balance(i) for i in range(lo, hi + 1))
                    conn.execute("COMMIT")
                except psycopg.Error as e:
                    conn.execute("ROLLBACK")
                    if e.sqlstate in RETRYABLE:
                        self.retries += 1
                        continue
                    self.errors.append((iso, e.sqlstate, str(e)))
                    continue
                if full:
                    self.full_checks += 1
                    ok = s == want and n == d
                else:
                    self.group_checks += 1
                    ok = s == want and n == d == GROUP
                if not ok:
                    self.errors.append("%s %s read: sum %s (want %s), %d rows, %d distinct ids"
                                       % (iso, "full" if full else "group", s, want, n, d))
                time.sleep(0.05)


@pytest.mark.parametrize("script", [MIGRATION, ALTER_MIGRATION], ids=["replace", "alter"])
def test_stress_transfers_and_increments(make_cluster, script):
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 500,
                        "leapfrog.background_workers": 3,
                        "leapfrog.batch_size": 100, "leapfrog.background_naptime": 60})
    c.create_database("app")
    with c.connect("app") as conn:
        conn.execute("CREATE TABLE bank (id int PRIMARY KEY, branch int NOT NULL, "
                     "balance numeric(16,2), hits bigint NOT NULL)")
        conn.execute("INSERT INTO bank SELECT i, i %% 10, 1000 + (i * 7919) %% 1000, i %% 7 "
                     "FROM generate_series(1, %s) i", [N])
        conn.execute("VACUUM ANALYZE bank")
        total, hits0 = conn.execute("SELECT sum(balance), sum(hits) FROM bank").fetchone()
        t0 = time.monotonic()
        conn.execute("SELECT leapfrog.start('bank_v2', %s)", [script])
        print("start(): %.1f ms" % ((time.monotonic() - t0) * 1e3))

    begin = time.monotonic()
    deadline = begin + DURATION
    clients = [Client(c, i, deadline) for i in range(NCLIENTS)]
    reader = InvariantReader(c, begin + DURATION * 0.4, deadline, total)
    for t in clients + [reader]:
        t.start()
    progress = []
    for _ in range(int(DURATION * 2) + 20):
        if time.monotonic() > deadline:
            break
        try:
            progress.append(round(time.monotonic() - begin, 1))
            progress.append(c.sql("SELECT leapfrog.remaining('bank_v2')", dbname="app")[0][0]
                            if not MOCK else 0)
        except psycopg.Error as e:
            progress.append(e.sqlstate)
        time.sleep(2)
    for t in clients + [reader]:
        t.join(90)
    assert not any(t.is_alive() for t in clients + [reader]), "client threads hang"

    with c.connect("app") as conn:
        done = conn.execute("SELECT leapfrog.wait('bank_v2', 90)").fetchone()[0]
        mig = conn.execute("SELECT name, state, tuples_total, tuples_migrated, error "
                           "FROM leapfrog.migrations").fetchall()
        s, h, n, d = conn.execute("SELECT sum(balance), sum(hits), count(*), count(DISTINCT id) "
                                  "FROM bank").fetchone()
        ids = {r[0] for r in conn.execute("SELECT id FROM bank").fetchall()}
    retired = retired_tables_after_completion(c, "app")

    stats = {
        "commits": {k: sum(cl.commits.get(k, 0) for cl in clients)
                    for k in ("transfer", "increment", "upsert", "insert", "delete", "read")},
        "retries_40001": sum(cl.retries["40001"] for cl in clients),
        "retries_40P01": sum(cl.retries["40P01"] for cl in clients),
        "gave_up": sum(cl.gave_up for cl in clients),
        "group_sum_checks": reader.group_checks, "full_sum_checks": reader.full_checks,
        "reader_retries_40001_40P01": reader.retries,
        "remaining_over_time": progress,
    }
    print("stress:", stats)
    errors = [e for cl in clients for e in cl.errors] + reader.errors
    assert not errors, "client errors (first 10 of %d): %r" % (len(errors), errors[:10])
    assert done, "migration not done 90s after the load: %r" % mig
    if not MOCK:
        assert mig == [("bank_v2", "done", N, N, None)], mig
    assert retired == [], retired
    increments = sum(cl.increments for cl in clients)
    inserted = set().union(*(cl.inserted for cl in clients))
    deleted = set().union(*(cl.deleted for cl in clients))
    assert s == total, "sum of balances %s, want %s" % (s, total)
    assert h - hits0 == increments, "hits grew by %d, committed increments %d" % (h - hits0, increments)
    want_ids = set(range(1, N + 1)) | (inserted - deleted)
    assert n == d, "%d rows but %d distinct ids" % (n, d)
    assert ids == want_ids, "ids: %d missing %r, %d extra %r" % (
        len(want_ids - ids), sorted(want_ids - ids)[:10], len(ids - want_ids),
        sorted(ids - want_ids)[:10])
    assert sum(stats["commits"].values()) > 200, "too little progress: %r" % stats
    assert reader.group_checks >= 10 and reader.full_checks >= 1, \
        "the invariant reader did too few reads: %r" % stats
    bad = [l for l in c.log_text().splitlines()
           if re.search(r"PANIC|TRAP:|terminated by signal|terminated by exception", l)]
    assert not bad, "server crashed:\n" + "\n".join(bad[:20])


def test_completion_race(make_cluster):
    """Statements run while the worker finishes small migrations (retired
    tables dropped, plans invalidated): prepared statements with generic and
    custom plans, updates and joins must neither fail nor crash the server,
    and see every row exactly once."""
    needs_real_extension()
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 0,
                        "leapfrog.background_workers": 3,
                        "leapfrog.batch_size": 5, "leapfrog.background_naptime": 25})
    c.create_database("app")
    rows = 60
    errors = []
    states = []
    conns = [c.connect("app", prepare_threshold=None) for _ in range(2)]
    conns[0].execute("SET plan_cache_mode = force_generic_plan")
    try:
        for rnd in range(int(os.environ.get("LEAPFROG_RACE_ROUNDS", "12"))):
            conns[0].execute(
                "CREATE TABLE s{r} (id int PRIMARY KEY, v int); "
                "INSERT INTO s{r} SELECT g, g FROM generate_series(1, {n}) g".format(r=rnd, n=rows))
            conns[0].execute(
                "SELECT leapfrog.start(%s, %s)",
                ["race%d" % rnd, "CREATE TABLE n{r} (id int PRIMARY KEY, v int, w int); "
                 "INSERT INTO n{r} SELECT id, v, v * 2 FROM s{r}; DROP TABLE s{r};".format(r=rnd)])
            rng = random.Random(rnd)
            bumps = 0
            deadline = time.monotonic() + 1.2
            for k in range(100000):
                if time.monotonic() > deadline:
                    break
                conn = conns[k % 2]
                i = rng.randint(1, rows)
                try:
                    if k % 3 == 0:
                        r = conn.execute("SELECT count(*), sum(v) FROM n%d WHERE id BETWEEN %%s AND %%s"
                                         % rnd, [i, i + 5], prepare=True).fetchone()
                        want = min(rows, i + 5) - i + 1
                        if r[0] != want:
                            errors.append((rnd, "count %d, want %d" % (r[0], want)))
                    elif k % 3 == 1:
                        n = conn.execute("UPDATE n%d SET w = w + 1 WHERE id = %%s" % rnd, [i],
                                         prepare=True).rowcount
                        if n != 1:
                            errors.append((rnd, "update of %d touched %d rows" % (i, n)))
                        bumps += 1
                    else:
                        r = conn.execute("SELECT a.id FROM n%d a JOIN n%d b ON b.id = a.id + 1 "
                                         "WHERE a.id = %%s" % (rnd, rnd), [i], prepare=True).fetchall()
                        if r != ([(i,)] if i < rows else []):
                            errors.append((rnd, "join at %d: %r" % (i, r)))
                except psycopg.Error as e:
                    errors.append((rnd, "%s %s" % (e.sqlstate, str(e).strip().splitlines()[0])))
                    if conn.broken:
                        time.sleep(1)
                        raise AssertionError("connection lost: %r\n%s" % (errors, "\n".join(
                            l for l in c.log_text().splitlines()
                            if re.search(r"terminated by|Failed process|PANIC|TRAP", l))))
            done = conns[1].execute("SELECT leapfrog.wait(%s, 30)", ["race%d" % rnd]).fetchone()[0]
            total = conns[1].execute("SELECT count(*), sum(w) FROM n%d" % rnd).fetchone()
            states.append((rnd, done, total))
            if not done or total != (rows, rows * (rows + 1) + bumps):
                errors.append((rnd, "after completion: done=%s, (count, sum(w)) = %r, want %r"
                               % (done, total, (rows, rows * (rows + 1) + bumps))))
    finally:
        for conn in conns:
            conn.close()
    assert not errors, "errors (first 10 of %d): %r" % (len(errors), errors[:10])


def test_background_completion_analyzes(make_cluster):
    """The worker that completes a migration analyzes its new tables, in a
    transaction of its own after the one that marks it done: with autovacuum
    off, both halves of a split get their row count and column statistics
    shortly after leapfrog.wait() returns."""
    needs_real_extension()
    rows = 20_000
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 0,
                        "autovacuum": "off"})
    c.create_database("app")
    with c.connect("app") as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, a int NOT NULL, b text NOT NULL)")
        conn.execute("INSERT INTO t SELECT g, g %% 7, 'b' || g FROM generate_series(1, %s) g",
                     [rows])
        conn.execute("SELECT leapfrog.start('t_split', %s)",
                     ["CREATE TABLE ta (id int PRIMARY KEY, a int NOT NULL); "
                      "CREATE TABLE tb (id int PRIMARY KEY, b text NOT NULL); "
                      "INSERT INTO ta SELECT id, a FROM t; INSERT INTO tb SELECT id, b FROM t; "
                      "DROP TABLE t;"])
        assert conn.execute("SELECT leapfrog.wait('t_split', 60)").fetchone()[0]
        stats = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            stats = conn.execute(
                "SELECT c.relname, c.reltuples::bigint, "
                "       (SELECT count(*) FROM pg_stats s "
                "         WHERE s.schemaname = 'public' AND s.tablename = c.relname) "
                "  FROM pg_class c WHERE c.oid IN ('ta'::regclass, 'tb'::regclass) "
                " ORDER BY 1").fetchall()
            if stats == [("ta", rows, 2), ("tb", rows, 2)]:
                break
            time.sleep(0.1)
        assert stats == [("ta", rows, 2), ("tb", rows, 2)], stats
        # the statistics are the complete tables': a has 7 values, b one per row
        assert conn.execute("SELECT n_distinct FROM pg_stats WHERE tablename = 'ta' "
                            "AND attname = 'a'").fetchone()[0] == 7
        assert conn.execute("SELECT n_distinct FROM pg_stats WHERE tablename = 'tb' "
                            "AND attname = 'b'").fetchone()[0] == -1


def test_parallel_workers_share_the_migration(make_cluster):
    """leapfrog.background_workers = 3: three workers migrate one table at
    once (seen together in pg_stat_activity), while clients update rows;
    every row ends up migrated exactly once with the clients' updates, and
    the count of migrated rows is exact."""
    needs_real_extension()
    rows = 60_000
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 0,
                        "leapfrog.background_workers": 3, "leapfrog.batch_size": 200,
                        "leapfrog.background_naptime": 5})
    c.create_database("app")
    with c.connect("app") as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)")
        conn.execute("INSERT INTO t SELECT g, g FROM generate_series(1, %s) g", [rows])
        conn.execute("SELECT leapfrog.start('t_v2', %s)",
                     ["CREATE TABLE t_v2 (id int PRIMARY KEY, v int NOT NULL, twice int); "
                      "INSERT INTO t_v2 SELECT id, v, 2 * v FROM t; DROP TABLE t;"])
    seen = {}          # pid -> batches seen active
    most_at_once = 0
    bumps = 0
    rng = random.Random(7)
    deadline = time.monotonic() + 120
    with c.connect("app") as conn:
        while time.monotonic() < deadline:
            active = [r[0] for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE backend_type = 'leapfrog worker' "
                "AND datname = 'app'").fetchall()]
            most_at_once = max(most_at_once, len(active))
            for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = "
                                  "'leapfrog worker' AND query = 'leapfrog: migrating a batch' "
                                  "AND state = 'active'").fetchall():
                seen[r[0]] = seen.get(r[0], 0) + 1
            assert conn.execute("UPDATE t_v2 SET v = v + 1 WHERE id = %s",
                                [rng.randint(1, rows)]).rowcount == 1
            bumps += 1
            if conn.execute("SELECT state FROM leapfrog.migrations").fetchone()[0] == "done":
                break
        assert conn.execute("SELECT leapfrog.wait('t_v2', 60)").fetchone()[0]
        mig = conn.execute("SELECT state, tuples_total, tuples_migrated FROM leapfrog.migrations"
                           ).fetchall()
        n, d, sv, bad = conn.execute(
            "SELECT count(*), count(DISTINCT id), sum(v), count(*) FILTER (WHERE twice <> 2 * id) "
            "FROM t_v2").fetchone()
    print("workers seen at once: %d; batches seen per worker: %r; updates: %d"
          % (most_at_once, seen, bumps))
    assert most_at_once == 3, "never saw 3 workers at once (max %d)" % most_at_once
    assert len(seen) >= 2, "batches seen from %d worker(s) only: %r" % (len(seen), seen)
    assert mig == [("done", rows, rows)], mig
    assert (n, d, bad) == (rows, rows, 0)
    assert sv == rows * (rows + 1) // 2 + bumps
    assert retired_tables_after_completion(c, "app") == []


# ---------------------------------------------------------------------------
# GROUP BY and join mappings under concurrent clients.
#
# The unit that migrates is a group (GROUP BY k) or a join key (every row of
# both inputs sharing it), claimed whole.  Clients at READ COMMITTED and
# REPEATABLE READ read, update, upsert and delete on the new table while the
# background workers (small batches) or leapfrog.complete() migrate the rest.
# Every output row carries a version column `ver` (0 from the mapping) that
# each update increments, so a client knows which version its committed
# delta made; a version committed twice is a lost update.  Each committed
# transaction is logged with what it saw and did and three times: before
# BEGIN (t_begin), before COMMIT was sent (t_sent) and after it returned
# (t_ack).  A read must then see, for every unit it touches:
#   - exactly the eager value plus the deltas of versions 1..ver, all of them
#     committed by transactions whose COMMIT was sent before the read ended;
#   - no version older than one acknowledged before the read began (a stale
#     or re-migrated unit), no row deleted before it began, and every row
#     that existed for sure (created before it began, not deleted before it
#     ended);
#   - a unit whole: at most one row per group, and for a join key, every row
#     of a line id or none, and one version on all the rows of a key.
# At the end the table must equal the eager result (computed from copies of
# the inputs saved before start()) with the committed changes applied, and
# tuples_migrated = tuples_total = the input rows.
# Duration per test: LEAPFROG_STRESS_UNIT_SECONDS (default 9).
# ---------------------------------------------------------------------------

UNIT_SECONDS = float(os.environ.get("LEAPFROG_STRESS_UNIT_SECONDS", "9"))
UNIT_CLIENTS = 8

UNIT_MODES = {
    # A background batch is a block range and migrates the units whose first
    # row is in it (all their rows, wherever they are).  The inputs whose
    # rows come first in a unit have a filler column, so that a block holds
    # about 30 rows: with batch_size 40, a batch is one block, a few dozen
    # units; with a pause between batches, the workers are still at it for
    # most of the run.
    "background": {"leapfrog.background": "on", "leapfrog.background_delay": 300,
                   "leapfrog.background_workers": 2, "leapfrog.batch_size": 40,
                   "leapfrog.background_naptime": 80},
    # statements only, then leapfrog.complete() while the clients run
    "complete": {"leapfrog.background": "off"},
}


def unit_key(rng, begin, deadline, space):
    """A key in 1..space: 55% of them in a window of 400 keys that sweeps the
    key space during the run (so that several clients need the same groups
    not migrated yet, and the background workers race with them), 10% in a
    hot set of 100 keys (updates, deletes and upserts of the same groups),
    the rest anywhere (so that the migration is still running late in the
    run, rather than done by the clients in its first seconds)."""
    r = rng.random()
    if r < 0.55:
        frac = min(1.0, max(0.0, (time.monotonic() - begin) / (deadline - begin)))
        lo = int(frac * (space - 400))
        return rng.randint(lo + 1, lo + 400)
    if r < 0.65:
        return rng.randint(1, 100)
    return rng.randint(1, space)


class Txn:
    """What one attempt of a transaction saw (obs) and did (effects)."""

    def __init__(self, iso):
        self.iso = iso
        self.t_begin = time.monotonic()
        self.obs = []
        self.effects = []


class TxnClient(threading.Thread):
    """A client thread: picks an operation (self.pick() -> (kind, plan)), runs
    plan(conn, txn) in a transaction at READ COMMITTED or REPEATABLE READ
    (always REPEATABLE READ for kind 'rmw'), retries 40001 and 40P01, and
    logs each committed transaction as
    (kind, iso, t_begin, t_sent, t_ack, obs, effects).  Any other error, or
    an AssertionError raised by a plan's immediate checks, is an error."""

    def __init__(self, cluster, cid, deadline, prefix):
        super().__init__(daemon=True, name="%s-client-%d" % (prefix, cid))
        self.cluster = cluster
        self.cid = cid
        self.deadline = deadline
        self.prefix = prefix
        self.rng = random.Random(4242 + cid)
        self.begin = time.monotonic()
        self.log = []
        self.commits = {}
        self.retries = {"40001": 0, "40P01": 0}
        self.gave_up = 0
        self.errors = []

    def run(self):
        try:
            conn = self.cluster.connect("app", application_name="lf-%s-%d"
                                        % (self.prefix, self.cid))
            conn.execute("SET statement_timeout = '60s'")
        except psycopg.Error as e:
            self.errors.append(("connect", repr(e)))
            return
        try:
            while time.monotonic() < self.deadline and len(self.errors) <= 20:
                self._one(conn)
        except Exception as e:        # noqa: BLE001  (reported by the test)
            self.errors.append(("client", repr(e)))
        finally:
            conn.close()

    def _one(self, conn):
        kind, plan = self.pick()
        iso = self.rng.choice(["READ COMMITTED", "REPEATABLE READ"])
        if kind == "rmw":
            iso = "REPEATABLE READ"
        for _ in range(100):
            txn = Txn(iso)
            try:
                conn.execute("BEGIN ISOLATION LEVEL " + iso)
                plan(conn, txn)
                t_sent = time.monotonic()
                conn.execute("COMMIT")
                t_ack = time.monotonic()
            except psycopg.Error as e:
                try:
                    conn.execute("ROLLBACK")
                except psycopg.Error:
                    pass
                if e.sqlstate in RETRYABLE:
                    self.retries[e.sqlstate] += 1
                    time.sleep(0.001 * self.rng.randint(0, 5))
                    continue
                self.errors.append((kind, iso, e.sqlstate, str(e).strip()[:800]))
                if conn.broken:
                    raise
                return
            except AssertionError as e:
                try:
                    conn.execute("ROLLBACK")
                except psycopg.Error:
                    pass
                self.errors.append((kind, iso, "assert", str(e)))
                return
            self.commits[kind] = self.commits.get(kind, 0) + 1
            self.log.append((kind, iso, txn.t_begin, t_sent, t_ack, txn.obs, txn.effects))
            return
        self.gave_up += 1


class UnitChecker(threading.Thread):
    """Reads, at either isolation level, a range of the new table (before
    full_at) or all of it (from full_at on; a full read migrates every
    remaining unit), checking that no unit appears twice in one snapshot:
    check(conn, rng, full) returns None or a complaint."""

    def __init__(self, cluster, full_at, deadline, check, prefix):
        super().__init__(daemon=True, name=prefix + "-checker")
        self.cluster = cluster
        self.full_at = full_at
        self.deadline = deadline
        self.check = check
        self.rng = random.Random(99)
        self.checks = {"range": 0, "full": 0}
        self.retries = 0
        self.errors = []

    def run(self):
        with self.cluster.connect("app", application_name=self.name) as conn:
            conn.execute("SET statement_timeout = '60s'")
            while time.monotonic() < self.deadline and len(self.errors) <= 10:
                full = time.monotonic() >= self.full_at and self.rng.random() < 0.3
                iso = self.rng.choice(["READ COMMITTED", "REPEATABLE READ"])
                try:
                    conn.execute("BEGIN ISOLATION LEVEL " + iso)
                    bad = self.check(conn, self.rng, full)
                    conn.execute("COMMIT")
                except psycopg.Error as e:
                    conn.execute("ROLLBACK")
                    if e.sqlstate in RETRYABLE:
                        self.retries += 1
                        continue
                    self.errors.append((iso, e.sqlstate, str(e).strip()[:800]))
                    continue
                self.checks["full" if full else "range"] += 1
                if bad:
                    self.errors.append("%s %s read: %s" % (iso, "full" if full else "range", bad))
                time.sleep(0.2)


def run_unit_stress(c, name, mode, clients, checker):
    """Runs the client threads and the checker to their deadline; in mode
    'complete', calls leapfrog.complete() at 60% of the run (retrying
    40001/40P01) while they run; then waits for the migration.  Returns
    (stats, the migration's (state, tuples_total, tuples_migrated, error))."""
    begin = time.monotonic()
    threads = clients + [checker]
    for t in threads:
        t.start()
    completed = None
    remaining = []
    with c.connect("app") as conn:
        conn.execute("SET statement_timeout = '120s'")
        complete_at = begin + UNIT_SECONDS * 0.6
        while time.monotonic() < clients[0].deadline:
            now = time.monotonic()
            if mode == "complete" and completed is None and now >= complete_at:
                tries = 0
                while True:
                    tries += 1
                    t0 = time.monotonic()
                    try:
                        conn.execute("SELECT leapfrog.complete(%s)", [name])
                        completed = (round(t0 - begin, 1), round(time.monotonic() - t0, 2), tries)
                        break
                    except psycopg.Error as e:
                        if e.sqlstate not in RETRYABLE or tries >= 20:
                            raise
                continue
            if not MOCK:
                remaining.append((round(now - begin, 1), conn.execute(
                    "SELECT tuples_migrated FROM leapfrog.migrations WHERE name = %s",
                    [name]).fetchone()[0]))
            time.sleep(1)
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "client threads hang"
        done = conn.execute("SELECT leapfrog.wait(%s, 120)", [name]).fetchone()[0]
        mig = conn.execute("SELECT state, tuples_total, tuples_migrated, error "
                           "FROM leapfrog.migrations WHERE name = %s", [name]).fetchone()
    stats = {
        "commits": {k: sum(cl.commits.get(k, 0) for cl in clients)
                    for k in sorted({k for cl in clients for k in cl.commits})},
        "retries_40001": sum(cl.retries["40001"] for cl in clients),
        "retries_40P01": sum(cl.retries["40P01"] for cl in clients),
        "gave_up": sum(cl.gave_up for cl in clients),
        "checker": dict(checker.checks, retries=checker.retries),
        "migrated_over_time": remaining,
        "complete(): at s, took s, tries": completed,
    }
    print("%s %s stress:" % (name, mode), stats)
    errors = [e for cl in clients for e in cl.errors] + checker.errors
    assert not errors, "client errors (first 10 of %d): %r" % (len(errors), errors[:10])
    assert done, "migration not done 120s after the load: %r" % (mig,)
    assert stats["gave_up"] == 0, stats
    bad = [l for l in c.log_text().splitlines()
           if re.search(r"PANIC|TRAP:|terminated by signal|terminated by exception", l)]
    assert not bad, "server crashed:\n" + "\n".join(bad[:20])
    return stats, mig


def check_problems(problems, what):
    assert not problems, "%s: %d problems, first 15:\n%s" % (
        what, len(problems), "\n".join(str(p) for p in problems[:15]))


class Versions:
    """The committed versions of each unit: unit -> {ver: (delta, t_sent,
    t_ack)}.  value(unit, ver) sums the deltas 1..ver, and flags a missing
    version, or one whose COMMIT was sent after `before`."""

    def __init__(self, problems):
        self.v = {}
        self.problems = problems

    def add(self, unit, ver, delta, t_sent, t_ack):
        vs = self.v.setdefault(unit, {})
        if ver in vs:
            self.problems.append("version %d of %r committed twice (a lost update): %r and %r"
                                 % (ver, unit, vs[ver], (delta, t_sent, t_ack)))
        vs[ver] = (delta, t_sent, t_ack)

    def last(self, unit):
        return max(self.v.get(unit, {0: None}))

    def contiguous(self, unit):
        vs = self.v.get(unit, {})
        return sorted(vs) == list(range(1, len(vs) + 1))

    def value(self, unit, ver, before, where):
        vs = self.v.get(unit, {})
        total = 0
        for v in range(1, ver + 1):
            if v not in vs:
                self.problems.append("%s: %r at version %d, but version %d never committed"
                                     % (where, unit, ver, v))
                return None
            if vs[v][1] > before:
                self.problems.append("%s: %r at version %d, committed after the read ended"
                                     % (where, unit, ver))
            total += vs[v][0]
        return total

    def stale(self, unit, ver, after):
        """A version newer than ver acknowledged before `after`."""
        return [v for v, (_, _, ack) in self.v.get(unit, {}).items() if v > ver and ack < after]


# --- GROUP BY: order lines into per-group totals ------------------------------

AGG_LINES = 50_000
AGG_KEYS = 10_000           # lines' keys 1..AGG_KEYS, about 5 lines a group
AGG_NULL_LINES = 40         # one more group: k IS NULL
AGG_KEY_SPACE = 10_500      # keys the clients use: past AGG_KEYS, new groups

AGG_SCRIPT = """
CREATE TABLE total (k int, n bigint NOT NULL, amount numeric(14,2) NOT NULL,
                    top numeric(10,2), gen int NOT NULL, ver int NOT NULL);
CREATE UNIQUE INDEX total_k ON total (k);
INSERT INTO total SELECT k, count(*), sum(x), max(x), 0, 0 FROM lines GROUP BY k;
DROP TABLE lines;
"""


class AggClient(TxnClient):
    """Operations on `total` (k, n, amount, top, gen, ver).  A group's row is
    an incarnation (k, gen): gen 0 comes from the migration, an upsert that
    inserts makes a new one (gen unique to the client), a delete ends one.
    obs: (keys the query selects, rows (k, gen, n, amount, ver) it got).
    effects: ('delta', k, gen, ver, d), ('create', k, gen, amount),
    ('delete', k, gen, ver, amount)."""

    COLS = "k, gen, n, amount, ver"

    def __init__(self, *a):
        super().__init__(*a)
        self.next_gen = 1_000_000 * (self.cid + 1)

    def _key(self):
        return unit_key(self.rng, self.begin, self.deadline, AGG_KEY_SPACE)

    def pick(self):
        rng, C = self.rng, self.COLS
        r = rng.random()
        if r < 0.22:
            k = self._key()

            def plan(conn, txn):
                txn.obs.append(({k}, conn.execute(
                    "SELECT %s FROM total WHERE k = %%s" % C, [k]).fetchall()))
            return "read", plan
        if r < 0.32:
            lo = min(self._key(), AGG_KEY_SPACE - 9)
            twice = rng.random() < 0.5
            q = "SELECT %s FROM total WHERE k BETWEEN %%s AND %%s ORDER BY k" % C

            def plan(conn, txn):
                rows = conn.execute(q, [lo, lo + 9]).fetchall()
                txn.obs.append((set(range(lo, lo + 10)), rows))
                if twice:
                    again = conn.execute(q, [lo, lo + 9]).fetchall()
                    if txn.iso == "REPEATABLE READ":
                        assert again == rows, ("range %d..%d read twice in one REPEATABLE READ "
                                               "transaction: %r then %r" % (lo, lo + 9, rows, again))
                    txn.obs.append((set(range(lo, lo + 10)), again))
            return "range", plan
        if r < 0.34:
            def plan(conn, txn):
                txn.obs.append(({None}, conn.execute(
                    "SELECT %s FROM total WHERE k IS NULL" % C).fetchall()))
            return "read_null", plan
        if r < 0.62:
            ks = sorted({self._key() for _ in range(rng.choice([1, 1, 1, 2, 3]))})
            d = Decimal(rng.randint(-5000, 5000)) / 100
            null = rng.random() < 0.03

            def plan(conn, txn):
                if null:
                    rows = conn.execute("UPDATE total SET amount = amount + %%s, ver = ver + 1 "
                                        "WHERE k IS NULL RETURNING %s" % C, [d]).fetchall()
                    keys = {None}
                else:
                    rows = conn.execute("UPDATE total SET amount = amount + %%s, ver = ver + 1 "
                                        "WHERE k = ANY(%%s) RETURNING %s" % C, [d, ks]).fetchall()
                    keys = set(ks)
                txn.obs.append((keys, rows))
                for k, gen, _, _, ver in rows:
                    txn.effects.append(("delta", k, gen, ver, d))
            return "update", plan
        if r < 0.70:
            # read-modify-write at REPEATABLE READ: a concurrent update after
            # the snapshot must make it fail (40001), never lose an update
            k = self._key()
            d = Decimal(rng.randint(1, 5000)) / 100

            def plan(conn, txn):
                rows = conn.execute("SELECT %s FROM total WHERE k = %%s" % C, [k]).fetchall()
                txn.obs.append(({k}, rows))
                if not rows:
                    return
                _, gen, _, amount, ver = rows[0]
                rows = conn.execute("UPDATE total SET amount = %%s, ver = %%s WHERE k = %%s "
                                    "RETURNING %s" % C, [amount + d, ver + 1, k]).fetchall()
                assert len(rows) == 1 and rows[0][1] == gen, \
                    "RR update of group %d read %r, updated %r" % (k, (gen, ver), rows)
                txn.obs.append(({k}, rows))
                txn.effects.append(("delta", k, gen, ver + 1, d))
            return "rmw", plan
        if r < 0.90:
            k = self._key()
            d = Decimal(rng.randint(1, 5000)) / 100
            self.next_gen += 1
            gen = self.next_gen

            def plan(conn, txn):
                rows = conn.execute(
                    "INSERT INTO total AS t (k, n, amount, top, gen, ver) VALUES (%%s, 1, %%s, %%s, %%s, 0) "
                    "ON CONFLICT (k) DO UPDATE SET amount = t.amount + excluded.amount, "
                    "ver = t.ver + 1 RETURNING %s, (xmax = 0)" % C, [k, d, d, gen]).fetchall()
                assert len(rows) == 1, "upsert of %d returned %r" % (k, rows)
                k_, g, _, _, ver, inserted = rows[0]
                txn.obs.append(({k}, [rows[0][:5]]))
                if inserted:
                    assert (g, ver) == (gen, 0), "upsert of %d inserted %r" % (k, rows)
                    txn.effects.append(("create", k, gen, d))
                else:
                    txn.effects.append(("delta", k, g, ver, d))
            return "upsert", plan
        k = self._key()

        def plan(conn, txn):
            rows = conn.execute("DELETE FROM total WHERE k = %%s RETURNING %s" % C,
                                [k]).fetchall()
            txn.obs.append(({k}, rows))
            for _, gen, _, amount, ver in rows:
                txn.effects.append(("delete", k, gen, ver, amount))
        return "delete", plan


def agg_checker(conn, rng, full):
    lo = rng.randint(1, AGG_KEY_SPACE - 50)
    where = "" if full else " WHERE k BETWEEN %d AND %d" % (lo, lo + 49)
    n, d, nulls = conn.execute("SELECT count(*), count(DISTINCT k), count(*) FILTER "
                               "(WHERE k IS NULL) FROM total" + where).fetchone()
    if n != d + nulls or nulls > 1:
        return "%d rows, %d distinct keys, %d NULL keys%s" % (n, d, nulls, where)
    return None


def check_agg(eager, clients, final):
    """eager: k -> (n, amount, top); final: rows (k, gen, n, amount, top, ver)."""
    problems = []
    versions = Versions(problems)
    created = {(k, 0): (n, amount, top, -1.0, -1.0) for k, (n, amount, top) in eager.items()}
    deleted = {}
    log = [e for cl in clients for e in cl.log]
    for kind, iso, t_begin, t_sent, t_ack, obs, effects in log:
        for eff in effects:
            if eff[0] == "delta":
                _, k, gen, ver, d = eff
                versions.add((k, gen), ver, d, t_sent, t_ack)
            elif eff[0] == "create":
                _, k, gen, d = eff
                created[(k, gen)] = (1, d, d, t_sent, t_ack)
            else:
                _, k, gen, ver, amount = eff
                if (k, gen) in deleted:
                    problems.append("group %r deleted twice: %r, %r"
                                    % ((k, gen), deleted[(k, gen)], (ver, amount, t_sent)))
                deleted[(k, gen)] = (ver, amount, t_sent, t_ack)
    by_key = {}
    for (k, gen) in created:
        by_key.setdefault(k, []).append(gen)

    def row_ok(k, gen, n, amount, ver, before, where):
        inc = created.get((k, gen))
        if inc is None:
            problems.append("%s: group %r of no committed creation" % (where, (k, gen)))
            return
        if inc[3] > before:
            problems.append("%s: group %r created after the read" % (where, (k, gen)))
        add = versions.value((k, gen), ver, before, where)
        if add is not None and (n, amount) != (inc[0], inc[1] + add):
            problems.append("%s: group %r version %d: (n, amount) = %r, want %r"
                            % (where, (k, gen), ver, (n, amount), (inc[0], inc[1] + add)))

    for kind, iso, t_begin, t_sent, t_ack, obs, effects in log:
        for keys, rows in obs:
            where = "%s %s read at %.3f-%.3f" % (kind, iso, t_begin, t_sent)
            seen = {}
            for k, gen, n, amount, ver in rows:
                if k not in keys:
                    problems.append("%s: group %r outside the keys read" % (where, k))
                seen.setdefault(k, []).append((gen, ver))
                row_ok(k, gen, n, amount, ver, t_sent, where)
                if versions.stale((k, gen), ver, t_begin):
                    problems.append("%s: group %r at version %d, but %r acknowledged before"
                                    % (where, (k, gen), ver, versions.stale((k, gen), ver, t_begin)))
                dl = deleted.get((k, gen))
                if dl and dl[3] < t_begin:
                    problems.append("%s: group %r, deleted before the read" % (where, (k, gen)))
            for k, got in seen.items():
                if len(got) > 1:
                    problems.append("%s: group %r seen %d times: %r" % (where, k, len(got), got))
            for k in keys:
                if k in seen:
                    continue
                for gen in by_key.get(k, []):
                    inc, dl = created[(k, gen)], deleted.get((k, gen))
                    if inc[4] < t_begin and (dl is None or dl[2] > t_sent):
                        problems.append("%s: group %r missing (created %.3f, deleted %r)"
                                        % (where, (k, gen), inc[4], dl))
    check_problems(problems, "reads of the aggregate")

    want = {}
    for (k, gen), (n, amount, top, _, _) in created.items():
        last = versions.last((k, gen))
        if not versions.contiguous((k, gen)):
            problems.append("group %r: committed versions %r" % ((k, gen), sorted(versions.v[(k, gen)])))
        value = amount + versions.value((k, gen), last, float("inf"), "final")
        if (k, gen) in deleted:
            ver, amt, _, _ = deleted[(k, gen)]
            if (ver, amt) != (last, value):
                problems.append("group %r deleted at %r, want %r" % ((k, gen), (ver, amt), (last, value)))
            continue
        if k in want:
            problems.append("key %r: incarnations %r and %r both alive" % (k, want[k], gen))
        want[k] = (k, gen, n, value, top, last)
    got = {}
    for row in final:
        if row[0] in got:
            problems.append("final: group %r twice: %r and %r" % (row[0], got[row[0]], row))
        got[row[0]] = row
    for k in sorted(set(want) | set(got), key=lambda k: (k is None, k or 0)):
        if want.get(k) != got.get(k):
            problems.append("final: group %r is %r, want %r" % (k, got.get(k), want.get(k)))
    check_problems(problems, "final aggregate (eager + committed changes)")
    return {"groups": len(want), "incarnations_created": len(created) - len(eager),
            "deleted": len(deleted), "deltas": sum(len(v) for v in versions.v.values()),
            "reads": sum(len(e[5]) for e in log)}


@pytest.mark.parametrize("mode", sorted(UNIT_MODES))
def test_stress_group_by(make_cluster, mode):
    """A GROUP BY migration (50k lines into about 10k per-group totals and a
    NULL group) under 8 clients reading groups and ranges, updating totals
    (one to three groups a statement, and read-modify-write at REPEATABLE
    READ), upserting and deleting groups, with the background workers or
    complete(); see the section comment for the invariants."""
    needs_real_extension()
    c = make_cluster(**UNIT_MODES[mode])
    c.create_database("app")
    rng = random.Random(11)
    with c.connect("app") as conn:
        conn.execute("CREATE TABLE lines (id int PRIMARY KEY, k int, x numeric(10,2) NOT NULL, "
                     "filler text)")
        with conn.cursor().copy("COPY lines (id, k, x, filler) FROM STDIN") as cp:
            for i in range(1, AGG_LINES + AGG_NULL_LINES + 1):
                cp.write_row((i, rng.randint(1, AGG_KEYS) if i <= AGG_LINES else None,
                              Decimal(rng.randint(1, 100000)) / 100, "x" * 200))
        conn.execute("CREATE INDEX lines_k ON lines (k)")
        conn.execute("CREATE TABLE lines_copy AS SELECT * FROM lines")
        conn.execute("VACUUM ANALYZE lines")
        t0 = time.monotonic()
        conn.execute("SELECT leapfrog.start('agg', %s)", [AGG_SCRIPT])
        print("start(): %.1f ms" % ((time.monotonic() - t0) * 1e3))
        eager = {r[0]: tuple(r[1:]) for r in conn.execute(
            "SELECT k, count(*), sum(x), max(x) FROM lines_copy GROUP BY k").fetchall()}
    assert len(eager) > 9000 and None in eager

    deadline = time.monotonic() + UNIT_SECONDS
    clients = [AggClient(c, i, deadline, "agg") for i in range(UNIT_CLIENTS)]
    checker = UnitChecker(c, time.monotonic() + UNIT_SECONDS * 0.75, deadline, agg_checker, "agg")
    stats, mig = run_unit_stress(c, "agg", mode, clients, checker)
    lines = AGG_LINES + AGG_NULL_LINES
    assert mig == ("done", lines, lines, None), mig
    with c.connect("app") as conn:
        final = conn.execute("SELECT k, gen, n, amount, top, ver FROM total").fetchall()
    summary = check_agg(eager, clients, final)
    print("agg %s checked:" % mode, summary)
    assert summary["deltas"] > 100 and summary["deleted"] > 5 and summary["reads"] > 200, summary
    assert retired_tables_after_completion(c, "app") == []


# --- join: stock LEFT JOIN order lines, fan-out on both sides -----------------

JOIN_W, JOIN_I = 5, 1000    # stock keys (w, i): one stock row each, then
JOIN_DUP_STOCK = 1000       # more stock rows on random keys (fan-out),
JOIN_NULL_STOCK = 30        # and stock rows with a NULL in their key
JOIN_LINES = 20_000         # lines on keys i in 1..1050 (past 1000: no stock),
                            # 1% with a NULL si, 0.5% with a NULL sw

JOIN_SCRIPT = """
CREATE TABLE ls (sid int NOT NULL, w int, i int, qty int NOT NULL, id int, amount int,
                 ver int NOT NULL);
CREATE INDEX ls_id ON ls (id);
CREATE INDEX ls_wi ON ls (w, i);
CREATE INDEX ls_sid ON ls (sid);
INSERT INTO ls SELECT s.sid, s.w, s.i, s.qty, l.id, l.amount, 0
  FROM stock s LEFT JOIN line l ON l.sw = s.w AND l.si = s.i;
DROP TABLE line;
DROP TABLE stock;
"""


class JoinModel:
    """The eager join: pairs (sid, id) -> (w, i, qty, amount); id is None for
    a stock row without lines.  A unit of the stock updates is its key (w, i),
    or ('sid', sid) for a stock row whose key holds a NULL (it is alone)."""

    def __init__(self, rows):
        self.pair = {}
        self.by_id, self.by_key, self.by_sid = {}, {}, {}
        for sid, w, i, qty, lid, amount in rows:
            assert (sid, lid) not in self.pair, "eager join has (sid, id) %r twice" % ((sid, lid),)
            self.pair[(sid, lid)] = (w, i, qty, amount)
            self.by_sid.setdefault(sid, set()).add((sid, lid))
            if lid is not None:
                self.by_id.setdefault(lid, set()).add((sid, lid))
            if w is not None and i is not None:
                self.by_key.setdefault((w, i), set()).add((sid, lid))
        self.keys = sorted(self.by_key)
        self.null_sids = sorted(sid for (sid, _), (w, i, _, _) in self.pair.items()
                                if w is None or i is None)

    def unit(self, sid):
        w, i = next(iter(self.pair[p] for p in self.by_sid[sid]))[:2]
        return ("sid", sid) if w is None or i is None else (w, i)


class JoinClient(TxnClient):
    """Operations on `ls` (sid, w, i, qty, id, amount, ver): reads by line
    id, id range, stock key and stock id; updates of the stock columns of a
    whole key (UPDATE ls SET qty = qty - d ... WHERE w = .. AND i = ..), also
    as read-modify-write at REPEATABLE READ; deletes of lines by id.
    obs: (eager pairs the query selects, rows it got).  effects: ('delta',
    unit, ver, d), ('delete', id, pairs deleted)."""

    COLS = "sid, w, i, qty, id, amount, ver"

    def __init__(self, cluster, cid, deadline, prefix, model):
        super().__init__(cluster, cid, deadline, prefix)
        self.m = model

    def _key(self):
        m = self.m
        return m.keys[unit_key(self.rng, self.begin, self.deadline, len(m.keys)) - 1]

    def _line(self):
        """A line id, mostly on the keys of the window (as _key)."""
        m, rng = self.m, self.rng
        if rng.random() < 0.85:
            ids = [lid for _, lid in m.by_key[self._key()] if lid is not None]
            if ids:
                return rng.choice(ids)
        return rng.randint(1, JOIN_LINES)

    def pick(self):
        rng, m, C = self.rng, self.m, self.COLS
        r = rng.random()
        if r < 0.22:
            lid = self._line()

            def plan(conn, txn):
                txn.obs.append((m.by_id.get(lid, set()), conn.execute(
                    "SELECT %s FROM ls WHERE id = %%s" % C, [lid]).fetchall()))
            return "read_id", plan
        if r < 0.27:
            lo = self._line()

            def plan(conn, txn):
                scope = set().union(*(m.by_id.get(x, set()) for x in range(lo, lo + 10)))
                txn.obs.append((scope, conn.execute(
                    "SELECT %s FROM ls WHERE id BETWEEN %%s AND %%s" % C, [lo, lo + 9]).fetchall()))
            return "read_ids", plan
        if r < 0.47:
            w, i = self._key()
            twice = rng.random() < 0.5
            q = "SELECT %s FROM ls WHERE w = %%s AND i = %%s ORDER BY sid, id" % C

            def plan(conn, txn):
                rows = conn.execute(q, [w, i]).fetchall()
                txn.obs.append((m.by_key[(w, i)], rows))
                if twice:
                    again = conn.execute(q, [w, i]).fetchall()
                    if txn.iso == "REPEATABLE READ":
                        assert again == rows, ("key %r read twice in one REPEATABLE READ "
                                               "transaction: %r then %r" % ((w, i), rows, again))
                    txn.obs.append((m.by_key[(w, i)], again))
            return "read_key", plan
        if r < 0.52:
            sid = rng.choice(m.null_sids) if rng.random() < 0.3 else rng.choice(list(m.by_sid))

            def plan(conn, txn):
                txn.obs.append((m.by_sid[sid], conn.execute(
                    "SELECT %s FROM ls WHERE sid = %%s" % C, [sid]).fetchall()))
            return "read_sid", plan
        if r < 0.80:
            d = rng.randint(1, 3)
            if rng.random() < 0.05:
                sid = rng.choice(m.null_sids)
                where, args, scope, unit = "sid = %s", [sid], m.by_sid[sid], ("sid", sid)
            else:
                w, i = self._key()
                where, args, scope, unit = "w = %s AND i = %s", [w, i], m.by_key[(w, i)], (w, i)

            def plan(conn, txn):
                rows = conn.execute("UPDATE ls SET qty = qty - %%s, ver = ver + 1 WHERE %s "
                                    "RETURNING %s" % (where, C), [d] + args).fetchall()
                txn.obs.append((scope, rows))
                vers = {r[6] for r in rows}
                assert len(vers) <= 1, "update of %r: the rows got versions %r" % (unit, rows)
                if rows:
                    txn.effects.append(("delta", unit, vers.pop(), d))
            return "update", plan
        if r < 0.88:
            w, i = self._key()
            d = rng.randint(1, 3)

            def plan(conn, txn):
                rows = conn.execute("SELECT %s FROM ls WHERE w = %%s AND i = %%s" % C,
                                    [w, i]).fetchall()
                txn.obs.append((m.by_key[(w, i)], rows))
                if not rows:
                    return
                ver = rows[0][6]
                new = conn.execute(
                    "UPDATE ls SET qty = qty - %%s, ver = %%s WHERE w = %%s AND i = %%s "
                    "RETURNING %s" % C, [d, ver + 1, w, i]).fetchall()
                assert sorted(r[:5:4] for r in new) == sorted(r[:5:4] for r in rows), \
                    "RR update of key %r read %r, updated %r" % ((w, i), rows, new)
                txn.obs.append((m.by_key[(w, i)], new))
                txn.effects.append(("delta", (w, i), ver + 1, d))
            return "rmw", plan
        lid = self._line()

        def plan(conn, txn):
            rows = conn.execute("DELETE FROM ls WHERE id = %%s RETURNING %s" % C, [lid]).fetchall()
            txn.obs.append((m.by_id.get(lid, set()), rows))
            if rows:
                txn.effects.append(("delete", lid, [(r[0], r[4]) for r in rows]))
        return "delete", plan


def join_checker(conn, rng, full):
    lo = rng.randint(1, JOIN_LINES - 50)
    where = "" if full else " WHERE id BETWEEN %d AND %d" % (lo, lo + 49)
    n, d = conn.execute("SELECT count(*), count(DISTINCT (sid, coalesce(id, -1))) FROM ls"
                        + where).fetchone()
    return None if n == d else "%d rows, %d distinct (sid, id)%s" % (n, d, where)


def check_join(m, clients, final):
    """final: rows (sid, w, i, qty, id, amount, ver)."""
    problems = []
    versions = Versions(problems)
    deleted = {}
    log = [e for cl in clients for e in cl.log]
    for kind, iso, t_begin, t_sent, t_ack, obs, effects in log:
        for eff in effects:
            if eff[0] == "delta":
                versions.add(eff[1], eff[2], eff[3], t_sent, t_ack)
            else:
                _, lid, pairs = eff
                if lid in deleted:
                    problems.append("line %d deleted twice: %r and %r"
                                    % (lid, deleted[lid], (pairs, t_sent)))
                if sorted(pairs) != sorted(m.by_id.get(lid, ())):
                    problems.append("delete of line %d removed %r, want %r"
                                    % (lid, sorted(pairs), sorted(m.by_id.get(lid, ()))))
                deleted[lid] = (pairs, t_sent, t_ack)

    for kind, iso, t_begin, t_sent, t_ack, obs, effects in log:
        for scope, rows in obs:
            where = "%s %s read at %.3f-%.3f" % (kind, iso, t_begin, t_sent)
            got, unit_vers = {}, {}
            for sid, w, i, qty, lid, amount, ver in rows:
                p = (sid, lid)
                if p not in scope:
                    problems.append("%s: row %r outside the rows the query selects"
                                    % (where, (sid, w, i, qty, lid, amount, ver)))
                    continue
                if p in got:
                    problems.append("%s: (sid, id) %r twice" % (where, p))
                got[p] = ver
                unit = m.unit(sid)
                unit_vers.setdefault(unit, set()).add(ver)
                w0, i0, qty0, amount0 = m.pair[p]
                add = versions.value(unit, ver, t_sent, where)
                if add is not None and (w, i, qty, amount) != (w0, i0, qty0 - add, amount0):
                    problems.append("%s: row %r at version %d, want %r" % (
                        where, (sid, w, i, qty, lid, amount), ver, (w0, i0, qty0 - add, amount0)))
                if versions.stale(unit, ver, t_begin):
                    problems.append("%s: row %r of %r at version %d, but %r acknowledged before"
                                    % (where, p, unit, ver, versions.stale(unit, ver, t_begin)))
            for unit, vs in unit_vers.items():
                if len(vs) > 1:
                    problems.append("%s: the rows of %r at versions %r" % (where, unit, sorted(vs)))
            lines = {}
            for p in scope:
                lines.setdefault(p[1], []).append(p)
            for lid, ps in lines.items():
                present = [p for p in ps if p in got]
                if lid is None:
                    if len(present) != len(ps):
                        problems.append("%s: NULL-extended rows %r missing"
                                        % (where, sorted(set(ps) - set(present))))
                    continue
                dl = deleted.get(lid)
                if present and len(present) != len(ps):
                    problems.append("%s: line %d partly there: %r of %r"
                                    % (where, lid, sorted(present), sorted(ps)))
                elif present and dl and dl[2] < t_begin:
                    problems.append("%s: line %d, deleted before the read" % (where, lid))
                elif not present and (dl is None or dl[1] > t_sent):
                    problems.append("%s: line %d missing (rows %r, deleted %r)"
                                    % (where, lid, sorted(ps), dl and dl[1:]))
    check_problems(problems, "reads of the join")

    want = []
    for (sid, lid), (w, i, qty, amount) in m.pair.items():
        if lid in deleted:
            continue
        unit = m.unit(sid)
        last = versions.last(unit)
        want.append((sid, w, i, qty - versions.value(unit, last, float("inf"), "final"),
                     lid, amount, last))
    for unit in versions.v:
        if not versions.contiguous(unit):
            problems.append("%r: committed versions %r" % (unit, sorted(versions.v[unit])))
    key = lambda r: (r[0], -1 if r[4] is None else r[4])      # noqa: E731
    want.sort(key=key)
    final = sorted(final, key=key)
    if final != want:
        fw = {}
        for r in final:
            fw.setdefault(key(r), []).append(r)
        ww = {key(r): r for r in want}
        for k in sorted(set(fw) | set(ww)):
            if fw.get(k) != ([ww[k]] if k in ww else None):
                problems.append("final: (sid, id) %r is %r, want %r" % (k, fw.get(k), ww.get(k)))
        problems.append("final: %d rows, want %d" % (len(final), len(want)))
    check_problems(problems, "final join (eager + committed changes)")
    ids = [r[4] for r in final if r[4] is not None]
    return {"rows": len(final), "line_ids": len(set(ids)), "deleted_lines": len(deleted),
            "deltas": sum(len(v) for v in versions.v.values()),
            "reads": sum(len(e[5]) for e in log)}


@pytest.mark.parametrize("mode", sorted(UNIT_MODES))
def test_stress_join(make_cluster, mode):
    """A LEFT JOIN migration (6k stock rows, 1000 of them on a key another
    has, 30 with a NULL in their key; 20k lines, some on keys of no stock,
    some with NULL keys) under 8 clients reading by line id, id range, stock
    key and stock id, updating the stock columns of whole keys (also
    read-modify-write at REPEATABLE READ) and deleting lines, with the
    background workers or complete(); see the section comment."""
    needs_real_extension()
    # a join's batch holds every row of the keys of a block of stock: the
    # workers pause longer between batches
    c = make_cluster(**dict(UNIT_MODES[mode], **({"leapfrog.background_naptime": 200}
                                                 if mode == "background" else {})))
    c.create_database("app")
    rng = random.Random(12)
    with c.connect("app") as conn:
        conn.execute("CREATE TABLE stock (sid int PRIMARY KEY, w int, i int, qty int NOT NULL, "
                     "filler text DEFAULT repeat('x', 200))")
        conn.execute("CREATE TABLE line (id int PRIMARY KEY, sw int, si int, amount int NOT NULL)")
        stock = [(n + 1, n % JOIN_W + 1, n // JOIN_W + 1, rng.randint(1000, 2000))
                 for n in range(JOIN_W * JOIN_I)]
        for n in range(JOIN_DUP_STOCK):
            stock.append((len(stock) + 1, rng.randint(1, JOIN_W), rng.randint(1, JOIN_I),
                          rng.randint(1000, 2000)))
        for n in range(JOIN_NULL_STOCK):
            w, i = rng.choice([(None, rng.randint(1, JOIN_I)), (rng.randint(1, JOIN_W), None),
                               (None, None)])
            stock.append((len(stock) + 1, w, i, rng.randint(1000, 2000)))
        rng.shuffle(stock)
        with conn.cursor().copy("COPY stock (sid, w, i, qty) FROM STDIN") as cp:
            for row in stock:
                cp.write_row(row)
        with conn.cursor().copy("COPY line (id, sw, si, amount) FROM STDIN") as cp:
            for lid in range(1, JOIN_LINES + 1):
                r = rng.random()
                cp.write_row((lid, None if r < 0.005 else rng.randint(1, JOIN_W),
                              None if 0.005 <= r < 0.015 else rng.randint(1, 1050),
                              rng.randint(1, 500)))
        conn.execute("CREATE INDEX stock_wi ON stock (w, i)")
        conn.execute("CREATE INDEX line_supply ON line (si, sw)")
        conn.execute("CREATE TABLE stock_copy AS SELECT * FROM stock")
        conn.execute("CREATE TABLE line_copy AS SELECT * FROM line")
        conn.execute("VACUUM ANALYZE stock, line")
        t0 = time.monotonic()
        conn.execute("SELECT leapfrog.start('lsj', %s)", [JOIN_SCRIPT])
        print("start(): %.1f ms" % ((time.monotonic() - t0) * 1e3))
        model = JoinModel(conn.execute(
            "SELECT s.sid, s.w, s.i, s.qty, l.id, l.amount "
            "  FROM stock_copy s LEFT JOIN line_copy l ON l.sw = s.w AND l.si = s.i").fetchall())
    fanout = sum(1 for ps in model.by_id.values() if len(ps) > 1)
    no_lines = sum(1 for ps in model.by_key.values() if all(p[1] is None for p in ps))
    print("eager join: %d rows, %d lines, %d of them with several stock rows, %d keys without "
          "lines" % (len(model.pair), len(model.by_id), fanout, no_lines))
    assert fanout > 1000 and no_lines > 20 and len(model.null_sids) == JOIN_NULL_STOCK

    deadline = time.monotonic() + UNIT_SECONDS
    clients = [JoinClient(c, i, deadline, "join", model) for i in range(UNIT_CLIENTS)]
    checker = UnitChecker(c, time.monotonic() + UNIT_SECONDS * 0.75, deadline, join_checker, "join")
    stats, mig = run_unit_stress(c, "lsj", mode, clients, checker)
    inputs = len(stock) + JOIN_LINES
    assert mig == ("done", inputs, inputs, None), mig
    with c.connect("app") as conn:
        final = conn.execute("SELECT sid, w, i, qty, id, amount, ver FROM ls").fetchall()
    summary = check_join(model, clients, final)
    print("join %s checked:" % mode, summary)
    assert summary["deltas"] > 100 and summary["deleted_lines"] > 5 and summary["reads"] > 200, \
        summary
    assert retired_tables_after_completion(c, "app") == []


# ---------------------------------------------------------------------------
# Inputs that stay live: a mapping reads a table the script keeps.
#
# The live table is replaced lazily: its rows as they were at start() are
# retired, an empty copy takes its name, and the old rows move into the copy
# with the groups or join keys of the mapping that reads them.  The
# application keeps reading and writing the live table all along.  Eagerly,
# the new table is the mapping over the live table as it was when start()
# committed, plus what the application writes to the new table afterwards,
# and the live table holds exactly what the application wrote to it.
#
# Same clients (TxnClient: READ COMMITTED and REPEATABLE READ, 40001/40P01
# retried), modes (UNIT_MODES) and run (run_unit_stress) as above.
# ---------------------------------------------------------------------------

def _ts(token):
    """A delivery date, unique to a client's delivery (token)."""
    return datetime.datetime(2030, 1, 1) + datetime.timedelta(seconds=token)


def _absorb(client, on_effect):
    """Feeds the effects of the client's transactions committed since the
    last call to on_effect (a client's own committed rows, to pick from)."""
    for entry in client.log[client.absorbed:]:
        for eff in entry[6]:
            on_effect(eff)
    client.absorbed = len(client.log)


# --- an aggregate kept next to the lines it sums (BullFrog's order totals) ----

LIVE_W, LIVE_D, LIVE_O = 4, 10, 200     # 8000 orders of 1 to 9 lines (~40k)

LIVE_AGG_SCRIPT = """
CREATE TABLE order_total (w int, d int, o int, amount numeric(12,2), PRIMARY KEY (w, d, o));
INSERT INTO order_total SELECT ol_w_id, ol_d_id, ol_o_id, sum(ol_amount) FROM order_line GROUP BY 1, 2, 3;
"""

OL_COLS = "ol_w_id, ol_d_id, ol_o_id, ol_number, ol_i_id, ol_quantity, ol_amount, ol_delivery_d"
OL_KEY = "ol_w_id = %s AND ol_d_id = %s AND ol_o_id = %s"
OT_KEY = "w = %s AND d = %s AND o = %s"


class LiveAggModel:
    """The lines at start(): (w, d, o, n) -> (i_id, qty, amount); the orders
    in key order (the physical order of the lines), their line numbers, and
    their eager totals."""

    def __init__(self, rows):
        self.lines = {}
        self.by_order = {}
        for w, d, o, n, i, q, amount, dd in rows:
            assert dd is None
            self.lines[(w, d, o, n)] = (i, q, amount)
            self.by_order.setdefault((w, d, o), []).append(n)
        self.orders = sorted(self.by_order)
        self.eager = {k: sum(self.lines[k + (n,)][2] for n in ns)
                      for k, ns in self.by_order.items()}


class LiveAggClient(TxnClient):
    """The application of the live aggregate keeps order_total in step with
    order_line itself, in each transaction:
      neworder   inserts the lines of a new order and its total (in either
                 order);
      delivery   sets the delivery date of an order's undelivered lines, then
                 reads the order's total and the sum of its lines;
      adjust     changes the amount of a line (or of every line of an order)
                 and adds the same delta to the total;
      addline    adds a line to an existing order (old, perhaps not migrated
                 yet) and its amount to the total (either first);
      removeline deletes a line and subtracts its amount from the total;
      read       reads an order's total and its lines (one statement, or two
                 at REPEATABLE READ, in either order).
    Every read of a total with its lines in one snapshot must agree
    (total = sum of the lines, one total row), checked at once.  effects:
    ('line_new', key, n, i_id, qty, amount), ('line_delta', key, n, d),
    ('line_del', key, n, amount), ('deliver', key, [n], token),
    ('total_new', key, amount), ('total_delta', key, d)."""

    def __init__(self, cluster, cid, deadline, prefix, model):
        super().__init__(cluster, cid, deadline, prefix)
        self.m = model
        self.seq = 0
        self.absorbed = 0
        self.my_orders = []
        self.my_lines = {}
        self.reads_agreed = 0

    def _own(self, eff):
        if eff[0] == "total_new":
            self.my_orders.append(eff[1])
        elif eff[0] == "line_new":
            self.my_lines.setdefault(eff[1], []).append(eff[2])

    def _order(self):
        _absorb(self, self._own)
        rng = self.rng
        if self.my_orders and rng.random() < 0.1:
            return rng.choice(self.my_orders)
        return self.m.orders[unit_key(rng, self.begin, self.deadline, len(self.m.orders)) - 1]

    def _line(self, key):
        return self.rng.choice(self.m.by_order.get(key, []) + self.my_lines.get(key, [])
                               or [1])

    def _next(self):
        self.seq += 1
        return self.seq

    @staticmethod
    def _agree(conn, txn, key, where, variant):
        """Reads the order's total and its lines, in one statement (variant
        0, and always at READ COMMITTED) or in two at REPEATABLE READ, the
        total first (1) or the lines first (2); asserts that they agree."""
        rng_order = variant
        one = "SELECT (SELECT array_agg(amount) FROM order_total WHERE %s), " \
              "(SELECT coalesce(sum(ol_amount), 0) FROM order_line WHERE %s), " \
              "(SELECT count(*) FROM order_line WHERE %s)" % (OT_KEY, OL_KEY, OL_KEY)
        if txn.iso == "READ COMMITTED" or rng_order == 0:
            totals, s, n = conn.execute(one, list(key) * 3).fetchone()
            totals = totals or []
        elif rng_order == 1:
            totals = [r[0] for r in conn.execute(
                "SELECT amount FROM order_total WHERE " + OT_KEY, key).fetchall()]
            s, n = conn.execute("SELECT coalesce(sum(ol_amount), 0), count(*) FROM order_line "
                                "WHERE " + OL_KEY, key).fetchone()
        else:
            s, n = conn.execute("SELECT coalesce(sum(ol_amount), 0), count(*) FROM order_line "
                                "WHERE " + OL_KEY, key).fetchone()
            totals = [r[0] for r in conn.execute(
                "SELECT amount FROM order_total WHERE " + OT_KEY, key).fetchall()]
        assert totals == [s], ("%s %s of order %r (variant %d): totals %r, sum of its %d lines %s"
                               % (where, txn.iso, key, rng_order, totals, n, s))
        txn.obs.append((key, totals[0], n))

    def pick(self):
        rng = self.rng
        r = rng.random()
        if r < 0.10:
            key = (rng.randint(1, LIVE_W), rng.randint(1, LIVE_D), 100_000 * (self.cid + 1)
                   + self._next())
            lines = [(n, rng.randint(1, 100_000), rng.randint(1, 10),
                      Decimal(rng.randint(1, 99_999)) / 100) for n in range(1, rng.randint(5, 15))]
            total = sum(l[3] for l in lines)
            total_first = rng.random() < 0.3

            def plan(conn, txn):
                ins_total = ("INSERT INTO order_total VALUES (%s, %s, %s, %s)", list(key) + [total])
                if total_first:
                    conn.execute(*ins_total)
                conn.execute("INSERT INTO order_line (%s) VALUES %s" % (
                    OL_COLS, ", ".join(["(%s, %s, %s, %s, %s, %s, %s, NULL)"] * len(lines))),
                    [x for l in lines for x in list(key) + list(l)])
                if not total_first:
                    conn.execute(*ins_total)
                for l in lines:
                    txn.effects.append(("line_new", key) + l)
                txn.effects.append(("total_new", key, total))
            return "neworder", plan
        if r < 0.28:
            key = self._order()
            token = 1_000_000 * self.cid + self._next()
            variant = rng.randrange(3)

            def plan(conn, txn):
                ns = [x[0] for x in conn.execute(
                    "UPDATE order_line SET ol_delivery_d = %s WHERE " + OL_KEY
                    + " AND ol_delivery_d IS NULL RETURNING ol_number", [_ts(token)] + list(key))]
                if ns:
                    txn.effects.append(("deliver", key, ns, token))
                self._agree(conn, txn, key, "delivery", variant)
            return "delivery", plan
        if r < 0.53:
            key = self._order()
            d = Decimal(rng.randint(-5000, 5000)) / 100
            n = self._line(key) if rng.random() < 0.75 else None

            def plan(conn, txn):
                if n is None:
                    ns = [x[0] for x in conn.execute(
                        "UPDATE order_line SET ol_amount = ol_amount + %s WHERE " + OL_KEY
                        + " RETURNING ol_number", [d] + list(key))]
                else:
                    ns = [x[0] for x in conn.execute(
                        "UPDATE order_line SET ol_amount = ol_amount + %s WHERE " + OL_KEY
                        + " AND ol_number = %s RETURNING ol_number", [d] + list(key) + [n])]
                if not ns:
                    return
                c = conn.execute("UPDATE order_total SET amount = amount + %s WHERE " + OT_KEY,
                                 [d * len(ns)] + list(key)).rowcount
                assert c == 1, "adjust of order %r: its total updated %d rows" % (key, c)
                for x in ns:
                    txn.effects.append(("line_delta", key, x, d))
                txn.effects.append(("total_delta", key, d * len(ns)))
            return "adjust", plan
        if r < 0.61:
            key = self._order()
            n = 10_000 * (self.cid + 1) + self._next()
            i, q, amount = rng.randint(1, 100_000), rng.randint(1, 10), \
                Decimal(rng.randint(1, 99_999)) / 100
            total_first = rng.random() < 0.5

            def plan(conn, txn):
                up = ("UPDATE order_total SET amount = amount + %s WHERE " + OT_KEY,
                      [amount] + list(key))
                if total_first:
                    c = conn.execute(*up).rowcount
                conn.execute("INSERT INTO order_line (%s) VALUES (%%s, %%s, %%s, %%s, %%s, %%s, "
                             "%%s, NULL)" % OL_COLS, list(key) + [n, i, q, amount])
                if not total_first:
                    c = conn.execute(*up).rowcount
                assert c == 1, "line added to order %r: its total updated %d rows" % (key, c)
                txn.effects.append(("line_new", key, n, i, q, amount))
                txn.effects.append(("total_delta", key, amount))
            return "addline", plan
        if r < 0.68:
            key = self._order()
            n = self._line(key)

            def plan(conn, txn):
                rows = conn.execute("DELETE FROM order_line WHERE " + OL_KEY + " AND ol_number = %s "
                                    "RETURNING ol_amount", list(key) + [n]).fetchall()
                if not rows:
                    return
                amount = rows[0][0]
                c = conn.execute("UPDATE order_total SET amount = amount - %s WHERE " + OT_KEY,
                                 [amount] + list(key)).rowcount
                assert c == 1, "line removed from order %r: its total updated %d rows" % (key, c)
                txn.effects.append(("line_del", key, n, amount))
                txn.effects.append(("total_delta", key, -amount))
            return "removeline", plan
        key = self._order()
        variant = rng.randrange(3)

        def plan(conn, txn):
            self._agree(conn, txn, key, "read", variant)
        return "read", plan


def live_agg_checker(state, full_at=float("inf")):
    """A check for UnitChecker: one statement compares order_total with the
    sums of order_line, over 30 orders of a district, or over everything
    from full_at on and once the migration is done (every snapshot then
    sees the whole of both tables); from full_at on, always over everything
    (a full read migrates every unit left).  state counts the checks."""
    def check(conn, rng, full):
        done = conn.execute("SELECT state = 'done' FROM leapfrog.migrations WHERE name = "
                            "'live_agg'").fetchone()[0]
        full = full or done or time.monotonic() >= full_at
        if full:
            ct = cl = "true"
        else:
            w, d, lo = rng.randint(1, LIVE_W), rng.randint(1, LIVE_D), rng.randint(1, LIVE_O - 29)
            ct = "w = %d AND d = %d AND o BETWEEN %d AND %d" % (w, d, lo, lo + 29)
            cl = "ol_w_id = %d AND ol_d_id = %d AND ol_o_id BETWEEN %d AND %d" % (w, d, lo, lo + 29)
        n, distinct, bad, sample = conn.execute(
            "SELECT count(*), count(DISTINCT (w, d, o)), "
            "       count(*) FILTER (WHERE t_amount IS DISTINCT FROM coalesce(s, 0)), "
            "       (array_agg(format('%%s: total %%s, lines %%s', ARRAY[w, d, o], t_amount, s)) "
            "          FILTER (WHERE t_amount IS DISTINCT FROM coalesce(s, 0)))[1:5] "
            "  FROM (SELECT w, d, o, amount AS t_amount FROM order_total WHERE %s) t "
            "  FULL JOIN (SELECT ol_w_id AS w, ol_d_id AS d, ol_o_id AS o, sum(ol_amount) AS s "
            "               FROM order_line WHERE %s GROUP BY 1, 2, 3) l USING (w, d, o)"
            % (ct, cl)).fetchone()
        state["done_full" if done else "full" if full else "range"] += 1
        want = None if full else 30
        if n != distinct or bad or (want is not None and n != want) or \
                (full and n < LIVE_W * LIVE_D * LIVE_O):
            return "%s: %d orders (want %r), %d distinct, %d totals disagree with their lines: %r" % (
                "everything" if full else ct, n, want, distinct, bad, sample)
        return None
    return check


def check_live_agg(m, clients, final_lines, final_totals):
    """final_lines: rows (w, d, o, n, i_id, qty, amount, delivery); final_totals:
    rows (w, d, o, amount).  Both must be the start state with the committed
    effects applied, and every total the sum of its order's lines."""
    problems = []
    lines = {k: [i, q, amount, None] for k, (i, q, amount) in m.lines.items()}
    totals = dict(m.eager)
    log = [e for cl in clients for e in cl.log]
    effects = [eff for e in log for eff in e[6]]
    deltas, deleted = {}, {}
    for eff in effects:
        if eff[0] == "line_new":
            _, key, n, i, q, amount = eff
            if key + (n,) in lines:
                problems.append("line %r inserted twice" % (key + (n,),))
            lines[key + (n,)] = [i, q, amount, None]
        elif eff[0] == "total_new":
            if eff[1] in totals:
                problems.append("total of order %r inserted twice" % (eff[1],))
            totals[eff[1]] = eff[2]
    for eff in effects:
        if eff[0] == "line_delta":
            _, key, n, d = eff
            lines[key + (n,)][2] += d
            deltas[key + (n,)] = deltas.get(key + (n,), 0) + d
        elif eff[0] == "total_delta":
            totals[eff[1]] += eff[2]
        elif eff[0] == "deliver":
            _, key, ns, token = eff
            for n in ns:
                if lines[key + (n,)][3] is not None:
                    problems.append("line %r delivered twice: %r and %r"
                                    % (key + (n,), lines[key + (n,)][3], _ts(token)))
                lines[key + (n,)][3] = _ts(token)
        elif eff[0] == "line_del":
            _, key, n, amount = eff
            if key + (n,) in deleted:
                problems.append("line %r deleted twice" % (key + (n,),))
            deleted[key + (n,)] = amount
    for k, amount in deleted.items():
        # an adjust that finds the line deleted changes nothing, so every
        # committed delta of the line came before its deletion
        if lines[k][2] != amount:
            problems.append("line %r deleted with amount %s, want %s (start %s + deltas %s)"
                            % (k, amount, lines[k][2], m.lines.get(k, ("?",) * 3)[2],
                               deltas.get(k, 0)))
        del lines[k]
    got = {}
    for w, d, o, n, i, q, amount, dd in final_lines:
        if (w, d, o, n) in got:
            problems.append("final: line %r twice" % ((w, d, o, n),))
        got[(w, d, o, n)] = [i, q, amount, dd]
    for k in sorted(set(lines) | set(got)):
        if lines.get(k) != got.get(k):
            problems.append("final order_line: %r is %r, want %r" % (k, got.get(k), lines.get(k)))
    check_problems(problems, "final order_line (start + committed writes)")

    got = {}
    for w, d, o, amount in final_totals:
        if (w, d, o) in got:
            problems.append("final: total of %r twice" % ((w, d, o),))
        got[(w, d, o)] = amount
    sums = {}
    for (w, d, o, n), (_, _, amount, _) in lines.items():
        sums[(w, d, o)] = sums.get((w, d, o), 0) + amount
    for k in sorted(set(totals) | set(got)):
        if totals.get(k) != got.get(k):
            problems.append("final order_total: %r is %r, want %r (eager %r)"
                            % (k, got.get(k), totals.get(k), m.eager.get(k)))
        if got.get(k) != sums.get(k, 0):
            problems.append("final: total of %r is %r, its lines sum to %r"
                            % (k, got.get(k), sums.get(k, 0)))
    check_problems(problems, "final order_total (eager at start + committed writes)")
    count = lambda kind: sum(1 for eff in effects if eff[0] == kind)      # noqa: E731
    return {"orders": len(totals), "lines": len(lines), "new_lines": count("line_new"),
            "line_deltas": count("line_delta"), "deleted_lines": len(deleted),
            "deliveries": count("deliver"), "agreeing_reads": sum(len(e[5]) for e in log)}


@pytest.mark.parametrize("mode", sorted(UNIT_MODES))
def test_stress_live_aggregate(make_cluster, mode):
    """The BullFrog aggregate migration, order_line staying live (8000 orders,
    about 40k lines): 8 clients keep order_total in step with order_line
    themselves (LiveAggClient) while the groups migrate, with the background
    workers or complete() mid-run.  Every read of an order's total with its
    lines in one snapshot agrees; the checker compares totals with the sums
    of the lines in one statement, over ranges, and over everything once the
    migration is done; at the end order_line is its start state plus the
    committed writes, and order_total the eager aggregate at start() plus the
    committed writes, each total the sum of its lines, every key once."""
    needs_real_extension()
    c = make_cluster(**UNIT_MODES[mode])
    c.create_database("app")
    rng = random.Random(21)
    with c.connect("app") as conn:
        conn.execute("CREATE TABLE order_line (ol_w_id int, ol_d_id int, ol_o_id int, "
                     "ol_number int, ol_i_id int NOT NULL, ol_supply_w_id int, "
                     "ol_delivery_d timestamp, ol_quantity int, ol_amount numeric(6,2), "
                     "ol_dist_info char(24), PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number))")
        with conn.cursor().copy("COPY order_line (%s, ol_supply_w_id, ol_dist_info) FROM STDIN"
                                % OL_COLS) as cp:
            for w in range(1, LIVE_W + 1):
                for d in range(1, LIVE_D + 1):
                    for o in range(1, LIVE_O + 1):
                        for n in range(1, rng.randint(1, 9) + 1):
                            cp.write_row((w, d, o, n, rng.randint(1, 100_000), rng.randint(1, 10),
                                          Decimal(rng.randint(1, 99_999)) / 100, None, w,
                                          "d%023d" % rng.randint(0, 10 ** 9)))
        conn.execute("CREATE TABLE order_line_copy AS SELECT * FROM order_line")
        conn.execute("VACUUM ANALYZE order_line")
        t0 = time.monotonic()
        conn.execute("SELECT leapfrog.start('live_agg', %s)", [LIVE_AGG_SCRIPT])
        print("start(): %.1f ms" % ((time.monotonic() - t0) * 1e3))
        model = LiveAggModel(conn.execute("SELECT %s FROM order_line_copy" % OL_COLS).fetchall())
        # the script does not drop order_line: it stays live, tracked in place
        assert conn.execute("SELECT live_keys IS NOT NULL FROM leapfrog.input "
                            "WHERE relid = 'order_line'::regclass").fetchall() == [(True,)]
    n_lines = len(model.lines)
    print("start: %d orders, %d lines" % (len(model.orders), n_lines))
    assert len(model.orders) == LIVE_W * LIVE_D * LIVE_O and 35_000 < n_lines < 45_000

    deadline = time.monotonic() + UNIT_SECONDS
    clients = [LiveAggClient(c, i, deadline, "live-agg", model) for i in range(UNIT_CLIENTS)]
    state = {"range": 0, "full": 0, "done_full": 0}
    full_at = time.monotonic() + UNIT_SECONDS * 0.8
    checker = UnitChecker(c, full_at, deadline, live_agg_checker(state, full_at), "live-agg")
    stats, mig = run_unit_stress(c, "live_agg", mode, clients, checker)
    print("live_agg %s checker:" % mode, state)
    assert mig == ("done", n_lines, n_lines, None), mig
    with c.connect("app") as conn:
        final_lines = conn.execute("SELECT %s FROM order_line" % OL_COLS).fetchall()
        final_totals = conn.execute("SELECT w, d, o, amount FROM order_total").fetchall()
        n, distinct = conn.execute("SELECT count(*), count(DISTINCT (w, d, o)) FROM order_total"
                                   ).fetchone()
    assert n == distinct, "order_total: %d rows, %d distinct keys" % (n, distinct)
    summary = check_live_agg(model, clients, final_lines, final_totals)
    print("live_agg %s checked:" % mode, summary)
    assert retired_tables_after_completion(c, "app") == []
    assert summary["line_deltas"] > 100 and summary["deleted_lines"] > 5 \
        and summary["new_lines"] > 100 and summary["deliveries"] > 20 \
        and summary["agreeing_reads"] > 200, summary
    assert state["range"] + state["full"] + state["done_full"] >= 10, state
    assert state["done_full"] + state["full"] >= 1, state

    # The checks can fail: a total off by a cent in the table (the checker),
    # a start line off by a cent in the model, a final total off by a cent.
    with c.connect("app") as conn:
        key = model.orders[17]
        conn.execute("UPDATE order_total SET amount = amount + 0.01 WHERE " + OT_KEY, key)
        bad = live_agg_checker(dict.fromkeys(state, 0))(conn, random.Random(1), True)
        assert bad and "{%d,%d,%d}" % key in bad, bad
        conn.execute("UPDATE order_total SET amount = amount - 0.01 WHERE " + OT_KEY, key)
        assert live_agg_checker(dict.fromkeys(state, 0))(conn, random.Random(1), True) is None
    k0 = key + (model.by_order[key][0],)
    wrong = LiveAggModel([k + (i, q, amount + (Decimal("0.01") if k == k0 else 0), None)
                          for k, (i, q, amount) in model.lines.items()])
    with pytest.raises(AssertionError, match="final order_line"):
        check_live_agg(wrong, clients, final_lines, final_totals)
    with pytest.raises(AssertionError, match="its lines sum to"):
        check_live_agg(model, clients, final_lines, [r[:3] + (r[3] + Decimal("0.01"),)
                                                     if r[:3] == key else r for r in final_totals])


# --- a join with a live input: a customer name denormalized into orders ------

LJ_CUSTS = 6000             # customers 1..6000; orders on 1..5900 (so 100
LJ_ORPHANS = 200            # customers have none) and on 6001..6200 (no
LJ_ORDERS = 20_000          # customer at start), 1% with a NULL cust
LJ_NULLS = 200

LIVE_JOIN_SCRIPT = """
CREATE TABLE orders_v2 (id int PRIMARY KEY, cust int, cust_name text, amount numeric(10,2));
CREATE INDEX orders_v2_cust ON orders_v2 (cust);
INSERT INTO orders_v2 SELECT o.id, o.cust, c.name, o.amount
  FROM orders o LEFT JOIN customers c ON o.cust = c.id;
DROP TABLE orders;
"""


class LiveJoinModel:
    """customers at start: id -> name; orders: id -> (cust, amount); the
    eager orders_v2 rows by id and by cust."""

    def __init__(self, customers, orders):
        self.name = dict(customers)
        self.order = {i: (cust, amount) for i, cust, amount in orders}
        self.eager = {i: (i, cust, self.name.get(cust), amount)
                      for i, (cust, amount) in self.order.items()}
        self.by_cust = {}
        for i, (cust, _) in self.order.items():
            self.by_cust.setdefault(cust, []).append(i)
        self.custs = list(range(1, LJ_CUSTS + LJ_ORPHANS + 1))


class LiveJoinClient(TxnClient):
    """The application of the live join (customers live, orders_v2 new):
      rename     UPDATE customers SET name = <new>, ver = ver + 1 (an old
                 customer, perhaps not migrated yet, or a new one);
      newcust    inserts a customer (ON CONFLICT DO NOTHING): a new id, an id
                 orders reference with no customer at start, or an old id
                 (which must conflict with the row as it was at start);
      neworder   reads a customer's name and inserts an order with it;
      read_id    an order by id: an old one is its eager row at once;
      read_cust  the orders of a customer (or of none), some joined with the
                 customer: the old ones are exactly their eager rows;
      read_custs a customer by id.
    obs: ('orders', cust, rows (id, cust, cust_name, amount)) for the
    client-inserted rows a read of a customer's orders saw, ('cust', id,
    rows (name, ver)).  effects: ('rename', id, ver, name), ('newcust', id,
    name), ('neworder', id, cust, name, amount)."""

    def __init__(self, cluster, cid, deadline, prefix, model):
        super().__init__(cluster, cid, deadline, prefix)
        self.m = model
        self.seq = 0
        self.absorbed = 0
        self.my_custs = []
        self.my_orders = {}

    def _own(self, eff):
        if eff[0] == "newcust":
            self.my_custs.append(eff[1])
        elif eff[0] == "neworder":
            self.my_orders[eff[1]] = eff[1:]

    def _next(self):
        self.seq += 1
        return self.seq

    def _cust(self):
        _absorb(self, self._own)
        rng = self.rng
        if self.my_custs and rng.random() < 0.1:
            return rng.choice(self.my_custs)
        return self.m.custs[unit_key(rng, self.begin, self.deadline, len(self.m.custs)) - 1]

    def _token(self):
        return "n%d.%d" % (self.cid, self._next())

    def _check_old(self, rows, want_ids, where):
        got = {r[0]: tuple(r[:4]) for r in rows if r[0] in self.m.eager}
        assert len(got) == sum(1 for r in rows if r[0] in self.m.eager), \
            "%s: an old order twice: %r" % (where, rows)
        want = {i: self.m.eager[i] for i in want_ids}
        assert got == want, "%s: old orders %r, want their eager rows %r" % (
            where, [got.get(i) for i in sorted(set(got) | set(want)) if got.get(i) != want.get(i)],
            [want.get(i) for i in sorted(set(got) | set(want)) if got.get(i) != want.get(i)])

    def pick(self):
        rng, m = self.rng, self.m
        r = rng.random()
        if r < 0.22:
            cust = self._cust()
            name = self._token()

            def plan(conn, txn):
                rows = conn.execute("UPDATE customers SET name = %s, ver = ver + 1 WHERE id = %s "
                                    "RETURNING ver", [name, cust]).fetchall()
                if cust in m.name:
                    assert len(rows) == 1, "rename of old customer %d: %r" % (cust, rows)
                for (ver,) in rows:
                    txn.effects.append(("rename", cust, ver, name))
            return "rename", plan
        if r < 0.30:
            x = rng.random()
            cust = (rng.randint(LJ_CUSTS + 1, LJ_CUSTS + LJ_ORPHANS) if x < 0.4 else
                    rng.randint(1, LJ_CUSTS) if x < 0.6 else 100_000 * (self.cid + 1) + self._next())
            name = self._token()

            def plan(conn, txn):
                rows = conn.execute("INSERT INTO customers (id, name) VALUES (%s, %s) "
                                    "ON CONFLICT (id) DO NOTHING RETURNING id, ver",
                                    [cust, name]).fetchall()
                if cust in m.name:
                    assert rows == [], "insert of old customer %d did not conflict: %r" % (cust, rows)
                if rows:
                    txn.effects.append(("newcust", cust, name))
            return "newcust", plan
        if r < 0.40:
            oid = 1_000_000 * (self.cid + 1) + self._next()
            cust = self._cust()
            amount = Decimal(rng.randint(1, 10 ** 6)) / 100

            def plan(conn, txn):
                rows = conn.execute("SELECT name, ver FROM customers WHERE id = %s",
                                    [cust]).fetchall()
                txn.obs.append(("cust", cust, rows))
                name = rows[0][0] if rows else None
                conn.execute("INSERT INTO orders_v2 VALUES (%s, %s, %s, %s)",
                             [oid, cust, name, amount])
                txn.effects.append(("neworder", oid, cust, name, amount))
            return "neworder", plan
        if r < 0.63:
            x = rng.random()
            if x < 0.1 and self.my_orders:
                oid = rng.choice(list(self.my_orders))
            else:
                ids = m.by_cust.get(self._cust())
                oid = rng.choice(ids) if ids and x < 0.9 else rng.randint(1, LJ_ORDERS)

            def plan(conn, txn):
                rows = conn.execute("SELECT id, cust, cust_name, amount FROM orders_v2 "
                                    "WHERE id = %s", [oid]).fetchall()
                if oid in m.eager:
                    assert rows == [m.eager[oid]], "order %d: %r, want its eager row %r" % (
                        oid, rows, m.eager[oid])
                else:
                    assert rows == [self.my_orders[oid]], \
                        "own order %d: %r, want %r" % (oid, rows, self.my_orders[oid])
            return "read_id", plan
        if r < 0.90:
            cust = None if rng.random() < 0.03 else self._cust()
            join = rng.random() < 0.5
            where = "o.cust IS NULL" if cust is None else "o.cust = %s"
            q = ("SELECT o.id, o.cust, o.cust_name, o.amount%s FROM orders_v2 o%s WHERE %s "
                 "ORDER BY o.id" % (", c.name, c.ver" if join else "",
                                    " LEFT JOIN customers c ON c.id = o.cust" if join else "",
                                    where))

            def plan(conn, txn):
                rows = conn.execute(q, [] if cust is None else [cust]).fetchall()
                self._check_old(rows, m.by_cust.get(cust, []), "orders of customer %r" % cust)
                txn.obs.append(("orders", cust, [r[:4] for r in rows if r[0] not in m.eager]))
                if join and cust is not None:
                    seen = {r[4:] for r in rows}
                    assert len(seen) <= 1, "orders of %d joined with customers %r" % (cust, seen)
                    if seen:
                        c = seen.pop()
                        txn.obs.append(("cust", cust, [] if c == (None, None) else [c]))
            return "read_cust", plan
        cust = self._cust()

        def plan(conn, txn):
            txn.obs.append(("cust", cust, conn.execute(
                "SELECT name, ver FROM customers WHERE id = %s", [cust]).fetchall()))
        return "read_custs", plan


def live_join_checker(state, full_at=float("inf")):
    """A check for UnitChecker: one statement compares orders_v2 with the
    copies of orders and customers saved before start(), over 50 order ids
    or (from full_at on, and once the migration is done) all of them: every
    old order once, with the customer's name at start().  state counts the
    checks."""
    def check(conn, rng, full):
        done = conn.execute("SELECT state = 'done' FROM leapfrog.migrations WHERE name = "
                            "'live_join'").fetchone()[0]
        full = full or done or time.monotonic() >= full_at
        lo = 1 if full else rng.randint(1, LJ_ORDERS - 49)
        hi = LJ_ORDERS if full else lo + 49
        n, distinct, bad, sample = conn.execute(
            "SELECT count(*), count(DISTINCT v.id), "
            "       count(*) FILTER (WHERE o.id IS NULL OR (v.cust, v.cust_name, v.amount) "
            "                        IS DISTINCT FROM (o.cust, c.name, o.amount)), "
            "       (array_agg(format('%%s: %%s, want %%s', v.id, ARRAY[v.cust::text, v.cust_name, "
            "         v.amount::text], ARRAY[o.cust::text, c.name, o.amount::text])) "
            "         FILTER (WHERE o.id IS NULL OR (v.cust, v.cust_name, v.amount) "
            "                 IS DISTINCT FROM (o.cust, c.name, o.amount)))[1:5] "
            "  FROM orders_v2 v LEFT JOIN orders_copy o ON o.id = v.id "
            "  LEFT JOIN customers_copy c ON c.id = o.cust WHERE v.id BETWEEN %s AND %s",
            [lo, hi]).fetchone()
        state["done_full" if done else "full" if full else "range"] += 1
        if n != hi - lo + 1 or distinct != n or bad:
            return "orders %d..%d: %d rows (want %d), %d distinct, %d not as at start(): %r" % (
                lo, hi, n, hi - lo + 1, distinct, bad, sample)
        return None
    return check


def check_live_join(m, clients, final_orders, final_custs):
    """final_orders: rows (id, cust, cust_name, amount); final_custs: rows
    (id, name, ver).  orders_v2 must be the eager join at start() plus the
    committed new orders; customers the start state plus the committed
    inserts and renames (versions 1..k of a customer each committed once);
    a read of a customer or of the new orders of a customer must see
    committed states only, none older than one acknowledged before it
    began, nothing missing that was acknowledged before it began."""
    problems = []
    log = [e for cl in clients for e in cl.log]
    custs = {i: {0: (name, -1.0, -1.0)} for i, name in m.name.items()}
    orders = dict(m.eager)
    new_orders = {}
    for kind, iso, t_begin, t_sent, t_ack, obs, effects in log:
        for eff in effects:
            if eff[0] == "newcust":
                if eff[1] in custs:
                    problems.append("customer %d inserted twice (or an old one): %r"
                                    % (eff[1], eff[2]))
                custs[eff[1]] = {0: (eff[2], t_sent, t_ack)}
            elif eff[0] == "neworder":
                _, oid, cust, name, amount = eff
                assert oid not in orders
                orders[oid] = (oid, cust, name, amount)
                new_orders.setdefault(cust, []).append((oid, t_sent, t_ack))
    for kind, iso, t_begin, t_sent, t_ack, obs, effects in log:
        for eff in effects:
            if eff[0] == "rename":
                _, cid, ver, name = eff
                vs = custs.get(cid)
                if vs is None:
                    problems.append("rename of customer %d, never inserted" % cid)
                elif ver in vs:
                    problems.append("customer %d: version %d committed twice (a lost update): "
                                    "%r and %r" % (cid, ver, vs[ver], (name, t_sent, t_ack)))
                else:
                    vs[ver] = (name, t_sent, t_ack)
    for kind, iso, t_begin, t_sent, t_ack, obs, effects in log:
        where = "%s %s at %.3f-%.3f" % (kind, iso, t_begin, t_sent)
        for what, cust, rows in obs:
            if what == "cust":
                vs = custs.get(cust, {})
                if not rows:
                    if vs and vs[0][2] < t_begin:
                        problems.append("%s: customer %d missing" % (where, cust))
                    continue
                if len(rows) > 1:
                    problems.append("%s: customer %d twice: %r" % (where, cust, rows))
                name, ver = rows[0]
                if ver not in vs or vs[ver][0] != name or vs[ver][1] > t_sent:
                    problems.append("%s: customer %d (%r, version %d), committed: %r"
                                    % (where, cust, name, ver, vs.get(ver)))
                newer = [v for v, (_, _, ack) in vs.items() if v > ver and ack < t_begin]
                if newer:
                    problems.append("%s: customer %d at version %d, but %r acknowledged before"
                                    % (where, cust, ver, newer))
            else:
                got = {r[0]: r for r in rows}
                for oid, r in got.items():
                    if orders.get(oid) != r:
                        problems.append("%s: order %r, committed: %r" % (where, r, orders.get(oid)))
                for oid, sent, ack in new_orders.get(cust, []):
                    if oid in got and sent > t_sent:
                        problems.append("%s: order %d committed after the read" % (where, oid))
                    if oid not in got and ack < t_begin:
                        problems.append("%s: order %d of customer %r missing" % (where, oid, cust))
    check_problems(problems, "reads of customers and new orders")

    got = {}
    for r in final_orders:
        if r[0] in got:
            problems.append("final: order %d twice" % r[0])
        got[r[0]] = r
    for oid in sorted(set(got) | set(orders)):
        if got.get(oid) != orders.get(oid):
            problems.append("final orders_v2: %d is %r, want %r" % (oid, got.get(oid),
                                                                   orders.get(oid)))
    check_problems(problems, "final orders_v2 (eager join at start + committed orders)")
    want = {}
    for cid, vs in custs.items():
        last = max(vs)
        if sorted(vs) != list(range(last + 1)):
            problems.append("customer %d: committed versions %r" % (cid, sorted(vs)))
        want[cid] = (cid, vs[last][0], last)
    got = {}
    for r in final_custs:
        if r[0] in got:
            problems.append("final: customer %d twice" % r[0])
        got[r[0]] = r
    for cid in sorted(set(got) | set(want)):
        if got.get(cid) != want.get(cid):
            problems.append("final customers: %d is %r, want %r" % (cid, got.get(cid),
                                                                   want.get(cid)))
    check_problems(problems, "final customers (start + committed writes)")
    effects = [eff for e in log for eff in e[6]]
    return {"orders": len(orders), "customers": len(want),
            "renames": sum(1 for e in effects if e[0] == "rename"),
            "renamed_old_with_orders": sum(1 for cid, vs in custs.items()
                                           if cid in m.by_cust and len(vs) > 1),
            "new_customers": sum(1 for e in effects if e[0] == "newcust"),
            "new_orders": len(orders) - len(m.eager),
            "observations": sum(len(e[5]) for e in log)}


@pytest.mark.parametrize("mode", sorted(UNIT_MODES))
def test_stress_live_join(make_cluster, mode):
    """orders (dropped) LEFT JOIN customers (live) into orders_v2, under 8
    clients renaming and inserting customers (on ids old orders reference
    without a customer too), inserting orders, reading orders by id and by
    customer (joined with customers too) and customers, with the background
    workers or complete() mid-run.  Every old order reads as its eager row
    (the customer's name at start(), whatever the renames) at once; the
    checker compares ranges, and everything once the migration is done,
    with copies saved before start(); at the end orders_v2 is the eager
    join plus the committed orders and customers the start state plus the
    committed writes."""
    needs_real_extension()
    c = make_cluster(**UNIT_MODES[mode])
    c.create_database("app")
    rng = random.Random(22)
    with c.connect("app") as conn:
        conn.execute("CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, "
                     "ver int NOT NULL DEFAULT 0, address text)")
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, cust int, amount numeric(10,2), "
                     "note text)")
        with conn.cursor().copy("COPY customers (id, name, address) FROM STDIN") as cp:
            for i in range(1, LJ_CUSTS + 1):
                cp.write_row((i, "c%d" % i, "street %d " % i + "x" * 150))
        # the orders of a customer are together (so that a background batch,
        # a block range, holds a few join keys), their ids shuffled
        custs = [rng.randint(LJ_CUSTS + 1, LJ_CUSTS + LJ_ORPHANS) if rng.random() < 0.04
                 else rng.randint(1, LJ_CUSTS - 100)
                 for _ in range(LJ_ORDERS - LJ_NULLS)] + [None] * LJ_NULLS
        custs.sort(key=lambda x: (x is None, x or 0))
        ids = list(range(1, LJ_ORDERS + 1))
        rng.shuffle(ids)
        with conn.cursor().copy("COPY orders (id, cust, amount, note) FROM STDIN") as cp:
            for oid, cust in zip(ids, custs):
                cp.write_row((oid, cust, Decimal(rng.randint(1, 10 ** 6)) / 100, "x" * 100))
        conn.execute("CREATE INDEX orders_cust ON orders (cust)")
        conn.execute("CREATE TABLE customers_copy AS SELECT * FROM customers")
        conn.execute("CREATE TABLE orders_copy AS SELECT * FROM orders")
        conn.execute("VACUUM ANALYZE customers, orders")
        t0 = time.monotonic()
        conn.execute("SELECT leapfrog.start('live_join', %s)", [LIVE_JOIN_SCRIPT])
        print("start(): %.1f ms" % ((time.monotonic() - t0) * 1e3))
        model = LiveJoinModel(conn.execute("SELECT id, name FROM customers_copy").fetchall(),
                              conn.execute("SELECT id, cust, amount FROM orders_copy").fetchall())
    orphans = sum(1 for o in model.eager.values() if o[1] is not None and o[2] is None)
    print("start: %d orders, %d customers; %d orders of no customer, %d with a NULL one"
          % (len(model.order), len(model.name), orphans, len(model.by_cust[None])))
    assert orphans > 100 and len(model.by_cust[None]) == LJ_NULLS

    deadline = time.monotonic() + UNIT_SECONDS
    clients = [LiveJoinClient(c, i, deadline, "live-join", model) for i in range(UNIT_CLIENTS)]
    state = {"range": 0, "full": 0, "done_full": 0}
    full_at = time.monotonic() + UNIT_SECONDS * 0.8
    checker = UnitChecker(c, full_at, deadline, live_join_checker(state, full_at), "live-join")
    stats, mig = run_unit_stress(c, "live_join", mode, clients, checker)
    print("live_join %s checker:" % mode, state)
    inputs = LJ_ORDERS + LJ_CUSTS
    assert mig == ("done", inputs, inputs, None), mig
    with c.connect("app") as conn:
        final_orders = conn.execute("SELECT id, cust, cust_name, amount FROM orders_v2").fetchall()
        final_custs = conn.execute("SELECT id, name, ver FROM customers").fetchall()
    summary = check_live_join(model, clients, final_orders, final_custs)
    print("live_join %s checked:" % mode, summary)
    assert retired_tables_after_completion(c, "app") == []
    assert summary["renamed_old_with_orders"] > 100 and summary["new_customers"] > 20 \
        and summary["new_orders"] > 100 and summary["observations"] > 200, summary
    assert state["range"] + state["full"] + state["done_full"] >= 10, state
    assert state["done_full"] + state["full"] >= 1, state

    # The checks can fail: an old order with its customer's new name (in the
    # table, then in the final rows), an old order's amount off by a cent in
    # the model, a lost rename.
    renamed = next(cid for cid, _, ver in sorted(final_custs) if ver > 0 and model.by_cust.get(cid))
    oid = model.by_cust[renamed][0]
    with c.connect("app") as conn:
        conn.execute("UPDATE orders_v2 SET cust_name = c.name FROM customers c "
                     "WHERE c.id = orders_v2.cust AND orders_v2.id = %s", [oid])
        bad = live_join_checker(dict.fromkeys(state, 0))(conn, random.Random(1), True)
        assert bad and ("%d: " % oid) in bad, bad
        conn.execute("UPDATE orders_v2 SET cust_name = %s WHERE id = %s", [model.name[renamed], oid])
        assert live_join_checker(dict.fromkeys(state, 0))(conn, random.Random(1), True) is None
    new_name = next(r[1] for r in final_custs if r[0] == renamed)
    with pytest.raises(AssertionError, match="final orders_v2: %d is .*'%s'" % (oid, new_name)):
        check_live_join(model, clients, [(i, cust, new_name if i == oid else name, amount)
                                         for i, cust, name, amount in final_orders], final_custs)
    wrong = LiveJoinModel(model.name.items(), [
        (i, cust, amount + Decimal("0.01") if i == oid else amount)
        for i, (cust, amount) in model.order.items()])
    with pytest.raises(AssertionError, match="final orders_v2: %d is" % oid):
        check_live_join(wrong, clients, final_orders, final_custs)
    with pytest.raises(AssertionError, match="final customers"):
        check_live_join(model, clients, final_orders,
                        [(i, "c%d" % i, 0) if i == renamed else (i, n, v) for i, n, v in final_custs])
