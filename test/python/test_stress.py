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
