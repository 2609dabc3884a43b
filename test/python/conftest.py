"""Throwaway PostgreSQL clusters for the Leapfrog Python tests.

Every cluster lives in its own temporary directory (data directory, unix
socket, server log), listens on no TCP address, and preloads leapfrog.  Tests
get clusters from the ``make_cluster`` fixture with their own GUCs, e.g.

    c = make_cluster(**{"leapfrog.background": "off"})

The helpers here kill processes the way a crash would (SIGKILL of one
backend, of the leapfrog background worker, of the postmaster and all its
children) and wait, bounded in iterations and time, for the server to accept
connections again.

initdb refuses to run as root: when the tests are run as root, every server
program is started through ``runuser -u postgres`` and the temporary
directories are given to that user.

Environment knobs:
  LEAPFROG_TEST_KEEP=1   keep the temporary directories (printed at the end).
  LEAPFROG_TEST_CORES=1  start servers with pg_ctl -c (core files, see
                         /proc/sys/kernel/core_pattern).
  LEAPFROG_TEST_MOCK=1   harness self-check: no preload, and a PL/pgSQL
                         stand-in for the extension that runs scripts eagerly
                         (tests that need the real worker skip themselves).
"""

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

HERE = Path(__file__).resolve().parent
MOCK = os.environ.get("LEAPFROG_TEST_MOCK") == "1"
KEEP = os.environ.get("LEAPFROG_TEST_KEEP") == "1"


def _pg_bindir():
    pg_config = shutil.which("pg_config") or "/usr/lib/postgresql/15/bin/pg_config"
    out = subprocess.run([pg_config, "--bindir"], check=True,
                         capture_output=True, text=True).stdout.strip()
    return Path(out)


BINDIR = _pg_bindir()
IS_ROOT = os.geteuid() == 0
RUN_USER = "postgres"


def _as_server_user(cmd):
    """Prefix a server command so it does not run as root."""
    if IS_ROOT:
        return ["runuser", "-u", RUN_USER, "--"] + [str(c) for c in cmd]
    return [str(c) for c in cmd]


def _give_away(path):
    if IS_ROOT:
        pw = pwd.getpwnam(RUN_USER)
        os.chown(path, pw.pw_uid, pw.pw_gid)


def _run(cmd, timeout=120, check=True):
    res = subprocess.run(_as_server_user(cmd), capture_output=True, text=True,
                         timeout=timeout)
    if check and res.returncode != 0:
        raise RuntimeError("command failed (%d): %s\nstdout:\n%s\nstderr:\n%s"
                           % (res.returncode, " ".join(map(str, cmd)),
                              res.stdout, res.stderr))
    return res


