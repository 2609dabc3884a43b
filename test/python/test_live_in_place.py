"""A live input tracked in place (src/live.c) under concurrent writers, the
background worker and kill -9.

`lines` stays live and `total` aggregates it (GROUP BY o, NOT NULL key).
Writer threads update, delete and insert lines (inserts into existing and
into new orders) and read totals, while the worker migrates; the postmaster,
then a worker, are killed with SIGKILL mid-migration.  Invariants, checked
after each crash with nobody migrating and at the end:

- every key in the table of done keys has exactly the total row eager
  computed at start() (or none, for an order that did not exist at start or
  a group the HAVING left out), and every total row has its key: a group
  migrated exactly once, whole, durable with its key;
- at the end, total equals the eager aggregate of the lines as they were at
  start(), whatever the writers did to the lines afterwards, and the trigger
  and the table of done keys are gone.
"""


import psycopg
import pytest

from support import MOCK, ClientThreads, kill_midway, needs_real_extension, wait_until

N_ORDERS = 6000
SCRIPT = """
  CREATE TABLE total (o int PRIMARY KEY, n bigint NOT NULL, amt bigint NOT NULL);
  INSERT INTO total SELECT o, count(*), sum(amt) FROM lines GROUP BY o HAVING sum(amt) > 3;
"""


def setup(make_cluster, **gucs):
    c = make_cluster(**gucs)
    c.create_database("app")
    with c.connect("app") as conn:
        conn.execute("CREATE TABLE lines (id bigserial PRIMARY KEY, o int NOT NULL, amt int)")
        conn.execute("CREATE INDEX lines_o ON lines (o)")
        conn.execute("INSERT INTO lines (o, amt) SELECT o, (o * 7 + n) %% 50 "
                     "FROM generate_series(1, %s) o, generate_series(1, 1 + o %% 9) n",
                     [N_ORDERS])
        conn.execute("CREATE TABLE eager_total AS SELECT o, count(*) AS n, sum(amt) AS amt "
                     "FROM lines GROUP BY o HAVING sum(amt) > 3")
        conn.execute("ANALYZE")
        conn.execute("SELECT leapfrog.start('live_total', %s)", [SCRIPT])
        keys = conn.execute("SELECT done_keys::regclass::text FROM leapfrog.mapping "
                            "WHERE done_keys IS NOT NULL").fetchall()
        assert len(keys) == 1, "lines is not tracked in place: %r" % keys
    c.keys_table = keys[0][0]
    return c


def line_writers(c, n, seed):
    """Threads writing lines and reading totals until stopped (support.py)."""
    def one(conn, rnd):
        o = rnd.randint(1, N_ORDERS + 500)       # some orders are new
        kind = rnd.random()
        with conn.transaction():
            if kind < 0.35:
                conn.execute("UPDATE lines SET amt = amt + 1 WHERE o = %s", [o])
            elif kind < 0.5:
                conn.execute("DELETE FROM lines WHERE id = (SELECT min(id) FROM lines "
                             "WHERE o = %s)", [o])
            elif kind < 0.7:
                conn.execute("INSERT INTO lines (o, amt) VALUES (%s, 5), (%s, 6)", [o, o])
            elif kind < 0.8:
                conn.execute("UPDATE lines SET o = %s WHERE id = (SELECT min(id) FROM lines "
                             "WHERE o = %s)", [rnd.randint(1, N_ORDERS), o])
            else:
                conn.execute("SELECT * FROM total WHERE o = %s", [o]).fetchall()

    # two writers moving lines across orders can deadlock
    return ClientThreads(c, "app", n, seed, one,
                         tolerated=(psycopg.errors.SerializationFailure,
                                    psycopg.errors.DeadlockDetected))


