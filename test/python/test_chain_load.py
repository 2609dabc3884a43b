"""A revert under load: a split, a rename of one half, and the join of both
halves back into the old table, chained, while writers move money.

accounts(id, balance, owner, visits) starts with N rows.  Writer threads
(READ COMMITTED, a connection each) transfer amounts between two accounts,
count visits, and open accounts with a known balance (OPENING), in
transactions whose statements are those of the current schema.  Meanwhile:

  1. split:    accounts -> acct_bal (id, balance) and acct_prof (id, owner,
               visits), accounts dropped;
  2. rename:   acct_bal.balance -> amount, while 1 runs (a script of renames
               only: done at start);
  3. revert:   amount renamed back, the halves joined back into accounts and
               dropped, while 1 still runs (asserted): it waits for 1.

Each switch is the application's release: start() and the new code's first
statement (app_version) in one transaction; a writer whose statement meets a
table or column that is gone (42P01, 42703) reads app_version and retries in
the new schema, as it does on 40001 and 40P01.  The worker is on
throughout: slowed (one worker, small batches, a pause) until 3 has
started, so that 1 still runs then; sped up after.

Checked: at every step, in one statement (one snapshot) of the schema then
current (reads computing; after 3's start, computing and migrating in
turn: a whole-table read that migrates moves every row), that the balances sum to
the initial total plus OPENING per account opened, that no id is missing or
doubled (and the two halves hold the same accounts); at the end, the worker
done with the chain in order, the accounts exactly the initial ones plus
those opened, visits the committed ones, and the final tables those of an
eager replay of the committed operations, each at its schema, with the
scripts run eagerly at their moments (transfers and visits commute, so the
order within a schema does not matter).  About 30 s.
"""

import random
import threading
import time

import psycopg
from support import (assert_same_tables, needs_real_extension, retired_tables_after_completion,
                     user_tables_state)

N = 30_000
INITIAL = 1000                    # each account's opening balance at setup
OPENING = 100                     # balance of an account the writers open
NWRITERS = 4
RETRYABLE = ("40001", "40P01")
GONE = ("42P01", "42703")         # the schema moved on under the statement

SETUP = [
    "CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, owner text NOT NULL, "
    "visits int NOT NULL DEFAULT 0)",
    "INSERT INTO accounts SELECT g, %d, 'owner' || g, 0 FROM generate_series(1, %d) g"
    % (INITIAL, N),
    "CREATE TABLE app_version (v int NOT NULL)",
    "INSERT INTO app_version VALUES (1)",
]

SCRIPTS = {
    2: """
        CREATE TABLE acct_bal (id int PRIMARY KEY, balance bigint NOT NULL);
        CREATE TABLE acct_prof (id int PRIMARY KEY, owner text NOT NULL, visits int NOT NULL);
        INSERT INTO acct_bal SELECT id, balance FROM accounts;
        INSERT INTO acct_prof SELECT id, owner, visits FROM accounts;
        DROP TABLE accounts;
    """,
    3: "ALTER TABLE acct_bal RENAME COLUMN balance TO amount",
    4: """
        ALTER TABLE acct_bal RENAME COLUMN amount TO balance;
        CREATE TABLE accounts_old (id int PRIMARY KEY, balance bigint NOT NULL,
                                   owner text NOT NULL, visits int NOT NULL DEFAULT 0);
        INSERT INTO accounts_old SELECT b.id, b.balance, p.owner, p.visits
          FROM acct_bal b JOIN acct_prof p ON p.id = b.id;
        DROP TABLE acct_bal;
        DROP TABLE acct_prof;
        ALTER TABLE accounts_old RENAME TO accounts;
    """,
}
NAMES = {2: "split", 3: "rename_amount", 4: "revert"}

# The application's statements at each schema version.
BAL = {1: ("accounts", "balance"), 2: ("acct_bal", "balance"), 3: ("acct_bal", "amount"),
       4: ("accounts", "balance")}
PROF = {1: "accounts", 2: "acct_prof", 3: "acct_prof", 4: "accounts"}


def opening_stmts(v, i):
    if v in (1, 4):
        return [("INSERT INTO accounts (id, balance, owner, visits) VALUES (%s, %s, %s, 0)",
                 [i, OPENING, "new%d" % i])]
    return [("INSERT INTO acct_bal (id, %s) VALUES (%%s, %%s)" % BAL[v][1], [i, OPENING]),
            ("INSERT INTO acct_prof (id, owner, visits) VALUES (%s, %s, 0)", [i, "new%d" % i])]


def transfer_stmts(v, a, b, x):
    t, c = BAL[v]
    lo, hi = sorted([a, b])       # (lock order: fewer deadlocks, which are retried anyway)
    d = {a: -x, b: x}
    return [("UPDATE %s SET %s = %s + %%s WHERE id = %%s" % (t, c, c), [d[lo], lo]),
            ("UPDATE %s SET %s = %s + %%s WHERE id = %%s" % (t, c, c), [d[hi], hi])]


