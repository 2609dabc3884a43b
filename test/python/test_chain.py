"""Chained migrations, against the eager run of the same scripts.

A script may read, drop, rename or alter a table an earlier migration is
still filling.  Each chain below runs twice: eagerly (each script in one
transaction, at its moment) and through leapfrog.start(), with the same
writes and reads after each script.  Every write and read must give what it
gives eagerly, and the final tables (columns, indexes, constraints, rows)
must be the eager ones.  Chains of two and three, with row mappings, lazy
ALTER TABLE, a live GROUP BY input, and the revert of a type change while
it runs; with and without the background worker, reads computing and
migrating; and a crash of the whole server in the middle of a chain.
"""

from dataclasses import dataclass, field

import psycopg
import pytest

from support import (assert_same_tables, needs_real_extension, outcome,
                     retired_tables_after_completion, user_tables_state, wait_until)


@dataclass
class Chain:
    name: str
    setup: list
    steps: list                  # [(script, [statements after it])]
    reads: list = field(default_factory=list)   # compared after every step
    lazy_settings: list = field(default_factory=list)   # run first in the lazy database


CUST_SETUP = [
    "CREATE TABLE cust (id int PRIMARY KEY, name text NOT NULL, phone text, city text)",
    "INSERT INTO cust SELECT g, 'n' || g, CASE WHEN g % 5 = 0 THEN NULL ELSE 'p' || g END, "
    "'c' || (g % 7) FROM generate_series(1, 3000) g",
]

SPLIT = """
  CREATE TABLE cust_a (id int PRIMARY KEY, name text NOT NULL, city text);
  CREATE TABLE cust_b (id int PRIMARY KEY, phone text);
  INSERT INTO cust_a SELECT id, name, city FROM cust;
  INSERT INTO cust_b SELECT id, phone FROM cust WHERE phone IS NOT NULL;
  DROP TABLE cust;
"""

