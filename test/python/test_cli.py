"""The command-line tool `leapfrog` (python/leapfrog_cli), end to end.

Every test runs the tool as a subprocess (python -m leapfrog_cli, from this
tree's python/) against the module's throwaway clusters and checks its exit
status, its output and the database: `quiet` has leapfrog.background off
(migrations stay running until something moves their rows), `live` has it
on, `eager_worker` too with no delay and batches larger than the tables (a
failing migration lists all its bad rows at once).  Each test works in a
database of its own.

    plan      accepted script: every action (run, mapping 1:1/1:n/n:1/n:n,
              retire, replace), the inputs' sizes, the expected background
              time (--rate, and the rate measured from a finished migration);
              the catalog and every table unchanged.  Refused script: exit 4,
              SQLSTATE and hint, nothing after the refused statement.  Error: 1.
    start     the switch; --then in the same transaction (its failure rolls
              start() back); refused: 4; locks not obtained: 7; --wait, --json.
    status    human and --json, one or all; failed migration: 6.
    wait      --timeout expiring (5) with plain progress lines when not on a
              terminal, a bar on a terminal (pty); finishing when complete()
              runs meanwhile (0); a failed migration (6); a server restart
              during the wait (reconnects, then 0).
    complete  moves what is left; again: already done.
    failed    a migration failed on rows a new CHECK and NOT NULL reject: the
              rows listed (text, --json; 6), fixed (--set, --changes), one
              set aside (quarantine, the table unqualified), none left (0),
              resume, wait (0); the rows in the new table and the quarantine.
              Another role: 8 for failed, fix, quarantine, resume.
              start --on-error quarantine.  fix refused on a group key (4),
              a row not waiting (1), usage (2).
    chains    status (text, --json) shows after; wait says what it waits
              for, and fails (6) when the earlier migration did.
    connection  -d conninfo, -d URI, -h/-p/-U, PG* variables; an unreachable
              server: 3; a database without the extension: 1.  FILE "-".
"""

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest

import leapfrog_cli
from leapfrog_cluster import DB_USER
from support import needs_real_extension, session, user_tables_state

PYTHON_DIR = Path(leapfrog_cli.__file__).resolve().parents[1]

SETUP = """
CREATE TABLE cust (id int PRIMARY KEY, name text NOT NULL, city text);
INSERT INTO cust SELECT g, 'n' || g, 'c' || (g % 10) FROM generate_series(1, 1000) g;
CREATE TABLE ord (id int PRIMARY KEY, cust int NOT NULL, amount int NOT NULL);
CREATE INDEX ord_cust ON ord (cust);
INSERT INTO ord SELECT g, g % 1000 + 1, g FROM generate_series(1, 5000) g;
CREATE TABLE visit (id int PRIMARY KEY, cust int);
CREATE INDEX visit_cust ON visit (cust);
INSERT INTO visit SELECT g, g % 500 + 1 FROM generate_series(1, 2000) g;
CREATE TABLE item (id int PRIMARY KEY, v int NOT NULL);
INSERT INTO item SELECT g, g * 2 FROM generate_series(1, 1500) g;
CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL);
INSERT INTO acct SELECT g, g FROM generate_series(1, 3000) g;
CREATE TABLE version (v int);
ANALYZE;
"""
INPUT_ROWS = {"public.cust": 1000, "public.ord": 5000, "public.visit": 2000,
              "public.item": 1500, "public.acct": 3000}

# Every action and every kind of mapping; BEGIN/COMMIT as tools print them.
EVERYTHING = """
BEGIN;
CREATE TABLE cust_a (id int PRIMARY KEY, name text NOT NULL);
CREATE TABLE cust_b (id int PRIMARY KEY, city text);
INSERT INTO cust_a SELECT id, name FROM cust;
INSERT INTO cust_b SELECT id, city FROM cust;
CREATE TABLE totals AS SELECT cust, sum(amount) AS total FROM ord GROUP BY cust;
CREATE TABLE named AS SELECT v.id, c.name FROM visit v JOIN cust c ON c.id = v.cust;
DROP TABLE visit;
CREATE TABLE item2 (id bigint PRIMARY KEY, v bigint NOT NULL);
INSERT INTO item2 SELECT id, v FROM item;
DROP TABLE item;
INSERT INTO version VALUES (2);
DROP TABLE cust;
ALTER TABLE acct ALTER COLUMN bal TYPE bigint;
COMMIT;
"""

REFUSED = """
CREATE TABLE x (id int);
INSERT INTO x SELECT id FROM cust;
INSERT INTO x SELECT random()::int FROM cust;
CREATE TABLE never (id int);
"""
REFUSED_HINT = "Compute the column with immutable expressions"

SPLIT = """
CREATE TABLE cust_a (id int PRIMARY KEY, name text NOT NULL);
CREATE TABLE cust_b (id int PRIMARY KEY, city text);
INSERT INTO cust_a SELECT id, name FROM cust;
INSERT INTO cust_b SELECT id, city FROM cust;
DROP TABLE cust;
"""

ITEM_WIDER = """
CREATE TABLE item2 (id bigint PRIMARY KEY, v bigint NOT NULL);
INSERT INTO item2 SELECT id, v FROM item;
DROP TABLE item;
ALTER TABLE item2 RENAME TO item;
"""


# ---- running the tool ------------------------------------------------------

def clean_env(**extra):
    """The environment without libpq's variables, with this tree's python/."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PYTHON_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra)
    return env


def cli(*args, env=None, input=None, timeout=120):
    """Run `leapfrog args...`; the CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-m", "leapfrog_cli", *map(str, args)],
                          env=env or clean_env(), input=input, capture_output=True, text=True,
                          timeout=timeout, stdin=None if input is not None else subprocess.DEVNULL)


