#!/usr/bin/env python3
"""Where a run's latency tail comes from: the second after the migration
point, or the rest of the window.

    .venv/bin/python bench/run.py --profile quick --migrations split --loads rate \\
        --strategies lazy,lazy_nobg --rounds 3 --install no --out DIR
    .venv/bin/python bench/switch_latency.py [--migrate-at 8] DIR/raw/rate/*

Reads the per-transaction pgbench logs (-l) a run leaves in its raw
directory (compressed or not).  A transaction's latency is pgbench's
logged time, which at a fixed rate runs from its scheduled start (a queue
shows), and it is placed by that scheduled start, relative to the run's
first one; failed transactions are left out.  For each run: the window's p99 (from
the migration point), the first second after it (count, p50, p99, and
how many took over 40 ms), the rest of the window's p99, and the p99 per
transaction script in the rest.  The baseline run, which migrates
nothing, has the same split for comparison.  Not a test: figures.
"""

import argparse
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from leapfrog_bench.metrics import _pct  # noqa: E402
from leapfrog_bench.workload import parse_logs  # noqa: E402

SCRIPTS = ["new_order", "payment", "order_status", "delivery", "stock_level"]


def load(rundir):
    """[(scheduled start s from the run's first, latency ms, script no)] of
    a run's committed transactions.  At a fixed rate pgbench's logged time
    runs from the scheduled start (it includes the schedule lag)."""
    txs = [(end - lat / 1e6, lat / 1000, script)
           for end, lat, script, _ in parse_logs(glob.glob(os.path.join(rundir, "pgbench_log.*")))
           if lat is not None]
    if not txs:
        return txs
    t0 = min(t[0] for t in txs)
    return [(s - t0, lat, sc) for s, lat, sc in txs]


def pct(xs, q):
    """The suite's percentile (metrics._pct), q a fraction; nan if empty."""
    v = _pct(xs, q * 100)
    return float("nan") if v is None else v


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--migrate-at", type=float, default=8.0,
                    help="second of the run the migration started (the profile's migrate_at)")
    ap.add_argument("rundirs", nargs="+")
    args = ap.parse_args()
    m = args.migrate_at
    print("%-28s %9s | %24s %6s | %9s | %s" % (
        "run", "window", "first s: n, p50, p99", ">40ms", "rest p99",
        "rest p99 by script"))
    for d in args.rundirs:
        rows = load(d)
        if not rows:
            continue
        win = [r for r in rows if r[0] >= m]
        first = [r[1] for r in win if r[0] < m + 1]
        rest = [r for r in win if r[0] >= m + 1]
        by_script = " ".join("%s %.0f" % (SCRIPTS[s][:5], pct([r[1] for r in rest if r[2] == s],
                                                              .99))
                             for s in range(len(SCRIPTS)) if any(r[2] == s for r in rest))
        print("%-28s %6.1f ms | %5d %7.1f %7.1f ms %6d | %6.1f ms | %s" % (
            os.path.basename(d.rstrip("/")), pct([r[1] for r in win], .99), len(first),
            pct(first, .5), pct(first, .99), sum(1 for x in first if x > 40),
            pct([r[1] for r in rest], .99), by_script))


if __name__ == "__main__":
    main()