def free_port():
    """A TCP port nobody listens on now (the socket name carries it too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, timeout, interval=0.05, what="condition"):
    """Poll pred() until it is truthy; bounded in time and iterations."""
    deadline = time.monotonic() + timeout
    max_iter = int(timeout / interval) + 10
    last = None
    for _ in range(max_iter):
        last = pred()
        if last:
            return last
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    raise TimeoutError("timed out after %.1fs waiting for %s (last=%r)"
                       % (timeout, what, last))


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _pid_exists(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _children_of(ppid):
    kids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == ppid:
                kids.append(int(d))
        except (OSError, IndexError, ValueError):
            continue
    return kids


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Cluster:
    """One temporary PostgreSQL instance."""

    def __init__(self, template, gucs, name="lf"):
        self.base = Path(tempfile.mkdtemp(prefix="%s-" % name))
        os.chmod(self.base, 0o755)
        _give_away(self.base)
        self.datadir = self.base / "data"
        self.sockdir = self.base / "sock"
        self.sockdir.mkdir()
        _give_away(self.sockdir)
        self.logfile = self.base / "server.log"
        self.port = free_port()
        self.gucs = dict(gucs)
        # Copy the initdb'd template: much cheaper than initdb per test.
        _run(["cp", "-a", str(template), str(self.datadir)])
        self._write_conf()

    # ---- configuration -------------------------------------------------
    def _write_conf(self):
        conf = {
            "port": str(self.port),
            "listen_addresses": "''",
            "unix_socket_directories": "'%s'" % self.sockdir,
            "fsync": "off",
            # synchronous_commit must stay on: with it off, a crash restart
            # loses commits still in the WAL buffers, which the crash tests
            # would rightly report as lost updates.  fsync off is safe, as
            # the OS page cache survives a kill -9 of every server process.
            "full_page_writes": "off",
            "max_connections": "60",
            "shared_buffers": "'64MB'",
            "max_worker_processes": "16",
            "restart_after_crash": "on",
            "log_min_messages": "warning",
            "log_line_prefix": "'%m [%p] %b '",
            "timezone": "'UTC'",
            "deadlock_timeout": "'100ms'",
        }
        if not MOCK:
            conf["shared_preload_libraries"] = "'leapfrog'"
        for k, v in self.gucs.items():
            conf[k] = _quote_guc(v)
        text = "".join("%s = %s\n" % (k, v) for k, v in conf.items())
        path = self.datadir / "test.conf"
        path.write_text(text)
        _give_away(path)
        main = self.datadir / "postgresql.conf"
        body = main.read_text()
        if "include_if_exists = 'test.conf'" not in body:
            main.write_text(body + "\ninclude_if_exists = 'test.conf'\n")

    def set_gucs(self, **gucs):
        """Change GUCs in the config file (takes effect on reload/restart)."""
        self.gucs.update(gucs)
        self._write_conf()

    # ---- life cycle ----------------------------------------------------
    def start(self, timeout=60):
        # LEAPFROG_TEST_CORES=1: let the server dump core (pg_ctl -c), for gdb.
        cores = ["-c"] if os.environ.get("LEAPFROG_TEST_CORES") == "1" else []
        res = _run([BINDIR / "pg_ctl", "-D", self.datadir, "-l", self.logfile] + cores +
                   ["-w", "-t", str(int(timeout)), "start"],
                   timeout=timeout + 10, check=False)
        if res.returncode != 0:
            raise RuntimeError("pg_ctl start failed:\n%s\n%s\n--- log ---\n%s"
                               % (res.stdout, res.stderr, self.log_tail()))
        self.wait_ready(timeout)

    def stop(self, mode="fast", timeout=60):
        if not self.postmaster_pid():
            return
        _run([BINDIR / "pg_ctl", "-D", self.datadir, "-m", mode, "-w",
              "-t", str(int(timeout)), "stop"], timeout=timeout + 10, check=False)

    def restart(self, timeout=60):
        self.stop()
        self.start(timeout)

    def reload(self):
        with self.connect() as c:
            c.execute("SELECT pg_reload_conf()")

    def postmaster_pid(self):
        pidfile = self.datadir / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _pid_alive(pid) else None

    def server_pids(self):
        pm = self.postmaster_pid()
        return [pm] + _children_of(pm) if pm else []

    def wait_ready(self, timeout=60):
        """Wait until a connection succeeds and recovery is over."""
        def ok():
            try:
                with psycopg.connect(self.dsn("postgres"), autocommit=True,
                                     connect_timeout=2) as c:
                    return not c.execute("SELECT pg_is_in_recovery()").fetchone()[0]
            except psycopg.OperationalError:
                return False
        wait_until(ok, timeout, interval=0.1, what="server to accept connections")

    # ---- connections ---------------------------------------------------
    def dsn(self, dbname="postgres"):
        return "host=%s port=%d dbname=%s user=%s" % (
            self.sockdir, self.port, dbname, RUN_USER if IS_ROOT else pwd.getpwuid(os.geteuid()).pw_name)

    def connect(self, dbname="postgres", autocommit=True, **kw):
        kw.setdefault("connect_timeout", 10)
        return psycopg.connect(self.dsn(dbname), autocommit=autocommit, **kw)

    def sql(self, query, params=None, dbname="postgres"):
        """Run one statement in its own connection; return all rows (or None)."""
        with self.connect(dbname) as c:
            cur = c.execute(query, params)
            return cur.fetchall() if cur.description else None

    def create_database(self, dbname, extension=True):
        self.sql('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % dbname)
        self.sql('CREATE DATABASE "%s"' % dbname)
        if extension:
            with self.connect(dbname) as c:
                install_extension(c)

    def drop_database(self, dbname):
        self.sql('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % dbname)

    # ---- crashes -------------------------------------------------------
    def kill_pid(self, pid, expect_crash_restart=True, timeout=60):
        """SIGKILL one server child; the postmaster then reinitialises."""
        before = self.crash_restarts()
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not _pid_alive(pid), 10, what="pid %d to die" % pid)
        if expect_crash_restart:
            # Wait for the postmaster to notice and reinitialise, then for the
            # end of crash recovery.
            wait_until(lambda: self.crash_restarts() > before, 30,
                       what="postmaster to reinitialise after the kill")
            self.wait_ready(timeout)

    def crash_restarts(self):
        """How many times the postmaster reinitialised after a child crash."""
        return self.log_text().count("all server processes terminated; reinitializing")

    def kill_backend(self, pid, timeout=60):
        self.kill_pid(pid, timeout=timeout)

    def leapfrog_worker_pids(self, dbname="postgres"):
        """Pids of leapfrog background processes (pg_stat_activity, then /proc)."""
        pids = set()
        try:
            # In these clusters no other extension is loaded: any background
            # process of a type PostgreSQL itself does not define is leapfrog's.
            rows = self.sql(
                "SELECT pid FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND ("
                "   backend_type ILIKE '%leapfrog%' "
                "   OR application_name ILIKE '%leapfrog%' "
                "   OR backend_type NOT IN ('client backend', 'autovacuum launcher',"
                "       'autovacuum worker', 'logical replication launcher',"
                "       'logical replication worker', 'parallel worker',"
                "       'background writer', 'checkpointer', 'walwriter', 'startup',"
                "       'walreceiver', 'walsender', 'archiver', 'standalone backend'))",
                dbname=dbname)
            pids.update(r[0] for r in rows)
        except psycopg.Error:
            pass
        pm = self.postmaster_pid()
        if pm:
            for kid in _children_of(pm):
                if "leapfrog" in _cmdline(kid).lower():
                    pids.add(kid)
        return sorted(pids)

    def kill_worker(self, pids=None, timeout=60):
        """SIGKILL the given leapfrog processes (default: all of them)."""
        before = self.crash_restarts()
        pids = pids or self.leapfrog_worker_pids()
        if not pids:
            raise AssertionError("no leapfrog background worker found")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in pids:
            wait_until(lambda: not _pid_alive(pid), 10, what="worker %d to die" % pid)
        wait_until(lambda: self.crash_restarts() > before, 30,
                   what="postmaster to reinitialise after the kill")
        self.wait_ready(timeout)
        return pids

    def kill_postmaster(self, restart=True, timeout=60):
        """SIGKILL the postmaster and every child at once, then pg_ctl start."""
        pm = self.postmaster_pid()
        assert pm, "postmaster not running"
        kids = _children_of(pm)
        os.kill(pm, signal.SIGKILL)
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in [pm] + kids:
            wait_until(lambda: not _pid_alive(p), 15, what="pid %d to die" % p)
        # The new postmaster refuses to start while the old pid exists, even
        # as a zombie; wait for init to reap it, else drop the stale lock file.
        try:
            wait_until(lambda: not _pid_exists(pm), 5, what="postmaster reaped")
        except TimeoutError:
            (self.datadir / "postmaster.pid").unlink(missing_ok=True)
        # Stragglers forked just before the kill.
        for _ in range(20):
            left = [p for p in os.listdir("/proc") if p.isdigit()
                    and str(self.datadir) in _cmdline(int(p))]
            if not left:
                break
            for p in left:
                try:
                    os.kill(int(p), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        if restart:
            self.start(timeout)

    def log_tail(self, n=80):
        try:
            lines = self.logfile.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def log_text(self):
        try:
            return self.logfile.read_text(errors="replace")
        except OSError:
            return ""

    def destroy(self):
        pm = self.postmaster_pid()
        if pm:
            self.stop(mode="immediate", timeout=30)
        pm = self.postmaster_pid()
        if pm:
            for p in [pm] + _children_of(pm):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if not KEEP:
            shutil.rmtree(self.base, ignore_errors=True)


def _quote_guc(v):
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, (int, float)):
        return str(v)
    s = str(v)
    if s.startswith("'"):
        return s
    return "'%s'" % s.replace("'", "''")


RETIRED_SQL = ("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
               "WHERE n.nspname = 'leapfrog_retired' ORDER BY 1")


def retired_tables_after_completion(cluster, dbname, timeout=30):
    """Relations left in leapfrog_retired, polled (bounded): per the contract,
    completion drops the retired tables at once only if nobody holds a lock on
    them, otherwise the worker retries every second."""
    left = None
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / 0.2) + 5):
        left = [r[0] for r in cluster.sql(RETIRED_SQL, dbname=dbname)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return left


def install_extension(conn):
    """CREATE EXTENSION leapfrog (or the eager stand-in under LEAPFROG_TEST_MOCK)."""
    if MOCK:
        conn.execute((HERE / "mock_leapfrog.sql").read_text())
    else:
        conn.execute("CREATE EXTENSION leapfrog")


def needs_real_extension():
    if MOCK:
        pytest.skip("needs the real extension (LEAPFROG_TEST_MOCK=1)")


# ---- fixtures ------------------------------------------------------------

@pytest.fixture(scope="session")
def pg_template():
    """One initdb per test session; clusters start from copies of it."""
    base = Path(tempfile.mkdtemp(prefix="lf-template-"))
    os.chmod(base, 0o755)
    _give_away(base)
    data = base / "data"
    _run([BINDIR / "initdb", "-D", data, "-A", "trust", "-U", RUN_USER if IS_ROOT
          else pwd.getpwuid(os.geteuid()).pw_name, "--no-sync", "-E", "UTF8",
          "--locale=C"], timeout=180)
    yield data
    if not KEEP:
        shutil.rmtree(base, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _report_clusters(request, clusters):
    failed = any(getattr(request.node, "rep_" + w, None) is not None
                 and getattr(request.node, "rep_" + w).failed
                 for w in ("setup", "call"))
    for c in clusters:
        if failed:
            print("\n--- server log tail of %s ---\n%s" % (c.base, c.log_tail(60)))
        if KEEP:
            print("kept cluster in %s" % c.base)
        c.destroy()


@pytest.fixture
def make_cluster(pg_template, request):
    """Factory: make_cluster(**gucs) -> started Cluster, destroyed after the test."""
    clusters = []

    def make(start=True, **gucs):
        c = Cluster(pg_template, gucs)
        clusters.append(c)
        if start:
            c.start()
        return c

    yield make
    _report_clusters(request, clusters)


@pytest.fixture(scope="module")
def module_cluster_factory(pg_template, request):
    clusters = []

    def make(**gucs):
        c = Cluster(pg_template, gucs)
        clusters.append(c)
        c.start()
        return c

    yield make
    for c in clusters:
        c.destroy()


def pytest_terminal_summary(terminalreporter):
    """The differential tests' tally: how many cases ran, and where the lazy
    run failed with 40001 while the eager one did not (permitted under
    REPEATABLE READ and SERIALIZABLE, and counted so that a soak reports it)."""
    import sys
    diff = sys.modules.get("test_differential")
    if diff is None or not diff.CASES_RUN:
        return
    runs = ", ".join("%s %d" % kv for kv in sorted(diff.CASES_RUN.items()))
    terminalreporter.write_line(
        "differential cases completed: %s; lazy-only 40001: %d statements in %d runs"
        % (runs, len(diff.SERIALIZATION_FAILURES),
           len({run for _, _, _, run in diff.SERIALIZATION_FAILURES})))