def check_exactly_once(c):
    """The eager answer, mid-migration: a computing read of total (its rows
    plus the groups whose key is not in the table of done keys, on one
    snapshot) equals the eager aggregate at start().  A group lost (key
    without its row), migrated twice or without its key (its row and its
    computed row), or computed from part of its lines or from later writes
    shows as a difference."""
    with c.connect("app") as conn:
        conn.execute("SET leapfrog.read_mode = compute")
        diff = conn.execute(
            "(SELECT * FROM total EXCEPT ALL SELECT * FROM eager_total) UNION ALL "
            "(SELECT * FROM eager_total EXCEPT ALL SELECT * FROM total) LIMIT 10").fetchall()
        migrated = conn.execute("SELECT count(*) FROM %s" % c.keys_table).fetchone()[0]
    assert diff == [], "total differs from the eager aggregate at start(): %r" % diff
    return migrated


def final_check(c):
    with c.connect("app") as conn:
        conn.execute("SELECT leapfrog.complete('live_total')")
        diff = conn.execute(
            "(SELECT * FROM total EXCEPT ALL SELECT * FROM eager_total) UNION ALL "
            "(SELECT * FROM eager_total EXCEPT ALL SELECT * FROM total) LIMIT 10").fetchall()
        assert diff == [], "total differs from the eager aggregate at start(): %r" % diff
        wait_until(lambda: conn.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'lines'::regclass").fetchone()[0] == 0
            and conn.execute("SELECT to_regclass(%s)", [c.keys_table]).fetchone()[0] is None,
            60, what="the trigger and the table of done keys dropped")


def left(c):
    return c.sql("SELECT leapfrog.remaining('live_total') FROM leapfrog.migrations "
                 "WHERE name = 'live_total' AND state = 'running'", dbname="app")


def test_live_in_place_survives_kill_postmaster_and_worker(make_cluster):
    needs_real_extension()
    if MOCK:
        pytest.skip("needs the real extension")
    c = setup(make_cluster, **{"leapfrog.background": "on",
                               "leapfrog.background_delay": 300,
                               "leapfrog.batch_size": 300,
                               "leapfrog.background_naptime": 200})
    total_rows = c.sql("SELECT count(*) FROM lines", dbname="app")[0][0]
    writers = line_writers(c, 4, seed=7)

    def check():
        # from the first check on, the worker has migrated groups
        assert check_exactly_once(c) > 0

    writers.start()
    try:
        kill_midway(c, "app", writers, lambda: (left(c) or [[0]])[0][0], check, total_rows)
    finally:
        writers.stop()
    assert writers.errors_seen == [], writers.errors_seen[:5]
    check_exactly_once(c)
    final_check(c)


