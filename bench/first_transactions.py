#!/usr/bin/env python3
"""What the application's connections pay right after a switch.

On a throwaway cluster: load TPC-C at W warehouses once; then, for each
round and each strategy (interleaved: none, eager, lazy), copy the
database, open 8 connections and run the five TPC-C transactions once on
each, three times (warm), switch (the migration's script, or
leapfrog.start() with it, and the new application code, in one
transaction), and run them again, four times.  Sequential, one connection
at a time, no load: the CPU of each pass, not a queue.  Prints, per
strategy, the median over rounds of each pass's total (8 connections x 5
transactions) and of the switch.  The first pass after the switch carries
each backend's one-time costs (catalog caches, PL/pgSQL compiling the new
code, plans; for lazy also the relevance and step plans), the later ones
the steady cost of running while the migration is under way.

    .venv/bin/python bench/first_transactions.py --warehouses 2 --rounds 3
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
from start_time import copy_db, drop_db  # noqa: E402

TX = ["tpcc_new_order", "tpcc_payment", "tpcc_order_status", "tpcc_delivery",
      "tpcc_stock_level"]
STRATEGIES = ["none", "eager", "lazy"]
WARM, AFTER, CONNS = 3, 4, 8


def one_round(cl, mig, strategy, w):
    """[ms of each pass], switch ms (None for none)."""
    copy_db(cl, "ft")
    conns = [psycopg.connect(cl.conninfo("ft"), autocommit=True) for _ in range(CONNS)]
    passes, switch = [], None
    try:
        def one_pass():
            t = time.perf_counter()
            for c in conns:
                for f in TX:
                    c.execute(f"SELECT {f}(1, %s)", (w,))
            passes.append((time.perf_counter() - t) * 1000)

        for _ in range(WARM):
            one_pass()
        if strategy != "none":
            with psycopg.connect(cl.conninfo("ft")) as c:
                t = time.perf_counter()
                if strategy == "lazy":
                    c.execute("SELECT leapfrog.start(%s, %s)", ("ft", mig.script()))
                else:
                    c.execute(mig.script())
                c.execute(mig.tx())
                c.commit()
                switch = (time.perf_counter() - t) * 1000
        for _ in range(AFTER):
            one_pass()
    finally:
        for c in conns:
            c.close()
        drop_db(cl, "ft")
    return passes, switch


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouses", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--migration", default="split")
    args = ap.parse_args()
    mig = MIGRATIONS[args.migration]
    # no background worker: the passes after the switch measure the statements
    cl = Cluster(settings={**default_settings("2GB"), "leapfrog.background": "off"},
                 preload=True, log=print)
    try:
        cl.init().start()
        cl.wait_ready()
        tpcc.create_template(cl, "tpcc", args.warehouses, workers=2, leapfrog=True, log=print)
        res = {s: [] for s in STRATEGIES}
        for r in range(args.rounds):
            for s in STRATEGIES:
                res[s].append(one_round(cl, mig, s, args.warehouses))
                print(f"round {r + 1} {s}: passes " +
                      " ".join(f"{p:.0f}" for p in res[s][-1][0]) + " ms", flush=True)
        print(f"\n{args.migration}, W={args.warehouses}, {CONNS} connections x {len(TX)} "
              f"transactions per pass, medians of {args.rounds} interleaved rounds (ms):")
        print("%-6s %s | %7s | %s" % ("", " ".join(f"warm{i + 1:<2d}" for i in range(WARM)),
                                       "switch", " ".join(f"after{i + 1:<2d}" for i in range(AFTER))))
        for s in STRATEGIES:
            med = [statistics.median(rr[0][i] for rr in res[s]) for i in range(WARM + AFTER)]
            sw = [rr[1] for rr in res[s] if rr[1] is not None]
            print("%-6s %s | %7s | %s" % (
                s, " ".join(f"{m:7.0f}" for m in med[:WARM]),
                f"{statistics.median(sw):.1f}" if sw else "-",
                " ".join(f"{m:7.0f}" for m in med[WARM:])))
    finally:
        cl.destroy()


if __name__ == "__main__":
    main()
