#!/usr/bin/env python3
"""Leapfrog demo (`make demo` runs it through scripts/demo.sh, which builds
the extension), on the benchmark's TPC-C harness.

On a throwaway PostgreSQL 15 cluster with leapfrog preloaded, for one of the
benchmark's migrations (--migration: the split of customer by default, the
order_line aggregate or the stock/order_line join):
 1. load TPC-C (W=50 by default for the split: 1.5M customers; W=10 for the
    aggregate and the join, whose inputs are order_line);
 2. run the migration eagerly on a copy of the database, with no load,
    to show what it costs (the tables locked for that long) and to keep its
    result as the oracle;
 3. show what Leapfrog will do with the script (`leapfrog plan`, the
    project's command-line tool, python/leapfrog_cli), then start a live
    TPC-C load (pgbench, the five transactions);
 4. apply the same migration with `leapfrog start --then`, the new
    application code in the same transaction, and print the switch time;
 5. show the progress bar of `leapfrog wait` until the background worker
    and the load have moved every row;
 6. stop the load and print its error count (expected: 0);
 7. check the result, against the eager oracle where the load cannot change
    it and with invariants elsewhere (a lost or doubled row or update breaks
    them): split, row counts and keys, checksums of the columns the load
    never writes, TPC-C money/count invariants across the switch; aggregate,
    every order has one total and it is the sum of its lines; join, every
    stock row and every line of every order is there once, and a stock
    row's columns agree across its lines;
 8. write a plot (throughput, switch, progress) and print its path.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the project's shared Python modules (throwaway clusters)
sys.path.insert(0, os.path.join(REPO, "python"))

import psycopg  # noqa: E402
from leapfrog_cluster import Cluster, extension_installed  # noqa: E402

from leapfrog_bench import tpcc  # noqa: E402
from leapfrog_bench.migrations import MIGRATIONS  # noqa: E402
from leapfrog_bench.settings import default_settings  # noqa: E402
from leapfrog_bench.workload import PgbenchRun  # noqa: E402



def say(msg=""):
    print(msg, flush=True)


def not_built():
    log = os.environ.get("LEAPFROG_DEMO_INSTALL_LOG")
    say("")
    say("Leapfrog is not built yet: `make install` did not produce the extension.")
    if log and os.path.exists(log):
        with open(log, errors="replace") as f:
            lines = [ln.rstrip() for ln in f if "error" in ln.lower()]
        if lines:
            say("First errors from the build (full log: %s):" % log)
            for ln in lines[:5]:
                say("    " + ln)
    say("The demo needs the extension (leapfrog.start).  Once `make install` works,")
    say("run `make demo` again.  The eager side alone: scripts/demo.sh --eager-only")
    return 3


def split_checksums(conn):
    """Order-independent checksums of what the load never writes."""
    pub = conn.execute(
        "SELECT count(*), sum(hashtext(p::text)::bigint) FROM customer_public p").fetchone()
    prv = conn.execute(
        "SELECT count(*), sum(hashtext(row(c_w_id, c_d_id, c_id, c_credit, c_credit_lim,"
        " c_discount)::text)::bigint) FROM customer_private").fetchone()
    return {"customer_public rows and checksum": tuple(pub),
            "customer_private rows and checksum (columns the load never writes)": tuple(prv)}


INVARIANTS_OLD = """
SELECT (SELECT sum(c_ytd_payment) FROM customer) - (SELECT sum(h_amount) FROM history),
       (SELECT sum(c_payment_cnt) FROM customer) - (SELECT count(*) FROM history),
       (SELECT sum(c_delivery_cnt) FROM customer)
         - (SELECT count(*) FROM orders WHERE o_carrier_id IS NOT NULL),
       (SELECT sum(c_balance) + sum(c_ytd_payment) FROM customer)
         - (SELECT coalesce(sum(ol_amount), 0) FROM order_line WHERE ol_delivery_d IS NOT NULL)