CHAINS = [
    Chain(
        "split_rename_widen",
        CUST_SETUP,
        [
            (SPLIT, [
                "UPDATE cust_a SET name = 'x' || name WHERE id BETWEEN 10 AND 20",
                "INSERT INTO cust_a VALUES (5001, 'new', 'c9')",
                "INSERT INTO cust_b VALUES (5001, 'p5001')",
                "DELETE FROM cust_b WHERE id = 7",
            ]),
            # a rename of a column of one half while the split runs
            ("ALTER TABLE cust_a RENAME COLUMN city TO town", [
                "UPDATE cust_a SET town = 'moved' WHERE id IN (30, 31, 5001)",
                "SELECT id, name, town FROM cust_a WHERE id IN (1, 30, 40) ORDER BY id",
            ]),
            # the other half retyped, and a new column, lazily
            ("""ALTER TABLE cust_b ALTER COLUMN id TYPE bigint;
                ALTER TABLE cust_b ADD COLUMN verified boolean NOT NULL DEFAULT false;
                CREATE INDEX cust_b_phone ON cust_b (phone)""", [
                "UPDATE cust_b SET verified = true WHERE id BETWEEN 100 AND 110",
                "INSERT INTO cust_b VALUES (6000, 'p6000', true)",
                "DELETE FROM cust_b WHERE id = 8",
                "UPDATE cust_a SET name = 'y' WHERE id = 12",
            ]),
        ],
        ["SELECT count(*), count(DISTINCT id), sum(id) FROM cust_a",
         "SELECT count(*), count(phone), sum(id) FROM cust_b",
         "SELECT * FROM cust_a WHERE id IN (2, 10, 15, 30, 5001) ORDER BY id",
         "SELECT * FROM cust_b WHERE id BETWEEN 95 AND 105 ORDER BY id"],
    ),
    Chain(
        "retype_split_extend",
        CUST_SETUP,
        [
            ("ALTER TABLE cust ALTER COLUMN id TYPE bigint", [
                "UPDATE cust SET city = 'z' WHERE id % 100 = 0",
                "INSERT INTO cust VALUES (4000000000, 'big', NULL, 'c1')",
            ]),
            # a split of the table the first migration still fills
            ("""CREATE TABLE cust_a (id bigint PRIMARY KEY, name text NOT NULL, city text);
                CREATE TABLE cust_b (id bigint PRIMARY KEY, phone text);
                INSERT INTO cust_a SELECT id, name, city FROM cust;
                INSERT INTO cust_b SELECT id, phone FROM cust WHERE phone IS NOT NULL;
                DROP TABLE cust""", [
                "UPDATE cust_a SET name = upper(name) WHERE id < 50",
                "DELETE FROM cust_a WHERE id = 4000000000",
            ]),
            # and a change of one half, third in the chain
            ("""ALTER TABLE cust_a ADD COLUMN name_len int;
                ALTER TABLE cust_a RENAME COLUMN city TO town""", [
                "UPDATE cust_a SET name_len = length(name) WHERE id % 3 = 0",
                "INSERT INTO cust_a VALUES (7000, 'late', 'c2', 4)",
            ]),
        ],
        ["SELECT count(*), sum(id), count(town) FROM cust_a",
         "SELECT count(*), sum(length(phone)) FROM cust_b",
         "SELECT * FROM cust_a WHERE id IN (1, 3, 49, 100, 7000) ORDER BY id"],
    ),
    Chain(
        # a release rolled back while its migration runs: the split joined
        # back into the old table, every write made to the halves carried
        "split_then_revert",
        CUST_SETUP,
        [
            (SPLIT, [
                "UPDATE cust_a SET name = 'x' || name WHERE id BETWEEN 10 AND 20",
                "UPDATE cust_b SET phone = 'q' || phone WHERE id BETWEEN 15 AND 25",
                "INSERT INTO cust_a VALUES (5001, 'new', 'c9')",
                "INSERT INTO cust_b VALUES (5001, 'p5001')",
                "INSERT INTO cust_a VALUES (5002, 'nophone', 'c9')",
                "DELETE FROM cust_b WHERE id = 7",
                "DELETE FROM cust_a WHERE id = 9",
                "SELECT * FROM cust_a WHERE id = 30",
            ]),
            ("""CREATE TABLE cust_old (id int PRIMARY KEY, name text NOT NULL, phone text, city text);
                INSERT INTO cust_old SELECT a.id, a.name, b.phone, a.city
                  FROM cust_a a LEFT JOIN cust_b b ON b.id = a.id;
                DROP TABLE cust_a;
                DROP TABLE cust_b;
                ALTER TABLE cust_old RENAME TO cust""", [
                "SELECT * FROM cust WHERE id IN (7, 9, 10, 15, 20, 25, 5001, 5002) ORDER BY id",
                "UPDATE cust SET phone = 'r' WHERE id BETWEEN 40 AND 45",
                "DELETE FROM cust WHERE id = 50",
                "INSERT INTO cust VALUES (6001, 'after', NULL, 'c1')",
                "SELECT count(*), count(phone), sum(id) FROM cust WHERE city = 'c3'",
            ]),
        ],
        ["SELECT count(*), count(phone), sum(id), sum(length(name)) FROM cust",
         "SELECT * FROM cust WHERE id BETWEEN 5 AND 12 ORDER BY id"],
    ),
    Chain(
        # a GROUP BY over a half of a running split
        "split_then_group",
        CUST_SETUP,
        [
            (SPLIT + "CREATE INDEX cust_a_city ON cust_a (city);", [
                "UPDATE cust_a SET city = 'c1' WHERE id BETWEEN 100 AND 130",
                "INSERT INTO cust_a VALUES (5001, 'new', 'c9')",
            ]),
            ("""CREATE TABLE per_city AS SELECT city, count(*) AS n, max(name) AS last
                  FROM cust_a GROUP BY city""", [
                "SELECT * FROM per_city WHERE city = 'c1'",
                "UPDATE cust_a SET city = 'c2' WHERE id BETWEEN 200 AND 205",
                "INSERT INTO cust_a VALUES (5002, 'newer', 'c9')",
                "SELECT * FROM per_city WHERE city IN ('c2', 'c9') ORDER BY city",
            ]),
        ],
        ["SELECT * FROM per_city ORDER BY city",
         "SELECT city, count(*) FROM cust_a GROUP BY city ORDER BY city"],
    ),
    Chain(
        # a join whose key is not unique on one side, over a table still
        # being retyped: a unit found through one order must bring the
        # customer's other orders the retype still holds
        "retype_then_join",
        ["CREATE TABLE customer (id int PRIMARY KEY, name text NOT NULL)",
         "INSERT INTO customer SELECT g, 'c' || g FROM generate_series(1, 200) g",
         "CREATE TABLE orders (id int PRIMARY KEY, cust int NOT NULL, amt int NOT NULL)",
         "CREATE INDEX orders_cust ON orders (cust)",
         "INSERT INTO orders SELECT g, g % 200 + 1, g % 97 FROM generate_series(1, 5000) g"],
        [
            ("ALTER TABLE orders ALTER COLUMN amt TYPE bigint", [
                "UPDATE orders SET amt = amt + 1000 WHERE id % 9 = 0",
                "INSERT INTO orders VALUES (9001, 5, 50)",
            ]),
            ("""CREATE TABLE order_line AS SELECT o.id, o.cust, o.amt, c.name
                  FROM orders o JOIN customer c ON c.id = o.cust;
                DROP TABLE orders""", [
                "SELECT * FROM order_line WHERE amt = 50 ORDER BY id LIMIT 20",
                "SELECT count(*), sum(amt) FROM order_line WHERE cust IN (5, 6, 7)",
                "UPDATE order_line SET amt = 0 WHERE amt = 51",
                "SELECT count(*), sum(amt) FROM order_line WHERE cust IN (51, 52)",
                "UPDATE customer SET name = 'renamed' WHERE id = 8",
            ]),
        ],
        ["SELECT count(*), sum(amt), count(DISTINCT cust) FROM order_line",
         "SELECT cust, count(*), sum(amt), min(name) FROM order_line WHERE cust < 12 "
         "GROUP BY cust ORDER BY cust"],
    ),
    Chain(
        # a join whose preserved side is a plain table and whose other side
        # is still being retyped: the statement's conditions on that other
        # side must reach the retype's rows too
        "outer_join_over_running_retype",
        ["CREATE TABLE customer (id int PRIMARY KEY, name text NOT NULL)",
         "INSERT INTO customer SELECT g, 'c' || g FROM generate_series(1, 200) g",
         "CREATE TABLE orders (id int PRIMARY KEY, cust int NOT NULL, amt int NOT NULL)",
         "CREATE INDEX orders_cust ON orders (cust)",
         "INSERT INTO orders SELECT g, g % 150 + 1, g % 97 FROM generate_series(1, 3000) g"],
        [
            ("ALTER TABLE orders ALTER COLUMN amt TYPE bigint", [
                "UPDATE orders SET amt = 50 WHERE id = 7",
                "INSERT INTO orders VALUES (9001, 5, 50)",
            ]),
            ("""CREATE TABLE cust_order AS SELECT c.id, c.name, o.id AS order_id, o.amt
                  FROM customer c LEFT JOIN orders o ON o.cust = c.id;
                DROP TABLE orders""", [
                "SELECT * FROM cust_order WHERE amt = 50 ORDER BY id, order_id",
                "SELECT count(*) FROM cust_order WHERE order_id IS NULL",
                "UPDATE cust_order SET amt = amt + 1 WHERE amt = 51",
                "SELECT * FROM cust_order WHERE order_id BETWEEN 100 AND 110 ORDER BY order_id",
            ]),
        ],
        ["SELECT count(*), sum(amt), count(DISTINCT id), count(order_id) FROM cust_order"],
    ),
    Chain(
        # three deep: a join over a table that a replacement fills from a
        # table another replacement still fills; a customer's orders found
        # by amount must bring its other orders from two migrations up
        "join_three_deep",
        ["CREATE TABLE customer (id int PRIMARY KEY, name text NOT NULL)",
         "INSERT INTO customer SELECT g, 'c' || g FROM generate_series(1, 200) g",
         "CREATE TABLE orders (id int PRIMARY KEY, cust int NOT NULL, amt int NOT NULL)",
         "CREATE INDEX orders_cust ON orders (cust)",
         "INSERT INTO orders SELECT g, g % 200 + 1, g % 97 FROM generate_series(1, 5000) g"],
        [
            ("ALTER TABLE orders ALTER COLUMN amt TYPE bigint", [
                "UPDATE orders SET amt = amt + 1000 WHERE id % 9 = 0",
            ]),
            ("ALTER TABLE orders ADD COLUMN note text NOT NULL DEFAULT 'n'", [
                "UPDATE orders SET note = 'x' WHERE id % 4 = 0",
                "INSERT INTO orders VALUES (9001, 5, 50, 'late')",
            ]),
            ("""CREATE TABLE order_line AS SELECT o.id, o.cust, o.amt, o.note, c.name
                  FROM orders o JOIN customer c ON c.id = o.cust;
                DROP TABLE orders""", [
                "SELECT * FROM order_line WHERE amt = 50 ORDER BY id LIMIT 20",
                "SELECT count(*), sum(amt) FROM order_line WHERE cust IN (5, 6, 7)",
                "UPDATE order_line SET amt = 0 WHERE amt = 51",
                "SELECT count(*), sum(amt), count(*) FILTER (WHERE note = 'x') FROM order_line "
                "WHERE cust IN (51, 52)",
            ]),
        ],
        ["SELECT count(*), sum(amt), count(DISTINCT cust) FROM order_line",
         "SELECT cust, count(*), sum(amt), min(name), max(note) FROM order_line WHERE cust < 12 "
         "GROUP BY cust ORDER BY cust"],
    ),
    Chain(
        # a GROUP BY over the table a running GROUP BY fills
        "group_of_group",
        ["CREATE TABLE orders (id int PRIMARY KEY, cust int NOT NULL, band int NOT NULL, "
         "amt int NOT NULL)",
         "CREATE INDEX orders_key ON orders (cust, band)",
         "INSERT INTO orders SELECT g, g % 300, (g % 300) % 10, g % 97 FROM generate_series(1, 6000) g"],
        [
            ("""CREATE TABLE cust_total AS SELECT cust, band, sum(amt) AS total, count(*) AS n
                  FROM orders GROUP BY cust, band;
                CREATE INDEX cust_total_band ON cust_total (band);
                DROP TABLE orders""", [
                "SELECT * FROM cust_total WHERE cust = 13",
                "UPDATE cust_total SET total = total + 1000 WHERE cust = 23",
                "INSERT INTO cust_total VALUES (1003, 3, 5, 1)",
            ]),
            ("""CREATE TABLE band_total AS SELECT band, sum(total) AS total, sum(n) AS n, count(*) AS custs
                  FROM cust_total GROUP BY band;
                DROP TABLE cust_total""", [
                "SELECT * FROM band_total WHERE band = 3",
                "SELECT * FROM band_total WHERE total > 29000 ORDER BY band",
                "UPDATE band_total SET custs = custs + 1 WHERE band = 4",
            ]),
        ],
        ["SELECT * FROM band_total ORDER BY band"],
    ),
    Chain(
        # the revert of a migration while it runs: the type back as it was
        "retype_and_back",
        ["CREATE TABLE item (id int PRIMARY KEY, qty int NOT NULL, note text)",
         "INSERT INTO item SELECT g, g % 50, 'n' || g FROM generate_series(1, 4000) g"],
        [
            ("ALTER TABLE item ALTER COLUMN qty TYPE bigint", [
                "UPDATE item SET qty = qty + 1000 WHERE id % 10 = 0",
                "INSERT INTO item VALUES (9001, 1, 'new')",
            ]),
            ("ALTER TABLE item ALTER COLUMN qty TYPE int", [
                "UPDATE item SET qty = qty * 2 WHERE id % 7 = 0",
                "DELETE FROM item WHERE id % 11 = 0",
            ]),
        ],
        ["SELECT count(*), sum(qty), sum(id) FROM item",
         "SELECT * FROM item WHERE id IN (10, 14, 70, 9001) ORDER BY id",
         "SELECT pg_typeof(qty)::text FROM item LIMIT 1"],
    ),
    Chain(
        # a GROUP BY over a live input, then that input altered while the
        # first migration still moves its rows: the live input replaced
        # lazily (tracked in place, a later script may not alter it:
        # test_live_input_tracked_in_place_is_not_altered_meanwhile)
        "live_total_then_retype",
        ["CREATE TABLE orders (id int PRIMARY KEY, cust int NOT NULL, amt int NOT NULL)",
         "CREATE INDEX orders_cust ON orders (cust)",
         "INSERT INTO orders SELECT g, g % 300, g % 97 FROM generate_series(1, 6000) g"],
        [
            ("""CREATE TABLE total (cust int PRIMARY KEY, amt bigint NOT NULL, n bigint NOT NULL);
                INSERT INTO total SELECT cust, sum(amt), count(*) FROM orders GROUP BY cust""", [
                "UPDATE orders SET amt = amt + 1 WHERE id % 13 = 0",
                "UPDATE total SET amt = amt + 5 WHERE cust BETWEEN 10 AND 12",
                "INSERT INTO orders VALUES (7000, 5, 100)",
            ]),
            ("ALTER TABLE orders ALTER COLUMN amt TYPE bigint", [
                "UPDATE orders SET amt = amt * 3 WHERE cust = 7",
                "DELETE FROM orders WHERE id % 17 = 0",
                "UPDATE total SET n = n + 1 WHERE cust = 200",
            ]),
        ],
        ["SELECT count(*), sum(amt) FROM orders",
         "SELECT * FROM total WHERE cust IN (5, 7, 10, 200) ORDER BY cust",
         "SELECT count(*), sum(amt), sum(n) FROM total",
         "SELECT * FROM orders WHERE cust = 7 ORDER BY id LIMIT 5"],
        ["SET leapfrog.track_live_inputs = off"],
    ),
]


