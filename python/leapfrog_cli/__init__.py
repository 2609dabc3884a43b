"""leapfrog: Leapfrog migrations from the command line, for deployment pipelines.

    leapfrog plan FILE                 what start() would do with the script; changes nothing
    leapfrog start NAME FILE [--wait]  the switch (leapfrog.start); --then FILE: more SQL
                                       in the same transaction; --on-error quarantine
    leapfrog status [NAME] [--json]    the migrations, their progress, failed rows, chains
    leapfrog wait NAME [--timeout S]   until the data has moved, with a progress display
    leapfrog complete NAME             move what is left now (leapfrog.complete)
    leapfrog failed NAME [--json]      the rows the worker could not migrate
    leapfrog fix NAME INPUT CTID --set COL=VALUE ... | --changes JSON
                                       correct a failed row (leapfrog.correct_row)
    leapfrog quarantine NAME INPUT CTID  set a row aside (leapfrog.quarantine_row)
    leapfrog resume NAME [--wait]      a failed migration runs again (leapfrog.resume)

It connects as psql does: libpq's environment (PGHOST, PGPORT, PGDATABASE,
PGUSER, PGPASSWORD, PGSERVICE, ...), -d/--dbname (a database name, a
conninfo string or a URI), -h/--host, -p/--port, -U/--username.  FILE may
be - for standard input.  Exit codes: the EXIT_* constants below (README.md,
"Command-line tool").
"""
import argparse
import decimal
import json
import os
import re
import shutil
import sys
import textwrap
import time

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from leapfrog_cli import progress as fmt

__version__ = "0.1.0"

EXIT_OK = 0           # done: script accepted, switched, migration done, ...
EXIT_ERROR = 1        # an error from the server (SQLSTATE printed), or no such migration
EXIT_USAGE = 2        # bad arguments, unreadable FILE
EXIT_CONNECT = 3      # could not connect
EXIT_REFUSED = 4      # Leapfrog refuses the script (SQLSTATE 0A000): plan, start
EXIT_TIMEOUT = 5      # wait --timeout expired: the migration is still running
EXIT_FAILED = 6       # the migration failed (a row could not be migrated)
EXIT_LOCKED = 7       # start (or plan) could not take its locks in time (55P03): retry later
EXIT_PRIVILEGE = 8    # permission denied (42501): not the migration's owner, say
EXIT_INTERRUPTED = 130

EXIT_CODES = [
    (EXIT_OK, "success: plan accepted the script, start switched, wait saw the migration "
              "done, complete finished it, status printed, failed found no failed row, "
              "fix, quarantine or resume did it"),
    (EXIT_ERROR, "an error from the server (its SQLSTATE is printed), or no migration of "
                 "that name"),
    (EXIT_USAGE, "bad arguments, or FILE cannot be read"),
    (EXIT_CONNECT, "could not connect to the server"),
    (EXIT_REFUSED, "Leapfrog refuses (SQLSTATE 0A000; the hint says what to do): the script "
                   "(plan, start), the correction of a group or join key (fix)"),
    (EXIT_TIMEOUT, "wait --timeout expired, the migration still runs"),
    (EXIT_FAILED, "the migration failed (status NAME, wait, start --wait, resume --wait), or "
                  "an earlier migration of its chain did (wait); failed listed rows that "
                  "cannot be migrated"),
    (EXIT_LOCKED, "start or plan could not take its locks (55P03): retry later"),
    (EXIT_PRIVILEGE, "permission denied (42501): the role does not have the privileges of "
                     "the migration's owner (failed, fix, quarantine, resume, complete), or "
                     "lacks rights the script needs"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
]


class CliError(Exception):
    """What main() prints to stderr before it exits with code; hint is a
    line, or a list of them."""

    def __init__(self, code, message, detail=None, hint=None, sqlstate=None):
        super().__init__(message)
        self.code, self.message, self.detail, self.hint, self.sqlstate = (
            code, message, detail, hint, sqlstate)

    def print(self, out=None):
        out = out or sys.stderr
        state = " (SQLSTATE %s)" % self.sqlstate if self.sqlstate else ""
        out.write("leapfrog: %s%s\n" % (self.message, state))
        if self.detail:
            out.write("DETAIL: %s\n" % self.detail)
        for hint in [self.hint] if isinstance(self.hint, str) else self.hint or []:
            out.write("HINT: %s\n" % hint)
        out.flush()


def exit_code_of(sqlstate):
    if sqlstate == "0A000":
        return EXIT_REFUSED
    if sqlstate == "55P03":
        return EXIT_LOCKED
    if sqlstate == "42501":
        return EXIT_PRIVILEGE
    return EXIT_ERROR


def sql_error(e, doing):
    """A psycopg error as a CliError: its message, detail, hint, SQLSTATE."""
    diag = e.diag
    msg = diag.message_primary or str(e).strip().splitlines()[0]
    return CliError(exit_code_of(e.sqlstate), "%s: %s" % (doing, msg),
                    detail=diag.message_detail, hint=diag.message_hint, sqlstate=e.sqlstate)


# ---- connection ------------------------------------------------------------

def conninfo(args):
    """The connection string of -d/-h/-p/-U; libpq takes the rest from the
    environment (PGHOST, PGPORT, PGDATABASE, PGUSER, PGSERVICE, ...), as psql."""
    base = getattr(args, "dbname", None) or ""
    if base and "=" not in base and not base.startswith(("postgresql://", "postgres://")):
        base = make_conninfo(dbname=base)
    kw = {k: getattr(args, a, None) for k, a in
          (("host", "host"), ("port", "port"), ("user", "username"))}
    try:
        return make_conninfo(base, fallback_application_name="leapfrog",
                             **{k: v for k, v in kw.items() if v})
    except psycopg.ProgrammingError as e:
        raise CliError(EXIT_USAGE, "invalid connection string: %s" % e)


def _notice(diag):
    sys.stderr.write("%s: %s\n" % (diag.severity, diag.message_primary))
    sys.stderr.flush()


def connect(args):
    """An autocommit connection with the extension, server notices on stderr."""
    info = conninfo(args)
    try:
        conn = psycopg.connect(info, autocommit=True)
    except psycopg.ProgrammingError as e:
        raise CliError(EXIT_USAGE, "invalid connection string: %s" % e)
    except psycopg.OperationalError as e:
        raise CliError(EXIT_CONNECT, "could not connect: %s" % " ".join(str(e).split()))
    conn.add_notice_handler(_notice)
    try:
        has = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'leapfrog'"
                           ).fetchone()
    except psycopg.Error as e:
        raise sql_error(e, "checking the extension")
    if has is None:
        raise CliError(EXIT_ERROR, 'extension "leapfrog" is not installed in database "%s"'
                       % conn.info.dbname,
                       hint="As a superuser: CREATE EXTENSION leapfrog; (the server needs "
                            "shared_preload_libraries = 'leapfrog').")
    return conn