"""
INVARIANTS_NEW = INVARIANTS_OLD.replace("FROM customer)", "FROM customer_private)")
INVARIANT_NAMES = ["sum(c_ytd_payment) - sum(h_amount)",
                   "sum(c_payment_cnt) - count(history)",
                   "sum(c_delivery_cnt) - delivered orders",
                   "sum(c_balance + c_ytd_payment) - delivered amounts"]


def split_checks(conn, oracle, before):
    """(ok, line) per check of the split's result."""
    out = []
    got = split_checksums(conn)
    for k in got:
        out.append((got[k] == oracle[k], f"{k} match the eager result: {got[k][0]:,} rows"))
    orphans = conn.execute(
        "SELECT count(*) FROM customer_private a FULL JOIN customer_public b"
        " USING (c_w_id, c_d_id, c_id) WHERE a.c_id IS NULL OR b.c_id IS NULL").fetchone()[0]
    out.append((orphans == 0, f"same keys in both new tables ({orphans} unmatched)"))
    after = conn.execute(INVARIANTS_NEW).fetchone()
    for name, b, a in zip(INVARIANT_NAMES, before, after):
        out.append((b == a, f"invariant {name}: before {b}, after {a}"))
    return out


def aggregate_checks(conn, oracle, before):
    """Orders never change their lines' amounts and the new code records the
    total of each new order: every order has exactly one total (the primary
    key forbids two), and it is the sum of its lines.  But for orders the old
    code entered before the switch and finished after it (their lines go into
    order_line once the switch lets them, and the old code records no
    total): eagerly the same, as the eager script only holds order_line in
    SHARE mode while it runs."""
    missing, late, extra, wrong = conn.execute("""
SELECT count(*) FILTER (WHERE t.ot_o_id IS NULL),
       count(*) FILTER (WHERE t.ot_o_id IS NULL AND o.o_entry_d > %s::timestamptz::timestamp),
       count(*) FILTER (WHERE l.ol_o_id IS NULL),
       count(*) FILTER (WHERE t.ot_amount <> l.amount)
  FROM (SELECT ol_w_id, ol_d_id, ol_o_id, sum(ol_amount) AS amount FROM order_line
         GROUP BY 1, 2, 3) l
  FULL JOIN order_total t ON (t.ot_w_id, t.ot_d_id, t.ot_o_id) = (l.ol_w_id, l.ol_d_id, l.ol_o_id)
  LEFT JOIN orders o ON (o.o_w_id, o.o_d_id, o.o_id) = (l.ol_w_id, l.ol_d_id, l.ol_o_id)
""", (before["switch"],)).fetchone()
    n = conn.execute("SELECT count(*) FROM order_total").fetchone()[0]
    at_start = conn.execute(
        "SELECT count(*) FROM order_total WHERE ot_o_id <= 3000").fetchone()[0]
    return [(late == 0 and extra == 0,
             f"every order has one total ({n:,} totals; {extra} totals without lines; "
             f"{missing} orders without, entered by the old code before the switch, "
             f"{late} after it)"),
            (wrong == 0, f"every total is the sum of its order's lines ({wrong} differ)"),
            (at_start == oracle["totals of the loaded orders"],
             f"totals of the loaded orders: {at_start:,}, eager {oracle['totals of the loaded orders']:,}")]


def aggregate_oracle(conn):
    return {"totals of the loaded orders": conn.execute(
        "SELECT count(*) FROM order_total WHERE ot_o_id <= 3000").fetchone()[0]}


def join_checks(conn, oracle, before):
    """The load adds lines (NewOrder) and changes stock columns and delivery
    dates, never stock rows: every stock row is there, every line of every
    order once (a unique index), and a stock row's columns agree across its
    lines (they are one row denormalized)."""
    stock, split = conn.execute("""
SELECT count(*), count(*) FILTER (WHERE versions > 1) FROM (
  SELECT count(DISTINCT (s_quantity, s_ytd, s_order_cnt, s_remote_cnt, s_data)) AS versions
    FROM orderline_stock GROUP BY s_w_id, s_i_id) s""").fetchone()
    short = conn.execute("""
SELECT count(*) FROM orders o
 WHERE o.o_ol_cnt <> (SELECT count(*) FROM orderline_stock x
                       WHERE (x.ol_w_id, x.ol_d_id, x.ol_o_id) = (o.o_w_id, o.o_d_id, o.o_id))""").fetchone()[0]
    return [(stock == oracle["stock rows"], f"every stock row is there: {stock:,}, eager {oracle['stock rows']:,}"),
            (split == 0, f"a stock row's columns agree across its lines ({split} disagree)"),
            (short == 0, f"every order has all its lines ({short} orders short)")]


