#!/usr/bin/env python3
"""Instructions per read of one unit while a migration runs, the unit
migrated or not yet, the read sent as text (planned for one run), as a
custom plan or prepared (its plan kept): what a computing read costs, and
what its shortcut for a migrated unit saves and costs (docs/design.md
section 3b, "A pinned join unit of a retired input", and section 3 for a
group of a live input).

On a throwaway cluster, no background worker, one of:

  join    stock (2 warehouses x 5000 items) LEFT JOIN line (30000 lines)
          into unit, both inputs dropped (the TPC-C join's shape, smaller)
  group   line (2 x 5000 x 3 lines) grouped by (w, i) into unit, line
          staying live (tracked in place)
  row     cust (2 x 5000) split into unit and unit_balance, cust dropped
          (the TPC-C split's shape); a unit is one row

An UPDATE migrates the units of warehouse 1's first 2000 items; warehouse
2's are not migrated.  Then, in a single-user backend under valgrind's
callgrind, N and then 3N reads of SELECT * FROM unit WHERE w = W AND i = I
(I among the first 2000), and the figure is (I(3N) - I(N)) / 2N, so
start-up cancels:

  text       the statement sent with literal values, planned each time
  custom     PREPARE'd with $1 and $2, EXECUTE'd with plan_cache_mode =
             force_custom_plan: planned for each run with its values, as
             a driver's unnamed statement with parameters is (psycopg 3,
             node-postgres, JDBC's first four runs)
  prepared   PREPARE'd with $1 and $2, EXECUTE'd (plan_cache_mode auto: a
             generic plan after the first five)

each on a migrated unit (W = 1), one not migrated (W = 2), and, the
control, the same rows in a plain table (plain_unit: what the read costs
once the migration is done).  The default leapfrog.read_mode, compute: the
reads migrate nothing.  Two builds are compared by two invocations.  Needs
valgrind.

    .venv/bin/python bench/unit_reads.py [--migration join|group|row] [--reads 100] [--keep DIR]
"""
import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from statement_cost import (keep_files, psycopg, run_single, statement,  # noqa: E402
                            throwaway_cluster)

SETUP = {"join": """
CREATE TABLE stock (w int, i int, qty int, PRIMARY KEY (w, i));
INSERT INTO stock SELECT w, i, 100 FROM generate_series(1, 2) w, generate_series(1, 5000) i;
CREATE TABLE line (id int PRIMARY KEY, sw int, si int, amount int);
INSERT INTO line SELECT g, g % 2 + 1, g % 5000 + 1, g FROM generate_series(1, 30000) g;
CREATE INDEX line_supply ON line (sw, si);
CREATE TABLE plain_unit AS SELECT s.w, s.i, s.qty, l.id, l.amount
  FROM stock s LEFT JOIN line l ON l.sw = s.w AND l.si = s.i;
CREATE INDEX plain_unit_wi ON plain_unit (w, i);
ANALYZE stock, line, plain_unit;
SELECT leapfrog.start('unit_reads', $$
  CREATE TABLE unit (w int, i int, qty int, id int, amount int);
  INSERT INTO unit SELECT s.w, s.i, s.qty, l.id, l.amount
    FROM stock s LEFT JOIN line l ON l.sw = s.w AND l.si = s.i;
  CREATE INDEX unit_wi ON unit (w, i);
  DROP TABLE line;
  DROP TABLE stock;
$$);
UPDATE unit SET qty = qty WHERE w = 1 AND i <= 2000;
""", "group": """
CREATE TABLE line (w int, i int, n int, amount int, PRIMARY KEY (w, i, n));
INSERT INTO line SELECT w, i, n, i * n FROM generate_series(1, 2) w, generate_series(1, 5000) i,
  generate_series(1, 3) n;
CREATE TABLE plain_unit AS SELECT w, i, count(*) AS lines, sum(amount) AS amount
  FROM line GROUP BY w, i;
ALTER TABLE plain_unit ADD PRIMARY KEY (w, i);
ANALYZE line, plain_unit;
SELECT leapfrog.start('unit_reads', $$
  CREATE TABLE unit (w int, i int, lines bigint, amount bigint, PRIMARY KEY (w, i));
  INSERT INTO unit SELECT w, i, count(*), sum(amount) FROM line GROUP BY w, i;
$$);
UPDATE unit SET lines = lines WHERE w = 1 AND i <= 2000;
""", "row": """
CREATE TABLE cust (w int, i int, name text, bal int, PRIMARY KEY (w, i));
INSERT INTO cust SELECT w, i, 'name ' || i, i FROM generate_series(1, 2) w, generate_series(1, 5000) i;
CREATE TABLE plain_unit AS SELECT w, i, name FROM cust;
ALTER TABLE plain_unit ADD PRIMARY KEY (w, i);
ANALYZE cust, plain_unit;
SELECT leapfrog.start('unit_reads', $$
  CREATE TABLE unit (w int, i int, name text, PRIMARY KEY (w, i));
  INSERT INTO unit SELECT w, i, name FROM cust;
  CREATE TABLE unit_balance (w int, i int, bal int, PRIMARY KEY (w, i));
  INSERT INTO unit_balance SELECT w, i, bal FROM cust;
  DROP TABLE cust;
$$);
UPDATE unit SET name = name WHERE w = 1 AND i <= 2000;
"""}
VARIANTS = [(how, unit) for how in ("text", "custom", "prepared")
            for unit in ("migrated", "retired", "plain")]


def session(how, unit, reads):
    w = 1 if unit == "migrated" else 2
    table = "plain_unit" if unit == "plain" else "unit"
    items = [(k * 7) % 2000 + 1 for k in range(reads)]
    if how == "text":
        return "".join(statement(f"SELECT * FROM {table} WHERE w = {w} AND i = {i}")
                       for i in items)
    custom = statement("SET plan_cache_mode = force_custom_plan") if how == "custom" else ""
    return custom + \
        statement(f"PREPARE q(int, int) AS SELECT * FROM {table} WHERE w = $1 AND i = $2") + \
        "".join(statement(f"EXECUTE q({w}, {i})") for i in items)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reads", type=int, default=100, help="N (the second run has 3N)")
    ap.add_argument("--migration", choices=sorted(SETUP), default="join")
    ap.add_argument("--keep", metavar="DIR", help="copy the callgrind files into DIR")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("unit_reads: needs valgrind (apt-get install valgrind)")
    cl, work = throwaway_cluster("leapfrog-reads-")
    try:
        cl.init().start()
        cl.wait_ready()
        with psycopg.connect(cl.conninfo(), autocommit=True) as c:
            c.execute("CREATE DATABASE reads")
        with psycopg.connect(cl.conninfo(dbname="reads"), autocommit=True) as c:
            c.execute("CREATE EXTENSION leapfrog")
            c.execute(SETUP[args.migration])
        cl.stop()
        per = {}
        files = []
        for how, unit in VARIANTS:
            n = {}
            for reads in (args.reads, 3 * args.reads):
                n[reads], f = run_single(cl, "reads", session(how, unit, reads), work,
                                         f"{how}_{unit}_{reads}")
                files.append(f)
            per[how, unit] = (n[3 * args.reads] - n[args.reads]) / (2 * args.reads)
        print(f"\ninstructions per read of one {args.migration} unit, {args.reads} and "
              f"{3 * args.reads} reads:")
        for how, unit in VARIANTS:
            print(f"  {how:9s} {unit:9s} {per[how, unit]:12,.0f}")
        keep_files(files, args.keep)
    finally:
        cl.destroy()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