def cli_ok(*args, **kw):
    res = cli(*args, **kw)
    assert res.returncode == 0, "leapfrog %s: exit %d\nstdout:\n%s\nstderr:\n%s" % (
        " ".join(map(str, args)), res.returncode, res.stdout, res.stderr)
    return res


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    p.chmod(0o644)
    return p


def new_db(cluster, name, setup=SETUP):
    cluster.create_database(name)
    with cluster.connect(name) as conn:
        conn.execute(setup)
    return cluster.dsn(name)


def migration(cluster, db, name):
    rows = cluster.sql("SELECT state, tuples_total, tuples_migrated, error FROM "
                       "leapfrog.migrations WHERE name = %s", [name], dbname=db)
    return rows[0] if rows else None


def catalog_state(cluster, db):
    """What a plan must leave as it was: the relations of public (and their
    storage), the migrations, the retired relations, the functions."""
    return {
        "relations": cluster.sql(
            "SELECT relname, relkind, relfilenode FROM pg_class "
            "WHERE relnamespace = 'public'::regnamespace ORDER BY 1", dbname=db),
        "migrations": cluster.sql("SELECT * FROM leapfrog.migration ORDER BY id", dbname=db),
        "retired": cluster.sql(
            "SELECT relname FROM pg_class WHERE relnamespace = 'leapfrog_retired'::regnamespace "
            "ORDER BY 1", dbname=db),
        "functions": cluster.sql(
            "SELECT proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace ORDER BY 1",
            dbname=db),
    }


def tables_state(cluster, db):
    with session(cluster, db) as conn:
        return user_tables_state(conn)


@pytest.fixture(scope="module")
def quiet(module_cluster_factory):
    """Background off: a migration runs until complete() or statements move its rows."""
    needs_real_extension()
    return module_cluster_factory(**{"leapfrog.background": "off"})


@pytest.fixture(scope="module")
def live(module_cluster_factory):
    needs_real_extension()
    return module_cluster_factory(**{"leapfrog.background": "on",
                                     "leapfrog.background_delay": 100,
                                     "leapfrog.batch_size": 2000})


@pytest.fixture(scope="module")
def eager_worker(module_cluster_factory):
    """The worker at once, in batches larger than the tables: a migration
    fails on all its bad rows together."""
    needs_real_extension()
    return module_cluster_factory(**{"leapfrog.background": "on",
                                     "leapfrog.background_delay": 0,
                                     "leapfrog.batch_size": 10000})


# ---- plan --------------------------------------------------------------------

def test_plan_accepted_changes_nothing(quiet, tmp_path):
    c = quiet
    dsn = new_db(c, "plan_ok")
    script = write(tmp_path, "everything.sql", EVERYTHING)
    catalog, tables = catalog_state(c, "plan_ok"), tables_state(c, "plan_ok")

    res = cli_ok("-d", dsn, "plan", script)
    out = res.stdout
    for action in ("run", "mapping", "retire", "replace", "track"):
        assert "  %s  " % action.ljust(8) in out, (action, out)
    for kind, frm, to in (("1:n", "public.cust", "public.cust_a"),
                          ("1:n", "public.cust", "public.cust_b"),
                          ("n:1", "public.ord", "public.totals"),
                          ("n:n", "public.visit, public.cust", "public.named"),
                          ("1:1", "public.item", "public.item2")):
        assert "%s  %s -> %s" % (kind, frm, to) in out, out
    assert "public.acct replaced lazily" in out
    assert "public.ord stays live, tracked in place" in out
    assert "public.visit: kept in leapfrog_retired" in out
    assert "input ~5,000 rows" in out and "input ~1,500 rows" in out
    # no migration ever ran here: no rate to estimate from
    assert "rate unknown" in out and "--rate" in out
    assert "Background work: 5 inputs, ~12,500 rows" in out
    assert "Accepted" in out

    # JSON, with a rate given: the expected times follow from it
    res = cli_ok("plan", script, "--rate", "500", "--json", "-d", dsn)
    plan = json.loads(res.stdout)
    assert plan["accepted"] and plan["exit_code"] == 0
    steps = plan["statements"]
    assert {s["action"] for s in steps} == {"run", "mapping", "retire", "replace", "track"}
    kinds = {(s["kind"], s["input"], s["target"]) for s in steps if s["action"] == "mapping"}
    assert kinds == {("1:n", "public.cust", "public.cust_a"),
                     ("1:n", "public.cust", "public.cust_b"),
                     ("n:1", "public.ord", "public.totals"),
                     ("n:n", "public.visit, public.cust", "public.named"),
                     ("1:1", "public.item", "public.item2")}
    replaced = {s["input"] for s in steps if s["action"] == "replace"}
    assert replaced == {"public.acct"}                    # the ALTER
    # the live input of the GROUP BY, its key NOT NULL
    assert {s["input"] for s in steps if s["action"] == "track"} == {"public.ord"}
    retired = {s["input"] for s in steps if s["action"] == "retire"}
    assert retired == {"public.visit", "public.item", "public.cust"}
    for s in steps:
        if s["action"] in ("mapping", "replace"):
            inputs = s["input"].split(", ")
            assert s["input_rows"] == sum(INPUT_ROWS[t] for t in inputs), s
            assert s["input_bytes"] > 0
            assert s["expected_s"] == pytest.approx(s["input_rows"] / 500)
    assert plan["rate_rows_per_s"] == 500 and plan["rate_basis"] == "--rate"
    assert plan["background"]["inputs"] == 5
    assert plan["background"]["input_rows"] == sum(INPUT_ROWS.values())
    assert plan["background"]["expected_s"] == pytest.approx(sum(INPUT_ROWS.values()) / 500)
    # the statements in script order, BEGIN and COMMIT left out
    numbers = [s["statement"] for s in steps]
    assert numbers == sorted(numbers) and numbers[0] == 2
    assert [s["sql"] for s in steps if s["action"] == "run"][-1] == "INSERT INTO version VALUES (2)"

    assert catalog_state(c, "plan_ok") == catalog
    assert tables_state(c, "plan_ok") == tables
    assert c.sql("SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND "
                 "database = (SELECT oid FROM pg_database WHERE datname = 'plan_ok')"
                 )[0][0] == 0


