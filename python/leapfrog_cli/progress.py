"""Figures for people: sizes, durations, rates; the background rate of a
database; the progress display of `leapfrog wait`."""
import math
import statistics
import time
from collections import deque

# ---- formatting ----------------------------------------------------------


def rows(n):
    return "?" if n is None else "{:,}".format(int(n))


def size(n):
    """Bytes in kB, MB, GB, TB (powers of 1024), as pg_size_pretty names them."""
    if n is None:
        return "?"
    n = float(n)
    if n < 1024:
        return "%d bytes" % n
    for unit in ("kB", "MB", "GB", "TB"):
        n /= 1024
        if n < 1024 or unit == "TB":
            return ("%.1f %s" if n < 10 else "%.0f %s") % (n, unit)


def duration(s):
    """Seconds, rounded to what a person reads: 0.3 s, 42 s, 4 min 12 s, 2 h 05 min."""
    if s is None:
        return "?"
    if s < 10:
        return "%.1f s" % s
    s = int(round(s))
    if s < 60:
        return "%d s" % s
    if s < 3600:
        return "%d min %02d s" % (s // 60, s % 60)
    return "%d h %02d min" % (s // 3600, (s % 3600) // 60)


def rate(r):
    return "?" if r is None else "{:,.0f} rows/s".format(r)


def percent(fraction):
    """A fraction in percent, one decimal, rounded down: 100.0% only when
    nothing is left (199,997 of 200,000 is 99.9%)."""
    if fraction is None:
        return "?%"
    return "%.1f%%" % (math.floor(1000 * fraction + 1e-9) / 10)


def one_line(sql, width=72):
    """A statement on one line without the comment lines before it,
    shortened to width characters."""
    lines = (sql or "").splitlines()
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines.pop(0)
    text = " ".join(" ".join(lines).split())
    return text if len(text) <= width else text[:width - 3] + "..."


# ---- the rate of the background ------------------------------------------

# The recent migrations of the database and how fast their rows moved:
# done ones over their whole run, running ones so far.
RATE_SQL = """
SELECT CASE WHEN state = 'done' THEN tuples_total ELSE tuples_migrated END,
       extract(epoch FROM coalesce(finished_at, clock_timestamp()) - started_at)::float8
  FROM leapfrog.migrations
 WHERE state IN ('done', 'running')
 ORDER BY started_at DESC
 LIMIT %s
"""


def measured_rate(conn, recent=10):
    """(input rows per second, how many migrations it is the median of), or
    (None, 0) when the database has no migration that moved rows."""
    rates = [n / secs for n, secs in conn.execute(RATE_SQL, [recent]).fetchall()
             if n and secs and secs > 0]
    if not rates:
        return None, 0
    return statistics.median(rates), len(rates)


# ---- progress of one migration --------------------------------------------

STATUS_SQL = """
SELECT name, state, started_at, finished_at, tuples_total, tuples_migrated, error,
       extract(epoch FROM coalesce(finished_at, clock_timestamp()) - started_at)::float8,
       on_error, failed_rows, after
  FROM leapfrog.migrations
"""
STATUS_FIELDS = ("name", "state", "started_at", "finished_at", "tuples_total",
                 "tuples_migrated", "error", "elapsed_s", "on_error", "failed_rows", "after")


def status_rows(conn, name=None, names=None):
    """Rows of leapfrog.migrations as dicts (all, the one named, or those
    in the list names), with what follows from them: remaining, fraction,
    rate (input rows per second: over the whole run once done, so far
    while running) and, while running, eta_s at that rate.  failed_rows
    counts the rows the worker could not migrate, after lists the
    unfinished migrations that fill its inputs (a chain)."""
    q, params = STATUS_SQL, []
    if name is not None:
        q, params = q + " WHERE name = %s", [name]
    elif names is not None:
        q, params = q + " WHERE name = ANY(%s)", [list(names)]
    out = []
    for r in conn.execute(q + " ORDER BY started_at, name", params).fetchall():
        d = dict(zip(STATUS_FIELDS, r))
        total, moved, el = d["tuples_total"], d["tuples_migrated"] or 0, d["elapsed_s"]
        d["remaining"] = max(total - moved, 0) if total is not None else None
        d["fraction"] = (moved / total if total else 1.0) if total is not None else None
        d["rate_rows_per_s"] = (moved / el) if el and el > 0 and moved else None
        d["eta_s"] = None
        if d["state"] == "running" and d["rate_rows_per_s"] and d["remaining"] is not None:
            d["eta_s"] = d["remaining"] / d["rate_rows_per_s"]
        out.append(d)
    return out


def bar(fraction, width=30):
    n = int(round(max(0.0, min(1.0, fraction or 0.0)) * width))
    return "[" + "#" * n + "." * (width - n) + "]"


class Progress:
    """Shows a running migration: a bar redrawn in place on a terminal, a
    plain line per poll otherwise (logs, pipelines).  The rate is that of
    the last 10 seconds (before a second sample, the average since the
    start if that is 10 seconds ago or more)."""

    WINDOW_S = 10.0

    def __init__(self, out, name, quiet=False):
        self.out = out
        self.name = name
        self.tty = out.isatty()
        self.quiet = quiet
        self.samples = deque()
        self.drawn = False
        self.average_ok = True

    def held(self):
        """The migration waits for earlier ones (a chain): its rate starts
        afresh once they are done, without the average since its start."""
        self.samples.clear()
        self.average_ok = False

    def rate(self, d):
        now = time.monotonic()
        moved = d["tuples_migrated"] or 0
        self.samples.append((now, moved))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.WINDOW_S:
            self.samples.popleft()
        t0, m0 = self.samples[0]
        if now - t0 >= 1.0 and moved > m0:
            return (moved - m0) / (now - t0)
        # No window yet: the average since the start, once it is not mostly
        # the worker's start-up (leapfrog.background_delay) any more.
        if self.average_ok and d["elapsed_s"] and d["elapsed_s"] >= self.WINDOW_S:
            return d["rate_rows_per_s"]
        return None

    def show(self, d):
        r = self.rate(d)
        left = d["remaining"]
        eta = left / r if r and left is not None else None
        pct = "%6s" % percent(d["fraction"])
        text = "%s %s migrated, %s rows left, %s, ETA %s" % (
            pct, rows(d["tuples_migrated"] or 0) + "/" + rows(d["tuples_total"]), rows(left),
            rate(r) if r else "rate ?", duration(eta) if eta is not None else "?")
        if self.quiet:
            return
        if self.tty:
            self.out.write("\r%s %s\x1b[K" % (bar(d["fraction"]), text))
            self.drawn = True
        else:
            self.out.write("%s %s %s: %s\n" % (time.strftime("%H:%M:%S"), self.name,
                                               d["state"], text))
        self.out.flush()

    def end(self, line):
        if self.drawn:
            self.out.write("\n")
            self.drawn = False
        if line:
            self.out.write(line + "\n")
        self.out.flush()