def read_script(path):
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(EXIT_USAGE, "cannot read %s: %s" % (path, getattr(e, "strerror", None) or e))


def emit_json(obj, out=None):
    out = out or sys.stdout
    json.dump(obj, out, indent=2, default=_json_default)
    out.write("\n")
    out.flush()


def _json_default(v):
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


# ---- plan ------------------------------------------------------------------

PLAN_COLUMNS = ("statement", "sql", "action", "kind", "input", "target", "input_rows",
                "input_bytes", "detail", "sqlstate", "hint")
MOVES_ROWS = ("mapping", "replace")


def analyse(conn, script):
    """leapfrog.plan(script) in a transaction rolled back whatever happens
    (plan() itself rolls its subtransaction back): its rows as dicts."""
    conn.autocommit = False
    try:
        cur = conn.cursor(row_factory=dict_row)
        rows = cur.execute("SELECT * FROM leapfrog.plan(%s)", [script]).fetchall()
    except psycopg.Error as e:
        conn.rollback()
        raise sql_error(e, "leapfrog.plan")
    conn.rollback()
    conn.autocommit = True
    return [{k: r.get(k) for k in PLAN_COLUMNS} for r in rows]


def background_work(steps):
    """What the background moves: (inputs, their rows, their bytes), each
    input table once (a split's mappings share their input; a table may be
    a join's input and a row mapping's too).  A join's row counts are per
    table where another row of the plan gives them (its retirement, say),
    else counted for the pair.  Rows None when a count is unknown."""
    per_table = {}
    for s in steps:
        if s["action"] in MOVES_ROWS + ("retire",) and s["input"] and ", " not in s["input"]:
            n = s["input_rows"] if s["input_rows"] is not None and s["input_rows"] >= 0 else None
            per_table.setdefault(s["input"], (n, s["input_bytes"] or 0))
    counted = {}
    for s in steps:
        if s["action"] in MOVES_ROWS and s["input"]:
            tables = s["input"].split(", ")
            if all(t in per_table for t in tables):
                for t in tables:
                    counted[t] = per_table[t]
            else:
                n = s["input_rows"] if s["input_rows"] is not None and s["input_rows"] >= 0 \
                    else None
                counted.setdefault(s["input"], (n, s["input_bytes"] or 0))
    counts = [n for n, _ in counted.values()]
    total = None if None in counts else sum(counts)
    return len(counted), total, sum(b for _, b in counted.values())


