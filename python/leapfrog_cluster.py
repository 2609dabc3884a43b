"""Throwaway PostgreSQL 15 clusters, for the tests, the benchmarks and the demo.

A cluster lives in a temporary directory of its own: the data directory, a
Unix socket (no TCP address), the server log.  Its settings go to one file,
cluster.conf, included by postgresql.conf; with preload (the default when
`make install` has put leapfrog into this PostgreSQL) it preloads leapfrog.

    c = Cluster(settings={"leapfrog.background": "off"}).init().start()
    with c.connect("postgres") as conn: ...
    c.destroy()

As root, every server program runs as the postgres OS user (initdb refuses
root); clients connect over the socket as database user postgres, and client
programs (pg_dump, pg_restore, psql) run with run_client().  A running
cluster can be copied into a hot standby of itself (standby():
pg_basebackup -R over the socket, WAL streamed; wait_replay()).  A cluster
can start from a copy of an initialised data directory (template, made once
with make_template), which is much cheaper than initdb each time.  The crash
helpers kill processes the way a crash would (one backend, the leapfrog
workers, the postmaster and all its children) and wait, bounded in time and
iterations, for the server to accept connections again.
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

PG_MAJOR = "15"
RUN_USER = "postgres"
IS_ROOT = os.geteuid() == 0
DB_USER = RUN_USER if IS_ROOT else pwd.getpwuid(os.geteuid()).pw_name


# ---- the PostgreSQL installation ----------------------------------------

def pg_config(flag):
    try:
        return subprocess.check_output(["pg_config", flag], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def find_bindir():
    """Directory with initdb, pg_ctl, postgres and pgbench of PostgreSQL 15."""
    for d in (pg_config("--bindir"), "/usr/lib/postgresql/%s/bin" % PG_MAJOR):
        if d and all(os.access(os.path.join(d, x), os.X_OK)
                     for x in ("initdb", "pg_ctl", "postgres")):
            return Path(d)
    raise RuntimeError(
        "PostgreSQL %s server binaries not found (initdb, pg_ctl, postgres): "
        "apt-get install postgresql-%s, or put its pg_config on PATH" % (PG_MAJOR, PG_MAJOR))


def extension_installed():
    """True when `make install` has put leapfrog into this PostgreSQL."""
    lib, share = pg_config("--pkglibdir"), pg_config("--sharedir")
    return bool(lib and share
                and os.path.exists(os.path.join(lib, "leapfrog.so"))
                and os.path.exists(os.path.join(share, "extension", "leapfrog.control")))


# ---- small helpers -------------------------------------------------------

def free_port():
    """A TCP port nobody listens on now (the socket's name carries it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, timeout, interval=0.05, what="condition"):
    """Poll pred() until it is truthy; bounded in time and iterations."""
    deadline = time.monotonic() + timeout
    last = None
    for _ in range(int(timeout / interval) + 10):
        last = pred()
        if last:
            return last
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    raise TimeoutError("timed out after %.1fs waiting for %s (last=%r)"
                       % (timeout, what, last))


def _server_user():
    pw = pwd.getpwnam(RUN_USER)
    return pw.pw_uid, pw.pw_gid


def give_away(path):
    """Let the server's OS user own path (as root)."""
    if IS_ROOT:
        os.chown(path, *_server_user())


def run_as_server(argv, timeout=120, check=True, cwd=None, extra_env=None, stdin_path=None):
    """Run a server program, as the postgres OS user when we are root, with
    extra_env added to its environment (and stdin_path as its input)."""
    kw = {}
    env = dict(os.environ)
    env.pop("PGDATA", None)
    env.update(extra_env or {})
    if IS_ROOT:
        uid, gid = _server_user()
        kw = {"user": uid, "group": gid, "extra_groups": []}
        env.update(HOME=cwd or "/tmp", USER=RUN_USER, LOGNAME=RUN_USER)
    with open(stdin_path or os.devnull) as stdin:
        res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, stdin=stdin,
                             timeout=timeout, env=env, cwd=cwd or "/tmp", **kw)
    if check and res.returncode != 0:
        raise RuntimeError("command failed (%d): %s\nstdout:\n%s\nstderr:\n%s"
                           % (res.returncode, " ".join(map(str, argv)), res.stdout, res.stderr))
    return res


def make_template(datadir):
    """initdb into datadir, once, for clusters to copy (Cluster(template=...))."""
    run_as_server([find_bindir() / "initdb", "-D", datadir, "-A", "trust", "-U", DB_USER,
                   "--no-sync", "-E", "UTF8", "--locale=C"], timeout=180)


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:                    # a zombie is dead for our purposes
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


def quote_setting(v):
    """A value as postgresql.conf wants it."""
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, (int, float)):
        return str(v)
    s = str(v)
    if s.startswith("'"):
        return s
    return "'%s'" % s.replace("'", "''")


# ---- the cluster ---------------------------------------------------------

