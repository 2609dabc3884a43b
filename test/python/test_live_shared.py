"""A live table read by two GROUP BY mappings, tracked in place with a table
of done keys each (src/live.c), under concurrent writers, readers of both
new tables, the background workers and kill -9.

`orders` stays live; `cust_total` groups it by customer and `day_total` by
day, so every order is in one group of each, and the two mappings' groups
cut across each other.  Writer threads update amounts, move orders to
another customer or day (or both), delete and insert orders (into existing
and new groups), and read either new table with `leapfrog.read_mode =
migrate`, which migrates that mapping's group only.  Invariants, checked
mid-migration (after a worker is killed) and at the end:

- a computing read of each new table (its rows plus the groups whose key is
  not in its mapping's table of done keys, on one snapshot) equals the
  eager aggregate of the orders as they were at start(): a group lost,
  migrated twice, computed from part of its rows or from later writes, or
  migrated into the wrong mapping shows as a difference;
- at the end, after complete(), both tables equal the eager aggregates, and
  the trigger and both tables of done keys are gone.
"""

import time

import psycopg
import pytest

from support import MOCK, ClientThreads, kill_workers, needs_real_extension, wait_until

N_ORDERS = 20000
N_CUST = 3000
N_DAYS = 400
SCRIPT = """
  CREATE TABLE cust_total (cust int PRIMARY KEY, n bigint NOT NULL, amt bigint NOT NULL);
  INSERT INTO cust_total SELECT cust, count(*), sum(amt) FROM orders GROUP BY cust;
  CREATE TABLE day_total (day int PRIMARY KEY, n bigint NOT NULL, amt bigint NOT NULL,
                          top int NOT NULL);
  INSERT INTO day_total SELECT day, count(*), sum(amt), max(amt) FROM orders
   WHERE amt % 10 <> 3 GROUP BY day HAVING count(*) > 2;
"""
EAGER = {
    "cust_total": "SELECT cust, count(*) AS n, sum(amt) AS amt FROM orders_start GROUP BY cust",
    "day_total": "SELECT day, count(*) AS n, sum(amt) AS amt, max(amt) AS top FROM orders_start "
                 "WHERE amt % 10 <> 3 GROUP BY day HAVING count(*) > 2",
}


def setup(make_cluster, script=SCRIPT, **gucs):
    c = make_cluster(**gucs)
    c.create_database("app")
    with c.connect("app") as conn:
        conn.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, cust int NOT NULL, "
                     "day int NOT NULL, amt int NOT NULL)")
        conn.execute("CREATE INDEX ON orders (cust)")
        conn.execute("CREATE INDEX ON orders (day)")
        conn.execute("INSERT INTO orders (cust, day, amt) SELECT (g * 7919) %% %s, g / 50, g %% 97 "
                     "FROM generate_series(1, %s) g", [N_CUST, N_ORDERS])
        conn.execute("CREATE TABLE orders_start AS SELECT * FROM orders")
        conn.execute("ANALYZE")
        conn.execute("SELECT leapfrog.start('totals', %s)", [script])
        keys = conn.execute("SELECT DISTINCT done_keys::regclass::text FROM leapfrog.mapping "
                            "WHERE done_keys IS NOT NULL ORDER BY 1").fetchall()
        assert len(keys) == 2, "orders is not tracked in place for both mappings: %r" % keys
    c.keys_tables = [k for (k,) in keys]
    return c


