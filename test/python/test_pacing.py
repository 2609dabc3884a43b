"""Background pacing: leapfrog.background_yield.

A worker whose batches took over twice their CPU time pauses for
background_yield times the excess.  The test makes that time certain: it
holds a lock on the retired table, so the worker's first batch waits for
it, and then watches the worker.  At 8 the worker must be seen pausing
("leapfrog: yielding the CPU") after the wait; at 0, the default, it must
never be; both migrations end with every row migrated exactly once.
"""

import time

from support import needs_real_extension, retired_tables_after_completion, wait_until

ROWS = 20_000
HOLD_S = 0.6     # how long the worker waits for the lock: its batch's time off the CPU

SCRIPT = ("CREATE TABLE {new} (id int PRIMARY KEY, v int NOT NULL); "
          "INSERT INTO {new} SELECT id, v FROM {old}; DROP TABLE {old};")

WAITING = ("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'leapfrog worker' "
           "AND datname = 'app' AND wait_event_type = 'Lock'")
YIELDING = ("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'leapfrog worker' "
            "AND datname = 'app' AND query = 'leapfrog: yielding the CPU'")


def _run_with_lock_held(c, conn, old, new):
    """Start old -> new, hold ACCESS EXCLUSIVE on the retired table while the
    worker begins, then watch: return how many polls saw a worker yielding."""
    conn.execute("CREATE TABLE %s (id int PRIMARY KEY, v int NOT NULL)" % old)
    conn.execute("INSERT INTO %s SELECT g, g FROM generate_series(1, %%s) g" % old, [ROWS])
    conn.execute("SELECT leapfrog.start(%s, %s)", [new, SCRIPT.format(new=new, old=old)])
    retired = conn.execute(
        "SELECT i.relid::regclass::text FROM leapfrog.input i JOIN leapfrog.migration m "
        "ON m.id = i.migration_id WHERE m.name = %s", [new]).fetchone()[0]
    seen = 0
    with c.connect("app", autocommit=False) as locker:
        # background_delay (1 s) has not passed: the worker has not begun
        locker.execute("LOCK TABLE %s IN ACCESS EXCLUSIVE MODE" % retired)
        wait_until(lambda: conn.execute(WAITING).fetchone()[0] > 0, 30,
                   what="the worker waiting for the lock")
        time.sleep(HOLD_S)
        locker.commit()
    deadline = time.monotonic() + 2 + HOLD_S
    while time.monotonic() < deadline:
        seen += conn.execute(YIELDING).fetchone()[0]
        time.sleep(0.01)
    assert conn.execute("SELECT leapfrog.wait(%s, 60)", [new]).fetchone()[0]
    state, total, migrated = conn.execute(
        "SELECT state, tuples_total, tuples_migrated FROM leapfrog.migrations WHERE name = %s",
        [new]).fetchone()
    n, d, bad = conn.execute(
        "SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE v <> id) FROM %s" % new
    ).fetchone()
    assert (state, total, migrated) == ("done", ROWS, ROWS)
    assert (n, d, bad) == (ROWS, ROWS, 0)
    return seen


def test_worker_yields_after_waiting(make_cluster):
    needs_real_extension()
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 1000,
                        "leapfrog.background_workers": 1, "leapfrog.batch_size": 500,
                        "leapfrog.background_naptime": 0, "leapfrog.background_yield": 8})
    c.create_database("app")
    with c.connect("app") as conn:
        assert conn.execute("SHOW leapfrog.background_yield").fetchone()[0] == "8"
        seen = _run_with_lock_held(c, conn, "a", "a_v2")
        assert seen > 0, "the worker waited %.1f s for a lock and never yielded" % HOLD_S

        c.set_gucs(**{"leapfrog.background_yield": 0})
        c.reload()
        time.sleep(0.5)
        assert conn.execute("SHOW leapfrog.background_yield").fetchone()[0] == "0"
        seen = _run_with_lock_held(c, conn, "b", "b_v2")
        assert seen == 0, "leapfrog.background_yield = 0, yet a worker yielded"
    assert retired_tables_after_completion(c, "app") == []
