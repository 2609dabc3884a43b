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

The *_units tests do the same for a GROUP BY migration (60k order lines into
per-order totals, NULLs in a group column) and a LEFT JOIN migration (20k
stock rows with 30k lines, fan-out on both sides, NULL keys), whose unit is a
group or a join key (see appload.py): a backend holding migrated units in an
open transaction, statements migrating many groups and join keys, a writer,
complete(), the worker mid-batch and the postmaster are killed; the final
tables must equal the eager run of the same scripts on copies of the inputs
(EXCEPT ALL both ways) plus the writers' committed updates of the new tables.
"""

import re
import threading
import time

import psycopg
import pytest

from appload import (ACCT_MIGRATION, UnitWriters, Writers, acct_eager, create_data,
                     create_unit_data, load_unit_eager, order_eager, start_migrations,
                     start_unit_migrations)
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


def statement_runtime(c, query):
    """How long query takes now, in a transaction rolled back (what it
    migrates goes back), in seconds."""
    with c.connect("app", autocommit=False) as conn:
        t0 = time.monotonic()
        conn.execute(query).fetchall()
        took = time.monotonic() - t0
        conn.rollback()
    return took


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
    # Its reads are the statements that migrate (and are killed while they
    # do): reads migrate here, as with leapfrog.read_mode = migrate.
    c = setup_app(make_cluster, **{"leapfrog.background": "off",
                                   "leapfrog.read_mode": "migrate"})
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


# ---------------------------------------------------------------------------
# GROUP BY and join migrations: the unit is a group / a join key.
# ---------------------------------------------------------------------------

N_LINES = 60_000
N_STOCK = 20_000
N_SLINE = 30_000
UNIT_TOTAL = {"lines_total": N_LINES, "stock_lines": N_STOCK + N_SLINE}


def setup_units(make_cluster, **gucs):
    c = make_cluster(**gucs)
    c.create_database("app")
    with c.connect("app") as conn:
        create_unit_data(conn, N_LINES, N_STOCK, N_SLINE)
        groups, stock = load_unit_eager(conn)
        (t_group, t_join), retired = start_unit_migrations(conn)
    print("start(): lines_total %.1f ms, stock_lines %.1f ms; %d groups, %d stock rows"
          % (t_group * 1e3, t_join * 1e3, len(groups), len(stock)))
    c.unit_retired = retired
    return c, groups, stock


def check_unit_accounting(c):
    """With nobody migrating: migrated + remaining = input rows, per migration."""
    if MOCK:
        return
    rows = c.sql("SELECT name, state, tuples_total, tuples_migrated, "
                 "leapfrog.remaining(name) FROM leapfrog.migrations ORDER BY name",
                 dbname="app")
    for name, state, total, migrated, left in rows:
        assert state in ("running", "done"), rows
        assert total == UNIT_TOTAL[name] and migrated + left == UNIT_TOTAL[name], \
            "exactly-once accounting broken after crash: %r" % (rows,)
    return rows


def check_units_whole(c, writers):
    """With nobody migrating: every unit is in its retired tables whole or not
    at all (a group: its lines; a join key: its stock rows and its lines), the
    retired tables hold nothing but input rows, and every unit a committed
    writer transaction touched is migrated.  Reads the retired tables only (a
    read of the new tables would migrate), in one transaction that locks them
    first.  A migration already done is left to final_check_units."""
    if MOCK:
        return
    r = c.unit_retired
    inputs = {"lines_total": ("lines",), "stock_lines": ("stock", "sline")}
    bad = {}
    with c.connect("app", autocommit=False) as conn:
        def q(sql, params=None):
            return conn.execute(sql, params).fetchall()

        present = {t: q("SELECT to_regclass(%s) IS NOT NULL", [r[t]])[0][0] for t in r}
        for t in r:
            if present[t]:
                conn.execute("LOCK TABLE %s IN ACCESS SHARE MODE" % r[t])
        state = dict(q("SELECT name, state FROM leapfrog.migrations"))
        check = {}
        for name, tables in inputs.items():
            if state[name] == "done":
                continue
            assert all(present[t] for t in tables), (
                "migration %s is %s without its retired tables: %r" % (name, state[name], present))
            check[name] = True
            for t in tables:
                bad["retired %s rows not in the input" % t] = q(
                    "SELECT r.id FROM {r} r LEFT JOIN eager.copy_{t} c USING (id) "
                    "WHERE c.id IS NULL OR (r.*)::text <> (c.*)::text LIMIT 10"
                    .format(r=r[t], t=t))
        if check.get("lines_total"):
            bad["groups partly migrated (o, w, lines, left)"] = q(
                "SELECT c.o, c.w, count(*), count(r.id) FROM eager.copy_lines c "
                "LEFT JOIN {l} r USING (id) GROUP BY c.o, c.w "
                "HAVING count(r.id) NOT IN (0, count(*)) LIMIT 10".format(l=r["lines"]))
            left = {(o, w) for o, w in q("SELECT DISTINCT o, w FROM %s" % r["lines"])}
            bad["groups updated by a committed writer, not migrated"] = \
                [k for k in writers.gdelta() if k in left][:10]
        if check.get("stock_lines"):
            bad["join keys partly migrated (w, i, rows, left)"] = q(
                "SELECT w, i, sum(n), sum(n_left) FROM ("
                "  SELECT c.w, c.i, count(*) AS n, count(r.id) AS n_left "
                "    FROM eager.copy_stock c LEFT JOIN {s} r USING (id) "
                "   WHERE c.w IS NOT NULL AND c.i IS NOT NULL GROUP BY c.w, c.i "
                "  UNION ALL "
                "  SELECT c.sw, c.si, count(*), count(r.id) "
                "    FROM eager.copy_sline c LEFT JOIN {sl} r USING (id) "
                "   WHERE c.sw IS NOT NULL AND c.si IS NOT NULL GROUP BY c.sw, c.si) k "
                "GROUP BY w, i HAVING sum(n_left) NOT IN (0, sum(n)) LIMIT 10"
                .format(s=r["stock"], sl=r["sline"]))
            bad["stock rows updated by a committed writer, not migrated"] = q(
                "SELECT id FROM %s WHERE id = ANY(%%s) LIMIT 10" % r["stock"],
                [list(writers.sdelta())])
        conn.rollback()
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, "after a crash: %r" % bad


def quiesce_and_check_units(c, writers):
    """Pause the writers and the background worker (a reload), wait for the
    migration to stand still (the rows left unchanged and no worker active
    for 0.5 s), check the accounting and that every unit is whole; then let
    them go on.  Returns False if the migrations finished meanwhile."""
    if MOCK:
        return False
    writers.pause()
    c.sql("ALTER SYSTEM SET leapfrog.background = off")
    c.reload()
    try:
        def snapshot():
            pids = c.leapfrog_worker_pids("app")
            active = c.sql("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s) "
                           "AND state = 'active'", [pids], dbname="app")[0][0]
            return remaining(c), active
        last = None
        for _ in range(100):
            now = snapshot()
            if now == last and now[1] == 0 or now[0] == 0:
                break
            last = now
            time.sleep(0.5)
        if now[0] == 0:
            return False
        assert now == last and now[1] == 0, \
            "the migration did not stand still with the worker off: %r" % (now,)
        rows = check_unit_accounting(c)
        check_units_whole(c, writers)
        print("quiescent after crashes: %r" % (rows,))
        return True
    finally:
        c.sql("ALTER SYSTEM RESET leapfrog.background")
        c.reload()
        writers.resume()


def finish_units_with_wait(c, timeout=120):
    for name in UNIT_TOTAL:
        ok = c.sql("SELECT leapfrog.wait(%s, %s)", [name, float(timeout)], dbname="app")[0][0]
        assert ok, "migration %s not done after %ds: %r\n%s" % (
            name, timeout, c.sql("SELECT * FROM leapfrog.migrations", dbname="app"),
            c.log_tail(30))


def final_check_units(c, writers):
    """The new tables are the eager run plus the committed updates, exactly."""
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
            assert [(m[0], m[1]) for m in mig] == [("lines_total", "done"),
                                                   ("stock_lines", "done")]
        else:
            assert mig == [("lines_total", "done", N_LINES, N_LINES, None),
                           ("stock_lines", "done", N_STOCK + N_SLINE,
                            N_STOCK + N_SLINE, None)], mig
        retired = retired_tables_after_completion(c, "app")
        assert retired == [], "leapfrog_retired not empty 30s after completion: %r" % retired
        conn.execute("CREATE TEMP TABLE gdelta (o int, w int, d int)")
        conn.execute("CREATE TEMP TABLE sdelta (sid int, d int)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO gdelta VALUES (%s, %s, %s)",
                            [(o, w, d) for (o, w), d in writers.gdelta().items()])
            cur.executemany("INSERT INTO sdelta VALUES (%s, %s)",
                            list(writers.sdelta().items()))
        conn.execute("""
            CREATE TEMP TABLE want_total AS
            SELECT t.o, t.w, t.nlines, t.amount, t.qty, t.adj + coalesce(d.d, 0) AS adj
              FROM eager.total t LEFT JOIN gdelta d ON d.o = t.o AND d.w IS NOT DISTINCT FROM t.w;
            CREATE TEMP TABLE want_ls AS
            SELECT l.sid, l.w, l.i, l.qty + coalesce(d.d, 0) AS qty, l.lid, l.amount
              FROM eager.ls l LEFT JOIN sdelta d ON d.sid = l.sid""")
        for table, cols, want in (("total", "o, w, nlines, amount, qty, adj", "want_total"),
                                  ("ls", "sid, w, i, qty, lid, amount", "want_ls")):
            n_lazy = conn.execute("SELECT count(*) FROM %s" % table).fetchone()[0]
            n_want = conn.execute("SELECT count(*) FROM %s" % want).fetchone()[0]
            lazy_only = conn.execute(
                "SELECT %s FROM %s EXCEPT ALL SELECT %s FROM %s ORDER BY 1, 2"
                % (cols, table, cols, want)).fetchall()
            eager_only = conn.execute(
                "SELECT %s FROM %s EXCEPT ALL SELECT %s FROM %s ORDER BY 1, 2"
                % (cols, want, cols, table)).fetchall()
            assert not lazy_only and not eager_only and n_lazy == n_want, (
                "%s: %d rows, eager plus committed updates %d; %d only in the lazy table "
                "(first 10: %r), %d only in the expected one (first 10: %r)"
                % (table, n_lazy, n_want, len(lazy_only), lazy_only[:10],
                   len(eager_only), eager_only[:10]))
        ledger = {r[0] for r in conn.execute("SELECT txid FROM unit_ledger").fetchall()}
        committed = {t for w in writers.threads for t in w.committed}
        assert ledger == committed, (
            "ledger and client disagree: %d committed only in the ledger %r, "
            "%d only on the client %r" % (len(ledger - committed), sorted(ledger - committed)[:10],
                                          len(committed - ledger), sorted(committed - ledger)[:10]))
    print("writers:", writers.summary())


def kill_worker_at_thresholds(c, total, thresholds, timeout=60):
    """Kill the background worker in the middle of a batch once the given
    fractions of the input rows are migrated; returns what was killed."""
    kills = []
    for threshold in thresholds:
        deadline = time.monotonic() + timeout
        forced_at = None
        while time.monotonic() < deadline:
            left = remaining(c)
            if left == 0:
                break
            done = 1 - left / total
            pids = c.leapfrog_worker_pids("app")
            if done >= threshold and pids:
                forced_at = forced_at or time.monotonic() + 3
                st = c.sql("SELECT pid, state, backend_type FROM pg_stat_activity "
                           "WHERE pid = ANY(%s)", [pids], dbname="app")
                active = [r[0] for r in st if r[1] == "active"
                          and "launcher" not in (r[2] or "")]
                if active or time.monotonic() > forced_at:
                    killed = c.kill_worker(active or None)
                    kills.append((threshold, round(done, 3), left, bool(active), killed))
                    break
            time.sleep(0.01)
        if remaining(c) == 0:
            break
    return kills


def test_kill_backend_mid_migration_units(make_cluster):
    # reads migrate, as in test_kill_backend_mid_migration
    c, groups, stock = setup_units(make_cluster, **{"leapfrog.background": "off",
                                                    "leapfrog.read_mode": "migrate"})
    writers = UnitWriters(c, NW, groups, stock, seed=44)
    writers.start()
    try:
        assert writers.wait_committed(30, 60), writers.errors()[:5]

        # 1. A transaction that migrated many groups and join keys, still open.
        conn = c.connect("app", autocommit=False)
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        want_groups = [k for k in groups if k[0] <= 4000]
        assert conn.execute("SELECT count(*), sum(nlines) FROM total WHERE o <= 4000"
                            ).fetchone() == (len(want_groups),
                                             sum(groups[k][0] for k in want_groups))
        want_ls = c.sql("SELECT count(*) FROM eager.ls WHERE w = 3", dbname="app")[0][0]
        assert conn.execute("SELECT count(*) FROM ls WHERE w = 3").fetchone()[0] == want_ls
        c.kill_backend(pid)
        conn.close()
        assert writers.wait_committed(30, 90), writers.errors()[:5]
        writers.pause()
        after = check_unit_accounting(c)
        check_units_whole(c, writers)
        print("open transaction killed, then: %r" % (after,))
        writers.resume()

        # 2. Statements killed while they migrate many join keys (18k stock
        # rows and their lines), many groups (about 33k): each takes about
        # 0.5 s on an idle machine, killed early and late in it.
        for query in ("SELECT count(*), sum(qty) FROM ls WHERE sid > 2000",
                      "SELECT count(*), sum(amount) FROM total WHERE o > 1000"):
            # early and late in it, as long as it takes now (on a busy
            # machine, or with part of it migrated by the writers, a fixed
            # 0.3 s was sometimes after its end)
            took = statement_runtime(c, query)
            for at in (0.1 * took, 0.6 * took):
                what = kill_mid_statement(c, query, min_runtime=at)
                print("mid-statement kill (%s):" % query, what)
                assert MOCK or what.startswith("killed"), what
                assert writers.wait_committed(10, 90), writers.errors()[:5]
        writers.pause()
        check_unit_accounting(c)
        check_units_whole(c, writers)
        writers.resume()

        # 3. A writer killed in the middle of its transaction.
        def writer_in_tx():
            r = c.sql("SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'lf-writer-%' "
                      "AND xact_start IS NOT NULL LIMIT 1", dbname="app")
            return r[0][0] if r else None
        wpid = wait_until(writer_in_tx, 30, interval=0.005, what="a writer inside a transaction")
        c.kill_backend(wpid)
        assert writers.wait_committed(30, 90), writers.errors()[:5]
        writers.pause()
        check_unit_accounting(c)
        check_units_whole(c, writers)
        writers.resume()
        assert writers.wait_committed(20, 60), writers.errors()[:5]
    finally:
        writers.stop()
    # 4. complete() killed while it migrates the rest: nothing of it stays.
    for name in UNIT_TOTAL:
        what = kill_mid_statement(c, "SELECT leapfrog.complete('%s')" % name, min_runtime=0.05)
        print("complete(%s) kill:" % name, what)
    check_unit_accounting(c)
    check_units_whole(c, writers)
    # 5. The background worker, turned on by a reload, finishes both.
    if not MOCK:
        c.sql("ALTER SYSTEM SET leapfrog.background = on")
        c.sql("ALTER SYSTEM SET leapfrog.background_delay = 0")
        c.reload()
    t0 = time.monotonic()
    finish_units_with_wait(c, timeout=90)
    print("background on by reload: done after %.1fs" % (time.monotonic() - t0))
    final_check_units(c, writers)


def test_kill_background_worker_mid_batch_units(make_cluster):
    needs_real_extension()
    c, groups, stock = setup_units(make_cluster, **{"leapfrog.background": "on",
                                                    "leapfrog.background_delay": 300,
                                                    "leapfrog.batch_size": 5000,
                                                    "leapfrog.background_naptime": 200})
    total = sum(UNIT_TOTAL.values())
    writers = UnitWriters(c, NW, groups, stock, seed=55)
    writers.start()
    try:
        kills = kill_worker_at_thresholds(c, total, (0.1, 0.35, 0.6, 0.85))
        print("worker kills (threshold, fraction done, remaining, active, pids):")
        for k in kills:
            print("  ", k)
        assert kills and kills[0][2] > 0, \
            "the background worker was never killed during the migration: %r" % kills
        assert writers.wait_committed(20, 90), writers.errors()[:5]
        quiesce_and_check_units(c, writers)
        finish_units_with_wait(c)
        assert writers.wait_committed(10, 60), writers.errors()[:5]
    finally:
        writers.stop()
    final_check_units(c, writers)


def test_kill_postmaster_units(make_cluster):
    c, groups, stock = setup_units(make_cluster, **{"leapfrog.background": "on",
                                                    "leapfrog.background_delay": 300,
                                                    "leapfrog.batch_size": 2000,
                                                    "leapfrog.background_naptime": 50})
    total = sum(UNIT_TOTAL.values())
    writers = UnitWriters(c, NW, groups, stock, seed=66)
    writers.start()
    conn = None
    try:
        assert writers.wait_committed(30, 60), writers.errors()[:5]
        # An open transaction holding freshly migrated units at the time of the crash.
        conn = c.connect("app", autocommit=False)
        conn.execute("SELECT count(*) FROM total WHERE o BETWEEN 9001 AND 11000").fetchone()
        conn.execute("SELECT count(*) FROM ls WHERE sid > 15000").fetchone()
        if not MOCK:
            wait_until(lambda: remaining(c) <= total * 0.75, 60, interval=0.02,
                       what="a quarter of the rows migrated")
        left_before = remaining(c)
        c.kill_postmaster(restart=True)
        conn.close()
        conn = None
        print("postmaster killed with %d rows left" % left_before)
        assert writers.wait_committed(30, 120), writers.errors()[:5]
        quiesce_and_check_units(c, writers)
        finish_units_with_wait(c)
        assert writers.wait_committed(10, 60), writers.errors()[:5]
    finally:
        if conn is not None:
            conn.close()
        writers.stop()
    final_check_units(c, writers)
