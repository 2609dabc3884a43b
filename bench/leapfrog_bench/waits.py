"""What the server's processes wait for during a run, to explain stalls.

Every 100 ms a thread reads pg_stat_activity, from a connection of its own to
the maintenance database (so that it never keeps the run's database from
being dropped), and keeps the client backends that wait on a lock, an LWLock,
I/O or IPC, and every other backend that is active (autovacuum, Leapfrog's
workers, a migration's copy...).  The runner writes the samples to waits.csv
in the run's raw directory and, for the run's longest stall, names what the
samples taken during it show most often (`stall_waits` in summary.json);
`lock_waits` is how many client backends wait on a lock, on average over the
window's samples.

This is how the 0.75-0.85 s stalls of some lazy runs were found to be
autovacuum truncating district under AccessExclusiveLock (bench/README.md).

With each sample it also reads the run's database's buffer accesses
(pg_stat_database: blks_hit + blks_read, every backend's), so that
`blocks_between` gives the shared-buffer pages read over an interval.
Backends report them at most once a second: over a window of many seconds
the lag at its two ends about cancels.  Why: a page read is a lookup in the
shared buffer table and a pin, which cost more under concurrency than in a
backend alone; their count per transaction is what a strategy adds in
memory traffic, where instructions (bench/statement_cost.py) do not show it.
"""
import collections
import csv
import threading
import time

import psycopg

QUERY = """
SELECT backend_type, coalesce(wait_event_type, ''), coalesce(wait_event, ''),
       left(regexp_replace(query, '\\s+', ' ', 'g'), 60)
  FROM pg_stat_activity
 WHERE pid <> pg_backend_pid() AND state = 'active'
   AND (backend_type <> 'client backend'
        OR wait_event_type IN ('Lock', 'LWLock', 'IO', 'IPC', 'BufferPin', 'Timeout'))
"""


class WaitSampler(threading.Thread):
    def __init__(self, conninfo, interval=0.1, datname=None):
        super().__init__(daemon=True)
        self.conninfo = conninfo
        self.interval = interval
        self.datname = datname
        self.samples = []          # (time, [(backend_type, wait type, wait event, query)])
        self.blocks = []           # (time, blks_hit + blks_read of datname)
        self.errors = 0
        self._stop_ev = threading.Event()

    def run(self):
        conn = None
        while not self._stop_ev.is_set():
            try:
                if conn is None:
                    conn = psycopg.connect(self.conninfo, autocommit=True)
                rows = conn.execute(QUERY).fetchall()
                self.samples.append((time.time(), [tuple(r) for r in rows]))
                if self.datname:
                    b = conn.execute("SELECT blks_hit + blks_read FROM pg_stat_database "
                                     "WHERE datname = %s", (self.datname,)).fetchone()
                    if b and b[0] is not None:
                        self.blocks.append((time.time(), int(b[0])))
            except psycopg.Error:
                self.errors += 1
                if conn is not None:
                    conn.close()
                conn = None
            self._stop_ev.wait(self.interval)
        if conn is not None:
            conn.close()

    def stop(self):
        self._stop_ev.set()
        self.join(timeout=10)

    def write_csv(self, path, t0):
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["t_s", "backend_type", "wait_event_type", "wait_event", "query"])
            for t, rows in self.samples:
                for r in rows:
                    w.writerow([round(t - t0, 3), *r])


def blocks_between(blocks, t_from, t_to):
    """Buffer accesses between the samples nearest t_from and t_to (inside
    the interval); None without two samples."""
    inside = [b for t, b in blocks if t_from <= t <= t_to]
    return inside[-1] - inside[0] if len(inside) >= 2 else None


def lock_waits(samples, t_from, t_to):
    """Client backends waiting on a heavyweight lock (row, transaction,
    relation, advisory), on average over the samples taken in [t_from, t_to];
    None without samples."""
    n = [sum(1 for r in rows if r[0] == "client backend" and r[1] == "Lock")
         for t, rows in samples if t_from <= t <= t_to]
    return round(sum(n) / len(n), 3) if n else None


def summarize(samples, t_from, t_to, top=4):
    """The process states seen most often in the samples taken in [t_from,
    t_to], as "<n>x <backend type> <wait type>/<wait event> <query>" (n: in
    how many samples, counted once per sample), most frequent first."""
    seen = collections.Counter()
    n = 0
    for t, rows in samples:
        if t_from <= t <= t_to:
            n += 1
            for r in set(rows):
                seen[r] += 1
    out = []
    for (btype, wtype, wevent, query), k in seen.most_common(top):
        wait = f"{wtype}/{wevent}" if wtype else "running"
        out.append(f"{k}/{n} samples: {btype} {wait} {query}".rstrip())
    return out