def test_worker_migrates_clustered_and_scattered_groups(make_cluster):
    """The worker's batches claim the keys of a block range, then look the
    groups they got up through the key index: where the table was filled in
    key order (`near`, a two-column key with a text column), and where its
    keys are scattered over every block (`far`), with groups a session
    migrated first among them.  Before start(), rows were updated in place
    (HOT chains: the index entry points at the chain's root, which the
    look-up must follow to the row), moved to another group (a dead entry
    under the old key) and deleted.  Each total must equal the eager
    aggregate at start()."""
    needs_real_extension()
    if MOCK:
        pytest.skip("needs the real extension")
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 2000,
                        "leapfrog.batch_size": 700})
    c.create_database("app")
    script = """
      CREATE TABLE near_sum AS SELECT r, o, count(*) AS n, sum(v) AS v FROM near GROUP BY r, o;
      CREATE TABLE far_sum AS SELECT k, count(*) AS n, sum(v) AS v FROM far GROUP BY k;
    """
    with c.connect("app") as conn:
        conn.execute("CREATE TABLE near (r text NOT NULL, o int NOT NULL, v int) "
                     "WITH (fillfactor = 60)")
        conn.execute("INSERT INTO near SELECT 'region ' || r, o, r * o + n "
                     "FROM generate_series(1, 4) r, generate_series(1, 1500) o, "
                     "generate_series(1, 1 + o % 5) n ORDER BY 1, 2")
        conn.execute("CREATE INDEX ON near (r, o)")
        conn.execute("CREATE TABLE far (k int NOT NULL, v int) WITH (fillfactor = 60)")
        conn.execute("INSERT INTO far SELECT (g * 7919) % 5000, g FROM generate_series(1, 30000) g")
        conn.execute("CREATE INDEX ON far (k)")
        for t in ("near", "far"):
            conn.execute("UPDATE {t} SET v = v + 1 WHERE v % 3 = 0".format(t=t))
            conn.execute("DELETE FROM {t} WHERE v % 11 = 0".format(t=t))
        conn.execute("UPDATE near SET o = o + 1 WHERE v % 7 = 0")
        conn.execute("UPDATE far SET k = (k + 1) % 5000 WHERE v % 7 = 0")
        conn.execute("SELECT pg_stat_force_next_flush()")
        hot = conn.execute("SELECT sum(n_tup_hot_upd) FROM pg_stat_user_tables "
                           "WHERE relname IN ('near', 'far')").fetchone()[0]
        assert hot > 1000, "too few rows updated in place (HOT): %s" % hot
        conn.execute("CREATE TABLE near_eager AS SELECT r, o, count(*) AS n, sum(v) AS v "
                     "FROM near GROUP BY r, o")
        conn.execute("CREATE TABLE far_eager AS SELECT k, count(*) AS n, sum(v) AS v "
                     "FROM far GROUP BY k")
        conn.execute("ANALYZE")
        conn.execute("SELECT leapfrog.start('walk', %s)", [script])
        tracked = conn.execute("SELECT count(*) FROM leapfrog.input "
                               "WHERE live_keys IS NOT NULL").fetchone()[0]
        assert tracked == 2, "near and far are not both tracked in place"
        # before the worker's first batch: every seventh group, by a session
        conn.execute("UPDATE near SET v = v + 1000 WHERE o % 7 = 0")
        conn.execute("UPDATE far SET v = v + 1000 WHERE k % 7 = 0")
        conn.execute("SELECT leapfrog.wait('walk')")
        for table in ("near", "far"):
            diff = conn.execute(
                "(SELECT * FROM {t}_sum EXCEPT ALL SELECT * FROM {t}_eager) UNION ALL "
                "(SELECT * FROM {t}_eager EXCEPT ALL SELECT * FROM {t}_sum) LIMIT 10"
                .format(t=table)).fetchall()
            assert diff == [], "%s_sum differs from the eager aggregate: %r" % (table, diff)
        state = conn.execute("SELECT state FROM leapfrog.migrations "
                             "WHERE name = 'walk'").fetchone()[0]
        assert state == "done", state


ROWS_SCRIPT = """
  CREATE TABLE arch (id int PRIMARY KEY, o int, amt int);
  INSERT INTO arch SELECT id, o, amt FROM acct WHERE amt %% 3 <> 0;
  CREATE TABLE notes AS SELECT id, amt * 10 AS amt10 FROM acct;
"""


