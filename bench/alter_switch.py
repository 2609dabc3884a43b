#!/usr/bin/env python3
"""The switch time of ALTER TABLE and CREATE INDEX scripts on a large table.

    .venv/bin/python bench/alter_switch.py [--rows 1500000] [--rounds 3]

On a throwaway cluster, a table t (id int PRIMARY KEY, v int, s
varchar(10), pad text) of ROWS rows; for each one-statement script of
issue 18's table, each round times, alternately (the order flips every
round, so drift hits both alike):
  lazy:  BEGIN; SELECT leapfrog.start(name, script); ROLLBACK
  eager: BEGIN; <script>; ROLLBACK
and prints, per script, how Leapfrog carried it out (a catalog change: the
migration is done at once; a lazy replacement: it is running), the median
and range of each, and eager/lazy.  The lazy time is the switch only: the
rows move afterwards (the background is off here, and each round is rolled
back).  Not a test: figures only.
"""
import argparse
import statistics
import sys
import time

from run import ensure_venv  # noqa: E402  (run.py, beside this file, also finds python/)

ensure_venv()

import psycopg  # noqa: E402

from leapfrog_cluster import Cluster, extension_installed  # noqa: E402

from leapfrog_bench.settings import default_settings  # noqa: E402

SCRIPTS = [
    "ALTER TABLE t ALTER COLUMN v TYPE bigint",
    "ALTER TABLE t ADD COLUMN w int DEFAULT 0",
    "ALTER TABLE t ADD COLUMN created timestamptz DEFAULT now()",
    "ALTER TABLE t ALTER COLUMN s SET NOT NULL",
    "ALTER TABLE t ADD CONSTRAINT v_pos CHECK (v > 0)",
    "ALTER TABLE t RENAME COLUMN s TO label",
    "ALTER TABLE t DROP COLUMN s",
    "CREATE INDEX ON t (v)",
]


def timed(conn, sql, args=None):
    conn.execute("BEGIN")
    t0 = time.perf_counter()
    conn.execute(sql, args)
    elapsed = time.perf_counter() - t0
    how = None
    if args:
        how = conn.execute("SELECT state FROM leapfrog.migrations WHERE name = %s",
                           (args[0],)).fetchone()[0]
    conn.execute("ROLLBACK")
    return elapsed * 1000, how


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_500_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not extension_installed():
        sys.exit("alter_switch: the leapfrog extension is not installed (make install)")
    settings = default_settings()
    settings["leapfrog.background"] = "off"
    lazy = {s: [] for s in SCRIPTS}
    eager = {s: [] for s in SCRIPTS}
    how = {}
    with Cluster(settings=settings, preload=True) as cl:
        cl.wait_ready()
        with psycopg.connect(cl.conninfo(), autocommit=True) as c:
            c.execute("CREATE EXTENSION leapfrog")
            c.execute("CREATE TABLE t (id int PRIMARY KEY, v int, s varchar(10), pad text)")
            c.execute("INSERT INTO t SELECT g, g, 's' || g %% 1000000, repeat('x', 100)"
                      " FROM generate_series(1, %s) g", (args.rows,))
            c.execute("VACUUM ANALYZE t")
            size = c.execute("SELECT pg_size_pretty(pg_table_size('t'))").fetchone()[0]
            print(f"t: {args.rows} rows, {size}", flush=True)
            for r in range(args.rounds):
                for i, script in enumerate(SCRIPTS):
                    runs = [("lazy", "SELECT leapfrog.start(%s, %s)", (f"a{r}_{i}", script)),
                            ("eager", script, None)]
                    if r % 2:
                        runs.reverse()
                    for kind, sql, params in runs:
                        ms, state = timed(c, sql, params)
                        (lazy if kind == "lazy" else eager)[script].append(ms)
                        if state:
                            how[script] = ("catalog change" if state == "done"
                                           else "lazy replacement")
                print(f"round {r + 1} done", flush=True)

    def fmt(xs):
        return f"{statistics.median(xs):9.1f} ({min(xs):.1f}-{max(xs):.1f})"

    print(f"\n{'script':<60} {'how':<17} {'lazy ms':>22} {'eager ms':>26} eager/lazy")
    for s in SCRIPTS:
        print(f"{s:<60} {how[s]:<17} {fmt(lazy[s]):>22} {fmt(eager[s]):>26} "
              f"{statistics.median(eager[s]) / statistics.median(lazy[s]):9.1f}x")


if __name__ == "__main__":
    main()
