"""Shared pieces of the crash and stress tests: the data set, the two
migrations, and client threads that write through the new schema while
tracking exactly what they committed.

Data set (ids 1..N, values a pure function of the id, so the eager result is
computed here in Python):
  acct(id, grp, bal bigint, note text)
     -> same-name replacement acct(id, grp, bal numeric(14,2) = bal * 1.5,
        note varchar(40) = upper(note), flag bool = bal % 2 = 0)
  orders(id, cust, amount numeric(12,2), status, memo)
     -> split into order_core(id, cust, amount) and
        order_info(id, status, memo, edits int DEFAULT 0)

Writers own disjoint keys (id % n_writers), so each knows the exact value of
its rows at any time.  A transaction counts only once its COMMIT returned;
when the connection dies during COMMIT the outcome is in doubt and is
resolved after reconnecting by looking for the transaction's row in the
ledger table (written in the same transaction; the ledger is not migrated).
"""

import random
import threading
import time
import traceback
from decimal import Decimal

import psycopg

ACCT_MIGRATION = """
CREATE TABLE acct_v2 (id int PRIMARY KEY, grp int NOT NULL, bal numeric(14,2),
                      note varchar(40), flag bool);
INSERT INTO acct_v2 (id, grp, bal, note, flag)
    SELECT id, grp, bal * 1.5, upper(note), bal % 2 = 0 FROM acct;
DROP TABLE acct;
ALTER TABLE acct_v2 RENAME TO acct;
"""

ORDERS_MIGRATION = """
CREATE TABLE order_core (id int PRIMARY KEY, cust int, amount numeric(12,2));
CREATE TABLE order_info (id int PRIMARY KEY, status text, memo text,
                         edits int NOT NULL DEFAULT 0);
CREATE INDEX ON order_core (cust);
INSERT INTO order_core SELECT id, cust, amount FROM orders;
INSERT INTO order_info (id, status, memo) SELECT id, status, memo FROM orders;
DROP TABLE orders;
"""

RETRYABLE = ("40001", "40P01")


def acct_initial(i):
    return {"grp": i % 10, "bal": (i * 37) % 1000, "note": "n%d" % i}


def acct_eager(i):
    a = acct_initial(i)
    return (a["grp"], (Decimal(a["bal"]) * Decimal("1.5")).quantize(Decimal("0.01")),
            a["note"].upper(), a["bal"] % 2 == 0)


def order_eager(i):
    amount = Decimal(i % 500) + Decimal("0.25")
    return (i % 1000, amount), (["new", "paid", "sent"][i % 3], "m%d" % i, 0)


def create_data(conn, n_acct, n_orders):
    conn.execute("""
        CREATE TABLE acct (id int PRIMARY KEY, grp int NOT NULL, bal bigint, note text);
        INSERT INTO acct SELECT i, i % 10, (i * 37) % 1000, 'n' || i
          FROM generate_series(1, {n}) i;
        CREATE TABLE orders (id int PRIMARY KEY, cust int, amount numeric(12,2),
                             status text, memo text);
        INSERT INTO orders SELECT i, i % 1000, (i % 500) + 0.25,
               (ARRAY['new', 'paid', 'sent'])[i % 3 + 1], 'm' || i
          FROM generate_series(1, {m}) i;
        CREATE TABLE ledger (txid text PRIMARY KEY, writer int, acct_ids int[],
                             acct_delta int, order_id int, order_delta numeric(12,2));
    """.format(n=n_acct, m=n_orders))
    conn.execute("VACUUM ANALYZE")


def start_migrations(conn):
    t0 = time.monotonic()
    conn.execute("SELECT leapfrog.start('acct_v2', %s)", [ACCT_MIGRATION])
    t1 = time.monotonic()
    conn.execute("SELECT leapfrog.start('split_orders', %s)", [ORDERS_MIGRATION])
    t2 = time.monotonic()
    return t1 - t0, t2 - t1


