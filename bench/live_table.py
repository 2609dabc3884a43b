#!/usr/bin/env python3
"""The whole migration of a table that stays live, idle, against eager.

    .venv/bin/python bench/live_table.py [--groups 300000] [--layout spread|ordered]
                                         [--by worker|complete|statements] [--rounds 3]
                                         [--script groups|rows] [--null-every K]

A table `lines` of ten rows per group g (3M rows by default) stays live;
the script computes a per-group total and an archive of half the lines:

    CREATE TABLE totals (g int PRIMARY KEY, total bigint);
    INSERT INTO totals SELECT g, sum(amt) FROM lines GROUP BY g;
    CREATE TABLE arch (g int, n int, amt int, PRIMARY KEY (g, n));
    INSERT INTO arch SELECT g, n, amt FROM lines WHERE n % 2 = 0;

With --script rows, the archive alone: `lines` is then read only by a row
mapping, tracked in place by its primary key (g, n), each row its own unit.

With --null-every K, every K-th group's key is NULL instead (one NULL group
of 10 * groups / K rows, as orders without a customer): `g` may be NULL,
so `lines` has a unique index on (g, n) rather than a primary key, and so
have the new tables (the script groups only).

--layout says where a group's rows lie: `ordered` loads the table in key
order (a group's rows together, as an order's lines), `spread` puts each
group's ten rows in ten places over the table (as a customer's orders).

On a throwaway cluster (the benchmark suite's settings), each round runs,
in alternating order, on a fresh copy of the table:

  eager     the script and an ANALYZE of the new tables, one transaction;
  tracked   leapfrog.start(): `lines` is tracked in place (src/live.c);
  replaced  the same with leapfrog.track_live_inputs = off: `lines` is
            replaced lazily (src/replace.c), its rows moved into a copy;

and, for the lazy ones, with --by worker (the default) waits for the
background workers (leapfrog.background_delay = 0) to finish, or with
--by complete calls leapfrog.complete() at once (background off).  It
prints each run's wall time and the server's CPU time, then medians with
their spread.

--by statements measures instead what the application's statements cost
while the migration runs, tracked against replaced (background off): one
pgbench client (-M prepared) per query and kind, --seconds each,
interleaved, each round on groups no earlier round touched (so that they
are not migrated yet, and the UPDATE's is its group's first write); it
prints the mean latencies and the medians of tracked/replaced.  Not a
test: figures only.
"""
import argparse
import statistics
import sys
import time

from run import ensure_venv  # noqa: E402  (run.py, beside this file, also finds python/)

ensure_venv()

import psycopg  # noqa: E402

from leapfrog_cluster import Cluster, extension_installed  # noqa: E402

from leapfrog_bench.settings import default_settings  # noqa: E402
from idle_completion import server_cpu_s  # noqa: E402
from point_query import pgbench  # noqa: E402

TOTALS = """
  CREATE TABLE totals (g int PRIMARY KEY, total bigint);
  INSERT INTO totals SELECT g, sum(amt) FROM lines GROUP BY g;
"""
ARCHIVE = """
  CREATE TABLE arch (g int, n int, amt int, PRIMARY KEY (g, n));
  INSERT INTO arch SELECT g, n, amt FROM lines WHERE n % 2 = 0;
"""
SCRIPTS = {"groups": TOTALS + ARCHIVE, "rows": ARCHIVE}
KINDS = ["eager", "tracked", "replaced"]
QUERIES = {
    "SELECT a line (the live table)": "SELECT amt FROM lines WHERE g = :id AND n = 1;",
    "SELECT an archived line": "SELECT amt FROM arch WHERE g = :id AND n = 2;",
    "SELECT a total": "SELECT total FROM totals WHERE g = :id;",
    "UPDATE a line (its group's first write)":
        "UPDATE lines SET amt = amt + 1 WHERE g = :id AND n = 1;",
}


def make_template(cl, groups, layout, null_every):
    with psycopg.connect(cl.conninfo(), autocommit=True) as c:
        c.execute("CREATE DATABASE tmpl")
    with psycopg.connect(cl.conninfo("tmpl"), autocommit=True) as c:
        c.execute("CREATE EXTENSION leapfrog")
        c.execute("CREATE EXTENSION pg_prewarm")
        order = "g, n" if layout == "ordered" else "n, g"
        if null_every:
            c.execute("CREATE TABLE lines (g int, n int NOT NULL, amt int NOT NULL)")
            c.execute("CREATE UNIQUE INDEX ON lines (g, n)")
            key = f"CASE WHEN g %% {int(null_every)} = 0 THEN NULL ELSE g END"
        else:
            c.execute("CREATE TABLE lines (g int NOT NULL, n int NOT NULL, amt int NOT NULL, "
                      "PRIMARY KEY (g, n))")
            key = "g"
        c.execute(f"INSERT INTO lines SELECT {key}, n, g + n FROM generate_series(1, %s) g, "
                  f"generate_series(1, 10) n ORDER BY {order}", (groups,))
        c.execute("VACUUM ANALYZE lines")


