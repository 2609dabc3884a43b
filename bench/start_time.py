#!/usr/bin/env python3
"""Time leapfrog.start() of the benchmark's migrations on an idle TPC-C.

On a throwaway cluster: load TPC-C at W warehouses once, then for each
round and each migration (interleaved) copy the database (CREATE DATABASE
... TEMPLATE, FILE_COPY), run leapfrog.start() with the migration's script
in it, and time the call (client side, round trip included), then drop the
copy.  Prints the median, minimum and maximum per migration, and the eager
script's time for one round as the baseline.

    .venv/bin/python bench/start_time.py --warehouses 50 --rounds 5
"""
import argparse
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

import psycopg  # noqa: E402
from leapfrog_cluster import Cluster  # noqa: E402

from leapfrog_bench import tpcc  # noqa: E402
from leapfrog_bench.migrations import MIGRATIONS  # noqa: E402
from leapfrog_bench.settings import default_settings  # noqa: E402


def copy_db(cl, name):
    with psycopg.connect(cl.conninfo(), autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {name}")
        c.execute(f"CREATE DATABASE {name} TEMPLATE tpcc STRATEGY FILE_COPY")


def drop_db(cl, name):
    with psycopg.connect(cl.conninfo(), autocommit=True) as c:
        c.execute(f"DROP DATABASE {name} WITH (FORCE)")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouses", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--migrations", default="split,aggregate,join")
    args = ap.parse_args()
    names = args.migrations.split(",")
    # no background worker: it would connect to the copies and hold them
    cl = Cluster(settings={**default_settings("6GB"), "leapfrog.background": "off"},
                 preload=True, log=print)
    try:
        cl.init().start()
        cl.wait_ready()
        tpcc.create_template(cl, "tpcc", args.warehouses, workers=2, leapfrog=True, log=print)
        times = {n: [] for n in names}
        eager = {}
        for r in range(args.rounds):
            for n in names:
                mig = MIGRATIONS[n]
                copy_db(cl, "st")
                with psycopg.connect(cl.conninfo("st"), autocommit=True) as c:
                    c.execute("SELECT 1 FROM leapfrog.migrations")  # warm the backend
                    t = time.perf_counter()
                    c.execute("SELECT leapfrog.start(%s, %s)", (n, mig.script()))
                    times[n].append((time.perf_counter() - t) * 1000)
                drop_db(cl, "st")
                if r == 0:
                    copy_db(cl, "st")
                    with psycopg.connect(cl.conninfo("st")) as c:
                        t = time.perf_counter()
                        for s in mig.statements():
                            c.execute(s)
                        c.commit()
                        eager[n] = time.perf_counter() - t
                    drop_db(cl, "st")
                print(f"round {r + 1} {n}: start() {times[n][-1]:.1f} ms", flush=True)
        print(f"\nW={args.warehouses}, idle, {args.rounds} interleaved rounds:")
        for n in names:
            ts = times[n]
            print(f"  {n:9s} start() median {statistics.median(ts):7.1f} ms "
                  f"(min {min(ts):.1f}, max {max(ts):.1f}); eager script {eager[n]:.1f} s")
    finally:
        cl.destroy()


if __name__ == "__main__":
    main()