def test_live_rows_survive_kill_postmaster_and_worker(make_cluster):
    """A live table that only row mappings read, tracked in place by its
    primary key (each row a unit, src/units.c lf_describe_row_keys), under
    writers that update, delete, insert and move keys, while the worker
    migrates; the postmaster, then the workers, are killed with SIGKILL.
    After each crash and at the end, a computing read of each new table
    equals the eager copy at start(): a row lost, copied twice, or copied
    after a write shows as a difference."""
    needs_real_extension()
    if MOCK:
        pytest.skip("needs the real extension")
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 300,
                        "leapfrog.batch_size": 300, "leapfrog.background_naptime": 200})
    c.create_database("app")
    n = 40_000
    with c.connect("app") as conn:
        conn.execute("CREATE TABLE acct (id int PRIMARY KEY, o int NOT NULL, amt int)")
        conn.execute("INSERT INTO acct SELECT g, g %% 500, g %% 97 FROM generate_series(1, %s) g",
                     [n])
        conn.execute("CREATE TABLE eager_arch AS SELECT id, o, amt FROM acct WHERE amt % 3 <> 0")
        conn.execute("CREATE TABLE eager_notes AS SELECT id, amt * 10 AS amt10 FROM acct")
        conn.execute("ANALYZE")
        conn.execute("SELECT leapfrog.start('live_rows', %s)", [ROWS_SCRIPT.replace("%%", "%")])
        keys = conn.execute("SELECT DISTINCT done_keys::regclass::text FROM leapfrog.mapping "
                            "WHERE done_keys IS NOT NULL").fetchall()
        assert len(keys) == 1, "acct is not tracked by its primary key: %r" % keys

    def one(conn, rnd):
        i = rnd.randint(1, n + 2000)             # some keys are new
        kind = rnd.random()
        with conn.transaction():
            if kind < 0.35:
                conn.execute("UPDATE acct SET amt = amt + 1 WHERE id = %s", [i])
            elif kind < 0.5:
                conn.execute("DELETE FROM acct WHERE id = %s", [i])
            elif kind < 0.65:
                conn.execute("INSERT INTO acct VALUES (%s, 1, 1) ON CONFLICT (id) "
                             "DO UPDATE SET amt = acct.amt + 7", [i])
            elif kind < 0.8:
                conn.execute("UPDATE acct SET id = -id WHERE id = %s", [i])
            else:
                conn.execute("SELECT * FROM arch WHERE id = %s", [i]).fetchall()

    def check():
        with c.connect("app") as conn:
            conn.execute("SET leapfrog.read_mode = compute")
            for t in ("arch", "notes"):
                diff = conn.execute(
                    "(SELECT * FROM {t} EXCEPT ALL SELECT * FROM eager_{t}) UNION ALL "
                    "(SELECT * FROM eager_{t} EXCEPT ALL SELECT * FROM {t}) LIMIT 10"
                    .format(t=t)).fetchall()
                assert diff == [], "%s differs from the eager copy at start(): %r" % (t, diff)

    def rows_left():
        r = c.sql("SELECT leapfrog.remaining('live_rows') FROM leapfrog.migrations "
                  "WHERE name = 'live_rows' AND state = 'running'", dbname="app")
        return r[0][0] if r else 0

    writers = ClientThreads(c, "app", 4, 11, one,
                            tolerated=(psycopg.errors.SerializationFailure,
                                       psycopg.errors.DeadlockDetected,
                                       psycopg.errors.UniqueViolation))
    writers.start()
    try:
        kill_midway(c, "app", writers, rows_left, check, n)
    finally:
        writers.stop()
    assert writers.errors_seen == [], writers.errors_seen[:5]
    with c.connect("app") as conn:
        conn.execute("SELECT leapfrog.complete('live_rows')")
    check()


JOIN_SCRIPT = """
  CREATE TABLE order_names AS
    SELECT o.id, o.cust, o.amt, c.name FROM orders o LEFT JOIN customers c ON c.id = o.cust;
"""


