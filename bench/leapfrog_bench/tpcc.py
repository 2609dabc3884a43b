"""TPC-C schema, a fast set-based loader, and the transactions.

The loader runs INSERT ... SELECT over generate_series, one warehouse per
task, on as many connections as there are cores; random strings are slices
of one fixed random pool, cut as bytea (O(1) offsets; text substr walks
UTF-8 characters from the start), then validated as UTF-8.  Indexes are
built after the load, then VACUUM ANALYZE.
"""
import os
import queue
import random
import string
import threading
import time
import zlib

import psycopg

SQL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sql")

# pgbench scripts: file name, weight (the TPC-C mix), function
MIX = [
    ("new_order", 45, "tpcc_new_order"),
    ("payment", 43, "tpcc_payment"),
    ("order_status", 4, "tpcc_order_status"),
    ("delivery", 4, "tpcc_delivery"),
    ("stock_level", 4, "tpcc_stock_level"),
]
NEW_ORDER_SCRIPT_NO = 0


def read_sql(*parts):
    with open(os.path.join(SQL_DIR, *parts)) as f:
        return f.read()


def _pool():
    rnd = random.Random(20240601)
    alphabet = string.ascii_letters + string.digits
    return "".join(rnd.choice(alphabet) for _ in range(2000))


def load_helpers_sql():
    return f"""
CREATE FUNCTION tpcc_rs(lo int, hi int) RETURNS text
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT convert_from(substring('\\x{_pool().encode().hex()}'::bytea
                                 FROM 1 + floor(random() * 1000)::int
                                 FOR lo + floor(random() * (hi - lo + 1))::int), 'UTF8')
$$;
CREATE FUNCTION tpcc_rdata() RETURNS text
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT CASE WHEN random() < 0.1 THEN tpcc_rs(18, 42) || 'ORIGINAL' ELSE tpcc_rs(26, 50) END
$$;
CREATE FUNCTION tpcc_rzip() RETURNS text
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT lpad(floor(random() * 10000)::int::text, 4, '0') || '11111'
$$;
"""


def _addr(prefix):
    return (f"tpcc_rs(10, 20), tpcc_rs(10, 20), tpcc_rs(10, 20), "
            f"upper(tpcc_rs(2, 2)), tpcc_rzip()")


def load_tasks(W):
    """(name, [sql...]) tasks; each task's statements run in order on one
    connection, tasks run in parallel."""
    tasks = [("item", [f"""
INSERT INTO item SELECT i, tpcc_rand(1, 10000), tpcc_rs(14, 24), tpcc_rand(100, 10000) / 100.0, tpcc_rdata()
  FROM generate_series(1, 100000) i"""]),
             ("warehouse+district", [f"""
INSERT INTO warehouse SELECT w, tpcc_rs(6, 10), {_addr('w')}, tpcc_rand(0, 2000) / 10000.0, 300000
  FROM generate_series(1, {W}) w""", f"""
INSERT INTO district SELECT d, w, tpcc_rs(6, 10), {_addr('d')}, tpcc_rand(0, 2000) / 10000.0, 30000, 3001
  FROM generate_series(1, {W}) w, generate_series(1, 10) d"""])]
    for w in range(1, W + 1):
        tasks.append((f"stock w={w}", [f"""
INSERT INTO stock SELECT i, {w}, tpcc_rand(10, 100),
       tpcc_rs(24, 24), tpcc_rs(24, 24), tpcc_rs(24, 24), tpcc_rs(24, 24), tpcc_rs(24, 24),
       tpcc_rs(24, 24), tpcc_rs(24, 24), tpcc_rs(24, 24), tpcc_rs(24, 24), tpcc_rs(24, 24),
       0, 0, 0, tpcc_rdata()
  FROM generate_series(1, 100000) i"""]))
        tasks.append((f"customer+history w={w}", [f"""
INSERT INTO customer SELECT c, d, {w}, tpcc_rs(8, 16), 'OE',
       tpcc_lastname(CASE WHEN c <= 1000 THEN c - 1 ELSE tpcc_nurand(255, 0, 999, 157) END),
       {_addr('c')}, lpad(floor(random() * 1e16)::bigint::text, 16, '0'), now(),
       CASE WHEN random() < 0.1 THEN 'BC' ELSE 'GC' END, 50000, tpcc_rand(0, 5000) / 10000.0,
       -10, 10, 1, 0, tpcc_rs(300, 500)
  FROM generate_series(1, 10) d, generate_series(1, 3000) c""", f"""
INSERT INTO history SELECT c, d, {w}, d, {w}, now(), 10.00, tpcc_rs(12, 24)
  FROM generate_series(1, 10) d, generate_series(1, 3000) c"""]))
        tasks.append((f"orders+order_line+new_order w={w}", [f"""
INSERT INTO orders
SELECT o, d, {w}, c, now(), CASE WHEN o < 2101 THEN tpcc_rand(1, 10) END, tpcc_rand(5, 15), 1
  FROM (SELECT d, o, row_number() OVER (PARTITION BY d ORDER BY random()) AS c
          FROM generate_series(1, 10) d, generate_series(1, 3000) o) x""", f"""
INSERT INTO order_line
SELECT o.o_id, o.o_d_id, o.o_w_id, n, tpcc_rand(1, 100000), o.o_w_id,
       CASE WHEN o.o_id < 2101 THEN o.o_entry_d END, 5,
       CASE WHEN o.o_id < 2101 THEN 0 ELSE tpcc_rand(1, 999999) / 100.0 END, tpcc_rs(24, 24)
  FROM orders o, generate_series(1, o.o_ol_cnt) n
 WHERE o.o_w_id = {w}""", f"""
INSERT INTO new_order SELECT o, d, {w} FROM generate_series(1, 10) d, generate_series(2101, 3000) o"""]))
    return tasks


