"""Crash tests: kill -9 in the middle of a migration, restart, finish, check.

Each test creates acct (100k rows) and orders (60k rows), starts a same-name
replacement of acct and a split of orders (see appload.py), runs writers that
update through the new schema, and kills:
  - a backend holding rows it migrated in an open transaction, a backend in
    the middle of a statement that migrates, and a writer mid-transaction;
  - the leapfrog background worker in the middle of a batch, three times;
  - the postmaster and all its children at once (then pg_ctl start).
Then the migration finishes (leapfrog.wait, or leapfrog.complete with the
background worker off) and the final tables must be exactly the eager result
plus the committed updates: every input row exactly once, by key.
"""

import re
import threading
import time

import psycopg
import pytest

from appload import (ACCT_MIGRATION, Writers, acct_eager, create_data,
                     order_eager, start_migrations)
from support import (MOCK, RETIRED_SQL, needs_real_extension,
                      retired_tables_after_completion, wait_until)

N_ACCT = 100_000
N_ORD = 60_000
NW = 4
TOTAL = {"acct_v2": N_ACCT, "split_orders": N_ORD}


def setup_app(make_cluster, **gucs):
    c = make_cluster(**gucs)
    c.create_database("app")
    with c.connect("app") as conn:
        create_data(conn, N_ACCT, N_ORD)
        t_acct, t_ord = start_migrations(conn)
    print("start(): acct_v2 %.1f ms, split_orders %.1f ms" % (t_acct * 1e3, t_ord * 1e3))
    return c


def remaining(c):
    """Unmigrated input rows of both migrations (0 for a finished one)."""
    rows = c.sql("SELECT name, state FROM leapfrog.migrations", dbname="app")
    left = 0
    for name, state in rows:
        if state == "running":
            left += c.sql("SELECT leapfrog.remaining(%s)", [name], dbname="app")[0][0]
    return left


def check_accounting_quiescent(c):
    """With nobody migrating: migrated + remaining = input rows, per migration."""
    if MOCK:
        return
    rows = c.sql("SELECT name, state, tuples_total, tuples_migrated, "
                 "leapfrog.remaining(name) FROM leapfrog.migrations ORDER BY name",
                 dbname="app")
    for name, state, total, migrated, left in rows:
        assert state == "running", rows
        assert total == TOTAL[name] and migrated + left == TOTAL[name], \
            "exactly-once accounting broken after crash: %r" % (rows,)


def kill_mid_statement(c, query, min_runtime=0.1, timeout=20):
    """Run query in a thread, SIGKILL its backend while it runs.

    Returns what happened: 'killed while active' or 'finished first'."""
    conn = c.connect("app")
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    result = {}

    def run():
        try:
            result["rows"] = conn.execute(query).fetchall()
        except psycopg.Error as e:
            result["error"] = e

    th = threading.Thread(target=run, daemon=True)
    th.start()
    state = None
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / 0.01) + 1):
        if time.monotonic() > deadline or not th.is_alive():
            break
        r = c.sql("SELECT state, extract(epoch FROM clock_timestamp() - query_start) "
                  "FROM pg_stat_activity WHERE pid = %s", [pid], dbname="app")
        if r and r[0][0] == "active" and r[0][1] >= min_runtime:
            state = "killed while active (%.2fs into the statement)" % r[0][1]
            break
        time.sleep(0.01)
    if state is None:
        th.join(timeout)
        conn.close()
        return "finished first: %r" % (result,)
    c.kill_backend(pid)
    th.join(30)
    assert not th.is_alive()
    assert "error" in result, "statement survived its backend's SIGKILL: %r" % result
    conn.close()
    return state