def cmd_plan(args):
    script = read_script(args.file)
    conn = connect(args)
    if args.rate is not None:
        rate, basis = args.rate, "--rate"
    else:
        rate, n = fmt.measured_rate(conn)
        basis = ("median of %d recent migration%s of this database"
                 % (n, "" if n == 1 else "s")) if rate else None
    steps = analyse(conn, script)
    for s in steps:
        s["expected_s"] = None
        if (s["action"] in MOVES_ROWS and rate and s["input_rows"] is not None
                and s["input_rows"] >= 0):
            s["expected_s"] = s["input_rows"] / rate
    last = steps[-1]["action"] if steps else None
    code = EXIT_OK
    if last == "refused":
        code = EXIT_REFUSED
    elif last == "error":
        code = exit_code_of(steps[-1]["sqlstate"])
    n_inputs, total_rows, total_bytes = background_work(steps)
    total_s = total_rows / rate if rate and total_rows is not None else None
    if args.json:
        emit_json({"database": conn.info.dbname, "accepted": code == EXIT_OK,
                   "exit_code": code, "statements": steps,
                   "rate_rows_per_s": rate, "rate_basis": basis,
                   "background": {"inputs": n_inputs, "input_rows": total_rows,
                                  "input_bytes": total_bytes, "expected_s": total_s}})
        return code

    out = sys.stdout
    src = "standard input" if args.file == "-" else args.file
    n = len({st["statement"] for st in steps if st["statement"] is not None})
    out.write('Plan of %s in database "%s": %d statement%s analysed, nothing changed.\n\n'
              % (src, conn.info.dbname, n, "" if n == 1 else "s"))
    pad = " " * 16
    width = max(60, shutil.get_terminal_size((116, 24)).columns - len(pad) - 1)
    seen = set()
    for s in steps:
        action = s["action"].upper() if s["action"] in ("refused", "error") else s["action"]
        lines = []
        if s["action"] in MOVES_ROWS:
            if s["action"] == "mapping":
                what = "%s  %s -> %s" % (s["kind"], s["input"], s["target"])
            elif s["target"] and s["target"] != s["input"]:
                what = "%s  %s replaced lazily by %s" % (s["kind"], s["input"], s["target"])
            else:
                what = "%s  %s replaced lazily (its rows move into a copy)" % (s["kind"],
                                                                               s["input"])
            est = ("~%s rows" % fmt.rows(s["input_rows"]) if s["input_rows"] is not None
                   and s["input_rows"] >= 0 else "rows unknown (never analyzed)")
            bg = ("background ~%s" % fmt.duration(s["expected_s"]) if s["expected_s"] is not None
                  else "background time unknown")
            lines += [what, "input %s, %s; %s" % (est, fmt.size(s["input_bytes"]), bg)]
        elif s["action"] == "retire":
            lines.append("%s: %s" % (s["input"] or "the table", s["detail"]
                                     or "kept in leapfrog_retired until its rows have moved"))
        elif s["action"] == "track":
            lines.append("%s stays live, tracked in place: %s" % (
                s["input"], s["detail"] or "a write of a row first migrates its group"))
        if s["action"] in ("refused", "error"):
            msg = (s["detail"] or "").splitlines() or [""]
            lines.append("SQLSTATE %s: %s" % (s["sqlstate"], msg[0]))
            lines += ["DETAIL: " + m for m in msg[1:]]
            if s["hint"]:
                lines.append("HINT: %s" % s["hint"])
        elif s["detail"] and s["action"] not in ("retire", "track"):
            lines += s["detail"].splitlines()
        lines = [ln for ln in lines if ln]
        new_statement = s["statement"] is None or s["statement"] not in seen
        seen.add(s["statement"])
        if new_statement and s["sql"]:
            lines.insert(0, fmt.one_line(s["sql"]))
        number = "" if s["statement"] is None or not new_statement else s["statement"]
        out.write("%4s  %-8s  %s\n" % (number, action, lines[0] if lines else ""))
        for ln in lines[1:]:
            for part in textwrap.wrap(ln, width, subsequent_indent="  ") or [""]:
                out.write(pad + part + "\n")
    out.write("\n")
    if code == EXIT_OK:
        if n_inputs:
            out.write("Background work: %d input%s, %s rows, %s.\n" % (
                n_inputs, "" if n_inputs == 1 else "s",
                "~" + fmt.rows(total_rows) if total_rows is not None else "an unknown number of",
                fmt.size(total_bytes)))
            if total_s is not None:
                out.write("Expected background time: about %s at %s (%s).\n"
                          % (fmt.duration(total_s), fmt.rate(rate), basis))
            elif rate is None:
                out.write("Expected background time: rate unknown (no migration of this "
                          "database has moved rows yet; give --rate ROWS_PER_S).\n")
            else:
                out.write("Expected background time: unknown (an input was never analyzed).\n")
        else:
            out.write("No rows to move: start() runs the script as written.\n")
        out.write("Accepted: leapfrog start NAME FILE would switch in one transaction.\n")
    else:
        s = steps[-1]
        where = " at statement %d" % s["statement"] if s["statement"] is not None else ""
        out.write("%s (SQLSTATE %s)%s: leapfrog start would fail with this error; "
                  "nothing after it was analysed.\n"
                  % ("Refused" if s["action"] == "refused" else "Error", s["sqlstate"], where))
    return code


# ---- start, wait, status, complete ---------------------------------------

def failure_hint(conn, name):
    """What to do about a failed migration: the hint of the error that
    leapfrog.wait() raises for it (the server knows its remedies), and the
    commands of this tool that apply them."""
    hints = []
    try:
        conn.execute("SELECT leapfrog.wait(%s, 0)", [name])
    except psycopg.Error as e:
        if e.diag.message_hint:
            hints.append(e.diag.message_hint)
    if not hints:
        hints.append("Rows that cannot be migrated stay in their retired table (schema "
                     "leapfrog_retired); the statements that need them fail.")
    hints.append("From the shell: leapfrog failed %s lists the rows; leapfrog fix or leapfrog "
                 "quarantine each, then leapfrog resume %s." % (name, name))
    return hints


def _upstream_text(ups):
    """The earlier migrations of a chain, with their state: m1 (running,
    12.5%), m2 (failed)."""
    parts = []
    for u in ups:
        st = u["state"]
        if st == "running" and u["fraction"] is not None:
            st = "running, %s" % fmt.percent(u["fraction"])
        parts.append('"%s" (%s)' % (u["name"], st))
    return ", ".join(parts)


def connection_lost(conn, e):
    """The server went away under conn (a restart, a crash, the backend
    terminated), rather than refusing a statement."""
    return conn.closed or (e.sqlstate or "").startswith("57P")


def reconnected(reconnect, e, shown, deadline):
    """A new connection once the server is back: a migration goes on after
    a restart (the background resumes it), so a wait does too.  Tried every
    second until the wait's deadline (none: until it succeeds)."""
    shown.end("connection lost (%s): reconnecting" % " ".join(str(e).split()))
    while True:
        try:
            conn = reconnect()
            shown.end("reconnected")
            return conn
        except CliError as ce:
            # not up yet, or still recovering ("the database system is
            # starting up", 57P03)
            if ce.code != EXIT_CONNECT and not (ce.sqlstate or "").startswith("57P"):
                raise
            if deadline is not None and time.monotonic() >= deadline:
                raise
        time.sleep(1.0)


