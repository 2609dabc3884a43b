"""Where the server's CPU goes by function, during a run's migration window
(`bench/run.py --perf`).

`PerfWindow` samples the whole machine with `perf record -a -e cpu-clock`
(a timer, so it works in a VM without hardware counters) from the migration
until the end of the load.  `by_kind` then splits the samples by the kind of
process that took them, with CpuSampler's kinds (cpu.py: clients, workers,
autovacuum, other) and `host` for everything outside the server (pgbench,
this harness, other tenants' processes that show), and by shared object and
symbol.  The server's binary is stripped: a static function's samples go to
the exported symbol before it, so read a symbol as "this part of the code".

Why: a transaction's instructions (bench/statement_cost.py) are measured in
one backend alone; under load its CPU time also pays for what it shares with
the others (locks, buffers, the kernel's scheduling).  Comparing two runs'
profiles per committed transaction (bench/perf_diff.py) says which.
"""
import collections
import json
import os
import shutil
import subprocess
import threading
import time

FREQ = 499          # Hz per CPU; prime, so not in step with the load's timers


def available():
    """True when `perf record -a` can sample here (installed, and allowed)."""
    if not shutil.which("perf"):
        return False
    try:
        return subprocess.run(["perf", "record", "-a", "-e", "cpu-clock", "-o", "/dev/null",
                               "--", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class PerfWindow(threading.Thread):
    """`perf record -a` from wall-clock time t_from to t_to, into `path`."""

    def __init__(self, path, t_from, t_to):
        super().__init__(daemon=True)
        self.path, self.t_from, self.t_to = path, t_from, t_to
        self.error = None

    def run(self):
        time.sleep(max(0.0, self.t_from - time.time()))
        seconds = self.t_to - time.time()
        if seconds <= 0:
            self.error = "the window ended before perf could start"
            return
        r = subprocess.run(["perf", "record", "-a", "-q", "-e", "cpu-clock", "-F", str(FREQ),
                            "-o", self.path, "--", "sleep", f"{seconds:.2f}"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            self.error = (r.stderr.strip().splitlines() or ["perf record failed"])[-1]


def by_kind(path, kind_of_pid):
    """{kind: {"dso symbol": samples}} from perf.data at `path`."""
    r = subprocess.run(["perf", "report", "-i", path, "--stdio", "--no-children",
                        "--sort", "pid,dso,sym", "-F", "sample,pid,dso,sym",
                        "--field-separator=\t"], capture_output=True, text=True, check=True)
    return parse_report(r.stdout, kind_of_pid)


def parse_report(text, kind_of_pid):
    """by_kind's work on `perf report`'s text: lines of samples, "pid:comm",
    shared object and symbol, tab-separated; pid 0 is the idle task."""
    out = collections.defaultdict(collections.Counter)
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        parts = [p.strip() for p in line.split("\t")]
        if len(parts) < 4:
            continue
        samples, pid_comm, dso, sym = parts[:4]
        pid = int(pid_comm.split(":", 1)[0])
        if pid == 0:
            kind = "idle"
        else:
            kind = kind_of_pid.get(pid, "host")
        out[kind][f"{os.path.basename(dso)} {sym}"] += int(samples)
    return {k: dict(v) for k, v in out.items()}


def write_profile(rundir, window, cpu_sampler, committed, keep_data=False):
    """Summarize the window's perf.data into rundir/perf.json; for the run's
    result, the samples per kind, or {"error": why}."""
    if window.error or not os.path.exists(window.path):
        return {"error": window.error or "no perf data"}
    try:
        kinds = by_kind(window.path, cpu_sampler.kind_of_pid())
    except (subprocess.CalledProcessError, OSError) as e:
        return {"error": f"perf report: {e}"}
    finally:
        if not keep_data and os.path.exists(window.path):
            os.remove(window.path)
    doc = {"frequency_hz": FREQ, "committed": committed, "seconds": round(window.t_to - window.t_from, 2),
           "samples": {k: sum(v.values()) for k, v in kinds.items()}, "by_kind": kinds}
    with open(os.path.join(rundir, "perf.json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    return doc["samples"]
