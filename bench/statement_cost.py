#!/usr/bin/env python3
"""Instructions per TPC-C transaction while a migration runs: a yardstick
that the machine's noise does not move.

The machine's speed drifts by tens of percent between runs (bench/README.md),
so the CPU time of two runs cannot tell a few percent of statement cost
apart.  Instruction counts can.  On a throwaway cluster this loads TPC-C at
W=1, copies the database for each strategy and run, stops the server, and
runs TPC-C transactions in the bench's mix in a single-user backend under
valgrind's callgrind, after the switch of each strategy, in one transaction:

  none   the old schema and application code;
  eager  the migration's script, an ANALYZE of the tables it created (what
         autovacuum does soon after), and the new application code;
  lazy   leapfrog.start() with the script and the new code, no background
         worker: every row a statement needs is migrated or computed by it.

Each strategy runs twice, with N passes of 25 transactions (11 NewOrder, 11
Payment, one each of the others) and with 3N, and the figure is
(I(3N) - I(N)) / (2N x 25): start-up, the switch and
the first pass's one-time costs (catalog caches, PL/pgSQL compiling the new
code, plans) cancel.  random() is seeded, in the load and in the
sessions, so every invocation loads the same rows and both runs draw the
same transactions; at W=1 the split's and the aggregate's new tables have
at most 30000 rows, which ANALYZE reads whole (no random sample).  So two
builds can be compared by two invocations.  Lazy's figure
is the average over passes N to 3N, as the share of rows already migrated
grows (at W=1, 36 passes touch about 1000 of the 30000 customers).

    .venv/bin/python bench/statement_cost.py [--migration split] [--passes 12] [--functions 30]
        [--warehouses 1] [--cache-sim]

--warehouses W loads W warehouses (default 1); every transaction's home
warehouse is then drawn (seeded) among them, as the bench's clients spread.
--cache-sim also counts, per transaction, valgrind's simulated cache
misses: D1mr + D1mw (first-level data) and DLmr + DLmw (last level, the
reads and writes that go to memory).  Instructions do not show what a
larger working set costs; these do, on this machine whose virtual CPUs
expose no hardware counters.  About twice as slow.  The last level is the
host's as valgrind reads it (this machine reports a 260 MB L3 that its
tenants share), or --cache-sim=BYTES (16-way, 64-byte lines).
--keep DIR keeps the callgrind files (callgrind_annotate reads them).
--functions K lists the K functions whose own instructions per transaction
differ most between eager and lazy (callgrind_annotate; PostgreSQL's static
functions show as addresses).  Needs valgrind (apt-get install valgrind).
"""
import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

import psycopg  # noqa: E402
from leapfrog_cluster import Cluster, give_away, run_as_server  # noqa: E402

from leapfrog_bench import tpcc  # noqa: E402
from leapfrog_bench.migrations import MIGRATIONS  # noqa: E402
from leapfrog_bench.settings import default_settings  # noqa: E402

# A pass is the bench's TPC-C mix (tpcc.MIX, 45/43/4/4/4) in 25 transactions,
# 11/11/1/1/1, in an order fixed once
PASS = [fn for _, weight, fn in tpcc.MIX for _ in range(round(weight / 4))]
random.Random(1).shuffle(PASS)
STRATEGIES = ["none", "eager", "lazy"]
W = 1

# ANALYZE the tables this transaction created (pg_class rows it inserted)
ANALYZE_NEW = """DO $lf$
DECLARE r regclass;
BEGIN
  FOR r IN SELECT c.oid FROM pg_catalog.pg_class c
            WHERE c.relkind = 'r' AND c.xmin = pg_catalog.pg_current_xact_id()::xid
  LOOP
    EXECUTE pg_catalog.format('ANALYZE %s', r);
  END LOOP;
END $lf$"""


def statement(sql):
    """One statement for `postgres --single -j`: a semicolon and an empty
    line end it, so the statement itself keeps no empty line."""
    body = "\n".join(line for line in sql.splitlines() if line.strip())
    return body.rstrip().rstrip(";") + ";\n\n"


def session(mig, strategy, passes):
    home = random.Random(2)     # the same warehouses in every run's first passes
    out = [statement("SELECT setseed(0.25)"), statement("BEGIN")]
    if strategy == "lazy":
        out.append(statement("SELECT leapfrog.start('cost', $lfs$%s$lfs$)" % mig.script()))
    elif strategy == "eager":
        out.append(statement("DO $lfd$ BEGIN EXECUTE $lfs$%s$lfs$; END $lfd$" % mig.script()))
        out.append(statement(ANALYZE_NEW))
    if strategy != "none":
        out.append(statement("DO $lfd$ BEGIN EXECUTE $lfs$%s$lfs$; END $lfd$" % mig.tx()))
    out.append(statement("COMMIT"))
    for _ in range(passes):
        for f in PASS:
            out.append(statement(f"SELECT {f}({home.randint(1, W)}, {W})"))
    return "".join(out)


def throwaway_cluster(prefix):
    """A cluster for single-user runs (no background worker), not started,
    and a work directory the server's user may write."""
    cl = Cluster(settings={**default_settings("512MB"), "leapfrog.background": "off"},
                 preload=True, log=print)
    work = tempfile.mkdtemp(prefix=prefix)
    give_away(work)
    return cl, work