def join_oracle(conn):
    return {"stock rows": conn.execute(
        "SELECT count(DISTINCT (s_w_id, s_i_id)) FROM orderline_stock").fetchone()[0]}


# per migration: default W, what eagerly locks, the oracle kept from the eager
# run, the checks of the lazy result, and the invariants read before the switch
DEMOS = {
    "split": (50, "customer, stalling 4 of the 5 TPC-C transactions",
              split_checksums, split_checks, INVARIANTS_OLD),
    "aggregate": (10, "order_line against writes (NewOrder, Delivery)",
                  aggregate_oracle, aggregate_checks, None),
    "join": (10, "order_line and stock, stalling every TPC-C transaction",
             join_oracle, join_checks, None),
}


class Load(threading.Thread):
    """TPC-C load as back-to-back 5-second pgbench runs (each one ends with
    complete counts), until stopped."""

    def __init__(self, cluster, db, outdir, warehouses, clients, rate):
        super().__init__(daemon=True)
        self.args = (cluster, db, warehouses, clients, rate)
        self.outdir = outdir
        self.stop_ev = threading.Event()
        self.runs = []
        self.txs = []
        self.errors = []
        self.unexplained = 0

    def run(self):
        cluster, db, W, clients, rate = self.args
        i = 0
        while not self.stop_ev.is_set():
            pg = PgbenchRun(cluster, db, os.path.join(self.outdir, f"load{i:03d}"), W,
                            clients, min(2, clients), 5, rate=rate)
            pg.start()
            pg.wait()
            s = pg.summary()
            self.runs.append(s)
            self.txs += pg.parse()
            if s["aborted_clients"] or s["rc"] != 0:
                self.errors += s["errors_sample"] or [f"pgbench exit {s['rc']}"]
                if not s["aborted_clients"]:
                    self.unexplained += 1
            i += 1

    def totals(self):
        ok = sum(1 for t in self.txs if t[1] is not None)
        failed = sum(1 for t in self.txs if t[1] is None)
        aborted = sum(r["aborted_clients"] for r in self.runs) + self.unexplained
        return ok, failed, aborted

    def recent_tps(self, window=3.0):
        now = time.time()
        n = sum(1 for t in self.txs[-5000:] if t[1] is not None and now - 8 < t[0] <= now - 5 + window)
        return n / window