@pytest.fixture(scope="module")
def quiet(module_cluster_factory):
    needs_real_extension()
    return module_cluster_factory(**{"leapfrog.background": "off"})


@pytest.fixture(scope="module")
def busy(module_cluster_factory):
    needs_real_extension()
    return module_cluster_factory(**{"leapfrog.background": "on",
                                     "leapfrog.background_delay": 0,
                                     "leapfrog.batch_size": 500})


def _outcome(conn, st):
    """outcome(), or the SQLSTATE of the error (a read of a table the chain
    has not created yet fails in both databases alike)."""
    try:
        return outcome(conn, st)
    except psycopg.Error as e:
        return ("error", e.sqlstate)


def _run(eager, lazy, chain, tag):
    """The chain in both databases, step by step; the reads compared after
    every step.  Returns the migration names."""
    names = []
    for st in chain.lazy_settings:
        lazy.execute(st)
    for st in chain.setup:
        eager.execute(st)
        lazy.execute(st)
    eager.execute("ANALYZE")
    lazy.execute("ANALYZE")
    for i, (script, stmts) in enumerate(chain.steps):
        name = "%s_%s_%d" % (chain.name, tag, i)
        with eager.transaction():
            eager.execute(script)
        lazy.execute("SELECT leapfrog.start(%s, %s)", [name, script])
        names.append(name)
        for st in stmts + chain.reads:
            a, b = _outcome(eager, st), _outcome(lazy, st)
            assert a == b, "%s after step %d: %r: eager %r, lazy %r" % (
                chain.name, i, st, a, b)
    return names


