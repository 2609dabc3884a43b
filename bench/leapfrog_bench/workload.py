"""pgbench driver: the TPC-C mix, per-transaction log (-l), per-second
progress (-P 1), fixed rate (--rate) or unthrottled, --max-tries for
serialization failures and deadlocks; settings of its client sessions go
through PGOPTIONS."""
import glob
import gzip
import os
import re
import shutil
import subprocess
import time

from . import tpcc


class PgbenchRun:
    def __init__(self, cluster, dbname, outdir, warehouses, clients, threads, duration_s,
                 rate=None, max_tries=10, settings=None):
        self.cluster = cluster
        self.dbname = dbname
        self.outdir = outdir
        os.makedirs(outdir, exist_ok=True)
        self.log_prefix = os.path.join(outdir, "pgbench_log")
        scripts = tpcc.write_pgbench_scripts(os.path.join(outdir, "scripts"))
        self.argv = [cluster.pgbench, "-n", "-c", str(clients), "-j", str(threads),
                     "-T", str(int(duration_s)), "-P", "1", "-l",
                     f"--log-prefix={self.log_prefix}", f"--max-tries={max_tries}",
                     "--failures-detailed", "-D", f"nw={warehouses}"]
        if rate:
            self.argv += ["--rate", str(rate)]
        self.argv += scripts + cluster.pgbench_conn_args(dbname)
        self.env = dict(os.environ)
        if settings:
            self.env["PGOPTIONS"] = " ".join(
                ([self.env["PGOPTIONS"]] if self.env.get("PGOPTIONS") else [])
                + [f"-c {k}={_escape_option(v)}" for k, v in settings.items()])
        self.duration_s = duration_s
        self.proc = None
        self.t_start = None

    def start(self):
        self.stdout = open(os.path.join(self.outdir, "pgbench.out"), "w")
        self.stderr = open(os.path.join(self.outdir, "pgbench.err"), "w")
        self.t_start = time.time()
        self.proc = subprocess.Popen(self.argv, stdout=self.stdout, stderr=self.stderr,
                                     cwd=self.outdir, env=self.env)
        return self

    def wait(self, timeout=None):
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            self.stdout.close()
            self.stderr.close()
        self.rc = rc
        return rc

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def log_files(self):
        return sorted(glob.glob(self.log_prefix + ".*"))

    def parse(self):
        """Transactions as (end_epoch_s, latency_us or None when failed,
        script_no, retries)."""
        return parse_logs(self.log_files())

    def stderr_text(self):
        with open(os.path.join(self.outdir, "pgbench.err"), errors="replace") as f:
            return f.read()

    def stdout_text(self):
        with open(os.path.join(self.outdir, "pgbench.out"), errors="replace") as f:
            return f.read()

    def summary(self):
        """Numbers pgbench printed at the end."""
        out = self.stdout_text()
        err = self.stderr_text()
        res = {"rc": getattr(self, "rc", None)}
        m = re.search(r"number of failed transactions: (\d+)", out)
        res["failed"] = int(m.group(1)) if m else None
        m = re.search(r"number of transactions retried: (\d+)", out)
        res["retried"] = int(m.group(1)) if m else 0
        m = re.search(r"total number of retries: (\d+)", out)
        res["retries"] = int(m.group(1)) if m else 0
        aborted = re.findall(r"client \d+ (?:script \d+ )?aborted[^\n]*", err)
        res["aborted_clients"] = len(aborted)
        errors = re.findall(r"(?:ERROR|FATAL):[^\n]*", err)
        res["errors_sample"] = sorted(set(errors))[:5]
        return res

    def compress_logs(self):
        for p in self.log_files():
            if p.endswith(".gz"):
                continue
            with open(p, "rb") as src, gzip.open(p + ".gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.remove(p)


def _escape_option(value):
    """A value in libpq's options: spaces separate arguments unless escaped."""
    return str(value).replace("\\", "\\\\").replace(" ", "\\ ")


def parse_logs(paths):
    txs = []
    for p in paths:
        op = gzip.open if p.endswith(".gz") else open
        with op(p, "rt") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 6:
                    continue
                lat = parts[2]
                end = int(parts[4]) + int(parts[5]) / 1e6
                script = int(parts[3])
                retries = int(parts[-1]) if len(parts) >= 7 else 0
                if lat.isdigit():
                    txs.append((end, int(lat), script, retries))
                else:  # failed / serialization / deadlock / skipped
                    txs.append((end, None, script, retries))
    txs.sort(key=lambda t: t[0])
    return txs