def test_plan_refused_and_error(quiet, tmp_path):
    c = quiet
    dsn = new_db(c, "plan_bad")
    catalog, tables = catalog_state(c, "plan_bad"), tables_state(c, "plan_bad")
    script = write(tmp_path, "refused.sql", REFUSED)

    res = cli("-d", dsn, "plan", script)
    assert res.returncode == leapfrog_cli.EXIT_REFUSED == 4, res
    out = res.stdout
    assert "REFUSED" in out and "SQLSTATE 0A000" in out and REFUSED_HINT in out
    assert "INSERT INTO x SELECT random()::int FROM cust" in out
    assert "CREATE TABLE never" not in out        # nothing after the refusal
    assert "1:1  public.cust -> public.x" in out    # what came before it

    plan = json.loads(cli("-d", dsn, "plan", "--json", script).stdout)
    assert not plan["accepted"] and plan["exit_code"] == 4
    last = plan["statements"][-1]
    assert (last["action"], last["statement"], last["sqlstate"]) == ("refused", 3, "0A000")
    assert REFUSED_HINT in last["hint"]
    assert [s["action"] for s in plan["statements"]] == ["run", "mapping", "refused"]

    # any other error: exit 1, with its SQLSTATE
    res = cli("-d", dsn, "plan", write(tmp_path, "exists.sql", "CREATE TABLE cust (id int);"))
    assert res.returncode == 1, res
    assert "SQLSTATE 42P07" in res.stdout and 'relation "cust" already exists' in res.stdout

    assert catalog_state(c, "plan_bad") == catalog
    assert tables_state(c, "plan_bad") == tables


def test_plan_from_stdin(quiet):
    dsn = new_db(quiet, "plan_stdin")
    res = cli_ok("-d", dsn, "plan", "-", input=SPLIT)
    assert "Plan of standard input" in res.stdout
    assert "1:n  public.cust -> public.cust_b" in res.stdout


# ---- start, status, wait, complete --------------------------------------------

def test_start_status_wait_complete(quiet, tmp_path):
    c = quiet
    dsn = new_db(c, "flow")
    split = write(tmp_path, "split.sql", SPLIT)

    res = cli_ok("-d", dsn, "start", "m1", split)
    assert res.stdout.startswith('started "m1": leapfrog.start() ')
    assert "switched in" in res.stdout and "leapfrog wait m1" in res.stdout
    assert migration(c, "flow", "m1") == ("running", 1000, 0, None)
    assert c.sql("SELECT to_regclass('cust'), to_regclass('cust_a') IS NOT NULL",
                 dbname="flow")[0] == (None, True)

    # status: all, one, JSON
    listing = json.loads(cli_ok("-d", dsn, "status", "--json").stdout)
    assert [(m["name"], m["state"], m["tuples_total"], m["tuples_migrated"], m["remaining"])
            for m in listing] == [("m1", "running", 1000, 0, 1000)]
    one = json.loads(cli_ok("status", "m1", "--json", "-d", dsn).stdout)
    assert one["name"] == "m1" and one["fraction"] == 0.0 and one["error"] is None
    assert one["started_at"] and one["finished_at"] is None and one["elapsed_s"] >= 0
    text = cli_ok("-d", dsn, "status").stdout
    assert text.startswith("m1  running") and "0/1,000 rows (0.0%)" in text
    assert "state:           running" in cli_ok("-d", dsn, "status", "m1").stdout
    res = cli("-d", dsn, "status", "nope")
    assert res.returncode == 1 and 'migration "nope" does not exist' in res.stderr

    # wait: the background is off, nothing moves: the timeout expires
    t0 = time.monotonic()
    res = cli("-d", dsn, "wait", "m1", "--timeout", "1", "--interval", "0.2")
    took = time.monotonic() - t0
    assert res.returncode == leapfrog_cli.EXIT_TIMEOUT == 5, res
    assert took >= 1.0
    lines = res.stdout.splitlines()
    assert "\r" not in res.stdout and "\x1b" not in res.stdout      # not a terminal
    progress = [ln for ln in lines if " m1 running: " in ln]
    assert len(progress) >= 3, res.stdout
    assert all("0/1,000 migrated, 1,000 rows left" in ln for ln in progress), res.stdout
    assert lines[-1].startswith("timed out after") and "1,000 rows left" in lines[-1]

    # wait while complete() moves the rows: it ends as soon as they have
    waiter = subprocess.Popen(
        [sys.executable, "-m", "leapfrog_cli", "-d", dsn, "wait", "m1", "--timeout", "60",
         "--interval", "0.2"], env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True)
    try:
        first = waiter.stdout.readline()          # it is waiting
        assert " m1 running: " in first, first
        res = cli_ok("-d", dsn, "complete", "m1")
        assert res.stdout.startswith('completed "m1" in ')
        assert "1,000 rows were left, 1,000 input rows in all" in res.stdout
        out, err = waiter.communicate(timeout=30)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert waiter.returncode == 0, (out, err)
    assert out.splitlines()[-1].startswith('"m1" done: 1,000 input rows in ')

    assert migration(c, "flow", "m1") == ("done", 1000, 1000, None)
    assert c.sql("SELECT count(*) FROM cust_a", dbname="flow")[0][0] == 1000
    one = json.loads(cli_ok("-d", dsn, "status", "m1", "--json").stdout)
    assert (one["state"], one["remaining"], one["fraction"]) == ("done", 0, 1.0)
    assert "already done" in cli_ok("-d", dsn, "complete", "m1").stdout
    assert cli_ok("-d", dsn, "wait", "m1", "--timeout", "0").stdout.startswith('"m1" done')

    # plan now measures the rate from the finished migration
    secs = c.sql("SELECT extract(epoch FROM finished_at - started_at)::float8 FROM "
                 "leapfrog.migrations WHERE name = 'm1'", dbname="flow")[0][0]
    item = write(tmp_path, "item.sql", ITEM_WIDER)
    plan = json.loads(cli_ok("-d", dsn, "plan", item, "--json").stdout)
    assert plan["rate_rows_per_s"] == pytest.approx(1000 / secs, rel=1e-6)
    assert plan["rate_basis"] == "median of 1 recent migration of this database"
    mapping = [s for s in plan["statements"] if s["action"] == "mapping"][0]
    assert mapping["expected_s"] == pytest.approx(1500 / plan["rate_rows_per_s"])
    out = cli_ok("-d", dsn, "plan", item).stdout
    assert "background ~" in out and "(median of 1 recent migration of this database)" in out


