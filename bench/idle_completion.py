#!/usr/bin/env python3
"""Background completion on an idle server against the eager script.

    .venv/bin/python bench/idle_completion.py [--warehouses 10] [--rounds 3]
        [--migration split] [--set leapfrog.background_workers=1 ...]

On a throwaway cluster (the benchmark suite's settings) holding a TPC-C of
W warehouses, each round copies the database twice and runs, alternately:
  eager: the migration script and an ANALYZE of the new tables in one
         transaction, as the benchmark's eager strategy runs it;
  lazy:  leapfrog.start() with leapfrog.background_delay = 0, then
         leapfrog.wait(): the background workers' time to move every row,
         including the ANALYZE and the drop at completion.
It prints each round, the medians, lazy/eager, and the CPU cost per input
row of each (server processes' CPU time from /proc, all backends and
workers of the run's database).  Not a test: figures only.
"""
import argparse
import os
import statistics
import sys
import time

from run import ensure_venv  # noqa: E402  (run.py, beside this file, also finds python/)

ensure_venv()

import psycopg  # noqa: E402

from leapfrog_cluster import Cluster, extension_installed  # noqa: E402

from leapfrog_bench import tpcc  # noqa: E402
from leapfrog_bench.settings import default_settings  # noqa: E402
from leapfrog_bench.migrations import MIGRATIONS  # noqa: E402

TEMPLATE = "idle_tmpl"
RUNDB = "idle_run"


def server_cpu_s(cl):
    """CPU seconds (user + system) used so far by every process of the cluster."""
    clk = os.sysconf("SC_CLK_TCK")
    with open(os.path.join(cl.datadir, "postmaster.pid")) as f:
        ppid = f.readline().strip()
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if pid == ppid or fields[1] == ppid:
            # utime, stime, and the children's (exited workers)
            total += sum(int(x) for x in fields[11:15])
    return total / clk


def fresh_db(cl, template=TEMPLATE, rundb=RUNDB):
    """rundb, a new copy of template, its tables and indexes in shared
    buffers, checkpointed."""
    with psycopg.connect(cl.conninfo(), autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {rundb}")
        c.execute(f"CREATE DATABASE {rundb} TEMPLATE {template} STRATEGY FILE_COPY")
    with psycopg.connect(cl.conninfo(rundb), autocommit=True) as c:
        c.execute("SELECT count(pg_prewarm(oid)) FROM pg_class WHERE relkind IN ('r', 'i')")
        c.execute("CHECKPOINT")


def run_eager(cl, mig):
    fresh_db(cl)
    with psycopg.connect(cl.conninfo(RUNDB)) as c:
        cpu0, t0 = server_cpu_s(cl), time.monotonic()
        c.execute(mig.script())
        c.execute(mig.analyze_sql())
        c.commit()
        return time.monotonic() - t0, server_cpu_s(cl) - cpu0


def run_lazy(cl, name, script):
    fresh_db(cl)
    with psycopg.connect(cl.conninfo(RUNDB), autocommit=True) as c:
        cpu0, t0 = server_cpu_s(cl), time.monotonic()
        c.execute("SELECT leapfrog.start(%s, %s)", (name, script))
        if not c.execute("SELECT leapfrog.wait(%s, 600)", (name,)).fetchone()[0]:
            raise RuntimeError("lazy migration did not finish in 600 s")
        wall = time.monotonic() - t0
        cpu = server_cpu_s(cl) - cpu0
        rows = c.execute("SELECT tuples_migrated FROM leapfrog.migrations WHERE name = %s",
                         (name,)).fetchone()[0]
        return wall, cpu, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouses", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--migration", default="split", choices=sorted(MIGRATIONS))
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="server setting (repeatable)")
    args = ap.parse_args()

    if not extension_installed():
        sys.exit("idle_completion: the leapfrog extension is not installed (make install)")
    settings = default_settings()
    settings["leapfrog.background_delay"] = "0"
    for kv in args.set:
        k, _, v = kv.partition("=")
        settings[k] = v
    mig = MIGRATIONS[args.migration]
    eager, lazy = [], []
    with Cluster(settings=settings, preload=True) as cl:
        cl.wait_ready()
        tpcc.create_template(cl, TEMPLATE, args.warehouses, leapfrog=True)
        for r in range(args.rounds):
            eager.append(run_eager(cl, mig))
            w, cpu, rows = run_lazy(cl, f"idle_{r}", mig.script())
            lazy.append((w, cpu))
            print(f"round {r + 1}: eager {eager[-1][0]:.2f} s ({eager[-1][1]:.2f} s CPU), "
                  f"lazy {w:.2f} s ({cpu:.2f} s CPU), {rows} rows", flush=True)
    ew = statistics.median(e[0] for e in eager)
    ec = statistics.median(e[1] for e in eager)
    lw = statistics.median(x[0] for x in lazy)
    lc = statistics.median(x[1] for x in lazy)
    print(f"median: eager {ew:.2f} s, lazy {lw:.2f} s, lazy/eager {lw / ew:.2f}")
    print(f"server CPU per input row: eager {ec / rows * 1e6:.1f} us, "
          f"lazy {lc / rows * 1e6:.1f} us, lazy/eager {lc / ec:.2f}")
    print(f"server CPU in total: eager {ec:.2f} s, lazy {lc:.2f} s")


if __name__ == "__main__":
    main()