def watch(conn, name, timeout, interval, out, quiet=False, reconnect=None):
    """Follow migration name until it is done (EXIT_OK), failed
    (EXIT_FAILED) or timeout seconds have passed (EXIT_TIMEOUT).  A chained
    migration runs after the migrations that fill its inputs: a line says
    which, and when they are done; one of them failing ends the wait
    (EXIT_FAILED).  With reconnect (a function returning a new connection),
    a server restart does not end the wait."""
    shown = fmt.Progress(out, name, quiet)
    if interval is None:
        interval = 0.5 if shown.tty else 5.0
    began = time.monotonic()
    deadline = None if timeout is None else began + timeout
    after_shown = []
    while True:
        try:
            found = fmt.status_rows(conn, name)
        except psycopg.OperationalError as e:
            if reconnect is None or not connection_lost(conn, e):
                raise
            conn = reconnected(reconnect, e, shown, deadline)
            continue
        if not found:
            shown.end(None)
            raise CliError(EXIT_ERROR, 'migration "%s" does not exist' % name,
                           hint="See leapfrog status.")
        d = found[0]
        after = d["after"] or []
        if d["state"] == "running" and after:
            ups = fmt.status_rows(conn, names=after)
            bad = [u for u in ups if u["state"] == "failed"]
            if bad:
                shown.end(None)
                raise CliError(EXIT_FAILED, 'migration "%s" cannot go on: "%s", which fills its '
                               'inputs, failed: %s' % (name, bad[0]["name"], bad[0]["error"]),
                               hint=failure_hint(conn, bad[0]["name"]))
            shown.held()
            if after != after_shown:
                many = len(ups) > 1
                shown.end('"%s" waits for %s, which fill%s its inputs: the background moves '
                          'its rows once %s done' % (name, _upstream_text(ups),
                                                     "" if many else "s",
                                                     "those are" if many else "that is"))
        elif after_shown and d["state"] == "running":
            shown.end('"%s": %s done, its own rows move now'
                      % (name, ", ".join('"%s"' % a for a in after_shown)))
        after_shown = after
        if d["state"] == "done":
            shown.end('"%s" done: %s input rows in %s (%s)' % (
                name, fmt.rows(d["tuples_total"]), fmt.duration(d["elapsed_s"]),
                fmt.rate(d["rate_rows_per_s"]) if d["rate_rows_per_s"] else "no rows"))
            return EXIT_OK
        if d["state"] == "failed":
            shown.end(None)
            raise CliError(EXIT_FAILED, 'migration "%s" failed: %s' % (name, d["error"]),
                           hint=failure_hint(conn, name))
        shown.show(d)
        waited = time.monotonic() - began
        if timeout is not None and waited >= timeout:
            shown.end("timed out after %s: \"%s\" is still running, %s rows left"
                      % (fmt.duration(waited), name, fmt.rows(d["remaining"])))
            return EXIT_TIMEOUT
        pause = interval if timeout is None else max(0.0, min(interval, timeout - waited))
        try:
            # returns at once when the migration is done; raises 55000 when it failed
            conn.execute("SELECT leapfrog.wait(%s, %s)", [name, pause])
        except psycopg.Error as e:
            if reconnect is not None and connection_lost(conn, e):
                conn = reconnected(reconnect, e, shown, deadline)
            elif e.sqlstate != "55000":
                shown.end(None)
                raise sql_error(e, "leapfrog.wait")


def cmd_start(args):
    script = read_script(args.file)
    then = None
    if args.then is not None:
        if args.then == "-" and args.file == "-":
            raise CliError(EXIT_USAGE, "FILE and --then cannot both be standard input")
        then = read_script(args.then)
    conn = connect(args)
    conn.autocommit = False
    started_at = time.time()
    t0 = time.perf_counter()
    try:
        doing = "leapfrog.start"
        if args.on_error is None:
            conn.execute("SELECT leapfrog.start(%s, %s)", [args.name, script])
        else:
            conn.execute("SELECT leapfrog.start(%s, %s, on_error => %s)",
                         [args.name, script, args.on_error])
        t1 = time.perf_counter()
        if then is not None:
            doing = "--then %s" % args.then
            conn.execute(then)
        t2 = time.perf_counter()
        doing = "commit"
        conn.commit()
        t3 = time.perf_counter()
    except psycopg.Error as e:
        if not conn.closed:
            conn.rollback()
        raise sql_error(e, doing)
    conn.autocommit = True
    committed_at = conn.execute("SELECT statement_timestamp()").fetchone()[0]
    ms = lambda a, b: round((b - a) * 1000, 3)  # noqa: E731
    on_error = conn.execute("SELECT on_error FROM leapfrog.migrations WHERE name = %s",
                            [args.name]).fetchone()
    res = {"name": args.name, "on_error": on_error[0] if on_error else args.on_error,
           "start_ms": ms(t0, t1),
           "then_ms": ms(t1, t2) if then is not None else None,
           "commit_ms": ms(t2, t3), "switch_ms": ms(t0, t3),
           "started_at": started_at, "committed_at": committed_at}
    if args.json:
        emit_json(res)
    else:
        parts = ["leapfrog.start() %.1f ms" % res["start_ms"]]
        if then is not None:
            parts.append("--then %s %.1f ms" % (args.then, res["then_ms"]))
        parts.append("commit %.1f ms" % res["commit_ms"])
        print('started "%s": %s; switched in %.1f ms' % (args.name, ", ".join(parts),
                                                          res["switch_ms"]), flush=True)
        if res["on_error"] == "quarantine":
            print("Rows that cannot be migrated are set aside into schema "
                  "leapfrog_quarantine.", flush=True)
        if not args.wait:
            print("The data moves in the background: leapfrog status %s, leapfrog wait %s"
                  % (args.name, args.name), flush=True)
    if args.wait:
        return watch(conn, args.name, args.timeout, args.interval,
                     sys.stderr if args.json else sys.stdout, args.quiet,
                     reconnect=lambda: connect(args))
    return EXIT_OK


def cmd_wait(args):
    conn = connect(args)
    return watch(conn, args.name, args.timeout, args.interval, sys.stdout, args.quiet,
                 reconnect=lambda: connect(args))