def writers(c, n, seed):
    """Threads writing orders and reading both new tables until stopped
    (support.py)."""
    def one(conn, rnd):
        oid = rnd.randint(1, N_ORDERS)
        kind = rnd.random()
        with conn.transaction():
            if kind < 0.2:
                conn.execute("UPDATE orders SET amt = amt + 1 WHERE id = %s", [oid])
            elif kind < 0.3:
                conn.execute("UPDATE orders SET cust = %s WHERE id = %s",
                             [rnd.randint(0, N_CUST + 50), oid])
            elif kind < 0.4:
                conn.execute("UPDATE orders SET day = %s, cust = %s WHERE id = %s",
                             [rnd.randint(0, N_DAYS + 5), rnd.randint(0, N_CUST), oid])
            elif kind < 0.5:
                conn.execute("DELETE FROM orders WHERE id = %s", [oid])
            elif kind < 0.6:
                conn.execute("INSERT INTO orders (cust, day, amt) VALUES (%s, %s, 1), (%s, %s, 2)",
                             [rnd.randint(0, N_CUST + 50), rnd.randint(0, N_DAYS + 5),
                              rnd.randint(0, N_CUST), rnd.randint(0, N_DAYS)])
            elif kind < 0.8:
                conn.execute("SELECT * FROM cust_total WHERE cust = %s",
                             [rnd.randint(0, N_CUST)]).fetchall()
            else:
                conn.execute("SELECT * FROM day_total WHERE day = %s",
                             [rnd.randint(0, N_DAYS)]).fetchall()

    # two writers claiming a customer and a day in turn can deadlock
    return ClientThreads(c, "app", n, seed, one,
                         setup=lambda conn: conn.execute("SET leapfrog.read_mode = migrate"),
                         tolerated=(psycopg.errors.DeadlockDetected,))


def diff(conn, table):
    return conn.execute(
        "(SELECT * FROM %s EXCEPT ALL (%s)) UNION ALL ((%s) EXCEPT ALL SELECT * FROM %s) LIMIT 10"
        % (table, EAGER[table], EAGER[table], table)).fetchall()


def check_eager(c):
    """Both new tables, read by computing, equal the eager aggregates at
    start(); returns how many groups each mapping has migrated."""
    with c.connect("app") as conn:
        conn.execute("SET leapfrog.read_mode = compute")
        for table in EAGER:
            d = diff(conn, table)
            assert d == [], "%s differs from the eager aggregate at start(): %r" % (table, d)
        return [conn.execute("SELECT count(*) FROM %s" % k).fetchone()[0] for k in c.keys_tables]


def left(c):
    rows = c.sql("SELECT leapfrog.remaining('totals') FROM leapfrog.migrations "
                 "WHERE name = 'totals' AND state = 'running'", dbname="app")
    return rows[0][0] if rows else 0


def test_two_group_mappings_of_one_live_table(make_cluster):
    needs_real_extension()
    if MOCK:
        pytest.skip("needs the real extension")
    c = setup(make_cluster, **{"leapfrog.background": "on",
                               "leapfrog.background_delay": 300,
                               "leapfrog.batch_size": 500,
                               "leapfrog.background_naptime": 200})
    start_left = left(c)
    assert start_left == 2 * N_ORDERS, "each row counts once per mapping: %d" % start_left
    clients = writers(c, 4, seed=11)
    clients.start()
    try:
        assert clients.wait_committed(100, 60), clients.errors_seen[:5]
        wait_until(lambda: left(c) <= start_left * 0.8, 120, interval=0.05,
                   what="a fifth of the rows migrated")
        done = check_eager(c)
        assert all(n > 0 for n in done), "a mapping migrated nothing: %r" % done
        before = left(c)
        assert before > 0, "migrated before the worker's kill: nothing to test"
        killed = kill_workers(c, "app")
        print("%d worker(s) killed with %d of %d rows left" % (killed, before, start_left))
        time.sleep(1)
        assert clients.wait_committed(100, 120), clients.errors_seen[:5]
        check_eager(c)
    finally:
        clients.stop()
    assert clients.errors_seen == [], clients.errors_seen[:5]
    check_eager(c)
    with c.connect("app") as conn:
        conn.execute("SELECT leapfrog.complete('totals')")
        for table in EAGER:
            d = diff(conn, table)
            assert d == [], "%s differs from the eager aggregate at start(): %r" % (table, d)
        wait_until(lambda: conn.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'orders'::regclass").fetchone()[0] == 0
            and all(conn.execute("SELECT to_regclass(%s)", [k]).fetchone()[0] is None
                    for k in c.keys_tables),
            60, what="the trigger and both tables of done keys dropped")


