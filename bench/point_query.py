#!/usr/bin/env python3
"""What a point query costs on a table under migration.

    .venv/bin/python bench/point_query.py [--migration row|group|group2] [--rows 2000000]
                                          [--rounds 5] [--seconds 4]

On a throwaway cluster (the benchmark suite's settings, background workers
off so nothing moves but what the queries move), a table of N rows is
migrated from int to bigint keys (a 1:1 mapping: the new table is empty at
start(), every row is in the retired table).  The first M = N/10 rows are
migrated beforehand by one UPDATE.  A plain table with the same rows and no
migration is the reference.  Each round runs, for 4 s each, one pgbench
client (-M prepared) per variant, interleaved:

  plain      the query on the plain table, random keys
  migrated   the query on the new table, keys 1..M (already migrated)
  first      the query on the new table, keys M+1..N: the row is not
             migrated yet (almost always: the pool is large enough that
             repeats are rare; the run reports how many rows the variant
             actually moved)

for three queries: a SELECT by key (which computes the row, the default
leapfrog.read_mode), the same SELECT with read_mode = migrate (which moves
it), and an UPDATE by key (which moves it).  It prints per round the mean
latency of each variant and first/migrated and first/plain, then the
medians of the per-round ratios with their spread.  Not a test: figures.

--migration group does the same for a GROUP BY mapping whose input stays
live (tracked in place, as the TPC-C aggregate's order_line): N lines in
N/10 groups of ten, totals(g, total) = sum of a group's amounts.  A
"row" is then a group: the SELECT and UPDATE go to totals by group key,
and a fourth query updates one line of the group (the live input's
trigger migrates the group first, as TPC-C's Delivery does).

--migration group2 adds a second GROUP BY mapping of the same lines,
htotals(h, total), by another key (h: a hundred lines of ten groups g
scattered over the table), so the live input is tracked with a table of
done keys per mapping: its trigger migrates a written line's group in
both, and a query on totals migrates (or computes) totals' groups only.
Against --migration group, the cost of the second mapping.
"""
import argparse
import re
import statistics
from pathlib import Path
import sys

from run import ensure_venv  # noqa: E402  (run.py, beside this file, also finds python/)

ensure_venv()

import psycopg  # noqa: E402

from leapfrog_cluster import Cluster, extension_installed  # noqa: E402

from leapfrog_bench.settings import default_settings  # noqa: E402

DB = "pointq"
ROW_SCRIPT = """
  CREATE TABLE acct2 (id bigint PRIMARY KEY, bal bigint NOT NULL, note text NOT NULL);
  INSERT INTO acct2 SELECT id, bal, note FROM acct;
  DROP TABLE acct;
  ALTER TABLE acct2 RENAME TO acct;
"""
MIGRATE = {"PGOPTIONS": "-c leapfrog.read_mode=migrate"}
ROW_QUERIES = {
    "select": ("SELECT bal, note FROM {t} WHERE id = :id;", {}),
    "select_migrate": ("SELECT bal, note FROM {t} WHERE id = :id;", MIGRATE),
    "update": ("UPDATE {t} SET bal = bal + 1 WHERE id = :id;", {}),
}
GROUP_SCRIPT = """
  CREATE TABLE totals (g int PRIMARY KEY, total bigint);
  INSERT INTO totals SELECT g, sum(amt) FROM lines GROUP BY g;
"""
GROUP2_SCRIPT = GROUP_SCRIPT + """
  CREATE TABLE htotals (h int PRIMARY KEY, total bigint);
  INSERT INTO htotals SELECT h, sum(amt) FROM lines GROUP BY h;
"""
# {t}: the totals table, {l}: its input
GROUP_QUERIES = {
    "select": ("SELECT total FROM {t} WHERE g = :id;", {}),
    "select_migrate": ("SELECT total FROM {t} WHERE g = :id;", MIGRATE),
    "update": ("UPDATE {t} SET total = total + 1 WHERE g = :id;", {}),
    "update_line": ("UPDATE {l} SET amt = amt + 1 WHERE g = :id AND n = 1;", {}),
}