@pytest.mark.parametrize("read_mode", ["migrate", "compute"])
@pytest.mark.parametrize("chain", CHAINS, ids=[c.name for c in CHAINS])
def test_chain_equals_eager(quiet, chain, read_mode):
    c = quiet
    db = "ch_%s_%s" % (chain.name, read_mode)
    c.create_database(db + "_e")
    c.create_database(db)
    with c.connect(db + "_e") as eager, c.connect(db) as lazy:
        lazy.execute("SET leapfrog.read_mode = %s" % read_mode)
        names = _run(eager, lazy, chain, read_mode)
        # rows are still waiting in every migration of the chain but those
        # the reads emptied
        running = lazy.execute("SELECT count(*) FROM leapfrog.migrations "
                               "WHERE state = 'running'").fetchone()[0]
        assert running >= 1
        # the last completes the earlier ones first
        lazy.execute("SELECT leapfrog.complete(%s)", [names[-1]])
        states = lazy.execute("SELECT name, state FROM leapfrog.migrations ORDER BY name"
                              ).fetchall()
        assert all(s == "done" for _, s in states), states
        assert_same_tables(user_tables_state(eager), user_tables_state(lazy), chain.name)
    assert retired_tables_after_completion(c, db) == []


def test_live_input_tracked_in_place_is_not_altered_meanwhile(quiet):
    """The live input of a GROUP BY, tracked in place (the default): a later
    script that alters it is refused (55006) with nothing changed, until
    the first migration is done; then it runs, and both end as eagerly."""
    c = quiet
    chain = next(ch for ch in CHAINS if ch.name == "live_total_then_retype")
    db = "ch_in_place"
    c.create_database(db + "_e")
    c.create_database(db)
    (script1, stmts1), (script2, _) = chain.steps
    with c.connect(db + "_e") as eager, c.connect(db) as lazy:
        for st in chain.setup:
            eager.execute(st)
            lazy.execute(st)
        for conn in (eager, lazy):
            with conn.transaction():
                if conn is eager:
                    conn.execute(script1)
                else:
                    conn.execute("SELECT leapfrog.start('first', %s)", [script1])
            for st in stmts1:
                conn.execute(st)
        with pytest.raises(psycopg.errors.ObjectInUse) as err:
            lazy.execute("SELECT leapfrog.start('second', %s)", [script2])
        assert "first" in str(err.value)
        assert lazy.execute("SELECT pg_typeof(amt)::text FROM orders LIMIT 1").fetchone() \
            == ("integer",)
        assert lazy.execute("SELECT count(*) FROM leapfrog.migrations WHERE name = 'second'"
                            ).fetchone()[0] == 0
        lazy.execute("SELECT leapfrog.complete('first')")
        lazy.execute("SELECT leapfrog.start('second', %s)", [script2])
        with eager.transaction():
            eager.execute(script2)
        lazy.execute("SELECT leapfrog.complete('second')")
        for st in chain.reads:
            assert outcome(eager, st) == outcome(lazy, st), st
        assert_same_tables(user_tables_state(eager), user_tables_state(lazy), "in place")
    assert retired_tables_after_completion(c, db) == []


