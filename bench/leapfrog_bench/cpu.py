"""Where the server's CPU goes during a run, by kind of process.

Every 0.5 s a thread reads, from /proc, the CPU time (user + system) of the
postmaster's children and their process titles, and the postmaster's own
count of its exited children's CPU.  `by_kind(t_from, t_to)` then gives the
CPU seconds each kind of process used in that interval:

  clients     client backends: pgbench's sessions and the strategy's own
              connection (the eager script, start(), the multistep copy)
  workers     Leapfrog's background workers
  autovacuum  autovacuum workers
  other       the rest that runs: checkpointer, WAL writer, launchers...
  exited      processes that exited in the interval (their last half second
              or less, or all of a short-lived one: an autovacuum worker,
              a Leapfrog worker that finished)

Why: at saturation every strategy gets the same CPU, and what lazy loses
against eager is CPU spent elsewhere; this says where (bench/README.md).

`host_busy(t_from, t_to)` is the whole machine's busy share of its CPU
time in the interval (/proc/stat: everything but idle and iowait), pgbench
and the samplers included: at a fixed rate it says how much headroom the
load left, which is what a migration's extra work has to fit in.
"""
import os
import threading
import time

CLK = os.sysconf("SC_CLK_TCK")
KINDS = ("clients", "workers", "autovacuum", "other", "exited")


def _stat(pid):
    """(ppid, cpu seconds of the process, cpu seconds of its reaped children)"""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / CLK, \
        (int(fields[13]) + int(fields[14])) / CLK


def _host():
    """(busy, total) jiffies of the whole machine (/proc/stat's cpu line)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)       # idle + iowait
    total = sum(v[:8])                               # guest time is in user already
    return total - idle, total


def _kind(title):
    if "leapfrog worker" in title:
        return "workers"
    if "autovacuum worker" in title:
        return "autovacuum"
    for aux in ("checkpointer", "background writer", "walwriter", "autovacuum launcher",
                "logical replication launcher", "leapfrog launcher", "archiver",
                "walsender", "startup"):
        if title.startswith(f"postgres: {aux}"):
            return "other"
    return "clients"


class CpuSampler(threading.Thread):
    def __init__(self, datadir, interval=0.5):
        super().__init__(daemon=True)
        self.datadir = str(datadir)
        self.interval = interval
        self.samples = []          # (time, {pid: (kind, cpu_s)}, exited children's cpu_s)
        self.host = []             # (time, busy jiffies, total jiffies)
        self._stop_ev = threading.Event()

    def _postmaster(self):
        with open(os.path.join(self.datadir, "postmaster.pid")) as f:
            return int(f.readline())

    def _sample(self):
        pm = self._postmaster()
        _, own, reaped = _stat(pm)
        procs = {pm: ("other", own)}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            pid = int(d)
            try:
                ppid, cpu, _ = _stat(pid)
                if ppid != pm:
                    continue
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    title = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue       # exited meanwhile: counted in `reaped` next time
            procs[pid] = (_kind(title), cpu)
        return procs, reaped

    def run(self):
        while not self._stop_ev.is_set():
            try:
                procs, reaped = self._sample()
                self.samples.append((time.time(), procs, reaped))
                self.host.append((time.time(), *_host()))
            except (OSError, ValueError):
                pass           # the server restarting: no sample
            self._stop_ev.wait(self.interval)

    def stop(self):
        self._stop_ev.set()
        self.join(timeout=10)

    def by_kind(self, t_from, t_to):
        """CPU seconds per kind of process between the samples nearest
        t_from and t_to (inside the interval); None without two samples."""
        inside = [s for s in self.samples if t_from <= s[0] <= t_to]
        if len(inside) < 2:
            return None
        (_, a, ra), (_, b, rb) = inside[0], inside[-1]
        out = dict.fromkeys(KINDS, 0.0)
        for pid, (kind, cpu) in b.items():
            out[kind] += cpu - (a[pid][1] if pid in a else 0.0)
        # a process sampled at the start and gone at the end: its CPU since
        # the first sample is in the postmaster's reaped count, with that of
        # the processes that started and exited in between
        gone = sum(cpu for pid, (kind, cpu) in a.items() if pid not in b)
        out["exited"] = max(0.0, (rb - ra) - gone)
        return {k: round(v, 2) for k, v in out.items()}

    def kind_of_pid(self):
        """pid -> kind, over every sample (a pid keeps the kind it was first
        seen with): which kind of process took a profile's samples (perf.py)."""
        kinds = {}
        for _, procs, _ in self.samples:
            for pid, (kind, _) in procs.items():
                kinds.setdefault(pid, kind)
        return kinds

    def host_busy(self, t_from, t_to):
        """The machine's busy fraction of its CPU between the samples
        nearest t_from and t_to (inside the interval); None without two."""
        inside = [h for h in self.host if t_from <= h[0] <= t_to]
        if len(inside) < 2 or inside[-1][2] == inside[0][2]:
            return None
        return round((inside[-1][1] - inside[0][1]) / (inside[-1][2] - inside[0][2]), 3)