def final_check(c, writers):
    errs = writers.errors()
    assert not errs, "writer errors (first 10 of %d): %r" % (len(errs), errs[:10])
    log = c.log_text()
    bad = [l for l in log.splitlines()
           if re.search(r"PANIC|TRAP:|terminated by signal (?!9\b)|terminated by exception", l)]
    assert not bad, "server crashed by itself:\n" + "\n".join(bad[:20])
    with c.connect("app") as conn:
        mig = conn.execute("SELECT name, state, tuples_total, tuples_migrated, error "
                           "FROM leapfrog.migrations ORDER BY name").fetchall()
        if MOCK:
            assert [(m[0], m[1]) for m in mig] == [("acct_v2", "done"), ("split_orders", "done")]
        else:
            assert mig == [("acct_v2", "done", N_ACCT, N_ACCT, None),
                           ("split_orders", "done", N_ORD, N_ORD, None)], mig
        retired = retired_tables_after_completion(c, "app")
        assert retired == [], "leapfrog_retired not empty 30s after completion: %r" % retired
        types = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'acct'::regclass AND attnum > 0 AND NOT attisdropped "
            "ORDER BY attnum").fetchall()
        assert types == [("id", "integer"), ("grp", "integer"), ("bal", "numeric(14,2)"),
                         ("note", "character varying(40)"), ("flag", "boolean")], types

        def check_table(name, query, n, expected):
            rows = conn.execute(query).fetchall()
            ids = [r[0] for r in rows]
            seen = set()
            dups = sorted({i for i in ids if i in seen or seen.add(i)})
            missing = sorted(set(range(1, n + 1)) - seen)
            extra = sorted(seen - set(range(1, n + 1)))
            wrong = [(tuple(r), expected(r[0])) for r in rows
                     if 1 <= r[0] <= n and tuple(r[1:]) != expected(r[0])]
            assert not (dups or missing or extra or wrong), (
                "%s: %d rows, %d duplicated ids %r, %d missing %r, %d extra %r, "
                "%d wrong values (row, expected) %r"
                % (name, len(rows), len(dups), dups[:10], len(missing), missing[:10],
                   len(extra), extra[:10], len(wrong), wrong[:10]))

        check_table("acct", "SELECT id, grp, bal, note, flag FROM acct", N_ACCT,
                    writers.expected_acct)
        check_table("order_core", "SELECT id, cust, amount FROM order_core", N_ORD,
                    lambda i: writers.expected_order(i)[:2])
        check_table("order_info", "SELECT id, status, memo, edits FROM order_info", N_ORD,
                    lambda i: order_eager(i)[1][:2] + (writers.expected_order(i)[2],))
        ledger = {r[0] for r in conn.execute("SELECT txid FROM ledger").fetchall()}
        committed = {t for w in writers.threads for t in w.committed}
        assert ledger == committed, (
            "ledger and client disagree: %d committed only in the ledger %r, "
            "%d only on the client %r" % (len(ledger - committed), sorted(ledger - committed)[:10],
                                          len(committed - ledger), sorted(committed - ledger)[:10]))
    print("writers:", writers.summary())


def finish_with_wait(c, writers, timeout=120):
    for name in TOTAL:
        ok = c.sql("SELECT leapfrog.wait(%s, %s)", [name, float(timeout)], dbname="app")[0][0]
        assert ok, "migration %s not done after %ds: %r\n%s" % (
            name, timeout, c.sql("SELECT * FROM leapfrog.migrations", dbname="app"),
            c.log_tail(30))


def test_kill_backend_mid_migration(make_cluster):
    c = setup_app(make_cluster, **{"leapfrog.background": "off"})
    writers = Writers(c, NW, N_ACCT, N_ORD, seed=11)
    writers.start()
    try:
        assert writers.wait_committed(30, 60), writers.errors()[:5]

        # 1. A transaction that migrated many rows and has not committed.
        conn = c.connect("app", autocommit=False)
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM acct WHERE id <= 60000").fetchone()[0] == 60000
        assert conn.execute("SELECT count(*) FROM order_info WHERE id % 2 = 0"
                            ).fetchone()[0] == N_ORD // 2
        c.kill_backend(pid)
        conn.close()
        assert writers.wait_committed(30, 90), writers.errors()[:5]
        writers.pause()
        check_accounting_quiescent(c)
        writers.resume()

        # 2. A statement killed while it migrates.
        what = kill_mid_statement(c, "SELECT count(*), sum(bal) FROM acct WHERE id > 30000")
        print("mid-statement kill:", what)
        assert writers.wait_committed(30, 90), writers.errors()[:5]

        # 3. A writer killed in the middle of its transaction.
        def writer_in_tx():
            r = c.sql("SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'lf-writer-%' "
                      "AND xact_start IS NOT NULL LIMIT 1", dbname="app")
            return r[0][0] if r else None
        wpid = wait_until(writer_in_tx, 30, interval=0.005, what="a writer inside a transaction")
        c.kill_backend(wpid)
        assert writers.wait_committed(30, 90), writers.errors()[:5]
        writers.pause()
        check_accounting_quiescent(c)
        writers.resume()
        assert writers.wait_committed(20, 60), writers.errors()[:5]
    finally:
        writers.stop()
    # 4. complete() killed while it migrates the rest: nothing of it stays.
    what = kill_mid_statement(c, "SELECT leapfrog.complete('acct_v2')", min_runtime=0.05)
    print("complete() kill:", what)
    if what.startswith("killed"):
        check_accounting_quiescent(c)
    # 5. The background worker, turned on now (leapfrog.background is sighup),
    # finishes both migrations.
    c.sql("ALTER SYSTEM SET leapfrog.background = on")
    c.sql("ALTER SYSTEM SET leapfrog.background_delay = 0")
    c.reload()
    t0 = time.monotonic()
    finish_with_wait(c, writers, timeout=90)
    print("background on by reload: done after %.1fs" % (time.monotonic() - t0))
    final_check(c, writers)