@pytest.mark.parametrize("chain", CHAINS, ids=[c.name for c in CHAINS])
def test_chain_in_background(busy, chain):
    c = busy
    db = "chbg_%s" % chain.name
    c.create_database(db + "_e")
    c.create_database(db)
    with c.connect(db + "_e") as eager, c.connect(db) as lazy:
        names = _run(eager, lazy, chain, "bg")
        # the worker finishes the chain in order, with no help
        for name in names:
            assert lazy.execute("SELECT leapfrog.wait(%s, 120)", [name]).fetchone()[0], name
        # (a script of renames only has nothing to move: done at start)
        done = lazy.execute("SELECT name FROM leapfrog.migrations WHERE tuples_total > 0 "
                            "ORDER BY finished_at").fetchall()
        moving = [n for n in names if n in {d for (d,) in done}]
        assert [n for (n,) in done] == moving, "completed out of order: %r" % (done,)
        assert_same_tables(user_tables_state(eager), user_tables_state(lazy), chain.name)
    assert retired_tables_after_completion(c, db) == []


def test_chain_refusals(quiet):
    c = quiet
    c.create_database("chref")
    with c.connect("chref") as conn:
        for st in CUST_SETUP:
            conn.execute(st)
        conn.execute("SELECT leapfrog.start('split', %s)", [SPLIT])
        # dropping it without reading it would lose the earlier migration's rows
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="still filling"):
            conn.execute("SELECT leapfrog.start('drop_b', 'DROP TABLE cust_b')")
        # nothing of the refused scripts stayed
        assert conn.execute("SELECT name FROM leapfrog.migrations ORDER BY 1").fetchall() == \
            [("split",)]
        # the revert, while the split runs
        conn.execute("""SELECT leapfrog.start('join_back', $$
            CREATE TABLE cust AS SELECT a.id, a.name, b.phone, a.city
              FROM cust_a a LEFT JOIN cust_b b ON b.id = a.id;
            DROP TABLE cust_a; DROP TABLE cust_b
        $$)""")
        assert conn.execute("SELECT count(*), count(phone) FROM cust").fetchone() == (3000, 2400)


def test_crash_mid_chain(make_cluster):
    """The whole server killed while both migrations of a chain run: after
    the restart the chain completes, and the tables are the eager ones."""
    needs_real_extension()
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 500,
                        "leapfrog.batch_size": 200, "leapfrog.background_naptime": 20})
    chain = CHAINS[0]
    c.create_database("crash_e")
    c.create_database("crash")
    with c.connect("crash_e") as eager, c.connect("crash") as lazy:
        names = _run(eager, lazy, chain, "crash")
        want = user_tables_state(eager)
        # some of the first migration moved, not all
        wait_until(lambda: lazy.execute(
            "SELECT tuples_migrated > 0 FROM leapfrog.migrations WHERE name = %s",
            [names[0]]).fetchone()[0], 60, what="the worker to move rows")
    c.kill_postmaster(restart=True)
    with c.connect("crash") as lazy:
        for name in names:
            assert lazy.execute("SELECT leapfrog.wait(%s, 120)", [name]).fetchone()[0], name
        assert_same_tables(want, user_tables_state(lazy), "after the crash")