def test_start_then_and_refusals(quiet, tmp_path):
    c = quiet
    dsn = new_db(c, "start_more")

    # --then runs in the same transaction: its failure undoes start()
    bad_then = write(tmp_path, "bad_then.sql", "CREATE FUNCTION app_v() RETURNS int "
                     "LANGUAGE sql AS 'SELECT 2'; SELECT 1/0;")
    res = cli("-d", dsn, "start", "t1", write(tmp_path, "item.sql", ITEM_WIDER),
              "--then", bad_then)
    assert res.returncode == 1, res
    assert "SQLSTATE 22012" in res.stderr and "--then" in res.stderr
    assert migration(c, "start_more", "t1") is None
    assert c.sql("SELECT to_regclass('item2'), to_regproc('app_v')", dbname="start_more")[0] \
        == (None, None)

    good_then = write(tmp_path, "then.sql", "CREATE FUNCTION app_v() RETURNS int "
                      "LANGUAGE sql AS 'SELECT 2';\nCOMMENT ON FUNCTION app_v() IS 'v2';\n")
    res = cli_ok("-d", dsn, "start", "t1", tmp_path / "item.sql", "--then", good_then,
                 "--json")
    timing = json.loads(res.stdout)
    assert timing["name"] == "t1"
    assert 0 < timing["start_ms"] <= timing["switch_ms"]
    assert timing["then_ms"] is not None and timing["commit_ms"] >= 0
    assert timing["switch_ms"] == pytest.approx(
        timing["start_ms"] + timing["then_ms"] + timing["commit_ms"], abs=0.01)
    assert timing["committed_at"] and abs(timing["started_at"] - time.time()) < 60
    assert c.sql("SELECT app_v()", dbname="start_more")[0][0] == 2
    assert migration(c, "start_more", "t1")[0] == "running"

    # a refused script: exit 4, its SQLSTATE and hint, nothing done
    res = cli("-d", dsn, "start", "r1", write(tmp_path, "refused.sql", REFUSED))
    assert res.returncode == 4, res
    assert "(SQLSTATE 0A000)" in res.stderr and "HINT: " + REFUSED_HINT in res.stderr
    assert migration(c, "start_more", "r1") is None
    assert c.sql("SELECT to_regclass('x')", dbname="start_more")[0][0] is None

    # the same name twice: the server's error, exit 1
    res = cli("-d", dsn, "start", "t1", write(tmp_path, "acct.sql",
                                              "ALTER TABLE acct ALTER COLUMN bal TYPE bigint;"))
    assert res.returncode == 1 and "SQLSTATE 42710" in res.stderr, res

    # a table held by a transaction: start() gives up on its locks, exit 7
    with c.connect("start_more", autocommit=False) as holder:
        holder.execute("LOCK TABLE acct IN ACCESS SHARE MODE")
        res = cli("-d", dsn, "start", "l1", tmp_path / "acct.sql",
                  env=clean_env(PGOPTIONS="-c leapfrog.lock_retries=2 "
                                          "-c leapfrog.lock_timeout=20ms"))
        holder.rollback()
    assert res.returncode == leapfrog_cli.EXIT_LOCKED == 7, res
    assert "SQLSTATE 55P03" in res.stderr
    assert migration(c, "start_more", "l1") is None

    # the script from standard input
    res = cli_ok("-d", dsn, "start", "s1", "-", input=SPLIT)
    assert res.stdout.startswith('started "s1"')
    assert migration(c, "start_more", "s1") == ("running", 1000, 0, None)