def _status_line(d, extras=True):
    if d["state"] == "running":
        pct = fmt.percent(d["fraction"]) if d["fraction"] is not None else "?"
        more = "%s/%s rows (%s), %s, ETA %s" % (
            fmt.rows(d["tuples_migrated"]), fmt.rows(d["tuples_total"]), pct,
            fmt.rate(d["rate_rows_per_s"]) if d["rate_rows_per_s"] else "rate ?",
            fmt.duration(d["eta_s"]) if d["eta_s"] is not None else "?")
    elif d["state"] == "done":
        more = "%s rows in %s" % (fmt.rows(d["tuples_total"]), fmt.duration(d["elapsed_s"]))
    else:
        # the view shows the error to the owner's roles only (NULL to others)
        more = "%s/%s rows; error: %s" % (
            fmt.rows(d["tuples_migrated"]), fmt.rows(d["tuples_total"]),
            d["error"] if d["error"] is not None else "(shown to the migration's owner only)")
    if extras and d["failed_rows"]:
        more += "; %s failed row%s (leapfrog failed %s)" % (
            fmt.rows(d["failed_rows"]), "" if d["failed_rows"] == 1 else "s", d["name"])
    if extras and d["after"]:
        more += "; after %s" % ", ".join(d["after"])
    return more


def cmd_status(args):
    conn = connect(args)
    found = fmt.status_rows(conn, args.name)
    if args.name is not None and not found:
        raise CliError(EXIT_ERROR, 'migration "%s" does not exist' % args.name,
                       hint="See leapfrog status.")
    if args.json:
        emit_json(found[0] if args.name is not None else found)
    elif args.name is not None:
        d = found[0]
        for k in ("name", "state", "started_at", "finished_at", "on_error"):
            print("%-16s %s" % (k + ":", d[k] if d[k] is not None else ""))
        print("%-16s %s" % ("progress:", _status_line(d, extras=False)))
        print("%-16s %s%s" % ("failed rows:", fmt.rows(d["failed_rows"]),
                              " (leapfrog failed %s)" % d["name"] if d["failed_rows"] else ""))
        if d["after"]:
            print("%-16s %s (unfinished migrations that fill its inputs: the background "
                  "moves its rows once they are done)" % ("after:", ", ".join(d["after"])))
    elif not found:
        print("No migrations in this database.")
    else:
        width = max(len(d["name"]) for d in found)
        for d in found:
            print("%-*s  %-7s  started %s  %s" % (
                width, d["name"], d["state"], d["started_at"].strftime("%Y-%m-%d %H:%M:%S"),
                _status_line(d)))
    if args.name is not None and found[0]["state"] == "failed":
        return EXIT_FAILED
    return EXIT_OK


def cmd_complete(args):
    conn = connect(args)
    found = fmt.status_rows(conn, args.name)
    if not found:
        raise CliError(EXIT_ERROR, 'migration "%s" does not exist' % args.name,
                       hint="See leapfrog status.")
    if found[0]["state"] == "done":
        print('"%s" was already done' % args.name)
        return EXIT_OK
    left = found[0]["remaining"]
    t0 = time.perf_counter()
    try:
        conn.execute("SELECT leapfrog.complete(%s)", [args.name])
    except psycopg.Error as e:
        raise sql_error(e, "leapfrog.complete")
    took = time.perf_counter() - t0
    d = fmt.status_rows(conn, args.name)[0]
    print('completed "%s" in %s: %s rows were left, %s input rows in all'
          % (args.name, fmt.duration(took), fmt.rows(left), fmt.rows(d["tuples_total"])))
    return EXIT_OK


# ---- failed rows: failed, fix, quarantine, resume ---------------------------

# The row as the server prints its jsonb (row::text): numbers exactly as
# stored (-12.00, not -12.0; no digits lost to a float).
FAILED_SQL = """
SELECT input, ctid::text, row::text, sqlstate, error, failed_at
  FROM leapfrog.failed_rows
 WHERE migration = %s
 ORDER BY input, ctid
"""
FAILED_FIELDS = ("input", "ctid", "row", "sqlstate", "error", "failed_at")


def one_migration(conn, name):
    found = fmt.status_rows(conn, name)
    if not found:
        raise CliError(EXIT_ERROR, 'migration "%s" does not exist' % name,
                       hint="See leapfrog status.")
    return found[0]


def failed_rows(conn, name):
    """(the migration's status row, its failed rows as dicts), read in one
    snapshot.  leapfrog.failed_rows shows a migration's rows only to roles
    with the privileges of its owner, leapfrog.migrations counts them for
    everyone: rows counted but none shown means the role may not see them."""
    conn.autocommit = False
    try:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        d = one_migration(conn, name)
        rows = [dict(zip(FAILED_FIELDS, r)) for r in conn.execute(FAILED_SQL, [name])]
    finally:
        conn.rollback()
        conn.autocommit = True
    if d["failed_rows"] and not rows:
        raise CliError(EXIT_PRIVILEGE, 'migration "%s" has %s failed row%s, and role "%s" may '
                       'not see them: it needs the privileges of the migration\'s owner'
                       % (name, fmt.rows(d["failed_rows"]), "" if d["failed_rows"] == 1 else "s",
                          conn.info.user),
                       hint="Connect as the role that started the migration, or a member of "
                            "it (-U).")
    return d, rows


def tid_arg(v):
    """A ctid as leapfrog failed prints it, (16,41), or without the
    parentheses the shell would want quoted: 16,41."""
    m = re.fullmatch(r"\s*\(?\s*(\d+)\s*,\s*(\d+)\s*\)?\s*", v)
    if not m:
        raise argparse.ArgumentTypeError("not a ctid (BLOCK,OFFSET, as leapfrog failed "
                                         "prints it): %r" % v)
    return "(%s,%s)" % m.groups()


def resolve_input(conn, name, given):
    """INPUT as the server wants it, schema-qualified as leapfrog failed
    prints it; an unqualified name is taken when exactly one input of the
    migration's failed rows has it."""
    if "." in given:
        return given
    found = [r[0] for r in conn.execute(
        "SELECT DISTINCT input FROM leapfrog.failed_rows WHERE migration = %s", [name])
        if r[0].split(".", 1)[-1] in (given, '"%s"' % given)]
    return found[0] if len(found) == 1 else given