class Writer(threading.Thread):
    """Updates its own keys through the new schema; tracks committed effects."""

    ledger = "ledger"           # the table a transaction records itself in

    def __init__(self, cluster, wid, nwriters, n_acct, n_orders, dbname, seed,
                 rr_fraction=0.2, think=0.002, max_txns=10 ** 6):
        self._init_tracking(cluster, wid, nwriters, dbname, seed, rr_fraction, think, max_txns)
        self.n_acct = n_acct
        self.n_orders = n_orders
        self.acct_delta = {}      # id -> committed sum of deltas
        self.order_delta = {}     # id -> committed sum of deltas
        self.order_edits = {}     # id -> committed count of edits

    def _init_tracking(self, cluster, wid, nwriters, dbname, seed, rr_fraction, think,
                       max_txns, name="writer"):
        """What every tracked writer keeps: its connection, its pace and what
        it saw commit, abort or fail."""
        super().__init__(daemon=True, name="%s-%d" % (name, wid))
        self.cluster = cluster
        self.wid = wid
        self.nw = nwriters
        self.dbname = dbname
        self.rng = random.Random(seed)
        self.rr_fraction = rr_fraction
        self.think = think
        self.max_txns = max_txns
        self.stop_event = threading.Event()
        self.pause_event = threading.Event()    # set: finish the txn, then hold
        self.paused = threading.Event()         # set by the thread while holding
        self.committed = []       # txids whose COMMIT returned (or resolved committed)
        self.aborted_by_crash = 0
        self.in_doubt = 0
        self.in_doubt_committed = 0
        self.retries = {"40001": 0, "40P01": 0}
        self.errors = []          # unexpected: (txid, sqlstate, message)
        self.reconnects = 0
        self.conn = None
        self.seq = 0
        self.verified_reads = 0
        self.current = None

    # -- keys
    def _own(self, n):
        """A random key of this writer: ids with (id - 1) % nwriters == wid."""
        k = self.rng.randint(0, (n - 1 - self.wid) // self.nw)
        return k * self.nw + self.wid + 1

    def _connect(self, deadline):
        last = None
        for _ in range(2000):
            if time.monotonic() > deadline:
                break
            try:
                c = self.cluster.connect(self.dbname, autocommit=True,
                                         application_name="lf-writer-%d" % self.wid)
                c.execute("SET statement_timeout = '60s'")
                return c
            except psycopg.Error as e:
                last = e
                time.sleep(0.1)
        raise RuntimeError("writer %d could not reconnect: %r" % (self.wid, last))

    def _ensure_conn(self):
        if self.conn is None or self.conn.closed or self.conn.broken:
            if self.conn is not None:
                self.reconnects += 1
                try:
                    self.conn.close()
                except Exception:
                    pass
            self.conn = self._connect(time.monotonic() + 90)

    def _apply(self, tx):
        for i in tx["ids"]:
            self.acct_delta[i] = self.acct_delta.get(i, 0) + tx["d"]
        o = tx["oid"]
        self.order_delta[o] = self.order_delta.get(o, Decimal(0)) + tx["od"]
        self.order_edits[o] = self.order_edits.get(o, 0) + 1
        self.committed.append(tx["txid"])

    def expected_acct(self, i):
        g, bal, note, flag = acct_eager(i)
        return (g, bal + self.acct_delta.get(i, 0), note, flag)

    def expected_order(self, i):
        (cust, amount), (status, memo, edits) = order_eager(i)
        return (cust, amount + self.order_delta.get(i, Decimal(0)),
                edits + self.order_edits.get(i, 0))

    def _resolve_in_doubt(self, tx):
        self._ensure_conn()
        row = self.conn.execute("SELECT 1 FROM %s WHERE txid = %%s" % self.ledger,
                                [tx["txid"]]).fetchone()
        if row:
            self.in_doubt_committed += 1
            self._apply(tx)

    def run(self):
        try:
            self._run()
        except Exception:
            self.errors.append(("fatal", None, traceback.format_exc()))
        finally:
            if self.conn is not None:
                try:
                    self.conn.close()
                except Exception:
                    pass

    def _run(self):
        for _ in range(self.max_txns):
            if self.stop_event.is_set():
                return
            if self.pause_event.is_set():
                self.paused.set()
                for _ in range(6000):
                    if not self.pause_event.is_set() or self.stop_event.is_set():
                        break
                    time.sleep(0.01)
                self.paused.clear()
            self.seq += 1
            tx = self._draw()
            iso = "REPEATABLE READ" if self.rng.random() < self.rr_fraction else "READ COMMITTED"
            for attempt in range(50):
                outcome = self._one_txn(tx, iso)
                if outcome != "retry":
                    break
                time.sleep(0.001 * self.rng.randint(1, 20))
            if outcome == "error" and len(self.errors) > 20:
                return
            if self.think:
                time.sleep(self.think)

    def _draw(self):
        k = self.rng.randint(1, 3)
        ids = sorted(set(self._own(self.n_acct) for _ in range(k)))
        return {"txid": "w%d-%d" % (self.wid, self.seq), "ids": ids,
                "d": self.rng.choice([-7, -3, -1, 1, 2, 5, 11]),
                "oid": self._own(self.n_orders),
                "od": Decimal(self.rng.randint(-300, 300)) / 100}

    def _body(self, c, tx):
        """The transaction's statements (its ledger row last)."""
        self.current = "UPDATE acct"
        cur = c.execute("UPDATE acct SET bal = bal + %s WHERE id = ANY(%s)",
                        [tx["d"], tx["ids"]])
        if cur.rowcount != len(tx["ids"]):
            self.errors.append((tx["txid"], None, "UPDATE acct touched %d rows, want %d (ids %r)"
                                % (cur.rowcount, len(tx["ids"]), tx["ids"])))
        self.current = "UPDATE order_core"
        cur = c.execute("UPDATE order_core SET amount = amount + %s WHERE id = %s",
                        [tx["od"], tx["oid"]])
        if cur.rowcount != 1:
            self.errors.append((tx["txid"], None, "UPDATE order_core touched %d rows (id %d)"
                                % (cur.rowcount, tx["oid"])))
        self.current = "UPDATE order_info"
        cur = c.execute("UPDATE order_info SET edits = edits + 1 WHERE id = %s", [tx["oid"]])
        if cur.rowcount != 1:
            self.errors.append((tx["txid"], None, "UPDATE order_info touched %d rows (id %d)"
                                % (cur.rowcount, tx["oid"])))
        self.current = "INSERT INTO ledger"
        c.execute("INSERT INTO ledger VALUES (%s, %s, %s, %s, %s, %s)",
                  [tx["txid"], self.wid, tx["ids"], tx["d"], tx["oid"], tx["od"]])

    def _one_txn(self, tx, iso):
        try:
            self._ensure_conn()
        except RuntimeError as e:
            self.errors.append((tx["txid"], None, str(e)))
            self.stop_event.set()
            return "error"
        c = self.conn
        phase = "body"
        self.current = "BEGIN"
        try:
            c.execute("BEGIN ISOLATION LEVEL " + iso)
            self._body(c, tx)
            phase = "commit"
            self.current = "COMMIT"
            c.execute("COMMIT")
        except psycopg.Error as e:
            st = getattr(e, "sqlstate", None)
            if c.broken or c.closed or isinstance(e, psycopg.OperationalError) and st in (
                    None, "57P01", "57P02", "57P03", "08006", "08003", "08000"):
                if phase == "commit":
                    self.in_doubt += 1
                    try:
                        self._resolve_in_doubt(tx)
                    except (psycopg.Error, RuntimeError) as e2:
                        # Try once more after the server is back.
                        try:
                            self.conn = None
                            time.sleep(0.5)
                            self._resolve_in_doubt(tx)
                        except (psycopg.Error, RuntimeError) as e3:
                            self.errors.append((tx["txid"], None, "in-doubt unresolved: %r %r" % (e2, e3)))
                            self.stop_event.set()
                            return "error"
                else:
                    self.aborted_by_crash += 1
                return "crashed"
            try:
                c.execute("ROLLBACK")
            except psycopg.Error:
                pass
            if st in RETRYABLE:
                self.retries[st] += 1
                return "retry"
            self.errors.append((tx["txid"], st, "%s: %s (%s, in %s, at %.3f)" % (
                type(e).__name__, e, iso, self.current, time.time())))
            return "error"
        self._apply(tx)
        if self.rng.random() < 0.2:
            self._verify(tx)
        return "ok"

    def _verify(self, tx):
        """Read own rows back (join of the split tables too) and compare."""
        try:
            rows = self.conn.execute(
                "SELECT id, grp, bal, note, flag FROM acct WHERE id = ANY(%s) ORDER BY id",
                [tx["ids"]]).fetchall()
            got = {r[0]: tuple(r[1:]) for r in rows}
            want = {i: self.expected_acct(i) for i in tx["ids"]}
            if got != want or len(rows) != len(tx["ids"]):
                self.errors.append((tx["txid"], None, "read acct %r, want %r" % (rows, want)))
            r = self.conn.execute(
                "SELECT c.cust, c.amount, i.edits FROM order_core c JOIN order_info i "
                "ON i.id = c.id WHERE c.id = %s", [tx["oid"]]).fetchall()
            want_o = [self.expected_order(tx["oid"])]
            if [tuple(x) for x in r] != want_o:
                self.errors.append((tx["txid"], None, "read order %d: %r, want %r"
                                    % (tx["oid"], r, want_o)))
            self.verified_reads += 1
        except psycopg.Error:
            # A crash in the middle of a read: nothing to learn.
            pass


class Writers:
    def __init__(self, cluster, n, n_acct, n_orders, dbname="app", seed=1, **kw):
        self.threads = [Writer(cluster, w, n, n_acct, n_orders, dbname, seed * 100 + w, **kw)
                        for w in range(n)]

    def start(self):
        for t in self.threads:
            t.start()

    def stop(self, timeout=90):
        for t in self.threads:
            t.stop_event.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        stuck = [t.name for t in self.threads if t.is_alive()]
        assert not stuck, "writer threads did not stop: %r" % stuck

    def committed(self):
        return sum(len(t.committed) for t in self.threads)

    def pause(self, timeout=60):
        """Let every writer finish its transaction and hold (bounded)."""
        for t in self.threads:
            t.pause_event.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            while t.is_alive() and not t.paused.is_set() and time.monotonic() < deadline:
                time.sleep(0.01)
        stuck = [t.name for t in self.threads if t.is_alive() and not t.paused.is_set()]
        assert not stuck, "writers did not pause: %r" % stuck

    def resume(self):
        for t in self.threads:
            t.pause_event.clear()

    def errors(self):
        return [e for t in self.threads for e in t.errors]

    def summary(self):
        return {
            "committed": self.committed(),
            "in_doubt": sum(t.in_doubt for t in self.threads),
            "in_doubt_committed": sum(t.in_doubt_committed for t in self.threads),
            "aborted_by_crash": sum(t.aborted_by_crash for t in self.threads),
            "retries_40001": sum(t.retries["40001"] for t in self.threads),
            "retries_40P01": sum(t.retries["40P01"] for t in self.threads),
            "reconnects": sum(t.reconnects for t in self.threads),
            "verified_reads": sum(t.verified_reads for t in self.threads),
        }

    def expected_acct(self, i):
        return self.threads[(i - 1) % len(self.threads)].expected_acct(i)

    def expected_order(self, i):
        return self.threads[(i - 1) % len(self.threads)].expected_order(i)

    def wait_committed(self, n, timeout):
        deadline = time.monotonic() + timeout
        target = self.committed() + n
        for _ in range(int(timeout / 0.05) + 10):
            if self.committed() >= target or time.monotonic() > deadline:
                break
            if any(t.errors for t in self.threads):
                break
            time.sleep(0.05)
        return self.committed() >= target


# ---------------------------------------------------------------------------
# GROUP BY and join migrations (units.c): the unit that migrates is a group or
# a join key, all the rows of every input sharing it.
#
# Data set (SQL only; the eager result is the same script run eagerly, before
# start(), on copies of the inputs in schema `eager`, which also keeps
# copies eager.copy_<input> of the inputs):
#   lines(id, o, w, item, amount, qty): order lines, 1 to 15 lines an order,
#     spread over the table (the lines of an order lie in different blocks);
#     w is NULL on every 53rd line (a group of its own per order, found by IS NULL)
#     -> total(o, w, nlines, amount, qty, adj DEFAULT 0): GROUP BY o, w
#   stock(id, w, i, qty) LEFT JOIN sline(id, sw, si, amount) ON (w, i) = (sw, si):
#     4000 stock keys have two stock rows, far apart; most keys have one or
#     two lines; some lines match no stock row; NULL keys on both sides
#     -> ls(sid, w, i, qty, lid, amount)
# Each input has a btree index on its key, created before start().
#
# UnitWriters update the new tables through the lazy schema (total.adj of
# one group and ls.qty of the rows of one stock row, plus a row in
# unit_ledger, in one transaction) and track what committed, as Writers do.
# ---------------------------------------------------------------------------

GROUP_MIGRATION = """
CREATE TABLE total (o int NOT NULL, w int, nlines bigint NOT NULL, amount numeric(14,2),
                    qty bigint, adj int NOT NULL DEFAULT 0);
CREATE UNIQUE INDEX total_ow ON total (o, w);
INSERT INTO total (o, w, nlines, amount, qty)
    SELECT o, w, count(*), sum(amount), sum(qty) FROM lines GROUP BY o, w;
DROP TABLE lines;
"""

JOIN_MIGRATION = """
CREATE TABLE ls (sid int NOT NULL, w int, i int, qty int, lid int, amount int);
CREATE INDEX ls_sid ON ls (sid);
CREATE INDEX ls_wi ON ls (w, i);
INSERT INTO ls SELECT s.id, s.w, s.i, s.qty, l.id, l.amount
    FROM stock s LEFT JOIN sline l ON l.sw = s.w AND l.si = s.i;
DROP TABLE sline;
DROP TABLE stock;
"""

UNIT_MIGRATIONS = (("lines_total", GROUP_MIGRATION), ("stock_lines", JOIN_MIGRATION))


def create_unit_data(conn, n_lines, n_stock, n_sline):
    """The inputs, their key indexes, the ledger, and the eager result of both
    scripts in schema `eager` (run on copies of the inputs)."""
    q = n_lines // 4
    conn.execute("""
        CREATE TABLE lines (id int PRIMARY KEY, o int NOT NULL, w int, item int,
                            amount numeric(10,2), qty int);
        INSERT INTO lines
        SELECT g, CASE WHEN p < 2 * {q} THEN p / 5
                       WHEN p < 3 * {q} THEN 2 * {q} / 5 + (p - 2 * {q}) / 3
                       ELSE 2 * {q} / 5 + {q} / 3 + 1 + (p - 3 * {q}) / 15 END + 1,
               CASE WHEN g % 53 = 0 THEN NULL ELSE p % 3 END,
               g % 211, (g % 997) / 4.0, g % 9
          FROM (SELECT g, ((g::bigint * 7919) % {n})::int AS p
                  FROM generate_series(1, {n}) g) s;
        CREATE INDEX lines_ow ON lines (o, w);
        CREATE TABLE stock (id int PRIMARY KEY, w int, i int, qty int);
        INSERT INTO stock
        SELECT g, CASE WHEN g % 101 = 0 THEN NULL ELSE g % 10 END, (g / 10) % 1600, g % 500
          FROM generate_series(1, {ns}) g;
        CREATE INDEX stock_wi ON stock (w, i);
        CREATE TABLE sline (id int PRIMARY KEY, sw int, si int, amount int);
        INSERT INTO sline
        SELECT g, CASE WHEN g % 89 = 0 THEN NULL ELSE (g / 1700) % 10 END,
               CASE WHEN g % 97 = 0 THEN NULL ELSE g % 1700 END, g % 1000
          FROM generate_series(1, {nl}) g;
        CREATE INDEX sline_siw ON sline (si, sw);
        CREATE TABLE unit_ledger (txid text PRIMARY KEY, writer int, o int, w int,
                                  gdelta int, sid int, sdelta int);
        CREATE SCHEMA eager;
        CREATE TABLE eager.copy_lines AS SELECT * FROM lines;
        CREATE TABLE eager.copy_stock AS SELECT * FROM stock;
        CREATE TABLE eager.copy_sline AS SELECT * FROM sline;
        CREATE TABLE eager.lines AS SELECT * FROM eager.copy_lines;
        CREATE TABLE eager.stock AS SELECT * FROM eager.copy_stock;
        CREATE TABLE eager.sline AS SELECT * FROM eager.copy_sline;
    """.format(n=n_lines, q=q, ns=n_stock, nl=n_sline))
    conn.execute("SET search_path = eager")
    for _, script in UNIT_MIGRATIONS:
        conn.execute(script)
    conn.execute("RESET search_path")
    conn.execute("VACUUM ANALYZE")


def start_unit_migrations(conn):
    """Starts both; returns their durations and the retired tables by input name."""
    oids = {t: conn.execute("SELECT %s::regclass::oid", [t]).fetchone()[0]
            for t in ("lines", "stock", "sline")}
    times = []
    for name, script in UNIT_MIGRATIONS:
        t0 = time.monotonic()
        conn.execute("SELECT leapfrog.start(%s, %s)", [name, script])
        times.append(time.monotonic() - t0)
    retired = {t: conn.execute("SELECT %s::oid::regclass::text", [o]).fetchone()[0]
               for t, o in oids.items()}
    return times, retired


def load_unit_eager(conn):
    """The eager result, for the writers: per group (o, w) its row of total,
    per stock id the number of its rows in ls and their sum of qty."""
    groups = {(o, w): (n, a, q) for o, w, n, a, q in conn.execute(
        "SELECT o, w, nlines, amount, qty FROM eager.total").fetchall()}
    stock = {sid: (n, s) for sid, n, s in conn.execute(
        "SELECT sid, count(*), sum(qty) FROM eager.ls GROUP BY sid").fetchall()}
    return groups, stock


class UnitWriter(Writer):
    """Updates a group of total and the ls rows of a stock row per
    transaction; tracks committed effects (writers own disjoint keys)."""

    ledger = "unit_ledger"

    def __init__(self, cluster, wid, nwriters, group_keys, groups, stock, dbname, seed,
                 rr_fraction=0.2, think=0.002, max_txns=10 ** 6):
        self._init_tracking(cluster, wid, nwriters, dbname, seed, rr_fraction, think,
                            max_txns, name="unit-writer")
        self.my_groups = group_keys[wid::nwriters]
        self.my_sids = sorted(stock)[wid::nwriters]
        self.groups = groups            # (o, w) -> eager (nlines, amount, qty)
        self.stock = stock              # sid -> eager (rows in ls, sum of qty)
        self.gdelta = {}                # (o, w) -> committed sum of deltas to adj
        self.sdelta = {}                # sid -> committed sum of deltas to qty (each row)

    @staticmethod
    def _group_where(key):
        o, w = key
        if w is None:
            return "o = %s AND w IS NULL", [o]
        return "o = %s AND w = %s", [o, w]

    def _apply(self, tx):
        self.gdelta[tx["g"]] = self.gdelta.get(tx["g"], 0) + tx["gd"]
        self.sdelta[tx["sid"]] = self.sdelta.get(tx["sid"], 0) + tx["sd"]
        self.committed.append(tx["txid"])

    def _draw(self):
        return {"txid": "u%d-%d" % (self.wid, self.seq),
                "g": self.rng.choice(self.my_groups), "gd": self.rng.choice([-5, -1, 1, 3, 7]),
                "sid": self.rng.choice(self.my_sids), "sd": self.rng.choice([-2, 1, 4])}

    def _body(self, c, tx):
        self.current = "UPDATE total"
        where, args = self._group_where(tx["g"])
        cur = c.execute("UPDATE total SET adj = adj + %s WHERE " + where, [tx["gd"]] + args)
        if cur.rowcount != 1:
            self.errors.append((tx["txid"], None, "UPDATE total touched %d rows (group %r)"
                                % (cur.rowcount, tx["g"])))
        self.current = "UPDATE ls"
        cur = c.execute("UPDATE ls SET qty = qty + %s WHERE sid = %s", [tx["sd"], tx["sid"]])
        if cur.rowcount != self.stock[tx["sid"]][0]:
            self.errors.append((tx["txid"], None, "UPDATE ls touched %d rows, want %d (sid %d)"
                                % (cur.rowcount, self.stock[tx["sid"]][0], tx["sid"])))
        self.current = "INSERT INTO unit_ledger"
        c.execute("INSERT INTO unit_ledger VALUES (%s, %s, %s, %s, %s, %s, %s)",
                  [tx["txid"], self.wid, tx["g"][0], tx["g"][1], tx["gd"], tx["sid"], tx["sd"]])

    def _verify(self, tx):
        """Read the group and the stock row's rows back and compare."""
        try:
            where, args = self._group_where(tx["g"])
            r = self.conn.execute("SELECT nlines, amount, qty, adj FROM total WHERE " + where,
                                  args).fetchall()
            want = [self.groups[tx["g"]] + (self.gdelta.get(tx["g"], 0),)]
            if [tuple(x) for x in r] != want:
                self.errors.append((tx["txid"], None, "read group %r: %r, want %r"
                                    % (tx["g"], r, want)))
            r = self.conn.execute("SELECT count(*), sum(qty) FROM ls WHERE sid = %s",
                                  [tx["sid"]]).fetchone()
            n, s = self.stock[tx["sid"]]
            want = (n, s + n * self.sdelta.get(tx["sid"], 0))
            if tuple(r) != want:
                self.errors.append((tx["txid"], None, "read ls sid %d: %r, want %r"
                                    % (tx["sid"], r, want)))
            self.verified_reads += 1
        except psycopg.Error:
            pass


class UnitWriters(Writers):
    """UnitWriter threads, with Writers' start/stop/pause/summary."""

    def __init__(self, cluster, n, groups, stock, dbname="app", seed=1, **kw):
        keys = sorted(groups, key=lambda k: (k[0], k[1] is None, k[1] or 0))
        self.threads = [UnitWriter(cluster, w, n, keys, groups, stock, dbname, seed * 100 + w, **kw)
                        for w in range(n)]

    def gdelta(self):
        return {k: d for t in self.threads for k, d in t.gdelta.items()}

    def sdelta(self):
        return {k: d for t in self.threads for k, d in t.sdelta.items()}