def test_wait_survives_a_restart(quiet, tmp_path):
    """The server restarts while wait polls: the migration goes on after it,
    and so does the wait, on a new connection."""
    c = quiet
    dsn = new_db(c, "restart")
    cli_ok("-d", dsn, "start", "r1", write(tmp_path, "split.sql", SPLIT))
    waiter = subprocess.Popen(
        [sys.executable, "-m", "leapfrog_cli", "-d", dsn, "wait", "r1", "--timeout", "120",
         "--interval", "0.2"], env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True)
    try:
        first = waiter.stdout.readline()
        assert " r1 running: " in first, first
        c.restart()
        lost = waiter.stdout.readline()
        assert lost.startswith("connection lost ("), lost
        assert waiter.poll() is None                  # still waiting
        assert cli_ok("-d", dsn, "complete", "r1").stdout.startswith('completed "r1" in ')
        out, err = waiter.communicate(timeout=60)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert waiter.returncode == 0, (out, err)
    lines = out.splitlines()
    assert "reconnected" in lines, out
    assert lines[-1].startswith('"r1" done: 1,000 input rows in '), out


def test_start_wait_background(live, tmp_path):
    c = live
    dsn = new_db(c, "bg", SETUP + "INSERT INTO item SELECT g, g FROM generate_series(1501, 20000) g;"
                 "ANALYZE item;")
    res = cli_ok("-d", dsn, "start", "w1", write(tmp_path, "item.sql", ITEM_WIDER), "--wait",
                 "--timeout", "120", "--interval", "0.2")
    lines = res.stdout.splitlines()
    assert lines[0].startswith('started "w1"')
    assert lines[-1].startswith('"w1" done: 20,000 input rows in ')
    assert migration(c, "bg", "w1") == ("done", 20000, 20000, None)
    assert c.sql("SELECT count(*), sum(v) FROM item", dbname="bg")[0] == (
        20000, 1500 * 1501 + sum(range(1501, 20001)))

    # --json --wait: the JSON alone on stdout, the progress on stderr
    res = cli_ok("-d", dsn, "start", "w2", "--json", "--wait", "--interval", "0.2", "-",
                 input=SPLIT)
    timing = json.loads(res.stdout)
    assert timing["name"] == "w2" and timing["then_ms"] is None
    assert '"w2" done: 1,000 input rows' in res.stderr
    assert migration(c, "bg", "w2")[0] == "done"


def test_failed_migration(live, tmp_path):
    c = live
    dsn = new_db(c, "fails", "CREATE TABLE raw (id int PRIMARY KEY, v text NOT NULL);"
                 "INSERT INTO raw SELECT g, g::text FROM generate_series(1, 3000) g;"
                 "UPDATE raw SET v = 'oops' WHERE id = 2500;")
    script = write(tmp_path, "cast.sql", "CREATE TABLE num (id int PRIMARY KEY, v int NOT NULL);"
                   "INSERT INTO num SELECT id, v::int FROM raw; DROP TABLE raw;")
    cli_ok("-d", dsn, "start", "f1", script)
    res = cli("-d", dsn, "wait", "f1", "--timeout", "60", "--interval", "0.2")
    assert res.returncode == leapfrog_cli.EXIT_FAILED == 6, res
    assert 'migration "f1" failed' in res.stderr and "oops" in res.stderr
    assert "\nHINT: " in res.stderr        # the server's advice, from leapfrog.wait()
    assert migration(c, "fails", "f1")[0] == "failed"
    res = cli("-d", dsn, "status", "f1")
    assert res.returncode == 6 and "error:" in res.stdout and "oops" in res.stdout
    listing = json.loads(cli_ok("-d", dsn, "status", "--json").stdout)
    assert listing[0]["state"] == "failed" and "oops" in listing[0]["error"]


def test_progress_bar_on_a_terminal(quiet):
    """On a terminal, wait redraws one line: carriage returns, a bar, the
    line cleared after it; no plain lines."""
    dsn = new_db(quiet, "tty")
    cli_ok("-d", dsn, "start", "b1", "-", input=SPLIT)
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "leapfrog_cli", "-d", dsn, "wait", "b1", "--timeout", "0.8",
             "--interval", "0.2"], env=clean_env(), stdout=slave, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL)
        os.close(slave)
        slave = None
        chunks = []
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:       # EIO: the other side is closed
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=30) == 5
    finally:
        os.close(master)
        if slave is not None:
            os.close(slave)
    out = b"".join(chunks).decode()
    redraws = out.count("\r[")
    assert redraws >= 3, repr(out)
    assert "[" + "." * 30 + "]   0.0% 0/1,000 migrated" in out
    assert "\x1b[K" in out and " b1 running: " not in out
    assert "timed out after" in out


# ---- connecting ------------------------------------------------------------------

def test_connection_options(quiet, tmp_path):
    c = quiet
    new_db(c, "conn")
    script = write(tmp_path, "split.sql", SPLIT)
    header = 'Plan of %s in database "conn"' % script

    # libpq's variables alone
    env = clean_env(PGHOST=str(c.sockdir), PGPORT=str(c.port), PGUSER=DB_USER, PGDATABASE="conn")
    assert cli_ok("plan", script, env=env).stdout.startswith(header)
    # a URI
    uri = "postgresql://%s@/conn?host=%s&port=%d" % (DB_USER, quote(str(c.sockdir), safe=""),
                                                      c.port)
    assert cli_ok("-d", uri, "plan", script).stdout.startswith(header)
    # psql's -h -p -U, the database by name
    assert cli_ok("plan", script, "-h", c.sockdir, "-p", c.port, "-U", DB_USER,
                  "-d", "conn").stdout.startswith(header)
    # options override the variables
    assert cli_ok("-d", "conn", "plan", script,
                  env=clean_env(PGHOST=str(c.sockdir), PGPORT=str(c.port), PGUSER=DB_USER,
                                PGDATABASE="postgres")).stdout.startswith(header)

    # nobody there: exit 3
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    res = cli("-d", "host=%s port=%d dbname=conn" % (nowhere, c.port), "status")
    assert res.returncode == leapfrog_cli.EXIT_CONNECT == 3, res
    assert res.stderr.startswith("leapfrog: could not connect")
    # a database without the extension: exit 1, with what to do
    c.create_database("no_ext", extension=False)
    res = cli("-d", c.dsn("no_ext"), "status")
    assert res.returncode == 1 and "CREATE EXTENSION leapfrog" in res.stderr, res


