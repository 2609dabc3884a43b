#!/usr/bin/env python3
"""Runs' CPU profiles side by side, per committed transaction.

    python3 bench/perf_diff.py A/perf.json B/perf.json [A2/perf.json B2/perf.json ...]
                               [--kind clients] [--top 30]

Each A and B is a perf.json that `bench/run.py --perf` wrote in a run's raw
directory (raw/<load>/<migration>_<strategy>[_roundN]/perf.json).  For one
pair it prints each kind of process's CPU in microseconds per committed
transaction, then, for the chosen kind, the functions whose cost changed
most: A's and B's microseconds per transaction and the difference.  With
several pairs (one per round of an interleaved run), the kinds per pair,
then each function's median over the pairs, with the smallest and largest
difference: a function that grows in every round is not the machine's
drift.  One sample is 1/499 s of one CPU (bench/leapfrog_bench/perf.py).
"""
import argparse
import json
import statistics


def per_txn(doc, samples):
    return samples / doc["frequency_hz"] / max(1, doc["committed"]) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", metavar="A B", help="pairs of perf.json files")
    ap.add_argument("--kind", default="clients")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    if len(args.files) % 2:
        ap.error("perf.json files come in pairs: A B [A2 B2 ...]")
    docs = [json.load(open(p)) for p in args.files]
    pairs = list(zip(docs[0::2], docs[1::2]))

    print(f"{'pair':5s} {'kind':12s} {'A us/txn':>10s} {'B us/txn':>10s} {'B/A':>6s}"
          f"   (committed A, B)")
    for i, (a, b) in enumerate(pairs, 1):
        for k in sorted(set(a["samples"]) | set(b["samples"])):
            va, vb = per_txn(a, a["samples"].get(k, 0)), per_txn(b, b["samples"].get(k, 0))
            print(f"{i:<5d} {k:12s} {va:10.1f} {vb:10.1f} "
                  f"{vb / va if va else float('nan'):6.2f}   ({a['committed']}, {b['committed']})")

    fns = set()
    for a, b in pairs:
        fns |= set(a["by_kind"].get(args.kind, {})) | set(b["by_kind"].get(args.kind, {}))
    rows = []
    for fn in fns:
        va = [per_txn(a, a["by_kind"].get(args.kind, {}).get(fn, 0)) for a, _ in pairs]
        vb = [per_txn(b, b["by_kind"].get(args.kind, {}).get(fn, 0)) for _, b in pairs]
        d = [y - x for x, y in zip(va, vb)]
        rows.append((statistics.median(d), statistics.median(va), statistics.median(vb),
                     min(d), max(d), fn))
    rows.sort(key=lambda r: -abs(r[0]))
    many = len(pairs) > 1
    print(f"\n{args.kind}: functions by change, us per committed transaction"
          + (f" (medians of {len(pairs)} pairs; B-A's smallest and largest)" if many else ""))
    print(f"{'A':>8s} {'B':>8s} {'B-A':>8s}" + (f" {'min':>7s} {'max':>7s}" if many else "")
          + "  function")
    for d, va, vb, lo, hi, fn in rows[:args.top]:
        print(f"{va:8.1f} {vb:8.1f} {d:+8.1f}" + (f" {lo:+7.1f} {hi:+7.1f}" if many else "")
              + f"  {fn}")
    ta = [per_txn(a, sum(a["by_kind"].get(args.kind, {}).values())) for a, _ in pairs]
    tb = [per_txn(b, sum(b["by_kind"].get(args.kind, {}).values())) for _, b in pairs]
    d = [y - x for x, y in zip(ta, tb)]
    print(f"{statistics.median(ta):8.1f} {statistics.median(tb):8.1f} {statistics.median(d):+8.1f}"
          + (f" {min(d):+7.1f} {max(d):+7.1f}" if many else "") + f"  (all of {args.kind})")


if __name__ == "__main__":
    main()