def test_live_join_survives_kill_postmaster_and_worker(make_cluster):
    """A join whose two inputs stay live, both tracked in place (key columns
    NOT NULL: one table of done keys for the join, a trigger on each table),
    under writers that rename customers (the key's rows migrate first),
    touch a column the join does not read, add and delete customers, move
    orders between customers, add and delete orders, and read the new
    table, while the worker migrates; the postmaster, then the workers, are
    killed with SIGKILL.  After each crash and at the end, a computing read
    of the new table equals the eager join at start(): a join key lost,
    migrated twice, or computed after a write of either table shows as a
    difference."""
    needs_real_extension()
    if MOCK:
        pytest.skip("needs the real extension")
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 300,
                        "leapfrog.batch_size": 300, "leapfrog.background_naptime": 200})
    c.create_database("app")
    n_cust, n_orders = 8_000, 40_000
    with c.connect("app") as conn:
        conn.execute("CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, "
                     "visits int NOT NULL DEFAULT 0)")
        conn.execute("INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, %s) g",
                     [n_cust])
        # a tenth of the orders reference no customer (the LEFT JOIN keeps them)
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, cust int NOT NULL, amt int)")
        conn.execute("INSERT INTO orders SELECT g, 1 + (g * 7919) %% %s, g %% 97 "
                     "FROM generate_series(1, %s) g", [n_cust + n_cust // 10, n_orders])
        conn.execute("CREATE INDEX ON orders (cust)")
        conn.execute("CREATE TABLE eager_names AS SELECT o.id, o.cust, o.amt, c.name "
                     "FROM orders o LEFT JOIN customers c ON c.id = o.cust")
        conn.execute("ANALYZE")
        conn.execute("SELECT leapfrog.start('live_join', %s)", [JOIN_SCRIPT])
        triggers = conn.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgfoid = 'leapfrog.live_input_trigger'::regproc "
            "AND tgrelid IN ('customers'::regclass, 'orders'::regclass)").fetchone()[0]
        assert triggers == 2, "customers and orders are not both tracked in place"
        keys = conn.execute("SELECT done_keys::regclass::text FROM leapfrog.mapping "
                            "WHERE done_keys IS NOT NULL").fetchone()[0]
        total = conn.execute("SELECT (SELECT count(*) FROM customers) + "
                             "(SELECT count(*) FROM orders)").fetchone()[0]

    def one(conn, rnd):
        i = rnd.randint(1, n_cust + 1000)        # some customers are new
        kind = rnd.random()
        with conn.transaction():
            if kind < 0.2:
                conn.execute("UPDATE customers SET name = name || '+' WHERE id = %s", [i])
            elif kind < 0.35:
                conn.execute("UPDATE customers SET visits = visits + 1 WHERE id = %s", [i])
            elif kind < 0.45:
                conn.execute("INSERT INTO customers VALUES (%s, 'new') ON CONFLICT (id) "
                             "DO UPDATE SET name = 'again'", [i])
            elif kind < 0.5:
                conn.execute("DELETE FROM customers WHERE id = %s", [i])
            elif kind < 0.65:
                conn.execute("UPDATE orders SET cust = %s WHERE id = %s",
                             [i, rnd.randint(1, n_orders)])
            elif kind < 0.75:
                conn.execute("UPDATE orders SET amt = amt + 1 WHERE cust = %s", [i])
            elif kind < 0.82:
                conn.execute("INSERT INTO orders VALUES (%s, %s, 1) ON CONFLICT (id) DO NOTHING",
                             [n_orders + rnd.randint(1, 5000), i])
            elif kind < 0.87:
                conn.execute("DELETE FROM orders WHERE id = %s", [rnd.randint(1, n_orders)])
            else:
                conn.execute("SELECT * FROM order_names WHERE cust = %s", [i]).fetchall()

    def check():
        with c.connect("app") as conn:
            conn.execute("SET leapfrog.read_mode = compute")
            diff = conn.execute(
                "(SELECT * FROM order_names EXCEPT ALL SELECT * FROM eager_names) UNION ALL "
                "(SELECT * FROM eager_names EXCEPT ALL SELECT * FROM order_names) LIMIT 10"
            ).fetchall()
        assert diff == [], "order_names differs from the eager join at start(): %r" % diff

    def rows_left():
        r = c.sql("SELECT leapfrog.remaining('live_join') FROM leapfrog.migrations "
                  "WHERE name = 'live_join' AND state = 'running'", dbname="app")
        return r[0][0] if r else 0

    # writers of a customer and of its orders claim one key from either table
    writers = ClientThreads(c, "app", 4, 13, one,
                            tolerated=(psycopg.errors.SerializationFailure,
                                       psycopg.errors.DeadlockDetected))
    writers.start()
    try:
        kill_midway(c, "app", writers, rows_left, check, total)
    finally:
        writers.stop()
    assert writers.errors_seen == [], writers.errors_seen[:5]
    with c.connect("app") as conn:
        conn.execute("SELECT leapfrog.complete('live_join')")
        check()
        wait_until(lambda: conn.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgfoid = 'leapfrog.live_input_trigger'::regproc"
        ).fetchone()[0] == 0 and conn.execute("SELECT to_regclass(%s)", [keys]).fetchone()[0]
            is None, 60, what="both triggers and the table of done keys dropped")