def test_usage_errors(quiet, tmp_path):
    res = cli("-d", quiet.dsn(), "plan", tmp_path / "missing.sql")
    assert res.returncode == 2 and "cannot read" in res.stderr
    res = cli("frobnicate")
    assert res.returncode == 2
    res = cli("wait", "m", "--timeout", "-1")
    assert res.returncode == 2
    res = cli("-?")
    assert res.returncode == 0 and "exit codes:" in res.stdout


def test_installed_command():
    """`pip install .` (install-deps.sh: editable, into .venv) puts the
    command next to the interpreter."""
    script = Path(sys.executable).parent / "leapfrog"
    if not script.exists():
        pytest.skip("leapfrog is not installed in this interpreter's environment")
    res = subprocess.run([sys.executable, str(script), "--version"], env=clean_env(),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "leapfrog " + leapfrog_cli.__version__


# ---- failed rows: failed, fix, quarantine, resume; chains ----------------------

BAD_BALANCE = (17, 1500)        # balance < 0: breaks the new CHECK
BAD_EMAIL = 2999                # NULL: breaks the new NOT NULL

ACCT = """
CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, email text);
INSERT INTO acct SELECT g, g, 'u' || g FROM generate_series(1, 3000) g;
UPDATE acct SET balance = -5 WHERE id IN (17, 1500);
UPDATE acct SET email = NULL WHERE id = 2999;
"""

ACCT_CHECKED = """
CREATE TABLE acct2 (id int PRIMARY KEY, balance int NOT NULL CHECK (balance >= 0),
                    email text NOT NULL);
INSERT INTO acct2 SELECT id, balance, email FROM acct;
DROP TABLE acct;
ALTER TABLE acct2 RENAME TO acct;
"""


def test_failed_fix_quarantine_resume(eager_worker, tmp_path):
    """The owner, no superuser, lists the rows its migration failed on,
    corrects two, sets one aside and resumes; another role may do none of
    it (exit 8).  A migration chained after the failed one cannot finish
    until it is resumed."""
    c = eager_worker
    dsn = new_db(c, "failing", "CREATE ROLE cli_op LOGIN; CREATE ROLE cli_other LOGIN;"
                 "GRANT CREATE ON SCHEMA public TO cli_op; SET ROLE cli_op;" + ACCT)
    op, other = ("-d", dsn, "-U", "cli_op"), ("-d", dsn, "-U", "cli_other")
    cli_ok(*op, "start", "acct_v2", write(tmp_path, "checked.sql", ACCT_CHECKED))
    res = cli(*op, "wait", "acct_v2", "--timeout", "60", "--interval", "0.2")
    assert res.returncode == leapfrog_cli.EXIT_FAILED == 6, res
    assert "HINT: From the shell: leapfrog failed acct_v2" in res.stderr, res.stderr

    st = json.loads(cli(*op, "status", "acct_v2", "--json").stdout)
    assert (st["state"], st["on_error"], st["failed_rows"], st["after"]) == \
        ("failed", "fail", 3, [])
    res = cli(*op, "status")
    assert res.returncode == 0 and "3 failed rows (leapfrog failed acct_v2)" in res.stdout

    # failed: every bad row, as JSON and as text; exit 6 while there are some
    res = cli(*op, "failed", "acct_v2", "--json")
    assert res.returncode == 6, res
    listing = json.loads(res.stdout)
    assert (listing["migration"], listing["state"], listing["failed_rows"]) == \
        ("acct_v2", "failed", 3)
    rows = {r["row"]["id"]: r for r in listing["rows"]}
    assert set(rows) == set(BAD_BALANCE) | {BAD_EMAIL}
    for rid, r in rows.items():
        assert r["input"] == "public.acct" and r["failed_at"]
        if rid == BAD_EMAIL:
            assert (r["sqlstate"], r["row"]) == ("23502", {"id": rid, "balance": rid,
                                                           "email": None})
            assert "not-null" in r["error"]
        else:
            assert (r["sqlstate"], r["row"]["balance"]) == ("23514", -5)
            assert "acct2_balance_check" in r["error"]
    res = cli(*op, "failed", "acct_v2")
    assert res.returncode == 6, res
    assert res.stdout.startswith('"acct_v2" failed: 3 rows cannot be migrated.')
    for r in rows.values():
        assert "public.acct %s  %s  %s" % (r["ctid"], r["sqlstate"], r["error"]) in res.stdout
    assert '{"id": 17, "email": "u17", "balance": -5}' in res.stdout
    assert "leapfrog resume acct_v2" in res.stdout

    # another role sees the count, not the rows, and may act on none
    assert json.loads(cli(*other, "status", "acct_v2", "--json").stdout)["failed_rows"] == 3
    ctid17 = rows[BAD_BALANCE[0]]["ctid"]
    for args in (("failed", "acct_v2"),
                 ("fix", "acct_v2", "public.acct", ctid17, "--set", "balance=0"),
                 ("quarantine", "acct_v2", "public.acct", ctid17),
                 ("resume", "acct_v2")):
        res = cli(*other, *args)
        assert res.returncode == leapfrog_cli.EXIT_PRIVILEGE == 8, (args, res)
        assert "owner" in res.stderr
        if args[0] != "failed":
            assert "(SQLSTATE 42501)" in res.stderr

    # a migration chained after it: waits for it, and cannot finish while it is failed
    cli_ok(*op, "start", "acct_v3", "-", input="ALTER TABLE acct ALTER COLUMN balance "
                                                 "TYPE bigint;")
    assert json.loads(cli_ok(*op, "status", "acct_v3", "--json").stdout)["after"] == \
        ["acct_v2"]
    res = cli(*op, "wait", "acct_v3", "--timeout", "30")
    assert res.returncode == 6, res
    assert ('"acct_v3" cannot go on: "acct_v2", which fills its inputs, failed'
            in res.stderr), res.stderr

    # fix two (--set, the ctid without parentheses; --changes), set one aside
    # (the input unqualified: the failed rows name it)
    res = cli_ok(*op, "fix", "acct_v2", "public.acct", ctid17.strip("()"), "--set", "balance=0")
    assert res.stdout.startswith("corrected row %s of public.acct (balance): it is (" % ctid17)
    assert "2 failed rows left: leapfrog failed acct_v2" in res.stdout
    res = cli_ok(*op, "fix", "acct_v2", "public.acct", rows[BAD_EMAIL]["ctid"],
                 "--changes", '{"email": "fixed"}')
    assert "1 failed row left" in res.stdout
    res = cli_ok(*op, "quarantine", "acct_v2", "acct", rows[BAD_BALANCE[1]]["ctid"])
    assert ("set row %s of public.acct aside into leapfrog_quarantine.acct_m1"
            % rows[BAD_BALANCE[1]]["ctid"]) in res.stdout
    assert "No failed row left: leapfrog resume acct_v2" in res.stdout
    res = cli_ok(*op, "failed", "acct_v2")
    assert res.stdout.startswith('"acct_v2" (failed) has no failed rows.')
    assert json.loads(cli_ok(*op, "failed", "acct_v2", "--json").stdout)["rows"] == []

    res = cli_ok(*op, "resume", "acct_v2")
    assert res.stdout.startswith('resumed "acct_v2"')
    for name in ("acct_v2", "acct_v3"):
        res = cli_ok(*op, "wait", name, "--timeout", "60", "--interval", "0.2")
        assert res.stdout.splitlines()[-1].startswith('"%s" done' % name), res.stdout
    assert "is done: nothing to resume" in cli_ok(*op, "resume", "acct_v2").stdout
    st = json.loads(cli_ok(*op, "status", "acct_v2", "--json").stdout)
    assert (st["state"], st["failed_rows"], st["after"]) == ("done", 0, [])

    # every row in the new table or the quarantine, once
    assert c.sql("SELECT count(*), count(DISTINCT id), sum(balance) FROM acct",
                 dbname="failing")[0] == (2999, 2999, sum(range(3001)) - 17 - 1500)
    assert c.sql("SELECT balance, email FROM acct WHERE id IN (17, 2999) ORDER BY id",
                 dbname="failing") == [(0, "u17"), (2999, "fixed")]
    assert c.sql("SELECT id, balance, failed_sqlstate FROM leapfrog_quarantine.acct_m1",
                 dbname="failing") == [(1500, -5, "23514")]


def test_start_on_error_quarantine(eager_worker, tmp_path):
    c = eager_worker
    dsn = new_db(c, "quarantining", ACCT)
    res = cli_ok("-d", dsn, "start", "acct_v2", write(tmp_path, "checked.sql", ACCT_CHECKED),
                 "--on-error", "quarantine", "--wait", "--timeout", "60", "--interval", "0.2")
    assert "set aside into schema leapfrog_quarantine" in res.stdout
    assert res.stdout.splitlines()[-1].startswith('"acct_v2" done'), res.stdout
    st = json.loads(cli_ok("-d", dsn, "status", "acct_v2", "--json").stdout)
    assert (st["state"], st["on_error"], st["failed_rows"], st["error"]) == \
        ("done", "quarantine", 0, None)
    assert "on_error:        quarantine" in cli_ok("-d", dsn, "status", "acct_v2").stdout
    assert cli_ok("-d", dsn, "failed", "acct_v2").stdout.startswith(
        '"acct_v2" (done) has no failed rows.')
    assert c.sql("SELECT id, failed_sqlstate FROM leapfrog_quarantine.acct_m1 ORDER BY id",
                 dbname="quarantining") == [(17, "23514"), (1500, "23514"), (2999, "23502")]
    assert c.sql("SELECT count(*) FROM acct", dbname="quarantining")[0][0] == 2997
    timing = json.loads(cli_ok("-d", dsn, "start", "s1", "--json", "--on-error", "fail", "-",
                               input="CREATE TABLE s (id int);").stdout)
    assert timing["on_error"] == "fail"
    res = cli("-d", dsn, "start", "s2", "--on-error", "ignore", "-", input="SELECT 1;")
    assert res.returncode == 2 and "invalid choice" in res.stderr


def test_chain_status_and_wait(quiet, tmp_path):
    """A migration over a table an earlier one still fills: status shows
    the chain, wait says what it waits for."""
    c = quiet
    dsn = new_db(c, "chain")
    cli_ok("-d", dsn, "start", "m1", write(tmp_path, "split.sql", SPLIT))
    cli_ok("-d", dsn, "start", "m2", "-", input="""
        CREATE TABLE cust_a2 (id bigint PRIMARY KEY, name text NOT NULL);
        INSERT INTO cust_a2 SELECT id, name FROM cust_a;
        DROP TABLE cust_a;
        ALTER TABLE cust_a2 RENAME TO cust_a;""")
    listing = {m["name"]: m for m in json.loads(cli_ok("-d", dsn, "status", "--json").stdout)}
    assert (listing["m1"]["after"], listing["m2"]["after"]) == ([], ["m1"])
    text = cli_ok("-d", dsn, "status").stdout.splitlines()
    assert text[0].startswith("m1  running") and "after" not in text[0]
    assert text[1].startswith("m2  running") and text[1].endswith("; after m1")
    assert "\nafter:           m1 (unfinished migrations" in cli_ok("-d", dsn, "status",
                                                                   "m2").stdout

    # wait says what it waits for, and when that is done
    waiter = subprocess.Popen(
        [sys.executable, "-m", "leapfrog_cli", "-d", dsn, "wait", "m2", "--timeout", "60",
         "--interval", "0.2"], env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True)
    try:
        first = waiter.stdout.readline()
        assert first == ('"m2" waits for "m1" (running, 0.0%), which fills its inputs: the '
                         'background moves its rows once that is done\n'), first
        assert " m2 running: " in waiter.stdout.readline()
        cli_ok("-d", dsn, "complete", "m1")
        while True:
            line = waiter.stdout.readline()
            assert line, "wait ended early"
            if not line.startswith(tuple("0123456789")):
                break
        assert line == '"m2": "m1" done, its own rows move now\n', line
        assert json.loads(cli_ok("-d", dsn, "status", "m2", "--json").stdout)["after"] == []
        cli_ok("-d", dsn, "complete", "m2")
        out, err = waiter.communicate(timeout=30)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert waiter.returncode == 0, (out, err)
    assert out.splitlines()[-1].startswith('"m2" done: 1,000 input rows in '), out
    assert c.sql("SELECT count(*) FROM cust_a", dbname="chain")[0][0] == 1000


def test_quarantine_of_a_group(quiet):
    """A row of a table tracked by keys (kept by the script, read by a GROUP
    BY mapping on a NOT NULL key) sets its whole group aside, and the CLI
    says so."""
    needs_real_extension()
    dsn = new_db(quiet, "qgroup", """
        CREATE TABLE sale (id int PRIMARY KEY, cust int NOT NULL, amt int NOT NULL);
        CREATE INDEX ON sale (cust);
        INSERT INTO sale SELECT g, g % 3, g FROM generate_series(1, 30) g;""")
    cli_ok("-d", dsn, "start", "totals", "-", input="""
        CREATE TABLE total (cust int PRIMARY KEY, amt bigint NOT NULL);
        INSERT INTO total SELECT cust, sum(amt) FROM sale GROUP BY cust;""")
    ctid = quiet.sql("SELECT ctid::text FROM sale WHERE id = 4", dbname="qgroup")[0][0]
    res = cli_ok("-d", dsn, "quarantine", "totals", "public.sale", ctid.strip("()"))
    assert res.stdout.startswith(
        "set row %s of public.sale aside into leapfrog_quarantine.sale_m1 with the 9 other "
        'rows of its group: migration "totals" leaves the group out' % ctid), res.stdout
    cli_ok("-d", dsn, "complete", "totals")
    assert quiet.sql("SELECT cust FROM total ORDER BY 1", dbname="qgroup") == [(0,), (2,)]
    assert quiet.sql("SELECT count(*) FROM sale", dbname="qgroup")[0][0] == 30


def test_fix_refusals(quiet, tmp_path):
    dsn = new_db(quiet, "fixkey", """
        CREATE TABLE sale (id int PRIMARY KEY, cust int NOT NULL, amt int NOT NULL);
        CREATE INDEX ON sale (cust);
        INSERT INTO sale SELECT g, g % 3, g FROM generate_series(1, 30) g;""")
    cli_ok("-d", dsn, "start", "totals", "-", input="""
        CREATE TABLE total (cust int PRIMARY KEY, amt bigint NOT NULL);
        INSERT INTO total SELECT cust, sum(amt) FROM sale GROUP BY cust;
        DROP TABLE sale;""")
    # a group key: Leapfrog refuses, exit 4, the hint says to set the row aside
    res = cli("-d", dsn, "fix", "totals", "public.sale", "0,3", "--set", "cust=1")
    assert res.returncode == leapfrog_cli.EXIT_REFUSED == 4, res
    assert "(SQLSTATE 0A000)" in res.stderr and "leapfrog.quarantine_row" in res.stderr
    res = cli_ok("-d", dsn, "fix", "totals", "public.sale", "(0,3)", "--set", "amt=3",
                 "--null", "amt", "--changes", '{"amt": 1}', "--set", "amt=1003")
    assert res.stdout.startswith("corrected row (0,3) of public.sale (amt): it is (0,")
    # the row is not there any more (corrected: a new ctid); no such column
    res = cli("-d", dsn, "quarantine", "totals", "public.sale", "0,3")
    assert res.returncode == 1 and "is not waiting for migration" in res.stderr, res
    res = cli("-d", dsn, "fix", "totals", "public.sale", "0,4", "--set", "nope=1")
    assert res.returncode == 1 and "(SQLSTATE 42703)" in res.stderr, res
    for args in (("0,4",), ("0,4", "--set", "amt"), ("0,4", "--changes", "[1]"),
                 ("0,4", "--changes", "{"), ("x", "--set", "amt=1")):
        res = cli("-d", dsn, "fix", "totals", "public.sale", *args)
        assert res.returncode == 2, (args, res)
    res = cli("-d", dsn, "failed", "nope")
    assert res.returncode == 1 and 'migration "nope" does not exist' in res.stderr
    cli_ok("-d", dsn, "complete", "totals")
    assert quiet.sql("SELECT amt FROM total WHERE cust = 0", dbname="fixkey")[0][0] == \
        sum(g for g in range(1, 31) if g % 3 == 0) + 1000
