"""A table read by a join mapping and a GROUP BY mapping, both tables kept
live, under writers, migrating readers, the background workers and kill -9.

`line` is joined with `stock` on the item (`line_stock`) and summed per
order (`total`); both tables stay, so each is replaced lazily, and their
retired versions are tracked by keys: a table of done keys for the join
(an item: its stock row and all its lines) and one for the GROUP BY (an
order), nothing deleted (src/start.c, track_shared_retired).  The live
copies' rows move with the join's keys.  Each writer transaction adds 1 to
a line's amount and to a stock row's quantity, and logs itself in `wlog`,
in one transaction; readers read either new table by key, migrating.
Invariants, after each crash and at the end:

- a computing read of each new table equals the eager run at start():
  a unit lost, migrated twice, computed from part of its rows or from a
  later write shows as a difference;
- the live copies hold every row once, and their sums moved by exactly the
  logged writes: a row copied twice, or a write lost or applied to a row
  copied after it, shows in a count or a sum.

With nulls, a line in 40 has no item (a NULL join key): those lines are
one unit of the join, NULL keys equal (src/leapfrog.h, LF_KEY_SIZE).
"""

import time

import psycopg
import pytest

from support import MOCK, ClientThreads, kill_midway, needs_real_extension, wait_until

N_ORDERS = 12000
N_ITEMS = 20000
SCRIPT = """
  CREATE TABLE line_stock AS
    SELECT l.o, l.n, l.i, l.amt, s.qty FROM line l LEFT JOIN stock s ON s.i = l.i;
  CREATE TABLE total AS SELECT o, count(*) AS n, sum(amt) AS amt FROM line GROUP BY o;
"""
EAGER = {
    "line_stock": "SELECT l.o, l.n, l.i, l.amt, s.qty FROM line_start l "
                  "LEFT JOIN stock_start s ON s.i = l.i",
    "total": "SELECT o, count(*) AS n, sum(amt) AS amt FROM line_start GROUP BY o",
}


@pytest.mark.parametrize("nulls", [False, True], ids=["not_null", "null_items"])
def test_join_and_group_of_live_tables_survive_kill(make_cluster, nulls):
    needs_real_extension()
    if MOCK:
        pytest.skip("needs the real extension")
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 300,
                        "leapfrog.batch_size": 100, "leapfrog.background_naptime": 300})
    c.create_database("app")
    with c.connect("app") as conn:
        conn.execute("CREATE TABLE line (o int NOT NULL, n int NOT NULL, i int%s, "
                     "amt int NOT NULL, PRIMARY KEY (o, n))" % ("" if nulls else " NOT NULL"))
        conn.execute("CREATE INDEX ON line (i)")
        conn.execute("CREATE TABLE stock (i int PRIMARY KEY, qty int NOT NULL)")
        # items above N_ITEMS - 100 have no stock row; an order's lines are
        # scattered over the items, an item's lines over the table
        conn.execute("INSERT INTO stock SELECT i, i %% 50 FROM generate_series(1, %s) i",
                     [N_ITEMS - 100])
        conn.execute("INSERT INTO line SELECT o, n, CASE WHEN %s AND (o + n) %% 40 = 0 THEN NULL "
                     "ELSE 1 + (o * 7 + n * 131) %% %s END, (o + n) %% 97 "
                     "FROM generate_series(1, %s) o, generate_series(1, 4) n",
                     [nulls, N_ITEMS, N_ORDERS])
        if nulls:
            assert conn.execute("SELECT count(*) FROM line WHERE i IS NULL").fetchone()[0] > 1000
        conn.execute("CREATE TABLE line_start AS SELECT * FROM line")
        conn.execute("CREATE TABLE stock_start AS SELECT * FROM stock")
        conn.execute("CREATE TABLE wlog (id bigserial PRIMARY KEY, o int, n int, i int)")
        conn.execute("ANALYZE")
        conn.execute("SELECT leapfrog.start('sj', %s)", [SCRIPT])
        keys = conn.execute("SELECT count(DISTINCT done_keys) FROM leapfrog.mapping "
                            "WHERE done_keys IS NOT NULL").fetchone()[0]
        assert keys == 2, "not tracked by keys for the join and the GROUP BY: %r" % keys
    n_lines = N_ORDERS * 4
    start_left = 2 * n_lines + (N_ITEMS - 100)

    def one(conn, rnd):
        o, n, i = rnd.randint(1, N_ORDERS), rnd.randint(1, 4), rnd.randint(1, N_ITEMS - 100)
        kind = rnd.random()
        with conn.transaction():
            if kind < 0.6:
                conn.execute("UPDATE line SET amt = amt + 1 WHERE o = %s AND n = %s", [o, n])
                conn.execute("UPDATE stock SET qty = qty + 1 WHERE i = %s", [i])
                conn.execute("INSERT INTO wlog (o, n, i) VALUES (%s, %s, %s)", [o, n, i])
            elif kind < 0.8:
                conn.execute("SELECT * FROM line_stock WHERE o = %s", [o]).fetchall()
            else:
                conn.execute("SELECT * FROM total WHERE o = %s", [o]).fetchall()
        # paced, so that the workers' share of the migration lasts past both crashes
        time.sleep(0.01)

    def check():
        with c.connect("app") as conn:
            conn.execute("SET leapfrog.read_mode = compute")
            for t, q in EAGER.items():
                diff = conn.execute(
                    "(SELECT * FROM {t} EXCEPT ALL ({q})) UNION ALL "
                    "(({q}) EXCEPT ALL SELECT * FROM {t}) LIMIT 10".format(t=t, q=q)).fetchall()
                assert diff == [], "%s differs from the eager run at start(): %r" % (t, diff)
            got = conn.execute(
                "SELECT (SELECT count(*) FROM line), (SELECT count(DISTINCT (o, n)) FROM line), "
                "(SELECT sum(amt) FROM line) - (SELECT sum(amt) FROM line_start), "
                "(SELECT count(*) FROM stock), (SELECT count(DISTINCT i) FROM stock), "
                "(SELECT sum(qty) FROM stock) - (SELECT sum(qty) FROM stock_start), "
                "(SELECT count(*) FROM wlog)").fetchone()
            writes = got[6]
            assert got == (n_lines, n_lines, writes, N_ITEMS - 100, N_ITEMS - 100, writes, writes), \
                "the live copies lost or doubled a row or a write: %r" % (got,)

    def rows_left():
        r = c.sql("SELECT leapfrog.remaining('sj') FROM leapfrog.migrations "
                  "WHERE name = 'sj' AND state = 'running'", dbname="app")
        return r[0][0] if r else 0

    assert rows_left() == start_left, "each row counts once per mapping: %d" % rows_left()
    # a reader and a writer meeting an item and an order in opposite orders
    clients = ClientThreads(c, "app", 4, 5, one,
                            setup=lambda conn: conn.execute("SET leapfrog.read_mode = migrate"),
                            tolerated=(psycopg.errors.DeadlockDetected,))
    clients.start()
    try:
        kill_midway(c, "app", clients, rows_left, check, start_left)
    finally:
        clients.stop()
    assert clients.errors_seen == [], clients.errors_seen[:5]
    with c.connect("app") as conn:
        conn.execute("SELECT leapfrog.complete('sj')")
    check()
    with c.connect("app") as conn:
        wait_until(lambda: conn.execute(
            "SELECT count(*) FROM pg_class WHERE relnamespace = 'leapfrog_retired'::regnamespace"
        ).fetchone()[0] == 0, 60, what="the retired tables and the tables of done keys dropped")