def run_single(cl, db, text, work, tag, cache_sim=False):
    """The events of one single-user session ({"Ir": instructions, and with
    cache_sim the cache misses}), and its callgrind file."""
    path = os.path.join(work, tag + ".sql")
    with open(path, "w") as f:
        f.write(text)
    out = os.path.join(work, tag + ".callgrind")
    res = run_as_server(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out]
        + (["--cache-sim=yes"] if cache_sim else [])
        + ([f"--LL={cache_sim},16,64"] if cache_sim not in (None, "host") else []) +
        [cl.bindir / "postgres", "--single", "-j", "-D", cl.datadir,
         "-c", "shared_preload_libraries=leapfrog", "-c", "leapfrog.background=off",
         "-c", "autovacuum=off", "-c", "log_min_messages=warning", db],
        timeout=3600, check=False, cwd=work, stdin_path=path)
    names = re.search(r"Events\s*: ([\w ]+)", res.stderr)
    m = re.search(r"Collected : ([\d ]+)", res.stderr)
    errors = [line for line in res.stderr.splitlines() if "ERROR" in line]
    if res.returncode != 0 or not m or not names or errors:
        raise RuntimeError(f"{tag}: single-user run failed ({res.returncode}):\n"
                           + "\n".join(errors or res.stderr.splitlines()[-20:]))
    return dict(zip(names.group(1).split(), map(int, m.group(1).split()))), out


def keep_files(files, keep):
    """Copy the callgrind files into directory keep (--keep), if given."""
    if keep:
        os.makedirs(keep, exist_ok=True)
        for f in files:
            shutil.copy(f, keep)


def own_costs(callgrind_file):
    """{function: own instructions} from callgrind_annotate's table."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=no",
                           callgrind_file], capture_output=True, text=True, check=True).stdout
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().endswith("file:function")) + 2
    costs = {}
    for line in lines[start:]:
        if not line.strip() or line.startswith("--"):
            break
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(\S.*)$", line)
        if m:
            where = m.group(2).split(" [")[0]
            fn = where.split(":", 1)[1] if ":" in where else where
            costs[fn] = costs.get(fn, 0) + int(m.group(1).replace(",", ""))
    return costs


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--migration", default="split", choices=sorted(MIGRATIONS))
    ap.add_argument("--passes", type=int, default=12, help="N (the second run has 3N)")
    ap.add_argument("--functions", type=int, default=0)
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--keep", metavar="DIR", help="copy the callgrind files into DIR")
    ap.add_argument("--warehouses", type=int, default=1)
    ap.add_argument("--cache-sim", nargs="?", const="host", metavar="LL_BYTES",
                    help="also count simulated cache misses per transaction; the last "
                         "level is the host's (valgrind's default) or LL_BYTES (16-way)")
    args = ap.parse_args()
    global W
    W = args.warehouses
    if not shutil.which("valgrind"):
        sys.exit("statement_cost: needs valgrind (apt-get install valgrind)")
    mig = MIGRATIONS[args.migration]
    strategies = args.strategies.split(",")
    runs = [(s, n) for s in strategies for n in (args.passes, 3 * args.passes)]
    cl, work = throwaway_cluster("leapfrog-cost-")
    try:
        cl.init().start()
        cl.wait_ready()
        tpcc.create_template(cl, "tpcc", W, workers=2, leapfrog=True, log=print, seed=1)
        with psycopg.connect(cl.conninfo(), autocommit=True) as c:
            for s, n in runs:
                c.execute(f"CREATE DATABASE cost_{s}_{n} TEMPLATE tpcc STRATEGY FILE_COPY")
        cl.stop()
        events, files = {}, {}
        for s, n in runs:
            events[s, n], files[s, n] = run_single(cl, f"cost_{s}_{n}", session(mig, s, n),
                                                   work, f"{s}_{n}", args.cache_sim)
            print(f"{s:6s} {n:4d} passes: {events[s, n]['Ir']:,} instructions", flush=True)
        ntx = 2 * args.passes * len(PASS)

        def per_tx(names):
            return {s: sum(events[s, 3 * args.passes][e] - events[s, args.passes][e]
                           for e in names) / ntx for s in strategies}
        figures = [("instructions", ["Ir"])]
        if args.cache_sim:
            figures += [("first-level data misses (D1mr + D1mw)", ["D1mr", "D1mw"]),
                        ("last-level misses, to memory (DLmr + DLmw)", ["DLmr", "DLmw"])]
        for title, names in figures:
            per = per_tx(names)
            print(f"\n{args.migration}, W={W}, {args.passes} and {3 * args.passes} passes of "
                  f"{len(PASS)} transactions in the TPC-C mix: {title} per transaction")
            for s in strategies:
                ratios = ", ".join(f"{s}/{o} {per[s] / per[o]:.3f}" for o in strategies
                                   if o != s and strategies.index(o) < strategies.index(s))
                print(f"{s:6s} {per[s]:12,.0f}   {ratios}")
        if args.functions and {"eager", "lazy"} <= set(strategies):
            own = {k: own_costs(f) for k, f in files.items()}

            def one(s, fn):
                return (own[s, 3 * args.passes].get(fn, 0) - own[s, args.passes].get(fn, 0)) / ntx
            names = set().union(*(set(d) for d in own.values()))
            diff = sorted(names, key=lambda fn: -abs(one("lazy", fn) - one("eager", fn)))
            print(f"\nfunctions whose own instructions per transaction differ most, eager -> lazy:")
            for fn in diff[:args.functions]:
                print(f"  {one('eager', fn):10,.0f} {one('lazy', fn):10,.0f} "
                      f"{one('lazy', fn) - one('eager', fn):+10,.0f}  {fn}")
        keep_files(files.values(), args.keep)
    finally:
        cl.destroy()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
