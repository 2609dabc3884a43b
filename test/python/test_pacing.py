"""Background pacing (src/pacing.c).

The workers take the CPU the rest of the server leaves spare, less
leapfrog.background_headroom, at least leapfrog.background_min_share of a
core together; where even that floor leaves no CPU idle the server is
saturated, and they keep to the floor (with larger batches), pausing every
2 s to look again.

The test makes the load certain with CPU burners (busy loops) running for the
whole migration, and watches the one worker's activity in pg_stat_activity:
- one burner fewer than the machine has cores: the rest of the server uses
  all but one core, and the worker keeps to a share under one core
  ("leapfrog: pacing, 0.62 of a core" on 2 cores), never looking;
- one burner more than the machine has cores, two workers: nothing is ever
  idle; the workers keep to the floor ("0.05 of a core" each) until they
  have seen that for 2 s, then look ("leapfrog: pausing to measure the
  load"), find the server saturated and keep to the floor, looking every
  2 s;
- idle, one worker: it never paces nor pauses (two would: each has half
  of what the rest leaves, less the headroom, under a core);
- background_min_share = 1 (pacing off) with all cores burning: the same.
Every migration ends with each row migrated exactly once.
"""

import os
import re
import subprocess
import sys
import time

from support import needs_real_extension, retired_tables_after_completion, wait_until

ROWS = 200_000
NCPU = os.cpu_count() or 2

SCRIPT = ("CREATE TABLE {new} (id int PRIMARY KEY, v int NOT NULL); "
          "INSERT INTO {new} SELECT id, v FROM {old}; DROP TABLE {old};")

WORKERS = ("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'leapfrog worker' "
           "AND datname = 'app'")
ACTIVITY = ("SELECT query FROM pg_stat_activity WHERE backend_type = 'leapfrog worker' "
            "AND datname = 'app' AND (query LIKE 'leapfrog: pacing%' "
            "OR query = 'leapfrog: pausing to measure the load')")
LOOKING = "leapfrog: pausing to measure the load"
PACING = re.compile(r"leapfrog: pacing, (\d\.\d\d) of a core")


class Burners:
    """n busy loops."""

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                      for _ in range(self.n)]
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


def _migrate_and_watch(c, conn, old, new):
    """Start old -> new once the last worker is gone (its measurements
    remember the last load), and watch the worker until the migration is
    done: return the activities seen.  Checks that every row arrived once."""
    wait_until(lambda: conn.execute(WORKERS).fetchone()[0] == 0, 30, what="the worker to exit")
    conn.execute("CREATE TABLE %s (id int PRIMARY KEY, v int NOT NULL)" % old)
    conn.execute("INSERT INTO %s SELECT g, g FROM generate_series(1, %%s) g" % old, [ROWS])
    conn.execute("SELECT leapfrog.start(%s, %s)", [new, SCRIPT.format(new=new, old=old)])
    seen = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        seen += [r[0] for r in conn.execute(ACTIVITY).fetchall()]
        state = conn.execute("SELECT state FROM leapfrog.migrations WHERE name = %s",
                             [new]).fetchone()[0]
        if state == "done":
            break
        time.sleep(0.02)
    state, total, migrated = conn.execute(
        "SELECT state, tuples_total, tuples_migrated FROM leapfrog.migrations WHERE name = %s",
        [new]).fetchone()
    n, d, bad = conn.execute(
        "SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE v <> id) FROM %s" % new
    ).fetchone()
    assert (state, total, migrated) == ("done", ROWS, ROWS)
    assert (n, d, bad) == (ROWS, ROWS, 0)
    return seen


def test_pacing_follows_the_load(make_cluster):
    needs_real_extension()
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 500,
                        "leapfrog.background_workers": 1, "leapfrog.batch_size": 1000,
                        "leapfrog.background_naptime": 0})
    c.create_database("app")
    with c.connect("app") as conn:
        assert conn.execute("SHOW leapfrog.background_min_share").fetchone()[0] == "0.1"
        assert conn.execute("SHOW leapfrog.background_headroom").fetchone()[0] == "0.25"

        # all cores but one busy: paced below a core, never saturated
        with Burners(NCPU - 1):
            seen = _migrate_and_watch(c, conn, "a", "a_v2")
        shares = [float(m.group(1)) for m in map(PACING.fullmatch, seen) if m]
        assert shares, "%d of %d cores were busy, yet the worker never paced: %s" % (
            NCPU - 1, NCPU, sorted(set(seen)))
        assert all(0.1 <= s < 1 for s in shares), sorted(set(shares))
        assert LOOKING not in seen, "a core was idle, yet the worker suspected saturation"

        # more burners than cores, two workers: at the floor with nothing
        # idle for 2 s, a look, and from then on at the floor, looking again
        # every 2 s.  The floor is the workers' together: 0.05 of a core
        # each while both run (0.10 for one alone, before the other has
        # begun or after it has ended).
        c.set_gucs(**{"leapfrog.background_workers": 2})
        c.reload()
        wait_until(lambda: conn.execute("SHOW leapfrog.background_workers").fetchone()[0] == "2",
                   10, what="the reload")
        with Burners(NCPU + 1):
            seen = _migrate_and_watch(c, conn, "b", "b_v2")
        assert LOOKING in seen, "every core was busy, yet the workers never looked"
        shared, alone = "leapfrog: pacing, 0.05 of a core", "leapfrog: pacing, 0.10 of a core"
        before = seen[:seen.index(LOOKING)]
        after = seen[seen.index(LOOKING):]
        assert set(before) <= {shared, alone}, sorted(set(before))
        assert shared in after and set(after) <= {LOOKING, shared, alone}, (
            "saturated workers share the floor between their looks: %s" % sorted(set(after)))

        # idle, one worker: neither.  (Two workers would pace even here: each
        # has half of what the rest of the server leaves, less the headroom,
        # and the test's own polling is enough to bring that under a core.)
        c.set_gucs(**{"leapfrog.background_workers": 1})
        c.reload()
        wait_until(lambda: conn.execute("SHOW leapfrog.background_workers").fetchone()[0] == "1",
                   10, what="the reload")
        seen = _migrate_and_watch(c, conn, "d", "d_v2")
        assert seen == [], "the machine was idle, yet the worker paced: %s" % sorted(set(seen))

        # pacing off: neither, whatever the load
        c.set_gucs(**{"leapfrog.background_min_share": 1})
        c.reload()
        wait_until(lambda: conn.execute("SHOW leapfrog.background_min_share").fetchone()[0] == "1",
                   10, what="the reload")
        with Burners(NCPU + 1):
            seen = _migrate_and_watch(c, conn, "e", "e_v2")
        assert seen == [], "min_share = 1 turns pacing off, yet: %s" % sorted(set(seen))
    assert retired_tables_after_completion(c, "app") == []