DROPPED_SCRIPT = SCRIPT + """
  CREATE TABLE orders_v2 (id bigint PRIMARY KEY, cust int NOT NULL, day int NOT NULL,
                          amt int NOT NULL);
  INSERT INTO orders_v2 SELECT id, cust, day, amt FROM orders;
  DROP TABLE orders;
"""


def test_dropped_table_of_two_group_mappings_survives_kill_postmaster(make_cluster):
    """The script drops orders and splits it into a copy and the two totals:
    orders is retired and tracked by keys (a table of done keys per GROUP BY
    mapping, the copy's rows moving with cust_total's groups, no trigger).
    Readers of the three tables (migrating reads) and the workers run; the
    postmaster is killed with SIGKILL mid-migration.  After the restart and
    at the end, the three tables equal the eager ones: a group or row lost,
    migrated twice, or a copy row migrated without its group's key (or the
    key without it) shows as a difference."""
    needs_real_extension()
    if MOCK:
        pytest.skip("needs the real extension")
    c = setup(make_cluster, script=DROPPED_SCRIPT,
              **{"leapfrog.background": "on", "leapfrog.background_delay": 300,
                 "leapfrog.batch_size": 300, "leapfrog.background_naptime": 200})
    eager = dict(EAGER, orders_v2="SELECT id, cust, day, amt FROM orders_start")

    def one(conn, rnd):
        kind = rnd.random()
        if kind < 0.4:
            conn.execute("SELECT * FROM orders_v2 WHERE id = %s",
                         [rnd.randint(1, N_ORDERS)]).fetchall()
        elif kind < 0.7:
            conn.execute("SELECT * FROM cust_total WHERE cust = %s",
                         [rnd.randint(0, N_CUST)]).fetchall()
        else:
            conn.execute("SELECT * FROM day_total WHERE day = %s",
                         [rnd.randint(0, N_DAYS)]).fetchall()

    def check():
        with c.connect("app") as conn:
            conn.execute("SET leapfrog.read_mode = compute")
            for table, q in eager.items():
                d = conn.execute("(SELECT * FROM %s EXCEPT ALL (%s)) UNION ALL "
                                 "((%s) EXCEPT ALL SELECT * FROM %s) LIMIT 10"
                                 % (table, q, q, table)).fetchall()
                assert d == [], "%s differs from the eager one at start(): %r" % (table, d)

    start_left = left(c)
    clients = ClientThreads(c, "app", 3, 23, one,
                            setup=lambda conn: conn.execute("SET leapfrog.read_mode = migrate"))
    clients.start()
    try:
        assert clients.wait_committed(100, 60), clients.errors_seen[:5]
        wait_until(lambda: left(c) <= start_left * 0.8, 120, interval=0.05,
                   what="a fifth of the rows migrated")
        check()
        before = left(c)
        assert before > 0, "migrated before the crash: nothing to test"
        c.kill_postmaster(restart=True)
        print("postmaster killed with %d of %d rows left" % (before, start_left))
        assert clients.wait_committed(100, 120), clients.errors_seen[:5]
        check()
    finally:
        clients.stop()
    assert clients.errors_seen == [], clients.errors_seen[:5]
    with c.connect("app") as conn:
        conn.execute("SELECT leapfrog.complete('totals')")
    check()
    with c.connect("app") as conn:
        wait_until(lambda: all(conn.execute("SELECT to_regclass(%s)", [k]).fetchone()[0] is None
                               for k in c.keys_tables)
                   and conn.execute("SELECT count(*) FROM pg_class WHERE relnamespace = "
                                    "'leapfrog_retired'::regnamespace AND relname LIKE '%%orders'"
                                    ).fetchone()[0] == 0,
                   60, what="the retired table and both tables of done keys dropped")