def left_to_do(conn, name):
    """What the operator does next, after a row was corrected or set aside."""
    d = one_migration(conn, name)
    if d["failed_rows"]:
        return "%s failed row%s left: leapfrog failed %s" % (
            fmt.rows(d["failed_rows"]), "" if d["failed_rows"] == 1 else "s", name)
    if d["state"] == "failed":
        return "No failed row left: leapfrog resume %s" % name
    return None


def cmd_failed(args):
    conn = connect(args)
    d, rows = failed_rows(conn, args.name)
    if args.json:
        # each row's jsonb goes in as the server wrote it, in place of a marker
        marks = {}
        for i, r in enumerate(rows):
            if r["row"] is not None:
                mark = "\0leapfrog-row-%d\0" % i
                marks[json.dumps(mark)] = r["row"]
                r["row"] = mark
        text = json.dumps({"migration": args.name, "state": d["state"], "error": d["error"],
                           "failed_rows": len(rows), "rows": rows},
                          indent=2, default=_json_default)
        for mark, row in marks.items():
            text = text.replace(mark, row, 1)
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return EXIT_FAILED if rows else EXIT_OK
    out = sys.stdout
    if not rows:
        out.write('"%s" (%s) has no failed rows.\n' % (args.name, d["state"]))
        if d["state"] == "failed":
            out.write("It failed: %s\n" % d["error"])
            out.write("Once that is dealt with: leapfrog resume %s\n" % args.name)
        return EXIT_OK
    n = len(rows)
    if d["state"] == "failed":
        out.write('"%s" failed: %d row%s cannot be migrated.\n\n'
                  % (args.name, n, "" if n == 1 else "s"))
    else:
        out.write('"%s" is %s; %d row%s could not be migrated.\n\n'
                  % (args.name, d["state"], n, "" if n == 1 else "s"))
    width = max(len("%s %s" % (r["input"], r["ctid"])) for r in rows)
    for r in rows:
        out.write("%-*s  %s  %s\n" % (width, "%s %s" % (r["input"], r["ctid"]), r["sqlstate"],
                                       r["error"]))
        out.write("    %s\n" % (r["row"] if r["row"] is not None
                                 else "(gone: migrated, corrected or set aside meanwhile)"))
    first = rows[0]
    ctid = first["ctid"].strip("()")
    out.write("\nCorrect a row:   leapfrog fix %s %s %s --set COLUMN=VALUE\n"
              "Set it aside:    leapfrog quarantine %s %s %s\n"
              "Then:            leapfrog resume %s\n"
              % (args.name, first["input"], ctid, args.name, first["input"], ctid, args.name))
    out.flush()
    return EXIT_FAILED


class _Edit(argparse.Action):
    """--set, --null and --changes, kept in command-line order in args.edits."""

    def __call__(self, parser, namespace, values, option_string=None):
        edits = list(getattr(namespace, self.dest, None) or [])
        edits.append((self.const, values))
        setattr(namespace, self.dest, edits)


def changes_of(args):
    """(the columns changed, the JSON objects of --set, --null and
    --changes in command-line order).  The server joins the objects (jsonb
    ||: a later one wins for the same column), so that the numbers of
    --changes reach it as written, never through a float."""
    columns, parts = set(), []
    for option, value in args.edits or []:
        if option == "changes":
            try:
                obj = json.loads(value, parse_float=decimal.Decimal)
            except ValueError as e:
                raise CliError(EXIT_USAGE, "--changes is not JSON: %s" % e)
            if not isinstance(obj, dict):
                raise CliError(EXIT_USAGE, "--changes must be a JSON object of column names "
                                           "and values: %s" % value)
            columns.update(obj)
            parts.append(value)
        elif option == "null":
            columns.add(value)
            parts.append(json.dumps({value: None}))
        else:
            col, eq, text = value.partition("=")
            if not eq or not col:
                raise CliError(EXIT_USAGE, "--set takes COLUMN=VALUE: %r" % value)
            columns.add(col)
            parts.append(json.dumps({col: text}))
    if not columns:
        raise CliError(EXIT_USAGE, "nothing to change: give --set COLUMN=VALUE, --null COLUMN "
                                   "or --changes JSON")
    return sorted(columns), parts


def cmd_fix(args):
    columns, parts = changes_of(args)
    conn = connect(args)
    one_migration(conn, args.name)
    inp = resolve_input(conn, args.name, args.input)
    joined = " || ".join(["%s::jsonb"] * len(parts))
    try:
        new = conn.execute("SELECT leapfrog.correct_row(%%s, %%s, %%s::tid, %s)::text" % joined,
                           [args.name, inp, args.ctid] + parts).fetchone()[0]
    except psycopg.Error as e:
        raise sql_error(e, "leapfrog.correct_row")
    print('corrected row %s of %s (%s): it is %s now, and waits for migration "%s"'
          % (args.ctid, inp, ", ".join(columns), new, args.name))
    nxt = left_to_do(conn, args.name)
    if nxt:
        print(nxt)
    return EXIT_OK


def cmd_quarantine(args):
    conn = connect(args)
    one_migration(conn, args.name)
    inp = resolve_input(conn, args.name, args.input)
    try:
        with conn.transaction():
            table = conn.execute("SELECT leapfrog.quarantine_row(%s, %s, %s::tid)::text",
                                 [args.name, inp, args.ctid]).fetchone()[0]
            # a row of a table tracked by keys takes its whole group along
            moved = conn.execute("SELECT count(*) FROM %s WHERE xmin = "
                                 "pg_catalog.pg_current_xact_id()::pg_catalog.xid" % table
                                 ).fetchone()[0]
    except psycopg.Error as e:
        raise sql_error(e, "leapfrog.quarantine_row")
    if moved > 1:
        print('set row %s of %s aside into %s with the %s other row%s of its group: '
              'migration "%s" leaves the group out'
              % (args.ctid, inp, table, fmt.rows(moved - 1), "" if moved == 2 else "s",
                 args.name))
    else:
        print('set row %s of %s aside into %s: migration "%s" leaves it out'
              % (args.ctid, inp, table, args.name))
    nxt = left_to_do(conn, args.name)
    if nxt:
        print(nxt)
    return EXIT_OK


