"""How each strategy applies a migration while the load runs.

Every driver records wall-clock events (time.time()):
  start     the moment the migration was issued
  switch    the new schema answered (switch committed and a probe query on the
            new schema returned)
  complete  nothing is left to migrate (old data gone / copy finished)
and a progress series [(t, fraction_done)] where it has one.
"""
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import psycopg
from psycopg import errors

STRATEGIES = ["baseline", "redeploy", "eager", "multistep", "lazy", "lazy_nobg",
              "lazy_migrate", "lazy_unpaced", "lazy_variant"]
# The lazy strategies all run the Lazy driver; they differ in the server's
# settings during the run (ALTER SYSTEM, reset after it) and in the settings
# of the load's client sessions (pgbench's; given through PGOPTIONS, so
# nothing outlives the run).
LAZY_VARIANTS = {
    "lazy": dict(server_settings={}, client_settings={}),
    "lazy_nobg": dict(server_settings={"leapfrog.background": "off"}, client_settings={}),
    # plain reads migrate the rows they need, as writes do, instead of
    # computing them from the retired tables (the default)
    "lazy_migrate": dict(server_settings={}, client_settings={"leapfrog.read_mode": "migrate"}),
    # the workers run flat out whatever the load (no pacing)
    "lazy_unpaced": dict(server_settings={"leapfrog.background_min_share": "1"},
                         client_settings={}),
    # lazy with the server settings of run.py's --variant-set: a setting's
    # effect, in rounds interleaved with lazy's
    "lazy_variant": dict(server_settings={}, client_settings={}),
}
LAZY = tuple(LAZY_VARIANTS)


def server_settings(strategy):
    """Server settings (sighup) during a run of this strategy."""
    return LAZY_VARIANTS.get(strategy, {}).get("server_settings", {})


def client_settings(strategy):
    """Settings of the load's client sessions under this strategy."""
    return LAZY_VARIANTS.get(strategy, {}).get("client_settings", {})


class Driver(threading.Thread):
    def __init__(self, conninfo, migration, at, stop, params=None, log=print):
        super().__init__(daemon=True)
        self.conninfo = conninfo
        self.mig = migration
        self.at = at
        self.stop_ev = stop
        self.params = params or {}
        self.log = log
        self.events = {}
        self.progress = []
        self.status = "ok"
        self.error = None
        self.notes = []

    def run(self):
        delay = self.at - time.time()
        if delay > 0:
            time.sleep(delay)
        self.events["start"] = time.time()
        try:
            self.apply()
        except Exception as e:  # noqa: BLE001
            if isinstance(e, psycopg.Error) and e.sqlstate == "0A000":
                self.status = "unsupported"
            else:
                self.status = "failed"
            self.error = f"{type(e).__name__}: {e}".strip()
            self.log(f"    {self.name_()} {self.status}: {self.error.splitlines()[0]}")
            if self.status == "failed":
                self.notes.append(traceback.format_exc()[-2000:])

    def name_(self):
        return type(self).__name__

    def probe(self, conn):
        """The new schema answers: run the probe query, autocommit."""
        conn.execute(self.mig.probe_sql).fetchall()
        self.events["switch"] = time.time()

    def apply(self):
        raise NotImplementedError


class Baseline(Driver):
    def apply(self):
        pass


class Redeploy(Driver):
    """A control, not a migration: at the migration point, the functions the
    migration's new code replaces are deployed again unchanged, in one
    transaction, so every session replans them as after a real switch.
    What a code switch alone costs the load."""

    def apply(self):
        with psycopg.connect(self.conninfo, autocommit=False) as c:
            c.execute(self.mig.tx_unchanged())
            c.commit()
        self.events["switch"] = time.time()


class Eager(Driver):
    """The script in one transaction, inputs locked first (otherwise writes
    committed during the copy would be lost), new code in the same
    transaction."""

    def apply(self):
        with psycopg.connect(self.conninfo, autocommit=True) as c:
            def run(cc):
                # Inputs locked up front (several tables: retried on lock
                # timeout or deadlock, never left half-locked).
                cc.execute(self.mig.lock_sql(self.mig.eager_lock))
                self.events["locked"] = time.time()
                for s in self.mig.statements():
                    cc.execute(s)
                cc.execute(self.mig.analyze_sql())
                cc.execute(self.mig.tx())
            _with_lock_retries(c, run, lock_timeout_ms=1000, retries=50)
            self.events["complete"] = time.time()
            self.probe(c)


