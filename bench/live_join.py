#!/usr/bin/env python3
"""A join with a table that stays live: tracked in place against replaced.

    .venv/bin/python bench/live_join.py [--customers 100000] [--orders 10]
                                        [--statements 2000] [--rounds 3]
                                        [--by complete|worker]

A customer's name is copied into the orders that reference it; the script
drops `orders` and keeps `customers`:

    CREATE TABLE orders_v2 AS
      SELECT o.id, o.cust, o.amount, c.name FROM orders o LEFT JOIN customers c ON c.id = o.cust;
    DROP TABLE orders;

`customers.id` is NOT NULL, so `customers` is tracked in place (src/live.c:
a trigger claims the join key of a row written); with
leapfrog.track_live_inputs = off it is replaced lazily, as every join's live
input was before (its rows move into a copy; a statement on it carries a
step).  On a throwaway cluster (the benchmark suite's settings, workers
off), each round runs, in alternating order, on a fresh copy:

  eager    the script and an ANALYZE, one transaction;
  track    leapfrog.start();
  replace  leapfrog.start() with leapfrog.track_live_inputs = off.

Then, in that order, on the new schema (the migration still running):
--statements point reads of a random customer (`read`), updates of a
column the join does not read (`touch`), updates of the name (`rename`),
each a loop in one PL/pgSQL call (prepared statements, as an application's);
then the rest of the migration (`complete`): leapfrog.complete() in the
session, or with --by worker a wait for the background workers
(leapfrog.background_delay = 0; they run during the statements too).  It prints each step's mean time per statement (complete: the
call), and per step the medians over the rounds with their spread.  Not a
test: figures only.
"""
import argparse
import sys
import time

from run import ensure_venv  # noqa: E402  (run.py, beside this file, also finds python/)

ensure_venv()

import psycopg  # noqa: E402

from leapfrog_cluster import Cluster, extension_installed  # noqa: E402

from leapfrog_bench.settings import default_settings  # noqa: E402
from idle_completion import fresh_db, server_cpu_s  # noqa: E402
from live_table import spread  # noqa: E402

SCRIPT = """
  CREATE TABLE orders_v2 AS
    SELECT o.id, o.cust, o.amount, c.name FROM orders o LEFT JOIN customers c ON c.id = o.cust;
  DROP TABLE orders;
"""
KINDS = ["eager", "track", "replace"]
STEPS = {
    "read": "PERFORM name FROM customers WHERE id = 1 + (i::bigint * 7919) %% %(n)s",
    "touch": "UPDATE customers SET visits = visits + 1 WHERE id = 1 + (i::bigint * 104729) %% %(n)s",
    "rename": "UPDATE customers SET name = name || 'x' WHERE id = 1 + (i::bigint * 15485863) %% %(n)s",
}


def make_template(cl, customers, per):
    with psycopg.connect(cl.conninfo(), autocommit=True) as c:
        c.execute("CREATE DATABASE tmpl")
    with psycopg.connect(cl.conninfo("tmpl"), autocommit=True) as c:
        c.execute("CREATE EXTENSION leapfrog")
        c.execute("CREATE EXTENSION pg_prewarm")
        c.execute("CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, "
                  "visits int NOT NULL DEFAULT 0)")
        c.execute("INSERT INTO customers SELECT g, 'customer ' || g FROM generate_series(1, %s) g",
                  (customers,))
        c.execute("CREATE TABLE orders (id bigint PRIMARY KEY, cust int, amount int NOT NULL)")
        c.execute("INSERT INTO orders SELECT g, CASE WHEN g %% 50 = 0 THEN NULL "
                  "ELSE 1 + (g * 7) %% %s END, g %% 1000 FROM generate_series(1, %s) g",
                  (customers, customers * per))
        c.execute("CREATE INDEX ON orders (cust)")
        c.execute("VACUUM ANALYZE")


def run(cl, kind, statements, by):
    """{step: mean ms per statement, or the call's s for complete} on a fresh copy."""
    out = {}
    fresh_db(cl, "tmpl", "run")
    with psycopg.connect(cl.conninfo("run"), autocommit=True) as c:
        n = c.execute("SELECT count(*) FROM customers").fetchone()[0]
        cpu0, t0 = server_cpu_s(cl), time.monotonic()
        if kind == "eager":
            with c.transaction():
                c.execute(SCRIPT)
                c.execute("ANALYZE orders_v2")
        else:
            if kind == "replace":
                c.execute("SET leapfrog.track_live_inputs = off")
            c.execute("SELECT leapfrog.start('m', %s)", (SCRIPT,))
            c.execute("RESET leapfrog.track_live_inputs")
        out["start"] = (time.monotonic() - t0) * 1000
        for step, stmt in STEPS.items():
            body = stmt % {"n": n}
            t = time.monotonic()
            c.execute("DO $$ BEGIN FOR i IN 1..%d LOOP %s; END LOOP; END $$" % (statements, body))
            out[step] = (time.monotonic() - t) * 1000 / statements
        t = time.monotonic()
        if kind != "eager" and by == "complete":
            c.execute("SELECT leapfrog.complete('m')")
        elif kind != "eager" and not c.execute("SELECT leapfrog.wait('m', 900)").fetchone()[0]:
            raise RuntimeError("the workers did not finish in 900 s")
        out["complete"] = time.monotonic() - t
        out["cpu"] = server_cpu_s(cl) - cpu0
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--customers", type=int, default=100_000)
    ap.add_argument("--orders", type=int, default=10, help="orders per customer")
    ap.add_argument("--statements", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--by", choices=["complete", "worker"], default="complete")
    args = ap.parse_args()
    if not extension_installed():
        sys.exit("live_join: the leapfrog extension is not installed (make install)")
    settings = default_settings()
    if args.by == "complete":
        settings["leapfrog.background"] = "off"
    else:
        settings["leapfrog.background_delay"] = "0"
    res = {k: [] for k in KINDS}
    with Cluster(settings=settings, preload=True) as cl:
        cl.wait_ready()
        make_template(cl, args.customers, args.orders)
        for r in range(args.rounds):
            for kind in (KINDS if r % 2 == 0 else KINDS[::-1]):
                res[kind].append(run(cl, kind, args.statements, args.by))
                x = res[kind][-1]
                print(f"round {r + 1} {kind:7s} start {x['start']:8.1f} ms  "
                      + "  ".join(f"{s} {x[s]:7.3f} ms" for s in STEPS)
                      + f"  complete {x['complete']:6.2f} s  CPU {x['cpu']:6.2f} s", flush=True)
    print(f"\nmedians (min-max), {args.customers} customers, {args.customers * args.orders} orders, "
          f"{args.statements} statements per step, the rest by {args.by}:")
    for kind, v in res.items():
        print(f"  {kind:7s} " + "  ".join(
            f"{s} {spread([x[s] for x in v])} {'s' if s in ('complete', 'cpu') else 'ms'}"
            for s in ["start"] + list(STEPS) + ["complete", "cpu"]))


if __name__ == "__main__":
    main()