def cmd_resume(args):
    conn = connect(args)
    d = one_migration(conn, args.name)
    if d["state"] == "done":
        print('"%s" is done: nothing to resume' % args.name)
        return EXIT_OK
    try:
        conn.execute("SELECT leapfrog.resume(%s)", [args.name])
    except psycopg.Error as e:
        raise sql_error(e, "leapfrog.resume")
    if d["state"] == "failed":
        print('resumed "%s": the background worker tries its rows again' % args.name)
        if d["failed_rows"]:
            print("%s row%s still listed as failed (leapfrog failed %s): unless %s been "
                  "fixed otherwise, the migration fails on %s again"
                  % (fmt.rows(d["failed_rows"]), "" if d["failed_rows"] == 1 else "s",
                     args.name, "it has" if d["failed_rows"] == 1 else "they have",
                     "it" if d["failed_rows"] == 1 else "them"))
    else:
        print('"%s" was %s, not failed: nothing to resume' % (args.name, d["state"]))
    sys.stdout.flush()
    if args.wait:
        return watch(conn, args.name, args.timeout, args.interval, sys.stdout, args.quiet,
                     reconnect=lambda: connect(args))
    return EXIT_OK


# ---- arguments ---------------------------------------------------------------

def _positive(v):
    try:
        x = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % v)
    if x <= 0:
        raise argparse.ArgumentTypeError("must be positive: %r" % v)
    return x


def _nonnegative(v):
    try:
        x = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % v)
    if x < 0:
        raise argparse.ArgumentTypeError("must not be negative: %r" % v)
    return x


EPILOG = "exit codes:\n" + "\n".join(
    textwrap.fill(text, 78, initial_indent="  %3d  " % code, subsequent_indent=" " * 7)
    for code, text in EXIT_CODES)


