"""leapfrog: Leapfrog migrations from the command line, for deployment pipelines.

    leapfrog plan FILE                 what start() would do with the script; changes nothing
    leapfrog start NAME FILE [--wait]  the switch (leapfrog.start); --then FILE: more SQL
                                       in the same transaction
    leapfrog status [NAME] [--json]    the migrations and their progress
    leapfrog wait NAME [--timeout S]   until the data has moved, with a progress display
    leapfrog complete NAME             move what is left now (leapfrog.complete)

It connects as psql does: libpq's environment (PGHOST, PGPORT, PGDATABASE,
PGUSER, PGPASSWORD, PGSERVICE, ...), -d/--dbname (a database name, a
conninfo string or a URI), -h/--host, -p/--port, -U/--username.  FILE may
be - for standard input.  Exit codes: the EXIT_* constants below (README.md,
"Command-line tool").
"""
import argparse
import json
import os
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
EXIT_INTERRUPTED = 130

EXIT_CODES = [
    (EXIT_OK, "success: plan accepted the script, start switched, wait saw the migration "
              "done, complete finished it, status printed"),
    (EXIT_ERROR, "an error from the server (its SQLSTATE is printed), or no migration of "
                 "that name"),
    (EXIT_USAGE, "bad arguments, or FILE cannot be read"),
    (EXIT_CONNECT, "could not connect to the server"),
    (EXIT_REFUSED, "Leapfrog refuses the script (SQLSTATE 0A000; the hint says what to do)"),
    (EXIT_TIMEOUT, "wait --timeout expired, the migration still runs"),
    (EXIT_FAILED, "the migration failed (status NAME, wait, start --wait)"),
    (EXIT_LOCKED, "start or plan could not take its locks (55P03): retry later"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
]


class CliError(Exception):
    """What main() prints to stderr before it exits with code."""

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
        if self.hint:
            out.write("HINT: %s\n" % self.hint)
        out.flush()


def exit_code_of(sqlstate):
    if sqlstate == "0A000":
        return EXIT_REFUSED
    if sqlstate == "55P03":
        return EXIT_LOCKED
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
        if s["action"] in ("refused", "error"):
            msg = (s["detail"] or "").splitlines() or [""]
            lines.append("SQLSTATE %s: %s" % (s["sqlstate"], msg[0]))
            lines += ["DETAIL: " + m for m in msg[1:]]
            if s["hint"]:
                lines.append("HINT: %s" % s["hint"])
        elif s["detail"] and s["action"] != "retire":
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
    leapfrog.wait() raises for it (the server knows its remedies)."""
    try:
        conn.execute("SELECT leapfrog.wait(%s, 0)", [name])
    except psycopg.Error as e:
        if e.diag.message_hint:
            return e.diag.message_hint
    return ("Rows that cannot be migrated stay in their retired table (schema "
            "leapfrog_retired); the statements that need them fail.")


def watch(conn, name, timeout, interval, out, quiet=False):
    """Follow migration name until it is done (EXIT_OK), failed
    (EXIT_FAILED) or timeout seconds have passed (EXIT_TIMEOUT)."""
    shown = fmt.Progress(out, name, quiet)
    if interval is None:
        interval = 0.5 if shown.tty else 5.0
    began = time.monotonic()
    while True:
        found = fmt.status_rows(conn, name)
        if not found:
            shown.end(None)
            raise CliError(EXIT_ERROR, 'migration "%s" does not exist' % name,
                           hint="See leapfrog status.")
        d = found[0]
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
            if e.sqlstate != "55000":
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
        conn.execute("SELECT leapfrog.start(%s, %s)", [args.name, script])
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
    res = {"name": args.name, "start_ms": ms(t0, t1),
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
        if not args.wait:
            print("The data moves in the background: leapfrog status %s, leapfrog wait %s"
                  % (args.name, args.name), flush=True)
    if args.wait:
        return watch(conn, args.name, args.timeout, args.interval,
                     sys.stderr if args.json else sys.stdout, args.quiet)
    return EXIT_OK


def cmd_wait(args):
    conn = connect(args)
    return watch(conn, args.name, args.timeout, args.interval, sys.stdout, args.quiet)


def _status_line(d):
    if d["state"] == "running":
        pct = "%.1f%%" % (100 * d["fraction"]) if d["fraction"] is not None else "?"
        more = "%s/%s rows (%s), %s, ETA %s" % (
            fmt.rows(d["tuples_migrated"]), fmt.rows(d["tuples_total"]), pct,
            fmt.rate(d["rate_rows_per_s"]) if d["rate_rows_per_s"] else "rate ?",
            fmt.duration(d["eta_s"]) if d["eta_s"] is not None else "?")
    elif d["state"] == "done":
        more = "%s rows in %s" % (fmt.rows(d["tuples_total"]), fmt.duration(d["elapsed_s"]))
    else:
        more = "%s/%s rows; error: %s" % (fmt.rows(d["tuples_migrated"]),
                                          fmt.rows(d["tuples_total"]), d["error"])
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
        for k in ("name", "state", "started_at", "finished_at"):
            print("%-16s %s" % (k + ":", d[k] if d[k] is not None else ""))
        print("%-16s %s" % ("progress:", _status_line(d)))
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
    c.add_argument("--wait", action="store_true", help="then wait until the data has moved")
    c.add_argument("--timeout", type=_nonnegative, metavar="S",
                   help="with --wait: give up after S seconds (exit status 5)")
    c.add_argument("--interval", type=_positive, metavar="S",
                   help="with --wait: seconds between progress updates (default 0.5 on a "
                        "terminal, 5 otherwise)")
    c.add_argument("--quiet", "-q", action="store_true",
                   help="with --wait: no progress, only the final line")
    c.add_argument("--json", action="store_true",
                   help="print the switch's timings as JSON (--wait's progress goes to stderr)")
    c.set_defaults(func=cmd_start)

    c = command("status", "the migrations and their progress",
                "Lists the migrations of the database (or the one named) from "
                "leapfrog.migrations: state, rows migrated, rate, ETA.  With NAME, the exit "
                "status is 6 if that migration failed.")
    c.add_argument("name", metavar="NAME", nargs="?", help="one migration")
    c.add_argument("--json", action="store_true",
                   help="print JSON: a list, or one object with NAME")
    c.set_defaults(func=cmd_status)

    c = command("wait", "wait until a migration's data has moved",
                "Follows the migration until it is done: a progress bar (rows, rate, ETA) on a "
                "terminal, a plain line per update otherwise.  Exit status 0 once done, 5 when "
                "--timeout expires first, 6 if the migration failed.")
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
