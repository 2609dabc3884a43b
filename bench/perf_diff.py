#!/usr/bin/env python3
"""Two runs' CPU profiles side by side, per committed transaction.

    python3 bench/perf_diff.py A/perf.json B/perf.json [--kind clients] [--top 30]

A and B are perf.json files that `bench/run.py --perf` wrote in the runs'
raw directories (raw/<load>/<migration>_<strategy>/perf.json).  For the
chosen kind of process it prints each kind's CPU in microseconds per
committed transaction, then the functions whose share changed most: A's and
B's microseconds per transaction and the difference.  One sample is 1/499 s
of one CPU (bench/leapfrog_bench/perf.py).
"""
import argparse
import json


def per_txn(doc, samples):
    return samples / doc["frequency_hz"] / max(1, doc["committed"]) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--kind", default="clients")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    a, b = (json.load(open(p)) for p in (args.a, args.b))
    print(f"committed: A {a['committed']}, B {b['committed']} (windows {a['seconds']} s, {b['seconds']} s)")
    print(f"{'kind':12s} {'A us/txn':>10s} {'B us/txn':>10s} {'B/A':>6s}")
    for k in sorted(set(a["samples"]) | set(b["samples"])):
        va, vb = per_txn(a, a["samples"].get(k, 0)), per_txn(b, b["samples"].get(k, 0))
        print(f"{k:12s} {va:10.1f} {vb:10.1f} {vb / va if va else float('nan'):6.2f}")
    fa, fb = a["by_kind"].get(args.kind, {}), b["by_kind"].get(args.kind, {})
    rows = []
    for fn in set(fa) | set(fb):
        va, vb = per_txn(a, fa.get(fn, 0)), per_txn(b, fb.get(fn, 0))
        rows.append((vb - va, va, vb, fn))
    rows.sort(key=lambda r: -abs(r[0]))
    print(f"\n{args.kind}: functions by change, us per committed transaction")
    print(f"{'A':>8s} {'B':>8s} {'B-A':>8s}  function")
    for d, va, vb, fn in rows[:args.top]:
        print(f"{va:8.1f} {vb:8.1f} {d:+8.1f}  {fn}")
    ta = per_txn(a, sum(fa.values()))
    tb = per_txn(b, sum(fb.values()))
    print(f"{ta:8.1f} {tb:8.1f} {tb - ta:+8.1f}  (all of {args.kind})")


if __name__ == "__main__":
    main()