def test_no_correction_under_a_later_unit(quiet):
    """A row of a migration that feeds a later GROUP BY is not corrected (it
    could move into a group that migrated already): quarantine it instead."""
    c = quiet
    c.create_database("chfix")
    with c.connect("chfix") as conn:
        for st in CUST_SETUP:
            conn.execute(st)
        conn.execute("SELECT leapfrog.start('split', %s)",
                     [SPLIT + "CREATE INDEX cust_a_city ON cust_a (city);"])
        conn.execute("""SELECT leapfrog.start('per_city', $$
            CREATE TABLE per_city AS SELECT city, count(*) AS n FROM cust_a GROUP BY city
        $$)""")
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="later GROUP BY"):
            conn.execute("SELECT leapfrog.correct_row('split', 'public.cust', '(0,1)', "
                         "'{\"city\": \"c1\"}')")
        conn.execute("SELECT leapfrog.quarantine_row('split', 'public.cust', '(0,1)')")
        conn.execute("SELECT leapfrog.complete('per_city')")
        assert conn.execute("SELECT sum(n) FROM per_city").fetchone()[0] == 2999


def _unordered(out):
    """An outcome with its rows sorted: RETURNING gives them in no defined
    order (the plan's), and the two databases' plans may differ."""
    return (out[0], out[1], sorted(out[2])) if out[0] == "rows" else out


def _same_outcomes(eager, lazy, stmts, unordered=False):
    """Each statement's outcome in both databases, asserted equal (rows
    compared as sets if unordered); the outcomes."""
    got = []
    for st in stmts:
        a, b = _outcome(eager, st), _outcome(lazy, st)
        if unordered:
            a, b = _unordered(a), _unordered(b)
        assert a == b, "%r: eager %r, lazy %r" % (st, a, b)
        got.append(a)
    return got


def _halves_chain(name, setup, src, a_cols, a_select, b_cols, b_select):
    """A chain that splits table src into {src}_a and {src}_b (their columns
    and what each selects from src), then adds a column to each half (a
    mapping that only projects it): statements on the halves then reach the
    split's rows through the second migration."""
    return Chain(name, setup, [
        ("""CREATE TABLE {s}_a ({ac});
            CREATE TABLE {s}_b ({bc});
            INSERT INTO {s}_a SELECT {asel} FROM {s};
            INSERT INTO {s}_b SELECT {bsel} FROM {s};
            DROP TABLE {s}""".format(s=src, ac=a_cols, bc=b_cols, asel=a_select, bsel=b_select),
         []),
        ("""ALTER TABLE {s}_a ADD COLUMN vip boolean NOT NULL DEFAULT false;
            ALTER TABLE {s}_b ADD COLUMN checked boolean NOT NULL DEFAULT false""".format(s=src),
         []),
    ])


def test_key_written_by_expression_migrates_only_what_it_can_meet(quiet):
    """An UPDATE or INSERT ... SELECT that writes a key computed from a row
    (id + 1) into the last table of a chain: the earlier migration's rows
    it could conflict with are found through the later mapping, joined to
    the statement's rows, not the whole earlier migration (which every such
    statement used to migrate), and conflicts still fail as eagerly.  And
    statements joining the two halves, whose rows are all still in the
    first migration: each half's rows are found on their own (restricting
    each by the other, as the key conflicts are, found neither), through
    the condition the join carries over from one half to the other (which
    took all of the first migration's rows before)."""
    c = quiet
    db = "ch_key_expr"
    c.create_database(db + "_e")
    c.create_database(db)
    chain = Chain("key_expr", CUST_SETUP, [
        (SPLIT, []),
        ("""ALTER TABLE cust_a ADD COLUMN vip boolean NOT NULL DEFAULT false;
            ALTER TABLE cust_b ADD COLUMN checked boolean NOT NULL DEFAULT false""", []),
    ])
    stmts = [
        "UPDATE cust_a SET id = id + 1 WHERE id = 3000",       # 3001 is free
        "UPDATE cust_a SET id = id + 1 WHERE id = 10",         # 11 is taken: 23505
        "INSERT INTO cust_a (id, name) SELECT id + 1, name FROM cust_a WHERE id = 40",  # 23505
        "INSERT INTO cust_a (id, name) SELECT id + 5000, name FROM cust_a WHERE id = 41",
        "UPDATE cust_b SET id = id + 1 WHERE id = 2998",       # 2999 is taken: 23505
        "UPDATE cust_a a SET name = 'j' || a.name FROM cust_b b "
        "WHERE a.id = b.id AND b.id BETWEEN 81 AND 83 RETURNING a.id",
        "DELETE FROM cust_b b USING cust_a a WHERE a.id = b.id AND a.id BETWEEN 91 AND 92 "
        "RETURNING b.id",
        "SELECT a.id, b.phone FROM cust_a a JOIN cust_b b ON a.id = b.id "
        "WHERE b.id BETWEEN 101 AND 103 ORDER BY a.id FOR UPDATE",
        "SELECT a.id, b.phone FROM cust_a a LEFT JOIN cust_b b ON a.id = b.id "
        "WHERE a.id BETWEEN 109 AND 111 ORDER BY a.id FOR UPDATE OF a",
        "SELECT * FROM cust_a WHERE id IN (10, 11, 40, 41, 81, 82, 3000, 3001, 5041) ORDER BY id",
        "SELECT * FROM cust_b WHERE id BETWEEN 90 AND 93 ORDER BY id",
    ]
    with c.connect(db + "_e") as eager, c.connect(db) as lazy:
        names = _run(eager, lazy, chain, "k")
        got = _same_outcomes(eager, lazy, stmts)
        assert got[1] == ("error", "23505") and got[4] == ("error", "23505")
        assert len(got[5][2]) == 3 and len(got[6][2]) == 2, got
        assert len(got[7][2]) == 3 and got[8][2][1] == ("110", "None"), got
        # each statement moved a few of the split's 3000 rows, not all
        left = lazy.execute("SELECT leapfrog.remaining(%s)", [names[0]]).fetchone()[0]
        assert left >= 2950, left
        lazy.execute("SELECT leapfrog.complete(%s)", [names[-1]])
        assert_same_tables(user_tables_state(eager), user_tables_state(lazy), chain.name)
    assert retired_tables_after_completion(c, db) == []