def leapfrog_cli(cl, *args, capture=False, cwd=None):
    """Run the project's command-line tool (.venv/bin/leapfrog, installed by
    `make deps`; else python -m leapfrog_cli from python/), connected to the
    demo database with -d conninfo: the cluster's socket directory, port and
    user.  Prints the command; its output goes to the terminal unless
    captured.  The CompletedProcess."""
    exe = os.path.join(os.path.dirname(sys.executable), "leapfrog")
    cmd = [exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", "leapfrog_cli"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(REPO, "python")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    argv = ["-d", cl.conninfo("tpcc")] + [str(a) for a in args]
    say("$ leapfrog " + shlex.join(argv))
    return subprocess.run(cmd + argv, cwd=cwd, env=env, text=True,
                          stdout=subprocess.PIPE if capture else None)


class Sampler(threading.Thread):
    """The fraction migrated (leapfrog.migrations), every half second, for
    the plot, while `leapfrog wait` draws the bar."""

    def __init__(self, cl, name):
        super().__init__(daemon=True)
        self.cl, self.name = cl, name
        self.stop_ev = threading.Event()
        self.points = []

    def run(self):
        with psycopg.connect(self.cl.conninfo("tpcc"), autocommit=True) as c:
            while True:
                row = c.execute("SELECT tuples_total, tuples_migrated FROM leapfrog.migrations"
                                " WHERE name = %s", (self.name,)).fetchone()
                if row and row[0]:
                    self.points.append((time.time(), min(1.0, (row[1] or 0) / row[0])))
                if self.stop_ev.wait(0.5):
                    break


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--migration", choices=sorted(DEMOS), default="split",
                    help="which of the benchmark's migrations (default: split)")
    ap.add_argument("--warehouses", type=int, default=None,
                    help="TPC-C scale; default 50 for the split (1.5M customers), "
                         "10 for the aggregate and the join (3M order lines)")
    ap.add_argument("--rate", type=int, default=300, help="load, transactions per second")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--eager-only", action="store_true",
                    help="without the extension: show the eager migration only")
    ap.add_argument("--timeout", type=int, default=900,
                    help="give up waiting for the migration after this many seconds")
    args = ap.parse_args()

    have_ext = extension_installed() and os.environ.get("LEAPFROG_DEMO_INSTALL") != "failed"
    if not have_ext and not args.eager_only:
        return not_built()

    mig = MIGRATIONS[args.migration]
    name = "demo_" + args.migration
    default_w, locks, make_oracle, checks, invariants = DEMOS[args.migration]
    out = os.path.join(REPO, "bench", "out", "demo-" + time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    W = args.warehouses or default_w
    say(f"Leapfrog demo: {mig.title}; TPC-C W={W} ({W * 30000:,} customers, "
        f"about {W * 300000:,} order lines); output in {out}")
    cl = Cluster(settings=default_settings("6GB" if W >= 20 else "2GB"),
                 preload=have_ext, log=say)
    load = None
    try:
        cl.init().start()
        cl.wait_ready()
        say(f"cluster: {cl.dir} (port {cl.port}), leapfrog preloaded: {cl.leapfrog}")
        t = time.time()
        tpcc.create_template(cl, "tpcc", W, workers=2, leapfrog=have_ext,
                             log=lambda m: say(m))
        say(f"loaded in {time.time() - t:.0f}s")

        # -- eager oracle ---------------------------------------------------
        with psycopg.connect(cl.conninfo(), autocommit=True) as c:
            c.execute("CREATE DATABASE oracle TEMPLATE tpcc STRATEGY FILE_COPY")
        with psycopg.connect(cl.conninfo("oracle")) as c:
            t = time.time()
            c.execute(mig.lock_sql(mig.eager_lock))
            for s in mig.statements():
                c.execute(s)
            c.execute(mig.tx())
            c.commit()
            eager_s = time.time() - t
            oracle = make_oracle(c)
        with psycopg.connect(cl.conninfo(), autocommit=True) as c:
            c.execute("DROP DATABASE oracle")
        say(f"eager {args.migration}, no load: {eager_s:.1f}s "
            f"-- it would lock {locks} that long")
        if not have_ext:
            say("")
            return not_built()

        # -- the plan, live load, then the lazy switch -------------------------
        # The script and the new application code as files, for the CLI.
        with open(os.path.join(out, "script.sql"), "w") as f:
            f.write(mig.script())
        with open(os.path.join(out, "tx.sql"), "w") as f:
            f.write(mig.tx())
        say("")
        say("What Leapfrog will do with the migration script (nothing changes yet):")
        if leapfrog_cli(cl, "plan", "script.sql", cwd=out).returncode != 0:
            say("leapfrog plan: the script would not start (see above)")
            return 1
        say("")
        with psycopg.connect(cl.conninfo("tpcc"), autocommit=True) as c:
            before = c.execute(invariants).fetchone() if invariants else {}
        load = Load(cl, "tpcc", out, W, args.clients, args.rate)
        load.start()
        say(f"TPC-C load started: {args.rate} tps, {args.clients} clients")
        time.sleep(6)
        # The switch: `leapfrog start --then` runs start() and the new code in
        # one transaction and reports its timings (--json); the probe, the new
        # schema's first answer, runs right after on a connection opened before.
        with psycopg.connect(cl.conninfo("tpcc"), autocommit=True) as probe:
            res = leapfrog_cli(cl, "start", name, "script.sql", "--then", "tx.sql", "--json",
                               capture=True, cwd=out)
            if res.returncode != 0:
                say(f"leapfrog start failed (exit status {res.returncode})")
                return 1
            p0 = time.perf_counter()
            probe.execute(mig.probe_sql).fetchall()
            probe_ms = (time.perf_counter() - p0) * 1000
        sw = json.loads(res.stdout)
        t0 = sw["started_at"]
        t_switch = t0 + (sw["switch_ms"] + probe_ms) / 1000
        if isinstance(before, dict):
            before["switch"] = sw["committed_at"]
        say(f"leapfrog.start + new code committed in {sw['switch_ms']:.0f} ms "
            f"(start() {sw['start_ms']:.0f} ms); "
            f"new schema answered after {sw['switch_ms'] + probe_ms:.0f} ms "
            f"(eager: {eager_s * 1000:.0f} ms)")

        sampler = Sampler(cl, name)
        sampler.start()
        rc = leapfrog_cli(cl, "wait", name, "--timeout", args.timeout).returncode
        sampler.stop_ev.set()
        sampler.join()
        progress = sampler.points
        done_at = None
        if rc == 0:
            with psycopg.connect(cl.conninfo("tpcc"), autocommit=True) as c:
                done_at = c.execute("SELECT extract(epoch FROM finished_at)::float8 FROM "
                                    "leapfrog.migrations WHERE name = %s", (name,)).fetchone()[0]
            progress.append((done_at, 1.0))
        elif rc == 5:
            say("gave up waiting (--timeout)")
        else:
            say(f"leapfrog wait: exit status {rc}")
        if done_at:
            say(f"migration complete after {done_at - t0:.1f}s (eager copy: {eager_s:.1f}s, "
                f"ratio {(done_at - t0) / eager_s:.2f})")
        time.sleep(3)
        load.stop_ev.set()
        load.join()
        ok, failed, aborted = load.totals()
        say(f"load stopped: {ok:,} transactions committed, {failed} failed, "
            f"{aborted} clients aborted" + (f"; errors: {load.errors[:3]}" if load.errors else ""))

        # -- checks -----------------------------------------------------------
        good = True
        with psycopg.connect(cl.conninfo("tpcc"), autocommit=True) as c:
            if done_at:
                for ok_, line in checks(c, oracle, before):
                    good &= ok_
                    say(f"  {'ok  ' if ok_ else 'FAIL'} {line}")
            else:
                good = False
        good &= failed + aborted == 0
        png = plot(out, load, t0, t_switch, done_at, progress, eager_s, mig, locks)
        say(f"plot: {png}")
        say("RESULT: " + ("all checks passed" if good else "CHECKS FAILED"))
        return 0 if good else 1
    finally:
        if load and load.is_alive():
            load.stop_ev.set()
            load.join(timeout=30)
        cl.destroy()


def plot(out, load, t0, t_switch, done_at, progress, eager_s, mig, locks):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    ends = np.array([t[0] for t in load.txs if t[1] is not None])
    origin = ends.min() if len(ends) else t0
    sec = np.floor(ends - origin).astype(int)
    tps = np.bincount(sec)[:-1] if len(sec) > 1 else np.array([0])  # last second is partial
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.plot(np.arange(len(tps)) + 0.5, tps, color="#2ca02c", label="committed tx/s (live load)")
    ax.axvline(t0 - origin, color="purple", ls="--", lw=1)
    ax.plot([t0 - origin], [tps[min(len(tps) - 1, int(t0 - origin))]], "o", ms=11, mfc="none",
            mec="purple", mew=2, label=f"leapfrog.start (switch {1000 * (t_switch - t0):.0f} ms)")
    if done_at:
        ax.plot([done_at - origin], [tps[min(len(tps) - 1, int(done_at - origin))]], "o", ms=10,
                mfc="none", mec="#2ca02c", mew=2, label=f"migration done ({done_at - t0:.1f}s)")
    ax.axvspan(t0 - origin, t0 - origin + eager_s, color="#d62728", alpha=0.08,
               label=f"eager would lock {locks.split(',')[0]} ({eager_s:.1f}s)")
    ax.set_xlabel("Seconds")
    ax.set_ylabel("Txns/sec")
    ax.set_ylim(0, max(1, tps.max()) * 1.3)
    ax2 = ax.twinx()
    if progress:
        pt, pf = zip(*progress)
        ax2.plot(np.array(pt) - origin, pf, color="#1f77b4", lw=1, ls=":", label="fraction migrated")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("Fraction migrated")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="lower right")
    ax.set_title(f"Leapfrog demo: {mig.title} under a live TPC-C load")
    fig.tight_layout()
    path = os.path.join(out, "demo.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    sys.exit(main())
