#!/usr/bin/env python3
"""Where a run's latency tail comes from: the second after the migration
point, or the rest of the window.

    .venv/bin/python bench/run.py --profile quick --migrations split --loads rate \\
        --strategies lazy,lazy_nobg --rounds 3 --install no --out DIR
    python3 bench/switch_latency.py [--migrate-at 8] DIR/raw/rate/*

Reads the per-transaction pgbench logs (-l) a run leaves in its raw
directory (compressed or not).  A transaction's latency is its time plus
its schedule lag (at a fixed rate, pgbench measures from the scheduled
start, so a queue shows), and it is placed by its scheduled start,
relative to the run's first one.  For each run: the window's p99 (from
the migration point), the first second after it (count, p50, p99, and
how many took over 40 ms), the rest of the window's p99, and the p99 per
transaction script in the rest.  The baseline run, which migrates
nothing, has the same split for comparison.  Not a test: figures.
"""

import argparse
import glob
import gzip
import os

SCRIPTS = ["new_order", "payment", "order_status", "delivery", "stock_level"]


def load(rundir):
    """[(scheduled start s, latency ms, script no)] of a run's pgbench logs."""
    rows = []
    for f in glob.glob(os.path.join(rundir, "pgbench_log.*")):
        opener = gzip.open if f.endswith(".gz") else open
        with opener(f, "rt") as fh:
            for line in fh:
                p = line.split()
                # client, transaction, time us, script, epoch s, epoch us, lag us
                end = int(p[4]) + int(p[5]) / 1e6
                t_ms = int(p[2]) / 1000
                lag_ms = int(p[6]) / 1000 if len(p) > 6 else 0.0
                rows.append((end - (t_ms + lag_ms) / 1000, t_ms + lag_ms, int(p[3])))
    if not rows:
        return rows
    t0 = min(r[0] for r in rows)
    return [(s - t0, lat, sc) for s, lat, sc in rows]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


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
