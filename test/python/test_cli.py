"""The command-line tool `leapfrog` (python/leapfrog_cli), end to end.

Every test runs the tool as a subprocess (python -m leapfrog_cli, from this
tree's python/) against the module's throwaway clusters and checks its exit
status, its output and the database: `quiet` has leapfrog.background off
(migrations stay running until something moves their rows), `live` has it
on.  Each test works in a database of its own.

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
              runs meanwhile (0); a failed migration (6).
    complete  moves what is left; again: already done.
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


# ---- plan --------------------------------------------------------------------

def test_plan_accepted_changes_nothing(quiet, tmp_path):
    c = quiet
    dsn = new_db(c, "plan_ok")
    script = write(tmp_path, "everything.sql", EVERYTHING)
    catalog, tables = catalog_state(c, "plan_ok"), tables_state(c, "plan_ok")

    res = cli_ok("-d", dsn, "plan", script)
    out = res.stdout
    for action in ("run", "mapping", "retire", "replace"):
        assert "  %s  " % action.ljust(8) in out, (action, out)
    for kind, frm, to in (("1:n", "public.cust", "public.cust_a"),
                          ("1:n", "public.cust", "public.cust_b"),
                          ("n:1", "public.ord", "public.totals"),
                          ("n:n", "public.visit, public.cust", "public.named"),
                          ("1:1", "public.item", "public.item2")):
        assert "%s  %s -> %s" % (kind, frm, to) in out, out
    assert "public.acct replaced lazily" in out
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
    assert {s["action"] for s in steps} == {"run", "mapping", "retire", "replace"}
    kinds = {(s["kind"], s["input"], s["target"]) for s in steps if s["action"] == "mapping"}
    assert kinds == {("1:n", "public.cust", "public.cust_a"),
                     ("1:n", "public.cust", "public.cust_b"),
                     ("n:1", "public.ord", "public.totals"),
                     ("n:n", "public.visit, public.cust", "public.named"),
                     ("1:1", "public.item", "public.item2")}
    replaced = {s["input"] for s in steps if s["action"] == "replace"}
    assert replaced == {"public.ord", "public.acct"}      # the live input, the ALTER
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