def _with_lock_retries(conn, fn, lock_timeout_ms=50, retries=200, stop=None):
    """Run fn(conn) in a transaction under a short lock_timeout, retrying on
    55P03 so the DDL never queues traffic behind it for long."""
    for i in range(retries):
        try:
            with conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = '{lock_timeout_ms}ms'")
                conn.execute("SET LOCAL statement_timeout = 0")
                return fn(conn)
        except (errors.LockNotAvailable, errors.DeadlockDetected):
            time.sleep(0.01 + 0.002 * i)
    raise RuntimeError(f"could not get locks after {retries} tries")


def warehouse_parts(warehouses, k):
    """k contiguous ranges [lo, hi) of warehouse ids covering 1..2**31-1
    (the first from 0, the last to the end, so no key is left out), at most
    one per warehouse."""
    k = max(1, min(k, warehouses))
    bounds = [0] + [1 + i * warehouses // k for i in range(1, k)] + [2**31 - 1]
    return list(zip(bounds, bounds[1:]))


class Multistep(Driver):
    """pgroll / pg-osc style: shadow tables kept in sync by triggers, batched
    background copy, then a cut-over that drops the old tables and deploys
    the new code (old code runs, with trigger overhead, until then).

    The copy runs on params["copy_connections"] connections, each over its
    own range of warehouses; the profiles give it as many as Leapfrog has
    background workers, so both strategies copy with the same means."""

    def apply(self):
        self.batch_retries = 0
        with psycopg.connect(self.conninfo, autocommit=True) as c:
            total = c.execute(self.mig.copy_rows_sql).fetchone()[0] or 1

            def setup(cc):
                for s in self.mig.create_statements():
                    cc.execute(s)
                cc.execute(self.mig.multistep_setup())
            _with_lock_retries(c, setup)
            self.events["setup_done"] = time.time()
            self.progress.append((time.time(), 0.0))
            if not self._copy(total):
                return
            c.execute(self.mig.analyze_sql())
            self.events["copy_done"] = time.time()
            if self.batch_retries:
                self.notes.append(f"{self.batch_retries} copy batches retried after deadlocks")

            def cutover(cc):
                cc.execute(self.mig.lock_sql("ACCESS EXCLUSIVE"))
                for stmt in self.mig.multistep_cutover_statements():
                    cc.execute(stmt)
                cc.execute(self.mig.tx())
            _with_lock_retries(c, cutover)
            self.events["complete"] = time.time()
            self.progress.append((time.time(), 1.0))
            self.probe(c)
            cleanup = self.mig.multistep_cleanup()
            if cleanup:
                self._cleanup(c, cleanup)

    def _cleanup(self, c, sql):
        """Run the cut-over's cleanup once every transaction that began
        before the cut-over has ended (they may still run the old code)."""
        cut = c.execute("SELECT clock_timestamp()").fetchone()[0]
        while not self.stop_ev.is_set():
            older = c.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND xact_start < %s", (cut,)).fetchone()[0]
            if older == 0:
                _with_lock_retries(c, lambda cc: cc.execute(sql))
                self.events["cleanup"] = time.time()
                return
            time.sleep(0.05)

    def _copy(self, total):
        """Run the copy's connections to the end; False if the window ended
        first.  A connection's error stops the others and is raised."""
        parts = warehouse_parts(int(self.params.get("warehouses", 1)),
                                int(self.params.get("copy_connections", 1)))
        lock = threading.Lock()
        done_rows = [0]
        self._abort = threading.Event()   # a connection failed: the others stop

        def copy_part(w_lo, w_hi):
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as cc:
                    self._copy_part(cc, {"w_lo": w_lo, "w_hi": w_hi}, total, lock, done_rows)
            except BaseException:
                self._abort.set()
                raise

        with ThreadPoolExecutor(len(parts)) as pool:
            for f in [pool.submit(copy_part, *p) for p in parts]:
                f.result()
        if self.stop_ev.is_set():
            self.notes.append(f"copy stopped at end of window ({done_rows[0] / total:.0%})")
            return False
        return True

    def _copy_part(self, c, st, total, lock, done_rows):
        n = int(self.params.get("batch_size", 1000))
        nap = float(self.params.get("naptime_ms", 0)) / 1000.0
        done = False
        while not done:
            if self.stop_ev.is_set() or self._abort.is_set():
                return
            for attempt in range(50):
                saved = dict(st)
                try:
                    with c.transaction():
                        k, done = self.mig.batch(c, st, n)
                    break
                except (errors.DeadlockDetected, errors.SerializationFailure):
                    st.clear()
                    st.update(saved)
                    with lock:
                        self.batch_retries += 1
                    time.sleep(0.01)
            else:
                raise RuntimeError("copy batch failed 50 times (deadlocks)")
            with lock:
                done_rows[0] += k
                self.progress.append((time.time(), min(1.0, done_rows[0] / total)))
            if nap:
                time.sleep(nap)


class Lazy(Driver):
    """leapfrog.start + the new code in one transaction; then poll
    leapfrog.migrations until done (or the end of the window)."""

    def apply(self):
        name = f"bench_{self.mig.name}"
        with psycopg.connect(self.conninfo, autocommit=False) as c:
            for attempt in range(20):
                try:
                    c.execute("SELECT leapfrog.start(%s, %s)", (name, self.mig.script()))
                    c.execute(self.mig.tx())
                    c.commit()
                    break
                except errors.LockNotAvailable:
                    c.rollback()
                    time.sleep(0.05)
            else:
                raise RuntimeError("leapfrog.start: locks not obtained after 20 tries")
            self.events["started"] = time.time()
            c.autocommit = True
            self.probe(c)
            self.poll(c, name)

    def poll(self, c, name):
        """Progress from leapfrog.migrations; query errors (the view racing
        the end of the migration, a server restart) are retried on a fresh
        connection and noted.  The fraction is tuples_migrated over the
        inputs' row count known from the load (params["input_rows"]): the
        view's tuples_total counts the inputs on every read until a worker
        has counted them once, which with the background off is never (at
        4 reads a second that scan was 7% of the CPU of a lazy_nobg run, by
        perf), so it is read only when the row count is not known."""
        interval = float(self.params.get("poll_s", 0.25))
        known_total = self.params.get("input_rows")
        cols = "state, tuples_migrated, error" if known_total else \
            "state, tuples_migrated, error, tuples_total"
        errs = 0
        while not self.stop_ev.is_set():
            try:
                if c is None or c.closed:
                    c = psycopg.connect(self.conninfo, autocommit=True)
                row = c.execute(
                    f"SELECT {cols} FROM leapfrog.migrations WHERE name = %s", (name,)).fetchone()
            except psycopg.Error as e:
                errs += 1
                if errs <= 3:
                    self.notes.append(f"polling leapfrog.migrations: {str(e).splitlines()[0]}")
                try:
                    c.close()
                except Exception:  # noqa: BLE001
                    pass
                c = None
                if errs > 200:
                    self.status, self.error = "failed", "leapfrog.migrations unreadable"
                    return
                self.stop_ev.wait(interval)
                continue
            now = time.time()
            if row is None:
                self.notes.append("migration vanished from leapfrog.migrations")
                return
            state, migrated, err = row[:3]
            total = known_total or row[3]
            if total:
                self.progress.append((now, min(1.0, (migrated or 0) / total)))
            if state == "done":
                self.events["complete"] = now
                self.progress.append((now, 1.0))
                return
            if state == "failed":
                self.status = "failed"
                self.error = f"leapfrog migration failed: {err}"
                return
            self.stop_ev.wait(interval)
        self.notes.append("not complete at end of window")


DRIVERS = {"baseline": Baseline, "redeploy": Redeploy, "eager": Eager, "multistep": Multistep,
           **{s: Lazy for s in LAZY}}


def probe_lazy_support(conninfo, migration):
    """Ask leapfrog.start whether it accepts this migration script, on an
    empty schema, rolled back.  Returns (state, reason), state one of
    "supported", "unsupported" (SQLSTATE 0A000) or "error"."""
    try:
        with psycopg.connect(conninfo, autocommit=False) as c:
            try:
                c.execute("SELECT leapfrog.start(%s, %s)",
                          (f"probe_{migration.name}", migration.script()))
                return "supported", None
            except psycopg.Error as e:
                msg = f"leapfrog.start: SQLSTATE {e.sqlstate}: {str(e).splitlines()[0]}"
                return ("unsupported" if e.sqlstate == "0A000" else "error"), msg
            finally:
                c.rollback()
    except psycopg.Error as e:
        return "error", f"probe failed: {e}"