def visit_stmts(v, a):
    return [("UPDATE %s SET visits = visits + 1 WHERE id = %%s" % PROF[v], [a])]


def check_query(v):
    """One statement, so one snapshot: accounts, distinct ids, the sum of
    balances, and (split) the profile half's accounts."""
    if v in (1, 4):
        return ("SELECT count(*), count(DISTINCT id), sum(balance), count(*), "
                "count(DISTINCT id) FROM accounts")
    t, c = BAL[v]
    return ("SELECT (SELECT count(*) FROM %s), (SELECT count(DISTINCT id) FROM %s), "
            "(SELECT sum(%s) FROM %s), (SELECT count(*) FROM acct_prof), "
            "(SELECT count(DISTINCT id) FROM acct_prof)" % (t, t, c, t))


class App:
    """What the threads share: the schema version the application runs,
    the ids, the committed operations (version, kind, args)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.version = 1
        self.ids = list(range(1, N + 1))
        self.next_id = N + 1
        self.log = []
        self.stop = threading.Event()
        self.errors = []
        self.retries = {k: 0 for k in RETRYABLE + GONE}

    def refresh(self, conn):
        v = conn.execute("SELECT v FROM app_version").fetchone()[0]
        with self.lock:
            self.version = max(self.version, v)
        return v


def run_tx(app, conn, make):
    """Run the statements make(version) in one transaction, at the version
    the application is at; retried on 40001/40P01 and, at the new version,
    when the schema moved on.  Returns the version it committed at."""
    for attempt in range(200):
        v = app.version
        try:
            with conn.transaction():
                for sql, params in make(v):
                    conn.execute(sql, params)
            return v
        except psycopg.Error as e:
            if e.sqlstate in RETRYABLE or e.sqlstate in GONE:
                with app.lock:
                    app.retries[e.sqlstate] += 1
                if e.sqlstate in GONE:
                    app.refresh(conn)
                continue
            raise
    raise AssertionError("200 attempts without a commit")


class Writer(threading.Thread):
    def __init__(self, cluster, db, app, seed):
        super().__init__(daemon=True, name="writer-%d" % seed)
        self.cluster, self.db, self.app = cluster, db, app
        self.rng = random.Random(seed)
        self.commits = 0

    def run(self):
        app, rng = self.app, self.rng
        try:
            with self.cluster.connect(self.db) as conn:
                conn.execute("SET statement_timeout = '30s'")
                app.refresh(conn)
                while not app.stop.is_set():
                    r = rng.random()
                    with app.lock:
                        ids = app.ids
                        a, b = rng.sample(ids, 2)
                    if r < 0.08:
                        with app.lock:
                            i = app.next_id
                            app.next_id += 1
                        v = run_tx(app, conn, lambda v: opening_stmts(v, i))
                        op = ("open", i)
                        with app.lock:
                            app.ids = app.ids + [i]
                    elif r < 0.3:
                        v = run_tx(app, conn, lambda v: visit_stmts(v, a))
                        op = ("visit", a)
                    else:
                        x = rng.randint(1, 50)
                        v = run_tx(app, conn, lambda v: transfer_stmts(v, a, b, x))
                        op = ("transfer", a, b, x)
                    with app.lock:
                        app.log.append((v,) + op)
                    self.commits += 1
        except Exception as e:      # noqa: BLE001 (reported by the test)
            app.errors.append("%s: %r" % (self.name, e))
            app.stop.set()


class Checker(threading.Thread):
    """The invariant, over and over; reads compute, and once the revert has
    started, compute and migrate in turn."""

    def __init__(self, cluster, db, app):
        super().__init__(daemon=True, name="checker")
        self.cluster, self.db, self.app = cluster, db, app
        self.checked = {}           # version -> checks that passed
        self.lock = threading.Lock()

    def run(self):
        app = self.app
        try:
            with self.cluster.connect(self.db) as conn:
                conn.execute("SET statement_timeout = '30s'")
                k = 0
                while not app.stop.is_set():
                    k += 1
                    # (a whole-table read that migrates moves every row: until
                    # the revert has started, the reads compute)
                    conn.execute("SET leapfrog.read_mode = %s"
                                 % ("compute" if k % 2 or app.version < 4 else "migrate"))
                    self.check(conn)
                    time.sleep(0.1)
                self.check(conn)
        except Exception as e:      # noqa: BLE001
            app.errors.append("checker: %r" % e)
            app.stop.set()

    def check(self, conn):
        app = self.app
        while True:
            v = app.version
            try:
                n, distinct, total, n_prof, distinct_prof = conn.execute(check_query(v)).fetchone()
                break
            except psycopg.Error as e:
                if e.sqlstate in RETRYABLE:
                    continue
                if e.sqlstate in GONE:
                    app.refresh(conn)
                    continue
                raise
        assert n == distinct == n_prof == distinct_prof, \
            "version %d: %d accounts, %d ids, profiles %d, %d ids" % (
                v, n, distinct, n_prof, distinct_prof)
        want = N * INITIAL + (n - N) * OPENING
        assert total == want, "version %d: balances sum to %s, want %s (%d accounts)" % (
            v, total, want, n)
        with self.lock:
            self.checked[v] = self.checked.get(v, 0) + 1


def switch(conn, app, v):
    """The release: start() and the new code's first statement in one
    transaction (retried if start() cannot take its locks in time)."""
    for attempt in range(10):
        try:
            with conn.transaction():
                conn.execute("SELECT leapfrog.start(%s, %s)", [NAMES[v], SCRIPTS[v]])
                conn.execute("UPDATE app_version SET v = %s", [v])
            break
        except psycopg.errors.LockNotAvailable:
            time.sleep(0.2)
    else:
        raise AssertionError("start(%s) could not take its locks" % NAMES[v])
    with app.lock:
        app.version = v


def replay(conn, log):
    """The committed operations, eagerly: each schema's operations, then the
    next script in one transaction, with app_version as the application
    left it."""
    for v in (1, 2, 3, 4):
        for op in [o for o in log if o[0] == v]:
            kind = op[1]
            stmts = (opening_stmts(v, op[2]) if kind == "open" else
                     visit_stmts(v, op[2]) if kind == "visit" else
                     transfer_stmts(v, op[2], op[3], op[4]))
            with conn.transaction():
                for sql, params in stmts:
                    conn.execute(sql, params)
        if v + 1 in SCRIPTS:
            with conn.transaction():
                conn.execute(SCRIPTS[v + 1])
                conn.execute("UPDATE app_version SET v = %s", [v + 1])


def test_revert_under_load(make_cluster):
    needs_real_extension()
    # slow until the revert has started (the split must still run then)
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 300,
                        "leapfrog.background_workers": 1, "leapfrog.batch_size": 100,
                        "leapfrog.background_naptime": 100})
    c.create_database("bank")
    with c.connect("bank") as conn:
        for st in SETUP:
            conn.execute(st)
        conn.execute("ANALYZE")
    app = App()
    writers = [Writer(c, "bank", app, k) for k in range(NWRITERS)]
    checker = Checker(c, "bank", app)
    for t in writers + [checker]:
        t.start()
    try:
        with c.connect("bank") as conn:
            checker.check(conn)
            time.sleep(1.0)
            switch(conn, app, 2)
            checker.check(conn)
            time.sleep(1.0)
            switch(conn, app, 3)
            checker.check(conn)
            time.sleep(1.0)
            # the revert while the split still runs: it waits for it
            left = conn.execute("SELECT state, leapfrog.remaining('split') "
                                "FROM leapfrog.migrations WHERE name = 'split'").fetchone()
            assert left[0] == "running" and left[1] > 0, "the split is over already: %r" % (left,)
            switch(conn, app, 4)
            after = conn.execute("SELECT after FROM leapfrog.migrations WHERE name = 'revert'"
                                 ).fetchone()[0]
            assert "split" in after, after
            c.set_gucs(**{"leapfrog.background_workers": 2, "leapfrog.batch_size": 1000,
                          "leapfrog.background_naptime": 0})
            c.reload()
            checker.check(conn)
            # the load goes on until the worker is done with the chain
            for name in ("split", "rename_amount", "revert"):
                assert conn.execute("SELECT leapfrog.wait(%s, 90)", [name]).fetchone()[0], name
            time.sleep(1.0)
    finally:
        app.stop.set()
        for t in writers + [checker]:
            t.join(60)
    assert not app.errors, app.errors
    assert all(not t.is_alive() for t in writers + [checker])
    # every schema saw writes and checks
    by_version = {v: sum(1 for o in app.log if o[0] == v) for v in (1, 2, 3, 4)}
    assert all(by_version.values()), by_version
    assert all(checker.checked.get(v) for v in (1, 2, 3, 4)), checker.checked

    with c.connect("bank") as conn:
        done = conn.execute("SELECT name, state, after FROM leapfrog.migrations "
                            "ORDER BY finished_at").fetchall()
        assert [d for d in done if d[0] != "rename_amount"] == \
            [("split", "done", []), ("revert", "done", [])], done
        opened = [o[2] for o in app.log if o[1] == "open"]
        ids = [r[0] for r in conn.execute("SELECT id FROM accounts ORDER BY id").fetchall()]
        assert ids == sorted(list(range(1, N + 1)) + opened), \
            "%d accounts, want %d" % (len(ids), N + len(opened))
        assert conn.execute("SELECT sum(balance), sum(visits) FROM accounts").fetchone() == \
            (N * INITIAL + len(opened) * OPENING, sum(1 for o in app.log if o[1] == "visit"))
        lazy_state = user_tables_state(conn)

    c.create_database("bank_eager", extension=False)
    with c.connect("bank_eager") as conn:
        for st in SETUP:
            conn.execute(st)
        replay(conn, app.log)
        assert_same_tables(user_tables_state(conn), lazy_state, "after the chain")
    assert retired_tables_after_completion(c, "bank") == []
    print("commits by schema version %r, retries %r, checks by version %r"
          % (by_version, app.retries, checker.checked))
