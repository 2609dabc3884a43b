"""A throwaway PostgreSQL 15 cluster: initdb in a temporary directory, a free
port, Unix socket in the same directory, tuned for a 2-core / 24 GB machine,
with shared_preload_libraries = 'leapfrog' when the extension is installed.

As root, the server runs as the `postgres` OS user (initdb refuses root);
clients (psycopg, pgbench) connect over the socket as database user postgres.
"""
import atexit
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time

PG_MAJOR = "15"


def _pg_config(flag):
    try:
        return subprocess.check_output(["pg_config", flag], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def find_bindir():
    """Directory with initdb/pg_ctl/postgres/pgbench of PostgreSQL 15."""
    candidates = []
    b = _pg_config("--bindir")
    if b:
        candidates.append(b)
    candidates.append(f"/usr/lib/postgresql/{PG_MAJOR}/bin")
    for d in candidates:
        if all(os.access(os.path.join(d, x), os.X_OK) for x in ("initdb", "pg_ctl", "postgres")):
            return d
    return None


def find_pgbench(bindir):
    for p in (os.path.join(bindir or "", "pgbench"), shutil.which("pgbench") or ""):
        if p and os.access(p, os.X_OK):
            return p
    return None


def extension_installed():
    """True when `make install` has put leapfrog into this PostgreSQL."""
    lib = _pg_config("--pkglibdir")
    share = _pg_config("--sharedir")
    if not lib or not share:
        return False
    return (os.path.exists(os.path.join(lib, "leapfrog.so"))
            and os.path.exists(os.path.join(share, "extension", "leapfrog.control")))


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_settings(shared_buffers="2GB"):
    """Server settings for a benchmark on 2 cores / 24 GB.  Durability is off
    (throwaway cluster): the figures measure CPU, locking and I/O through the
    page cache, the same for every strategy.  wal_level stays at replica, as
    on any server with a standby or WAL archiving: minimal would skip the WAL
    of tables created in the writing transaction, which only the eager
    script's copy is (measured at W=10: its stall 2.2-2.7 s at minimal, 3.1-3.4 s
    at replica)."""
    return {
        "max_connections": "100",
        "shared_buffers": shared_buffers,
        "effective_cache_size": "16GB",
        "work_mem": "32MB",
        "maintenance_work_mem": "1GB",
        "max_wal_size": "32GB",
        "min_wal_size": "1GB",
        "checkpoint_timeout": "1h",
        "fsync": "off",
        "full_page_writes": "off",
        "synchronous_commit": "off",
        "wal_level": "replica",
        "jit": "off",
        "max_parallel_workers_per_gather": "0",
        "max_parallel_maintenance_workers": "1",
        "max_worker_processes": "16",
        "deadlock_timeout": "200ms",
        "autovacuum_naptime": "10s",
        "log_min_messages": "warning",
        "log_min_error_statement": "panic",
        "log_line_prefix": "%m [%p] %d ",
    }


class Cluster:
    def __init__(self, workdir=None, settings=None, preload_leapfrog=None, keep=False, log=print):
        self.log = log
        self.bindir = find_bindir()
        if not self.bindir:
            raise RuntimeError(
                "PostgreSQL 15 server binaries not found (initdb, pg_ctl, postgres). "
                "Install them (Debian: apt-get install postgresql-15 postgresql-client-15) "
                "or put pg_config on PATH.")
        self.pgbench = find_pgbench(self.bindir)
        if not self.pgbench:
            raise RuntimeError("pgbench not found (Debian: apt-get install postgresql-client-15)")
        self.is_root = os.geteuid() == 0
        self.keep = keep
        base = workdir or tempfile.gettempdir()
        os.makedirs(base, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix="leapfrog-pg-", dir=base)
        self.datadir = os.path.join(self.dir, "data")
        self.sockdir = os.path.join(self.dir, "sock")
        self.logfile = os.path.join(self.dir, "server.log")
        os.makedirs(self.sockdir)
        if preload_leapfrog is None:
            preload_leapfrog = extension_installed()
        self.leapfrog = bool(preload_leapfrog)
        self.settings = dict(settings or default_settings())
        self.port = free_port()
        self.running = False
        if self.is_root:
            pw = pwd.getpwnam("postgres")
            self._uid, self._gid = pw.pw_uid, pw.pw_gid
            os.chmod(self.dir, 0o755)
            for d in (self.dir, self.sockdir):
                os.chown(d, self._uid, self._gid)

    # -- processes run as the server's OS user ---------------------------------
    def _run_as_server(self, argv, **kw):
        kw.setdefault("cwd", self.dir)
        env = dict(os.environ)
        env.pop("PGDATA", None)
        if self.is_root:
            kw["user"] = self._uid
            kw["group"] = self._gid
            kw["extra_groups"] = []
            env["HOME"] = self.dir
            env["USER"] = env["LOGNAME"] = "postgres"
        return subprocess.run(argv, env=env, **kw)

    def init(self):
        r = self._run_as_server(
            [os.path.join(self.bindir, "initdb"), "-D", self.datadir, "-U", "postgres",
             "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"],
            capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("initdb failed:\n" + r.stdout + r.stderr)
        conf = dict(self.settings)
        conf["port"] = str(self.port)
        conf["listen_addresses"] = "'127.0.0.1'"
        conf["unix_socket_directories"] = f"'{self.sockdir}'"
        if self.leapfrog:
            conf["shared_preload_libraries"] = "'leapfrog'"
        with open(os.path.join(self.datadir, "postgresql.auto.conf"), "a") as f:
            f.write("\n# leapfrog bench\n")
            for k, v in conf.items():
                if not (v.startswith("'") or v.replace(".", "").isdigit()):
                    v = f"'{v}'"
                f.write(f"{k} = {v}\n")
        return self

    def start(self):
        r = self._run_as_server(
            [os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir, "-l", self.logfile,
             "-w", "-t", "120", "start"], capture_output=True, text=True)
        if r.returncode != 0:
            tail = ""
            if os.path.exists(self.logfile):
                with open(self.logfile) as f:
                    tail = f.read()[-3000:]
            raise RuntimeError("pg_ctl start failed:\n" + r.stdout + r.stderr + tail)
        self.running = True
        atexit.register(self.stop)
        return self

    def stop(self):
        if self.running:
            self._run_as_server(
                [os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir, "-m", "fast",
                 "-w", "-t", "120", "stop"], capture_output=True, text=True)
            self.running = False

    def restart(self):
        """Immediate stop and start (after a lazy run left the server unusable)."""
        self._run_as_server(
            [os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir, "-m", "immediate",
             "-w", "-t", "60", "stop"], capture_output=True, text=True)
        self.running = False
        self.start()
        self.wait_ready(timeout=60)

    def destroy(self):
        self.stop()
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        self.init().start()
        return self

    def __exit__(self, *exc):
        self.destroy()

    # -- client side ----------------------------------------------------------
    def conninfo(self, dbname="postgres"):
        return f"host={self.sockdir} port={self.port} user=postgres dbname={dbname}"

    def pgbench_conn_args(self, dbname):
        return ["-h", self.sockdir, "-p", str(self.port), "-U", "postgres", dbname]

    def server_log_tail(self, n=4000):
        try:
            with open(self.logfile, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def is_running(self):
        r = self._run_as_server([os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir, "status"],
                                capture_output=True, text=True)
        return r.returncode == 0

    def wait_ready(self, timeout=120):
        """Wait until the server accepts connections; after a crash the
        postmaster recovers by itself, and a stopped server is started."""
        import psycopg
        t0 = time.time()
        while True:
            try:
                with psycopg.connect(self.conninfo(), autocommit=True, connect_timeout=5):
                    return
            except psycopg.OperationalError:
                if time.time() - t0 > timeout:
                    raise
                if not self.is_running():
                    self.running = False
                    self.start()
                time.sleep(0.5)

    def crashes_in_log(self):
        """Lines of the server log that tell of a backend crash."""
        try:
            with open(self.logfile, errors="replace") as f:
                return [ln.rstrip() for ln in f
                        if "terminated by signal" in ln or "was terminated by" in ln
                        or "PANIC" in ln or "server process" in ln and "exited" in ln]
        except OSError:
            return []