def test_join_on_numeric_key_carries_comparisons_up_the_chain(quiet):
    """The same joins of the two halves on a numeric key, where equal
    values may differ (1.0 = 1.00), so a condition on one side does not
    carry over to the other in general (a text cast would tell them
    apart): a comparison in the key's btree family does (BETWEEN, IN, <),
    and each statement moves a few of the split's rows, not all; a cast
    to text does not."""
    c = quiet
    db = "ch_num_key"
    c.create_database(db + "_e")
    c.create_database(db)
    chain = _halves_chain("num_key", [
        # b's key comes from another column: b's 500.0, equal to a's 500,
        # is input row 700's
        "CREATE TABLE ncust (id numeric PRIMARY KEY, bid numeric UNIQUE, name text NOT NULL, "
        "phone text)",
        "INSERT INTO ncust SELECT g, CASE g WHEN 500 THEN 700 WHEN 700 THEN 500.0 ELSE g END, "
        "'n' || g, 'p' || g FROM generate_series(1, 3000) g",
    ], "ncust", "id numeric PRIMARY KEY, name text NOT NULL", "id, name",
        "id numeric PRIMARY KEY, phone text", "bid, phone")
    stmts = [
        "UPDATE ncust_a a SET name = 'j' || a.name FROM ncust_b b "
        "WHERE a.id = b.id AND b.id BETWEEN 81 AND 83.0 RETURNING a.id",
        "DELETE FROM ncust_b b USING ncust_a a WHERE a.id = b.id AND a.id IN (91.00, 92) "
        "RETURNING b.id",
        "SELECT a.id, b.phone FROM ncust_a a JOIN ncust_b b ON a.id = b.id "
        "WHERE b.id > 2997.5 ORDER BY a.id FOR UPDATE",
        "SELECT * FROM ncust_a WHERE id BETWEEN 80 AND 93 ORDER BY id",
        "SELECT * FROM ncust_b WHERE id BETWEEN 80 AND 93 ORDER BY id",
    ]
    with c.connect(db + "_e") as eager, c.connect(db) as lazy:
        names = _run(eager, lazy, chain, "k")
        got = _same_outcomes(eager, lazy, stmts, unordered=True)
        assert len(got[0][2]) == 3 and len(got[1][2]) == 2 and len(got[2][2]) == 3, got
        left = lazy.execute("SELECT leapfrog.remaining(%s)", [names[0]]).fetchone()[0]
        assert left >= 2950, left
        # b's 500.0 equals a's 500, which its text does not show: a condition
        # that is not a comparison in the family must not carry over (with
        # it, a's row 500, input row 500, would not be found, and nothing
        # updated)
        st = ("UPDATE ncust_a a SET name = 't' || a.name FROM ncust_b b "
              "WHERE a.id = b.id AND b.id::text = '500.0' RETURNING a.id, b.id")
        a, b = _unordered(_outcome(eager, st)), _unordered(_outcome(lazy, st))
        assert a == b and len(a[2]) == 1, (a, b)
        lazy.execute("SELECT leapfrog.complete(%s)", [names[-1]])
        assert_same_tables(user_tables_state(eager), user_tables_state(lazy), chain.name)
    assert retired_tables_after_completion(c, db) == []


def test_join_under_nondeterministic_collation_carries_comparisons_in_it(quiet):
    """A join key of text under a case-insensitive collation: 'n500' equals
    'N500' without being identical.  A comparison under that collation
    carries over from one side to the other; one under another collation
    does not (with it, a's 'n500', input row 500, would not be found where
    b's 'N500' comes from input row 2501)."""
    c = quiet
    db = "ch_ci_key"
    c.create_database(db + "_e")
    c.create_database(db)
    chain = _halves_chain("ci_key", [
        "CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
        "CREATE TABLE ccust (id int PRIMARY KEY, name text COLLATE ci NOT NULL, "
        "nick text COLLATE ci NOT NULL)",
        "INSERT INTO ccust SELECT g, 'n' || g, 'N' || (3001 - g) FROM generate_series(1, 3000) g",
    ], "ccust", "id int PRIMARY KEY, name text COLLATE ci NOT NULL", "id, name",
        "id int PRIMARY KEY, nick text COLLATE ci NOT NULL", "id, nick")
    stmts = [
        "UPDATE ccust_a a SET vip = true FROM ccust_b b "
        "WHERE a.name = b.nick AND b.nick BETWEEN 'N2990' AND 'N2999' RETURNING a.name, b.nick",
        "SELECT a.name, b.nick FROM ccust_a a JOIN ccust_b b ON a.name = b.nick "
        "WHERE b.nick IN ('n2000', 'N2001') ORDER BY a.name FOR UPDATE",
    ]
    with c.connect(db + "_e") as eager, c.connect(db) as lazy:
        names = _run(eager, lazy, chain, "k")
        got = _same_outcomes(eager, lazy, stmts, unordered=True)
        assert len(got[0][2]) == 10 and len(got[1][2]) == 2, got
        left = lazy.execute("SELECT leapfrog.remaining(%s)", [names[0]]).fetchone()[0]
        assert left >= 2950, left
        st = ("UPDATE ccust_a a SET vip = true FROM ccust_b b "
              "WHERE a.name = b.nick AND b.nick = 'N500' COLLATE \"C\" RETURNING a.id, b.id")
        out = _same_outcomes(eager, lazy, [st])[0]
        assert len(out[2]) == 1, out
        lazy.execute("SELECT leapfrog.complete(%s)", [names[-1]])
        assert_same_tables(user_tables_state(eager), user_tables_state(lazy), chain.name)
    assert retired_tables_after_completion(c, db) == []


