#!/usr/bin/env python3
"""A table read by a join mapping and a GROUP BY mapping, idle, against eager.

    .venv/bin/python bench/shared_join.py [--groups 300000] [--items 100000]
                                          [--by worker|complete] [--rounds 3]

A table `lines` (ten lines per order g, each of a random item) is joined
with `items` and summed per order; the script drops both:

    CREATE TABLE line_items AS
      SELECT l.g, l.n, l.item, l.amt, i.label FROM lines l LEFT JOIN items i ON i.item = l.item;
    CREATE TABLE totals AS SELECT g, count(*) AS n, sum(amt) AS amt FROM lines GROUP BY g;
    DROP TABLE lines; DROP TABLE items;

`lines` is read by two mappings whose units differ (an item, an order), so
both tables are tracked by keys (src/start.c, track_shared_retired).  On a
throwaway cluster (the benchmark suite's settings), each round runs, in
alternating order, on a fresh copy:

  eager  the script and an ANALYZE of the new tables, one transaction;
  lazy   leapfrog.start(), then with --by worker (the default) a wait for
         the background workers (leapfrog.background_delay = 0), or with
         --by complete leapfrog.complete() at once (background off).

It prints each run's wall time and the server's CPU time, then medians
with their spread and lazy/eager.  Not a test: figures only.
"""
import argparse
import sys
import time

from run import ensure_venv  # noqa: E402  (run.py, beside this file, also finds python/)

ensure_venv()

import psycopg  # noqa: E402

from leapfrog_cluster import Cluster, extension_installed  # noqa: E402

from leapfrog_bench.settings import default_settings  # noqa: E402
from idle_completion import server_cpu_s  # noqa: E402
from live_table import spread  # noqa: E402

SCRIPT = """
  CREATE TABLE line_items AS
    SELECT l.g, l.n, l.item, l.amt, i.label FROM lines l LEFT JOIN items i ON i.item = l.item;
  CREATE TABLE totals AS SELECT g, count(*) AS n, sum(amt) AS amt FROM lines GROUP BY g;
  DROP TABLE lines;
  DROP TABLE items;
"""
KINDS = ["eager", "lazy"]


def make_template(cl, groups, items):
    with psycopg.connect(cl.conninfo(), autocommit=True) as c:
        c.execute("CREATE DATABASE tmpl")
    with psycopg.connect(cl.conninfo("tmpl"), autocommit=True) as c:
        c.execute("CREATE EXTENSION leapfrog")
        c.execute("CREATE EXTENSION pg_prewarm")
        c.execute("CREATE TABLE items (item int PRIMARY KEY, label int NOT NULL)")
        c.execute("INSERT INTO items SELECT i, i %% 1000 FROM generate_series(1, %s) i", (items,))
        c.execute("CREATE TABLE lines (g int NOT NULL, n int NOT NULL, item int NOT NULL, "
                  "amt int NOT NULL, PRIMARY KEY (g, n))")
        c.execute("INSERT INTO lines SELECT g, n, 1 + (g::bigint * 7919 + n * 104729) %% %s, g + n "
                  "FROM generate_series(1, %s) g, generate_series(1, 10) n ORDER BY g, n",
                  (items, groups))
        c.execute("CREATE INDEX ON lines (item)")
        c.execute("VACUUM ANALYZE")


def run(cl, kind, by):
    """(wall s, server CPU s) of one migration on a fresh copy."""
    with psycopg.connect(cl.conninfo(), autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS run")
        c.execute("CREATE DATABASE run TEMPLATE tmpl STRATEGY FILE_COPY")
    with psycopg.connect(cl.conninfo("run"), autocommit=True) as c:
        c.execute("SELECT count(pg_prewarm(oid)) FROM pg_class WHERE relkind IN ('r', 'i')")
        c.execute("CHECKPOINT")
        cpu0, t0 = server_cpu_s(cl), time.monotonic()
        if kind == "eager":
            with c.transaction():
                c.execute(SCRIPT)
                c.execute("ANALYZE line_items, totals")
        else:
            c.execute("SELECT leapfrog.start('m', %s)", (SCRIPT,))
            if by == "complete":
                c.execute("SELECT leapfrog.complete('m')")
            elif not c.execute("SELECT leapfrog.wait('m', 900)").fetchone()[0]:
                raise RuntimeError("the workers did not finish in 900 s")
        return time.monotonic() - t0, server_cpu_s(cl) - cpu0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=300_000)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--by", choices=["worker", "complete"], default="worker")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not extension_installed():
        sys.exit("shared_join: the leapfrog extension is not installed (make install)")
    settings = default_settings()
    settings["leapfrog.background_delay"] = "0"
    if args.by != "worker":
        settings["leapfrog.background"] = "off"
    res = {k: [] for k in KINDS}
    with Cluster(settings=settings, preload=True) as cl:
        cl.wait_ready()
        make_template(cl, args.groups, args.items)
        for r in range(args.rounds):
            for kind in (KINDS if r % 2 == 0 else KINDS[::-1]):
                res[kind].append(run(cl, kind, args.by))
                print(f"round {r + 1} {kind:5s} {res[kind][-1][0]:7.2f} s wall "
                      f"{res[kind][-1][1]:7.2f} s CPU", flush=True)
    print(f"\nmedians (min-max), {args.groups * 10} lines, {args.items} items, by {args.by}:")
    for kind, v in res.items():
        print(f"  {kind:5s} wall {spread([x[0] for x in v])} s  CPU {spread([x[1] for x in v])} s")
    ratios = [lz[1] / e[1] for lz, e in zip(res["lazy"], res["eager"])]
    print(f"  lazy/eager CPU per round: {spread(ratios)}")


if __name__ == "__main__":
    main()