def run(cl, kind, by, script):
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
                c.execute(script)
                c.execute("ANALYZE totals, arch" if "totals" in script else "ANALYZE arch")
        else:
            if kind == "replaced":
                c.execute("SET leapfrog.track_live_inputs = off")
            c.execute("SELECT leapfrog.start('m', %s)", (script,))
            if by == "complete":
                c.execute("SELECT leapfrog.complete('m')")
            elif not c.execute("SELECT leapfrog.wait('m', 900)").fetchone()[0]:
                raise RuntimeError("the workers did not finish in 900 s")
        return time.monotonic() - t0, server_cpu_s(cl) - cpu0


def statements(cl, groups, rounds, seconds, script):
    for db in ("tracked", "replaced"):
        with psycopg.connect(cl.conninfo(), autocommit=True) as c:
            c.execute(f"CREATE DATABASE {db} TEMPLATE tmpl STRATEGY FILE_COPY")
        with psycopg.connect(cl.conninfo(db), autocommit=True) as c:
            if db == "replaced":
                c.execute("SET leapfrog.track_live_inputs = off")
            c.execute("SELECT leapfrog.start('m', %s)", (script,))
            c.execute("CHECKPOINT")
    queries = {q: sql for q, sql in QUERIES.items() if "totals" in script or "totals" not in sql}
    ratios = {q: [] for q in queries}
    width = groups // (rounds + 1)
    for r in range(rounds):
        lo, hi = r * width + 1, (r + 1) * width
        for q, sql in queries.items():
            order = ["tracked", "replaced"] if r % 2 == 0 else ["replaced", "tracked"]
            lat = {db: pgbench(cl, sql, lo, hi, seconds, db=db) for db in order}
            ratios[q].append(lat["tracked"] / lat["replaced"])
            print(f"round {r + 1} {q:42s} tracked {lat['tracked']:8.1f} us  replaced "
                  f"{lat['replaced']:8.1f} us", flush=True)
    print("\ntracked/replaced, medians of the rounds (min-max):")
    for q, v in ratios.items():
        print(f"  {q:42s} {spread(v)}")


def spread(xs):
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=300_000)
    ap.add_argument("--layout", choices=["spread", "ordered"], default="spread")
    ap.add_argument("--by", choices=["worker", "complete", "statements"], default="worker")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=4, help="per pgbench run (--by statements)")
    ap.add_argument("--script", choices=sorted(SCRIPTS), default="groups")
    ap.add_argument("--null-every", type=int, default=0,
                    help="every K-th group's key NULL (--script groups)")
    args = ap.parse_args()
    script = SCRIPTS[args.script]
    if args.null_every:
        if args.script != "groups":
            sys.exit("live_table: --null-every needs --script groups (rows tracks by primary key)")
        script = script.replace("g int PRIMARY KEY", "g int UNIQUE").replace(
            "PRIMARY KEY (g, n)", "UNIQUE (g, n)")
    if not extension_installed():
        sys.exit("live_table: the leapfrog extension is not installed (make install)")
    settings = default_settings()
    settings["leapfrog.background_delay"] = "0"
    if args.by != "worker":
        settings["leapfrog.background"] = "off"
    res = {k: [] for k in KINDS}
    with Cluster(settings=settings, preload=True) as cl:
        cl.wait_ready()
        make_template(cl, args.groups, args.layout, args.null_every)
        if args.by == "statements":
            statements(cl, args.groups, args.rounds, args.seconds, script)
            return
        for r in range(args.rounds):
            for kind in (KINDS if r % 2 == 0 else KINDS[::-1]):
                res[kind].append(run(cl, kind, args.by, script))
                print(f"round {r + 1} {kind:8s} {res[kind][-1][0]:7.2f} s wall "
                      f"{res[kind][-1][1]:7.2f} s CPU", flush=True)
    print(f"\nmedians (min-max), {args.groups * 10} rows, {args.layout}, by {args.by}, "
          f"script {args.script}" + (f", every {args.null_every}th group NULL" if args.null_every
                                     else "") + ":")
    for kind, v in res.items():
        print(f"  {kind:8s} wall {spread([x[0] for x in v])} s  "
              f"CPU {spread([x[1] for x in v])} s")


if __name__ == "__main__":
    main()