class Cluster:
    """One temporary PostgreSQL instance."""

    def __init__(self, settings=None, preload=None, template=None, name="leapfrog-pg",
                 workdir=None, keep=False, log=None):
        self.bindir = find_bindir()
        pgbench = self.bindir / "pgbench"
        self.pgbench = str(pgbench) if os.access(pgbench, os.X_OK) else shutil.which("pgbench")
        self.leapfrog = extension_installed() if preload is None else bool(preload)
        self.settings = dict(settings or {})
        self.template = template
        self.keep = keep
        self.log = log or (lambda msg: None)
        base = workdir or tempfile.gettempdir()
        os.makedirs(base, exist_ok=True)
        self.base = Path(tempfile.mkdtemp(prefix=name + "-", dir=base))
        os.chmod(self.base, 0o755)
        give_away(self.base)
        self.datadir = self.base / "data"
        self.sockdir = self.base / "sock"
        self.sockdir.mkdir()
        give_away(self.sockdir)
        self.logfile = self.base / "server.log"
        self.port = free_port()

    @property
    def dir(self):
        return str(self.base)

    # ---- set-up and configuration ----------------------------------------
    def init(self):
        """initdb (or a copy of the template), then the configuration."""
        if self.template:
            run_as_server(["cp", "-a", self.template, self.datadir])
        else:
            make_template(self.datadir)
        self._write_conf()
        main = self.datadir / "postgresql.conf"
        body = main.read_text()
        if "include_if_exists = 'cluster.conf'" not in body:
            main.write_text(body + "\ninclude_if_exists = 'cluster.conf'\n")
        return self

    def _write_conf(self):
        conf = {
            "port": self.port,
            "listen_addresses": "",
            "unix_socket_directories": str(self.sockdir),
        }
        if self.leapfrog:
            conf["shared_preload_libraries"] = "leapfrog"
        conf.update(self.settings)
        path = self.datadir / "cluster.conf"
        path.write_text("".join("%s = %s\n" % (k, quote_setting(v)) for k, v in conf.items()))
        give_away(path)

    def set_settings(self, **settings):
        """Change settings in the configuration file (applied by reload or restart)."""
        self.settings.update(settings)
        self._write_conf()

    # ---- life cycle ------------------------------------------------------
    def start(self, timeout=120):
        # LEAPFROG_TEST_CORES=1: let the server dump core (pg_ctl -c), for gdb.
        cores = ["-c"] if os.environ.get("LEAPFROG_TEST_CORES") == "1" else []
        res = run_as_server([self.bindir / "pg_ctl", "-D", self.datadir, "-l", self.logfile]
                            + cores + ["-w", "-t", str(int(timeout)), "start"],
                            timeout=timeout + 10, check=False, cwd=self.dir)
        if res.returncode != 0:
            raise RuntimeError("pg_ctl start failed:\n%s\n%s\n--- log ---\n%s"
                               % (res.stdout, res.stderr, self.log_tail()))
        self.wait_ready(timeout)
        return self

    def stop(self, mode="fast", timeout=60):
        if not self.postmaster_pid():
            return
        run_as_server([self.bindir / "pg_ctl", "-D", self.datadir, "-m", mode, "-w",
                       "-t", str(int(timeout)), "stop"], timeout=timeout + 10, check=False,
                      cwd=self.dir)

    def restart(self, mode="fast", timeout=120):
        self.stop(mode)
        self.start(timeout)

    def reload(self):
        with self.connect() as c:
            c.execute("SELECT pg_reload_conf()")

    def postmaster_pid(self):
        try:
            pid = int((self.datadir / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _pid_alive(pid) else None

    def server_pids(self):
        pm = self.postmaster_pid()
        return [pm] + _children_of(pm) if pm else []

    def is_standby(self):
        """True for a standby (standby.signal in its data directory)."""
        return (self.datadir / "standby.signal").exists()

    def wait_ready(self, timeout=60):
        """Wait until a connection succeeds and recovery is over (after a
        crash the postmaster reinitialises by itself); a standby stays in
        recovery: for it, until it accepts read-only connections."""
        standby = self.is_standby()

        def ready():
            try:
                with psycopg.connect(self.dsn("postgres"), autocommit=True,
                                     connect_timeout=2) as c:
                    return c.execute("SELECT pg_is_in_recovery()").fetchone()[0] == standby
            except psycopg.OperationalError:
                return False
        wait_until(ready, timeout, interval=0.1, what="server to accept connections")

    def destroy(self):
        if self.postmaster_pid():
            self.stop(mode="immediate", timeout=30)
        pm = self.postmaster_pid()
        if pm:
            for p in [pm] + _children_of(pm):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if not self.keep:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self):
        if not (self.datadir / "PG_VERSION").exists():
            self.init()
        return self.start()

    def __exit__(self, *exc):
        self.destroy()

    # ---- clients ---------------------------------------------------------
    def dsn(self, dbname="postgres"):
        return "host=%s port=%d dbname=%s user=%s" % (self.sockdir, self.port, dbname, DB_USER)

    conninfo = dsn

    def connect(self, dbname="postgres", autocommit=True, **kw):
        kw.setdefault("connect_timeout", 10)
        return psycopg.connect(self.dsn(dbname), autocommit=autocommit, **kw)

    def sql(self, query, params=None, dbname="postgres"):
        """Run one statement in its own connection; all its rows, or None."""
        with self.connect(dbname) as c:
            cur = c.execute(query, params)
            return cur.fetchall() if cur.description else None

    def create_database(self, dbname, setup=None):
        """A new, empty database; setup(conn), if given, prepares it."""
        self.drop_database(dbname)
        self.sql('CREATE DATABASE "%s"' % dbname)
        if setup:
            with self.connect(dbname) as c:
                setup(c)

    def drop_database(self, dbname):
        self.sql('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % dbname)

    def pgbench_conn_args(self, dbname):
        return ["-h", str(self.sockdir), "-p", str(self.port), "-U", DB_USER, dbname]

    def run_client(self, program, args, dbname=None, timeout=120, check=True, extra_env=None):
        """A client program of the installation (pg_dump, pg_restore, psql,
        pg_basebackup), connected over the socket as DB_USER (to dbname with
        -d, if given), run as the server's OS user: files it writes or reads
        belong in the cluster's directory (self.base).  The CompletedProcess."""
        conn = ["-h", str(self.sockdir), "-p", str(self.port), "-U", DB_USER]
        if dbname:
            conn += ["-d", dbname]
        return run_as_server([self.bindir / program] + conn + list(args),
                             timeout=timeout, check=check, cwd=self.dir, extra_env=extra_env)

    # ---- replication -----------------------------------------------------
    def standby(self, settings=None, name="standby", timeout=120):
        """A hot standby of this running cluster, not started yet: a base
        backup (pg_basebackup -R: standby.signal and primary_conninfo, WAL
        streamed) in a directory of its own, next to this one, with this
        cluster's settings and the given ones, its own port and socket.
        A replication connection over the socket must be allowed (initdb's
        pg_hba.conf does, with trust).  Start it with start(); wait_replay()
        waits until it has replayed what the primary wrote; destroy() it."""
        sb = Cluster(settings={**self.settings, **(settings or {})}, preload=self.leapfrog,
                     name="%s-%s" % (self.base.name, name), workdir=str(self.base.parent),
                     keep=self.keep, log=self.log)
        try:
            self.run_client("pg_basebackup",
                            ["-D", sb.datadir, "-R", "-X", "stream", "-c", "fast",
                             "--no-sync", "-w"], timeout=timeout)
            # The copy has the primary's cluster.conf (port, socket): its own.
            sb._write_conf()
        except BaseException:
            sb.destroy()
            raise
        return sb

    def wait_replay(self, primary, timeout=60):
        """On a standby: wait until it has replayed the primary's WAL up to
        the primary's current write position (every commit made so far)."""
        lsn = primary.sql("SELECT pg_current_wal_lsn()::text")[0][0]
        wait_until(lambda: self.sql("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                    [lsn])[0][0],
                   timeout, interval=0.02, what="the standby to replay up to %s" % lsn)
        return lsn

    # ---- the server log --------------------------------------------------
    def log_text(self):
        try:
            return self.logfile.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n=80):
        text = self.log_text()
        return "\n".join(text.splitlines()[-n:]) if text else "(no log)"

    def crash_restarts(self):
        """How many times the postmaster reinitialised after a child crash."""
        return self.log_text().count("all server processes terminated; reinitializing")

    def crashes_in_log(self):
        """Lines of the server log that tell of a backend crash."""
        return [ln.rstrip() for ln in self.log_text().splitlines()
                if "terminated by signal" in ln or "was terminated by" in ln
                or "PANIC" in ln or ("server process" in ln and "exited" in ln)]

    # ---- crashes ---------------------------------------------------------
    def kill_pid(self, pid, expect_crash_restart=True, timeout=60):
        """SIGKILL one server child; the postmaster then reinitialises."""
        before = self.crash_restarts()
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not _pid_alive(pid), 10, what="pid %d to die" % pid)
        if expect_crash_restart:
            # the postmaster notices and reinitialises, then recovers
            wait_until(lambda: self.crash_restarts() > before, 30,
                       what="postmaster to reinitialise after the kill")
            self.wait_ready(timeout)

    def kill_backend(self, pid, timeout=60):
        self.kill_pid(pid, timeout=timeout)

    def leapfrog_worker_pids(self, dbname="postgres"):
        """Pids of leapfrog background processes (pg_stat_activity, then /proc)."""
        pids = set()
        try:
            # No other extension is loaded in these clusters: any background
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
        # A new postmaster refuses to start while the old pid exists, even as
        # a zombie: wait for init to reap it, else drop the stale lock file.
        try:
            wait_until(lambda: not _pid_exists(pm), 5, what="postmaster reaped")
        except TimeoutError:
            (self.datadir / "postmaster.pid").unlink(missing_ok=True)
        # stragglers forked just before the kill
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