def _chain_mid_way(c, db, chain):
    """The chain started in db (and eagerly in db_e), every migration still
    holding rows; the eager state."""
    c.create_database(db + "_e")
    c.create_database(db)
    with c.connect(db + "_e") as eager, c.connect(db) as lazy:
        lazy.execute("SET leapfrog.read_mode = compute")
        _run(eager, lazy, chain, db)
        left = lazy.execute("SELECT count(*) FROM leapfrog.migrations WHERE state = 'running'"
                            ).fetchone()[0]
        assert left >= 2, "the chain should still be running: %d" % left
        return user_tables_state(eager)


@pytest.mark.parametrize("chain", [c for c in CHAINS if c.name in
                                   ("split_then_revert", "retype_then_join")],
                         ids=lambda c: c.name)
def test_chain_dump_restores_eager_state(quiet, chain):
    """pg_dump in the middle of a chain: the restore holds the eager tables,
    and no migration."""
    c = quiet
    db = "chdump_" + chain.name
    want = _chain_mid_way(c, db, chain)
    dump = c.base / (db + ".dump")
    c.run_client("pg_dump", ["-Fc", "-f", dump], dbname=db)
    c.create_database(db + "_r", extension=False)
    c.run_client("pg_restore", ["--exit-on-error", dump], dbname=db + "_r")
    with c.connect(db + "_r") as restored:
        assert_same_tables(want, user_tables_state(restored), "restored " + chain.name)
        assert restored.execute("SELECT count(*) FROM leapfrog.migration").fetchone()[0] == 0


def test_chain_on_standby(module_cluster_factory, module_standby_factory):
    """A hot standby computes the newest tables of a running chain: the
    eager answers, though it cannot migrate."""
    needs_real_extension()
    primary = module_cluster_factory(**{"leapfrog.background": "off"})
    standby = module_standby_factory(primary, hot_standby_feedback="on")
    chain = next(c for c in CHAINS if c.name == "split_then_revert")
    _chain_mid_way(primary, "chstandby", chain)
    standby.wait_replay(primary)
    queries = chain.reads + [
        "SELECT * FROM cust WHERE id IN (1, 7, 9, 15, 25, 40, 5001, 5002, 6001) ORDER BY id",
        "SELECT city, count(*), count(phone) FROM cust GROUP BY city ORDER BY city"]
    with primary.connect("chstandby_e") as eager, standby.connect("chstandby") as s:
        assert s.execute("SELECT pg_is_in_recovery()").fetchone()[0]
        for q in queries:
            assert _outcome(s, q) == _outcome(eager, q), q
    with primary.connect("chstandby") as lazy:
        assert lazy.execute("SELECT count(*) FROM leapfrog.migrations WHERE state = 'running'"
                            ).fetchone()[0] >= 2


def test_group_while_the_earlier_migration_completes(busy):
    """Stress: a GROUP BY over a running split, read by its group key while
    the split's worker completes it.  The split moves its last rows and
    marks itself done during the statement that migrates the group: the
    group's step once saw its own claimed rows vanish (the executor hook
    gave the step a newer snapshot after the completion reached the cache),
    and the group was lost for good.  Repeats LEAPFROG_CHAIN_RACE_ROUNDS
    times (the race hit about one round in a hundred)."""
    import os
    rounds = int(os.environ.get("LEAPFROG_CHAIN_RACE_ROUNDS", "40"))
    c = busy
    want = None
    for i in range(rounds):
        db = "chrace"
        c.create_database(db)
        with c.connect(db) as conn:
            for st in CUST_SETUP:
                conn.execute(st)
            conn.execute("SELECT leapfrog.start('split', %s)",
                         [SPLIT + "CREATE INDEX cust_a_city ON cust_a (city);"])
            conn.execute("UPDATE cust_a SET city = 'c1' WHERE id BETWEEN 100 AND 130")
            conn.execute("""SELECT leapfrog.start('per_city', $$
                CREATE TABLE per_city AS SELECT city, count(*) AS n FROM cust_a GROUP BY city
            $$)""")
            got = conn.execute("SELECT * FROM per_city WHERE city = 'c1'").fetchall()
            assert conn.execute("SELECT leapfrog.wait('per_city', 60)").fetchone()[0]
            final = conn.execute("SELECT * FROM per_city ORDER BY city").fetchall()
            if want is None:
                want = final
            assert got == [r for r in want if r[0] == "c1"], "round %d: %r" % (i, got)
            assert final == want, "round %d: %r, first round %r" % (i, final, want)
            assert sum(n for _, n in final) == 3000