def setup_rows(c, n):
    for t in ("acct", "plain"):
        c.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, bal int NOT NULL, note text NOT NULL)")
        c.execute(f"INSERT INTO {t} SELECT g, g, md5(g::text) FROM generate_series(1, %s) g",
                  (n,))
        c.execute(f"VACUUM ANALYZE {t}")
    c.execute("SELECT leapfrog.start('pointq', %s)", (ROW_SCRIPT,))
    c.execute("UPDATE acct SET bal = bal WHERE id <= %s", (n // 10,))
    c.execute("ANALYZE acct")


def setup_groups(c, n, two):
    """n lines in n/10 groups; returns the number of groups.  two: a second
    GROUP BY mapping, by h (n/100 groups)."""
    groups = n // 10
    for t in ("lines", "plain_lines"):
        c.execute(f"CREATE TABLE {t} (g int NOT NULL, n int NOT NULL, amt int NOT NULL, "
                  "h int NOT NULL, PRIMARY KEY (g, n))")
        c.execute(f"INSERT INTO {t} SELECT g, n, g + n, (g * 7919) %% %s "
                  "FROM generate_series(1, %s) g, generate_series(1, 10) n ORDER BY g, n",
                  (max(groups // 10, 1), groups))
        if two:
            c.execute(f"CREATE INDEX ON {t} (h)")
        c.execute(f"VACUUM ANALYZE {t}")
    c.execute("CREATE TABLE plain (g int PRIMARY KEY, total bigint)")
    c.execute("INSERT INTO plain SELECT g, sum(amt) FROM plain_lines GROUP BY g")
    c.execute("VACUUM ANALYZE plain")
    c.execute("SELECT leapfrog.start('pointq', %s)", (GROUP2_SCRIPT if two else GROUP_SCRIPT,))
    # a tenth of the groups migrated, by writes of a column they read (an
    # update that changes none migrates nothing), the amounts left as they were
    for delta in ("+ 1", "- 1"):
        c.execute(f"UPDATE lines SET amt = amt {delta} WHERE g <= %s AND n = 1", (groups // 10,))
    c.execute("ANALYZE totals")
    return groups


def setup(cl, n, migration):
    """Returns the number of keys (rows or groups) and the queries."""
    with psycopg.connect(cl.conninfo(), autocommit=True) as c:
        c.execute(f"CREATE DATABASE {DB}")
    with psycopg.connect(cl.conninfo(DB), autocommit=True) as c:
        c.execute("CREATE EXTENSION leapfrog")
        if migration == "row":
            keys, queries = n, ROW_QUERIES
            setup_rows(c, n)
        else:
            keys, queries = setup_groups(c, n, migration == "group2"), GROUP_QUERIES
        c.execute("CHECKPOINT")
    return keys, queries


def remaining(cl):
    with psycopg.connect(cl.conninfo(DB), autocommit=True) as c:
        return c.execute("SELECT leapfrog.remaining('pointq')").fetchone()[0]


def pgbench(cl, sql, lo, hi, seconds, env=None, db=DB):
    """Mean latency in microseconds of one client running sql for `seconds`
    on database db, :id drawn from [lo, hi]."""
    path = Path(cl.dir) / "pointq.sql"
    path.write_text(f"\\set id random({lo}, {hi})\n{sql}\n")
    path.chmod(0o644)
    args = ["-n", "-M", "prepared", "-c", "1", "-T", str(seconds), "-f", str(path), db]
    res = cl.run_client("pgbench", args, timeout=seconds + 60, extra_env=env)
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", res.stdout)
    if not m:
        raise RuntimeError("pgbench: no tps in its output:\n" + res.stdout + res.stderr)
    return 1e6 / float(m.group(1))


def spread(xs):
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--migration", choices=["row", "group", "group2"], default="row",
                    help="row: a 1:1 mapping (default); group: a GROUP BY mapping of a live "
                         "input; group2: two GROUP BY mappings of it")
    ap.add_argument("--rows", type=int,
                    help="rows (row) or lines (group); default 2M and 10M: the pool of keys "
                         "not migrated must outlast the rounds")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=4)
    args = ap.parse_args()
    if not extension_installed():
        sys.exit("point_query: the leapfrog extension is not installed (make install)")
    settings = default_settings()
    settings["leapfrog.background"] = "off"
    with Cluster(settings=settings, preload=True) as cl:
        cl.wait_ready()
        rows = args.rows or {"row": 2_000_000}.get(args.migration, 10_000_000)
        n, queries = setup(cl, rows, args.migration)
        m = n // 10
        ratios = {q: {"first/migrated": [], "first/plain": [], "migrated/plain": []}
                  for q in queries}
        moved = {q: 0 for q in queries}
        new = dict(t="acct") if args.migration == "row" else dict(t="totals", l="lines")
        plain = dict(t="plain") if args.migration == "row" else dict(t="plain", l="plain_lines")
        for r in range(args.rounds):
            for q, (sql, env) in queries.items():
                before = remaining(cl)
                lat = {
                    "plain": pgbench(cl, sql.format(**plain), 1, n, args.seconds, env),
                    "migrated": pgbench(cl, sql.format(**new), 1, m, args.seconds, env),
                }
                left = remaining(cl)
                lat["first"] = pgbench(cl, sql.format(**new), m + 1, n, args.seconds, env)
                moved[q] += left - remaining(cl)
                assert before == left, "queries on migrated rows moved rows"
                ratios[q]["first/migrated"].append(lat["first"] / lat["migrated"])
                ratios[q]["first/plain"].append(lat["first"] / lat["plain"])
                ratios[q]["migrated/plain"].append(lat["migrated"] / lat["plain"])
                print(f"round {r + 1} {q:15s} plain {lat['plain']:7.1f} us  migrated "
                      f"{lat['migrated']:7.1f} us  first {lat['first']:7.1f} us  "
                      f"first/migrated {lat['first'] / lat['migrated']:.2f}", flush=True)
    unit = "rows" if args.migration == "row" else "groups of 10 lines"
    print(f"\nmedians over {args.rounds} rounds (min-max), {n} {unit}, {m} migrated beforehand:")
    for q in queries:
        print(f"  {q:15s} " + "  ".join(f"{k} {spread(v)}" for k, v in ratios[q].items())
              + f"  (input rows moved by 'first': {moved[q]})")


if __name__ == "__main__":
    main()