def _parallel(conninfo, tasks, workers, log, what, seed=None):
    """Run the tasks on `workers` connections; with a seed, each task first
    seeds random() from it and its name, so the data does not depend on
    which connection runs it."""
    q = queue.Queue()
    for t in tasks:
        q.put(t)
    errors = []

    def worker():
        try:
            with psycopg.connect(conninfo, autocommit=True) as c:
                while True:
                    try:
                        name, stmts = q.get_nowait()
                    except queue.Empty:
                        return
                    if seed is not None:
                        c.execute("SELECT setseed(%s)",
                                  (zlib.crc32(f"{seed}:{name}".encode()) / 2**32,))
                    for s in stmts:
                        c.execute(s)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    t0 = time.time()
    ths = [threading.Thread(target=worker) for _ in range(workers)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    if errors:
        raise errors[0]
    log(f"  {what}: {time.time() - t0:.1f}s")


def create_template(cluster, dbname, W, workers=2, leapfrog=False, log=print, seed=None):
    """Create database `dbname` holding a loaded TPC-C of W warehouses with the
    original-schema transactions; returns load statistics.  With a seed, the
    same rows every time (each load task seeds random())."""
    t0 = time.time()
    with psycopg.connect(cluster.conninfo(), autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {dbname}")
        c.execute(f"CREATE DATABASE {dbname}")
    ci = cluster.conninfo(dbname)
    with psycopg.connect(ci, autocommit=True) as c:
        c.execute(read_sql("schema.sql"))
        c.execute(load_helpers_sql())
    log(f"loading TPC-C W={W} into {dbname} ({workers} connections)")
    _parallel(ci, load_tasks(W), workers, log, "load", seed=seed)
    idx = [(s, [s]) for s in read_sql("indexes.sql").split(";\n") if s.strip()]
    # biggest first
    order = ["order_line", "stock", "customer", "orders", "history", "new_order"]
    idx.sort(key=lambda t: next((i for i, n in enumerate(order) if n in t[0]), 99))
    _parallel(ci, idx, workers, log, "indexes")
    tables = ["order_line", "stock", "customer", "orders", "history", "new_order",
              "item", "district", "warehouse"]
    _parallel(ci, [(t, [f"VACUUM (ANALYZE) {t}"]) for t in tables], workers, log, "vacuum analyze")
    with psycopg.connect(ci, autocommit=True) as c:
        c.execute(read_sql("tx_base.sql"))
        c.execute(read_sql("tx_wrappers.sql"))
        c.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        if leapfrog:
            c.execute("CREATE EXTENSION IF NOT EXISTS leapfrog")
        rows = {}
        for t in ("customer", "order_line", "stock", "orders"):
            rows[t] = c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        size = c.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        c.execute("CHECKPOINT")
    stats = {"warehouses": W, "rows": rows, "db_bytes": size, "load_s": round(time.time() - t0, 1)}
    log(f"  loaded in {stats['load_s']}s, {size / 2**30:.2f} GiB, rows {rows}")
    return stats


def create_schema_only(cluster, dbname, leapfrog=False):
    """Empty TPC-C schema with indexes and code (to probe leapfrog.start)."""
    with psycopg.connect(cluster.conninfo(), autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {dbname}")
        c.execute(f"CREATE DATABASE {dbname}")
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as c:
        c.execute(read_sql("schema.sql"))
        c.execute(read_sql("indexes.sql"))
        c.execute(read_sql("tx_base.sql"))
        c.execute(read_sql("tx_wrappers.sql"))
        if leapfrog:
            c.execute("CREATE EXTENSION IF NOT EXISTS leapfrog")


def write_pgbench_scripts(dirpath):
    """One pgbench script per transaction; `nw` (warehouses) comes from -D."""
    os.makedirs(dirpath, exist_ok=True)
    args = []
    for name, weight, fn in MIX:
        p = os.path.join(dirpath, f"{name}.sql")
        with open(p, "w") as f:
            f.write("\\set w_id random(1, :nw)\n")
            f.write(f"SELECT {fn}(:w_id, :nw);\n")
        args += ["-f", f"{p}@{weight}"]
    return args
