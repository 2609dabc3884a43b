#!/usr/bin/env python3
"""Instructions of the background workers per input row, against the eager
script's: the figure of issue 14's "cheaper background rows" without the
machine's noise.

`bench/idle_completion.py` times the same work in CPU seconds, which move by
tens of percent between two runs of one build on this machine (4.3 to 5.7 s
for the aggregate at W=10 in one hour).  Instruction counts do not.  On a
throwaway cluster this loads TPC-C at W warehouses (seeded: every
invocation loads the same rows), copies the database twice, and restarts
the server under valgrind's callgrind, every process with its own file.
Then, on an idle server:

  eager  one session runs the migration's script and an ANALYZE of the
         tables it created, in one transaction (as the bench's eager
         strategy does);
  lazy   another runs leapfrog.start() and waits: one worker, not paced
         (`leapfrog.background_min_share = 1`: batches of
         `leapfrog.batch_size` rows, whatever the load), with no delay.

It reports the instructions of the eager session's backend and of the
workers, per input row, their ratio, and where the workers' go (inclusive
instructions of Leapfrog's main functions).  Start-up costs (a backend's
connection, a worker's first catalog reads) are in both; at W=1 they are
well under 1% of either.

    .venv/bin/python bench/worker_cost.py [--migration aggregate] [--warehouses 1]
        [--set leapfrog.batch_size=1000 ...] [--keep DIR]

About 2 minutes per migration at W=1.  Needs valgrind (apt-get install
valgrind).  --keep DIR keeps the callgrind files (callgrind_annotate reads
them).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

from leapfrog_cluster import Cluster, give_away, run_as_server  # noqa: E402

from leapfrog_bench import tpcc  # noqa: E402
from leapfrog_bench.migrations import MIGRATIONS  # noqa: E402
from leapfrog_bench.settings import default_settings  # noqa: E402

# Where a worker's instructions go: Leapfrog's functions, inclusive (a
# function that calls another of the list counts it too).
PARTS = [
    ("lf_migrate_range", "the batches (each a range of an input's blocks)"),
    ("copy_claimed", "  the copy into the new tables"),
    ("lf_units_by_keys", "  looking units up by key"),
    ("lf_units_of", "  looking units up by row"),
    ("lf_live_claim_nowait", "  claiming keys (table of done keys)"),
    ("lf_live_range_keys", "  reading the keys of the blocks"),
    ("lf_record_total", "counting the input rows (tuples_total)"),
    ("lf_try_complete", "completion: the count of rows left, ANALYZE, drops"),
    ("lf_analyze_targets", "  ANALYZE of the new tables"),
]


def start_under_callgrind(cl, work):
    """Start cl's server with every process under callgrind (work/cg.<pid>)."""
    wrapper = os.path.join(work, "postgres")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=%s/cg.%%p "
                "%s \"$@\"\n" % (work, cl.bindir / "postgres"))
    os.chmod(wrapper, 0o755)
    give_away(wrapper)
    res = run_as_server([cl.bindir / "pg_ctl", "-D", cl.datadir, "-l", cl.logfile, "-p", wrapper,
                         "-w", "-t", "600", "start"], timeout=620, check=False, cwd=work)
    if res.returncode != 0:
        raise RuntimeError("pg_ctl start under callgrind failed:\n%s\n%s\n--- log ---\n%s"
                           % (res.stdout, res.stderr, cl.log_tail()))
    cl.wait_ready(600)


def totals(path):
    """All instructions of one process's callgrind file."""
    with open(path) as f:
        for line in f:
            if line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError("%s has no totals (did the process exit?)" % path)


def inclusive(path, names):
    """{function: inclusive instructions} for the given functions of one file."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                          capture_output=True, text=True, check=True).stdout
    costs = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+\S*:(\w+) \[", line)
        if m and m.group(2) in names and m.group(2) not in costs:
            costs[m.group(2)] = int(m.group(1).replace(",", ""))
    return costs


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--migration", default="aggregate", choices=sorted(MIGRATIONS))
    ap.add_argument("--warehouses", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="server setting (repeatable)")
    ap.add_argument("--keep", metavar="DIR", help="copy the callgrind files into DIR")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("worker_cost: needs valgrind (apt-get install valgrind)")
    mig = MIGRATIONS[args.migration]
    settings = {**default_settings("512MB"), "autovacuum": "off",
                "leapfrog.background_delay": "0", "leapfrog.background_workers": "1",
                "leapfrog.background_min_share": "1"}
    for kv in args.set:
        k, _, v = kv.partition("=")
        settings[k] = v
    cl = Cluster(settings=settings, preload=True, log=print)
    work = tempfile.mkdtemp(prefix="leapfrog-worker-cost-")
    give_away(work)
    try:
        cl.init().start()
        cl.wait_ready()
        tpcc.create_template(cl, "tpcc", args.warehouses, workers=2, leapfrog=True, log=print,
                             seed=1)
        for db in ("cost_eager", "cost_lazy"):
            cl.sql(f"CREATE DATABASE {db} TEMPLATE tpcc STRATEGY FILE_COPY")
        cl.stop()
        start_under_callgrind(cl, work)
        with cl.connect("cost_eager", autocommit=False) as c:
            eager_pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
            c.execute(mig.script())
            c.execute(mig.analyze_sql())
            c.commit()
        with cl.connect("cost_lazy") as c:
            c.execute("SELECT leapfrog.start('cost', %s)", (mig.script(),))
            if not c.execute("SELECT leapfrog.wait('cost', 3600)").fetchone()[0]:
                raise RuntimeError("the lazy migration did not finish in an hour")
            rows = c.execute("SELECT tuples_total FROM leapfrog.migrations "
                             "WHERE name = 'cost'").fetchone()[0]
        cl.stop(timeout=600)
        eager = totals(os.path.join(work, "cg.%d" % eager_pid))
        names = {"lf_worker_main"} | {fn for fn, _ in PARTS}
        worker, parts = 0, {}
        for f in sorted(os.listdir(work)):
            if not f.startswith("cg."):
                continue
            costs = inclusive(os.path.join(work, f), names)
            if "lf_worker_main" in costs:
                worker += totals(os.path.join(work, f))
                for fn, n in costs.items():
                    parts[fn] = parts.get(fn, 0) + n
        if worker == 0:
            raise RuntimeError("no worker's callgrind file found in " + work)
        print(f"\n{args.migration}, W={args.warehouses}, {rows:,} input rows, idle server:")
        print(f"  eager session   {eager:15,} instructions, {eager / rows:8,.0f} per input row")
        print(f"  lazy workers    {worker:15,} instructions, {worker / rows:8,.0f} per input row"
              f"   lazy/eager {worker / eager:.2f}")
        print("\nwhere the workers' instructions go (inclusive):")
        for fn, what in PARTS:
            if parts.get(fn):
                print(f"  {parts[fn] / worker:6.1%}  {fn:22s} {what}")
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for f in os.listdir(work):
                if f.startswith("cg."):
                    shutil.copy(os.path.join(work, f), args.keep)
    finally:
        cl.destroy()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