def test_kill_during_start(make_cluster):
    """start() killed while it retries its locks: all or nothing."""
    needs_real_extension()
    c = make_cluster(**{"leapfrog.background": "off"})
    c.create_database("app")
    with c.connect("app") as conn:
        create_data(conn, 10_000, 5_000)
    # A reader holds acct, so start() has to retry its lock (lock_timeout x retries).
    holder = c.connect("app", autocommit=False)
    holder.execute("SELECT count(*) FROM acct").fetchone()
    what = kill_mid_statement(
        c, "SELECT leapfrog.start('acct_v2', $$%s$$)" % ACCT_MIGRATION, min_runtime=0.2)
    holder.close()
    print("start() kill:", what)
    assert what.startswith("killed"), "start() did not wait for its lock: %s" % what
    with c.connect("app") as conn:
        assert conn.execute("SELECT count(*) FROM leapfrog.migrations").fetchone()[0] == 0
        cols = conn.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                            "WHERE attrelid = 'acct'::regclass AND attnum > 0 "
                            "AND NOT attisdropped ORDER BY attnum").fetchall()
        assert cols == [("id", "integer"), ("grp", "integer"), ("bal", "bigint"),
                        ("note", "text")], cols
        assert conn.execute("SELECT count(*), sum(bal) FROM acct").fetchone() == (
            10_000, sum((i * 37) % 1000 for i in range(1, 10_001)))
        assert conn.execute("SELECT to_regclass('acct_v2')").fetchone()[0] is None
        retired = conn.execute(RETIRED_SQL).fetchall()
        assert retired == [], retired
        # And the same start() works afterwards.
        conn.execute("SELECT leapfrog.start('acct_v2', %s)", [ACCT_MIGRATION])
        conn.execute("SELECT leapfrog.complete('acct_v2')")
        rows = conn.execute("SELECT id, grp, bal, note, flag FROM acct").fetchall()
        assert len(rows) == 10_000
        assert all(tuple(r[1:]) == acct_eager(r[0]) for r in rows)


def test_kill_background_worker_mid_batch(make_cluster):
    needs_real_extension()
    c = setup_app(make_cluster, **{"leapfrog.background": "on",
                                   "leapfrog.background_delay": 300,
                                   "leapfrog.batch_size": 20000,
                                   "leapfrog.background_naptime": 200})
    total = N_ACCT + N_ORD
    writers = Writers(c, NW, N_ACCT, N_ORD, seed=22)
    writers.start()
    kills = []
    try:
        for threshold in (0.1, 0.4, 0.7):
            # Wait for the worker to pass the threshold, then for it to be
            # in a batch (active), then kill it.
            deadline = time.monotonic() + 60
            forced_at = None
            for _ in range(6000):
                if time.monotonic() > deadline:
                    break
                left = remaining(c)
                if left == 0:
                    break
                done = 1 - left / total
                pids = c.leapfrog_worker_pids("app")
                if done >= threshold and pids:
                    forced_at = forced_at or time.monotonic() + 3
                    st = c.sql("SELECT pid, state, backend_type FROM pg_stat_activity "
                               "WHERE pid = ANY(%s)", [pids], dbname="app")
                    # The process migrating the batch (not a launcher).
                    active = [r[0] for r in st if r[1] == "active"
                              and "launcher" not in (r[2] or "")]
                    if active or time.monotonic() > forced_at:
                        killed = c.kill_worker(active or None)
                        kills.append((threshold, round(done, 3), left, st, bool(active), killed))
                        break
                time.sleep(0.01)
            if remaining(c) == 0:
                break
        print("worker kills (threshold, fraction done, remaining, pg_stat_activity, active, pids):")
        for k in kills:
            print("  ", k)
        assert kills and kills[0][2] > 0, \
            "the background worker was never killed during the migration: %r" % kills
        assert writers.wait_committed(20, 90), writers.errors()[:5]
        finish_with_wait(c, writers)
        assert writers.wait_committed(10, 60), writers.errors()[:5]
    finally:
        writers.stop()
    final_check(c, writers)


def test_kill_postmaster(make_cluster):
    c = setup_app(make_cluster, **{"leapfrog.background": "on",
                                   "leapfrog.background_delay": 300,
                                   "leapfrog.batch_size": 5000,
                                   "leapfrog.background_naptime": 50})
    total = N_ACCT + N_ORD
    writers = Writers(c, NW, N_ACCT, N_ORD, seed=33)
    writers.start()
    conn = None
    try:
        assert writers.wait_committed(30, 60), writers.errors()[:5]
        # An open transaction holding freshly migrated rows at the time of the crash.
        conn = c.connect("app", autocommit=False)
        conn.execute("SELECT count(*) FROM acct WHERE id BETWEEN 70001 AND 90000").fetchone()
        conn.execute("SELECT count(*) FROM order_core WHERE id > 50000").fetchone()
        if not MOCK:
            wait_until(lambda: remaining(c) <= total * 0.75, 60, interval=0.02,
                       what="a quarter of the rows migrated")
        left_before = remaining(c)
        c.kill_postmaster(restart=True)
        conn.close()
        conn = None
        print("postmaster killed with %d rows left" % left_before)
        assert writers.wait_committed(30, 120), writers.errors()[:5]
        left_after = remaining(c)
        # Rows migrated by committed transactions stay migrated; the open
        # transaction's rows came back to the retired tables.
        assert left_after <= left_before + 20000 + 10000
        finish_with_wait(c, writers)
        assert writers.wait_committed(10, 60), writers.errors()[:5]
    finally:
        if conn is not None:
            conn.close()
        writers.stop()
    final_check(c, writers)