class _Formatter(argparse.HelpFormatter):
    """Wraps the descriptions; the exit codes' table stays as laid out."""

    def _fill_text(self, text, width, indent):
        if text.startswith("exit codes:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def add_wait_options(c):
    c.add_argument("--wait", action="store_true", help="then wait until the data has moved")
    c.add_argument("--timeout", type=_nonnegative, metavar="S",
                   help="with --wait: give up after S seconds (exit status 5)")
    c.add_argument("--interval", type=_positive, metavar="S",
                   help="with --wait: seconds between progress updates (default 0.5 on a "
                        "terminal, 5 otherwise)")
    c.add_argument("--quiet", "-q", action="store_true",
                   help="with --wait: no progress, only the final line")


def build_parser():
    S = argparse.SUPPRESS
    # Connection options, accepted before and after the command (psql's
    # letters: -h is the host, help is -? or --help).
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group(
        "connection (as psql; defaults from PGHOST, PGPORT, PGDATABASE, PGUSER, ...)")
    g.add_argument("-d", "--dbname", default=S,
                   help="database name, or a conninfo string ('host=... dbname=...') or URI "
                        "(postgresql://...)")
    g.add_argument("-h", "--host", default=S, help="server host or Unix socket directory")
    g.add_argument("-p", "--port", default=S, help="server port")
    g.add_argument("-U", "--username", default=S, help="database user")
    g.add_argument("-?", "--help", action="help", default=S, help="show this help and exit")

    p = argparse.ArgumentParser(
        prog="leapfrog", parents=[common], add_help=False,
        formatter_class=_Formatter,
        description="Leapfrog lazy schema migrations from the command line.",
        epilog=EPILOG)
    p.add_argument("-V", "--version", action="version", version="leapfrog " + __version__)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name, help_, desc):
        return sub.add_parser(name, parents=[common], add_help=False, help=help_,
                              description=desc, epilog=EPILOG,
                              formatter_class=_Formatter)

    c = command("plan", "what start() would do with a script; changes nothing",
                "Analyses the script as start() would, in a transaction that is rolled back "
                "(the switch's brief locks are taken and released; nothing changes), and "
                "prints each statement: run as written, a lazy mapping (1:1, 1:n, n:1, n:n) "
                "with its input's size and the expected background time, a retired input, a "
                "table replaced lazily, or why the script is refused.  Exit status 0 when "
                "start() would accept the script, 4 when it refuses it.")
    c.add_argument("file", metavar="FILE", help="the migration script (- for standard input)")
    c.add_argument("--rate", type=_positive, metavar="ROWS_PER_S",
                   help="background rate in input rows per second (default: the median of "
                        "this database's recent migrations)")
    c.add_argument("--json", action="store_true", help="print the plan as JSON")
    c.set_defaults(func=cmd_plan)

    c = command("start", "start a migration (the switch)",
                "Runs leapfrog.start(NAME, script) and commits: the new schema is in place "
                "when it returns, and the rows move in the background.  --then FILE runs more "
                "SQL (the application's new functions, say) in the same transaction, after "
                "start(): both commit together or not at all.")
    c.add_argument("name", metavar="NAME", help="the migration's name")
    c.add_argument("file", metavar="FILE", help="the migration script (- for standard input)")
    c.add_argument("--then", metavar="FILE",
                   help="SQL to run in the same transaction after start() (- for standard input)")
    c.add_argument("--on-error", choices=("fail", "quarantine"),
                   help="what the background does with a row it cannot migrate: fail the "
                        "migration on it (the default; leapfrog failed lists the rows), or set "
                        "it aside into schema leapfrog_quarantine and go on")
    add_wait_options(c)
    c.add_argument("--json", action="store_true",
                   help="print the switch's timings as JSON (--wait's progress goes to stderr)")
    c.set_defaults(func=cmd_start)

    c = command("status", "the migrations and their progress",
                "Lists the migrations of the database (or the one named) from "
                "leapfrog.migrations: state, rows migrated, rate, ETA, the rows that could not "
                "be migrated (failed rows), and for a chained migration the earlier ones it "
                "runs after.  With NAME, the exit status is 6 if that migration failed.")
    c.add_argument("name", metavar="NAME", nargs="?", help="one migration")
    c.add_argument("--json", action="store_true",
                   help="print JSON: a list, or one object with NAME")
    c.set_defaults(func=cmd_status)

    c = command("wait", "wait until a migration's data has moved",
                "Follows the migration until it is done: a progress bar (rows, rate, ETA) on a "
                "terminal, a plain line per update otherwise; a chained migration says which "
                "earlier migrations it waits for.  Exit status 0 once done, 5 when --timeout "
                "expires first, 6 if the migration (or an earlier one of its chain) failed.")
    c.add_argument("name", metavar="NAME", help="the migration's name")
    c.add_argument("--timeout", type=_nonnegative, metavar="S",
                   help="give up after S seconds (exit status 5)")
    c.add_argument("--interval", type=_positive, metavar="S",
                   help="seconds between progress updates (default 0.5 on a terminal, "
                        "5 otherwise)")
    c.add_argument("--quiet", "-q", action="store_true", help="no progress, only the final line")
    c.set_defaults(func=cmd_wait)

    c = command("complete", "migrate what is left now",
                "Runs leapfrog.complete(NAME): every remaining row is migrated in this "
                "session, now, and the migration is done (the eager fallback).")
    c.add_argument("name", metavar="NAME", help="the migration's name")
    c.set_defaults(func=cmd_complete)

    c = command("failed", "the rows the background could not migrate",
                "Lists the migration's failed rows from leapfrog.failed_rows: input table, "
                "ctid, SQLSTATE, error, and the row as it is now (JSON).  Correct them with "
                "leapfrog fix or set them aside with leapfrog quarantine, then leapfrog "
                "resume.  Needs the privileges of the migration's owner (exit status 8 "
                "otherwise).  Exit status 0 when there is none, 6 when there are some.")
    c.add_argument("name", metavar="NAME", help="the migration's name")
    c.add_argument("--json", action="store_true",
                   help="print JSON: the migration's state and error, and its rows")
    c.set_defaults(func=cmd_failed)

    c = command("fix", "correct a failed row (leapfrog.correct_row)",
                "Sets columns of a row that waits for the migration (leapfrog.correct_row): "
                "the row stays in its input and migrates when the migration runs again "
                "(leapfrog resume).  VALUEs of --set are text, read by the column's type as "
                "SQL would read a literal; --null sets NULL; --changes gives a JSON object "
                "(numbers, nulls, JSON values for json columns).  A group or join key cannot "
                "be corrected (exit status 4): set the row aside instead.")
    c.add_argument("name", metavar="NAME", help="the migration's name")
    c.add_argument("input", metavar="INPUT",
                   help="the input table as leapfrog failed prints it (schema.table; the table "
                        "alone when no other input of the failed rows has its name)")
    c.add_argument("ctid", metavar="CTID", type=tid_arg,
                   help="the row's ctid as leapfrog failed prints it: (16,41) or 16,41")
    c.add_argument("--set", action=_Edit, dest="edits", const="set",
                   metavar="COLUMN=VALUE",
                   help="set COLUMN to VALUE (text); repeat for more columns")
    c.add_argument("--null", action=_Edit, dest="edits", const="null",
                   metavar="COLUMN",
                   help="set COLUMN to NULL; repeat for more columns")
    c.add_argument("--changes", action=_Edit, dest="edits", const="changes",
                   metavar="JSON",
                   help='the changes as a JSON object: \'{"balance": 0, "email": null}\'; '
                        "with --set and --null, a later option wins for the same column")
    c.set_defaults(func=cmd_fix)

    c = command("quarantine", "set a row aside (leapfrog.quarantine_row)",
                "Moves a row that waits for the migration out of it, into the quarantine table "
                "leapfrog_quarantine.<input>_m<migration id> (leapfrog.quarantine_row), with "
                "its SQLSTATE and error: the new tables never get it.  The row stays there "
                "until you delete it.  A row of a table tracked by keys (kept by the script, "
                "or read by several GROUP BY mappings) sets its whole group aside: a copy of "
                "the group's rows goes to the quarantine table, and the new table never gets "
                "the group.")
    c.add_argument("name", metavar="NAME", help="the migration's name")
    c.add_argument("input", metavar="INPUT",
                   help="the input table as leapfrog failed prints it (schema.table; the table "
                        "alone when no other input of the failed rows has its name)")
    c.add_argument("ctid", metavar="CTID", type=tid_arg,
                   help="the row's ctid as leapfrog failed prints it: (16,41) or 16,41")
    c.set_defaults(func=cmd_quarantine)

    c = command("resume", "a failed migration runs again (leapfrog.resume)",
                "Runs leapfrog.resume(NAME): the background worker takes the failed migration "
                "up again and tries the rows left, failing again on a row still wrong.  A "
                "migration that is running or done is left as it is (exit status 0).")
    c.add_argument("name", metavar="NAME", help="the migration's name")
    add_wait_options(c)
    c.set_defaults(func=cmd_resume)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CliError as e:
        e.print()
        return e.code
    except psycopg.OperationalError as e:
        # the connection went away mid-command
        CliError(EXIT_ERROR, "connection lost: %s" % " ".join(str(e).split()),
                 sqlstate=e.sqlstate).print()
        return EXIT_ERROR
    except psycopg.Error as e:
        sql_error(e, args.command).print()
        return exit_code_of(e.sqlstate)
    except KeyboardInterrupt:
        sys.stderr.write("\nleapfrog: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (| head): no more output, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
