"""Rows that cannot be migrated: listed, corrected, quarantined, resumed.

The background worker tries a failed batch's rows one by one.  By default
each bad row is listed in leapfrog.failed_rows (input row as jsonb, SQLSTATE,
error) and the migration fails once the batch is through; its owner, with
no superuser rights, corrects a row (leapfrog.correct_row) or sets it aside
(leapfrog.quarantine_row) and resumes it (leapfrog.resume).  Started with
on_error => 'quarantine', the worker sets bad rows aside itself.  Either
way no row is lost: every input row ends in the new table or in the
quarantine table, where it stays until the operator removes it.
"""

import threading

import psycopg
import pytest

from support import needs_real_extension, wait_until

ROWS = 3000
BAD_BALANCE = (17, 1500)        # balance < 0: break the new CHECK
BAD_EMAIL = 2999                # NULL email: breaks the new NOT NULL

SCRIPT = """
  CREATE TABLE acct2 (id int PRIMARY KEY, balance int NOT NULL CHECK (balance >= 0),
                      email text NOT NULL);
  INSERT INTO acct2 SELECT id, balance, email FROM acct;
  DROP TABLE acct;
  ALTER TABLE acct2 RENAME TO acct;
"""


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    needs_real_extension()
    return module_cluster_factory(**{"leapfrog.background": "on",
                                     "leapfrog.background_delay": 0,
                                     "leapfrog.batch_size": 1000})


def _setup(c, db):
    c.create_database(db)
    with c.connect(db) as conn:
        conn.execute("CREATE ROLE op_%s LOGIN" % db)
        conn.execute("CREATE ROLE other_%s LOGIN" % db)
        conn.execute("GRANT CREATE ON SCHEMA public TO op_%s" % db)
        conn.execute("SET ROLE op_%s" % db)
        conn.execute("CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, email text)")
        conn.execute("INSERT INTO acct SELECT g, g, 'u' || g FROM generate_series(1, %s) g",
                     [ROWS])
        conn.execute("UPDATE acct SET balance = -5 WHERE id = ANY(%s)", [list(BAD_BALANCE)])
        conn.execute("UPDATE acct SET email = NULL WHERE id = %s", [BAD_EMAIL])


def _as(c, db, role):
    conn = c.connect(db)
    conn.execute("SET ROLE %s_%s" % (role, db))
    return conn


def _state(conn, name):
    return conn.execute("SELECT state, failed_rows, error FROM leapfrog.migrations "
                        "WHERE name = %s", [name]).fetchone()


def _failed(conn):
    return {r[0]["id"]: r for r in conn.execute(
        "SELECT row, ctid::text, sqlstate, error, input FROM leapfrog.failed_rows "
        "ORDER BY ctid").fetchall()}


def test_fail_correct_quarantine_resume(cluster):
    c, db = cluster, "frfail"
    _setup(c, db)
    with _as(c, db, "op") as conn:
        conn.execute("SELECT leapfrog.start('acct_v2', %s)", [SCRIPT])
        wait_until(lambda: _state(conn, "acct_v2")[0] == "failed", 60,
                   what="the migration to fail on its bad rows")
        bad = _failed(conn)
        # The bad rows the worker reached before failing are all listed.
        assert set(bad) <= set(BAD_BALANCE) | {BAD_EMAIL} and bad
        for rid, (row, _, sqlstate, error, input_) in bad.items():
            assert input_ == "public.acct"
            if rid == BAD_EMAIL:
                assert (sqlstate, row["email"]) == ("23502", None)
            else:
                assert sqlstate == "23514" and row["balance"] == -5
                assert "acct2_balance_check" in error
        state, nfailed, error = _state(conn, "acct_v2")
        assert nfailed == len(bad) and "input row" in error
        # The view still knows the input's rows (NULL when the first worker's
        # first batch was the one that failed: its count was rolled back).
        assert conn.execute("SELECT tuples_total FROM leapfrog.migrations WHERE name = %s",
                            ["acct_v2"]).fetchone()[0] == ROWS

        # Another role sees none of them and may act on none.  The error
        # quotes row values: it sees the migration failed, not the error.
        with _as(c, db, "other") as other:
            assert other.execute("SELECT count(*) FROM leapfrog.failed_rows").fetchone()[0] == 0
            assert _state(other, "acct_v2")[0] == "failed" and _state(other, "acct_v2")[2] is None
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as failed:
                other.execute("SELECT leapfrog.wait('acct_v2', 1)")
            assert "input row" not in str(failed.value.diag.message_detail)
            for sql in ("SELECT leapfrog.resume('acct_v2')",
                        "SELECT leapfrog.quarantine_row('acct_v2', 'public.acct', '(0,1)')",
                        "SELECT leapfrog.correct_row('acct_v2', 'public.acct', '(0,1)', "
                        "'{\"balance\": 1}')"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    other.execute(sql)

        # Until everything is fixed, the worker keeps failing on what is left:
        # correct, quarantine, resume, as often as it takes.
        quarantined = set()
        for _ in range(5):
            state = _state(conn, "acct_v2")[0]
            if state == "done":
                break
            if state == "running":
                wait_until(lambda: _state(conn, "acct_v2")[0] != "running", 60,
                           what="the migration to finish or fail again")
                continue
            for rid, (row, ctid, *_rest) in _failed(conn).items():
                if rid == BAD_BALANCE[0]:
                    conn.execute("SELECT leapfrog.correct_row('acct_v2', 'public.acct', %s, "
                                 "'{\"balance\": 0}')", [ctid])
                elif rid == BAD_EMAIL:
                    conn.execute("SELECT leapfrog.correct_row('acct_v2', 'public.acct', %s, "
                                 "'{\"email\": \"fixed\"}')", [ctid])
                else:
                    q = conn.execute("SELECT leapfrog.quarantine_row('acct_v2', 'public.acct', %s)",
                                     [ctid]).fetchone()[0]
                    assert q == "leapfrog_quarantine.acct_m1"
                    quarantined.add(rid)
            assert _failed(conn) == {}
            conn.execute("SELECT leapfrog.resume('acct_v2')")
        assert conn.execute("SELECT leapfrog.wait('acct_v2', 60)").fetchone()[0]
        assert _state(conn, "acct_v2")[:2] == ("done", 0)
        assert quarantined == {BAD_BALANCE[1]}

        # No row lost, none doubled: the new table plus the quarantine.
        n, d = conn.execute("SELECT count(*), count(DISTINCT id) FROM acct").fetchone()
        assert (n, d) == (ROWS - 1, ROWS - 1)
        assert conn.execute("SELECT balance, email FROM acct WHERE id = %s",
                            [BAD_BALANCE[0]]).fetchone() == (0, "u%d" % BAD_BALANCE[0])
        assert conn.execute("SELECT email FROM acct WHERE id = %s",
                            [BAD_EMAIL]).fetchone() == ("fixed",)
        q = conn.execute("SELECT id, balance, failed_sqlstate, failed_error IS NOT NULL "
                         "FROM leapfrog_quarantine.acct_m1").fetchall()
        assert q == [(BAD_BALANCE[1], -5, "23514", True)]
        # The owner owns the quarantine and may clear it.
        conn.execute("DELETE FROM leapfrog_quarantine.acct_m1")


def test_batch_indexes_and_a_duplicate(cluster):
    """A worker's batch inserts many rows at a time, then their index
    entries: a unique, a partial and an expression index hold every row
    (amcheck's heapallindexed), and a duplicate key inside a batch is the
    one row that fails, with 23505, as eagerly."""
    c, db = cluster, "frbulk"
    c.create_database(db)
    with c.connect(db) as conn:
        conn.execute("CREATE EXTENSION amcheck")
        conn.execute("CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, email text)")
        conn.execute("INSERT INTO acct SELECT g, g, 'u' || g FROM generate_series(1, %s) g",
                     [ROWS])
        conn.execute("UPDATE acct SET email = 'u10' WHERE id = 20")   # the batch's duplicate
        conn.execute("SELECT leapfrog.start('bulk', $$"
                     "  CREATE TABLE acct2 (id int PRIMARY KEY, balance int NOT NULL,"
                     "                      email text UNIQUE);"
                     "  CREATE INDEX acct2_lower ON acct2 (lower(email));"
                     "  CREATE INDEX acct2_rich ON acct2 (balance) WHERE balance > 2000;"
                     "  INSERT INTO acct2 SELECT id, balance, email FROM acct;"
                     "  DROP TABLE acct;$$)")
        wait_until(lambda: _state(conn, "bulk")[0] == "failed", 60,
                   what="the migration to fail on its duplicate")
        bad = _failed(conn)
        assert list(bad) == [20] and bad[20][2] == "23505", bad
        conn.execute("SELECT leapfrog.correct_row('bulk', 'public.acct', %s, "
                     "'{\"email\": \"u20\"}')", [bad[20][1]])
        conn.execute("SELECT leapfrog.resume('bulk')")
        assert conn.execute("SELECT leapfrog.wait('bulk', 60)").fetchone()[0]
        assert conn.execute("SELECT count(*), count(DISTINCT email), sum(balance) FROM acct2"
                            ).fetchone() == (ROWS, ROWS, ROWS * (ROWS + 1) // 2)
        for idx in ("acct2_pkey", "acct2_email_key", "acct2_lower", "acct2_rich"):
            conn.execute("SELECT bt_index_check(%s::regclass, true)", [idx])
        conn.execute("SET enable_seqscan = off")
        assert conn.execute("SELECT count(*) FROM acct2 WHERE balance > 2000").fetchone()[0] \
            == ROWS - 2000
        assert conn.execute("SELECT id FROM acct2 WHERE lower(email) = 'u2999'").fetchone() \
            == (2999,)


def test_on_error_quarantine(cluster):
    c, db = cluster, "frquar"
    _setup(c, db)
    with _as(c, db, "op") as conn:
        conn.execute("SELECT leapfrog.start('acct_v2', %s, on_error => 'quarantine')", [SCRIPT])
        assert conn.execute("SELECT leapfrog.wait('acct_v2', 60)").fetchone()[0]
        state, nfailed, error = _state(conn, "acct_v2")
        assert (state, nfailed, error) == ("done", 0, None)
        bad = sorted(BAD_BALANCE + (BAD_EMAIL,))
        assert conn.execute("SELECT array_agg(id ORDER BY id), count(*) FROM acct "
                            "WHERE id = ANY(%s)", [bad]).fetchone() == (None, 0)
        assert conn.execute("SELECT count(*) FROM acct").fetchone()[0] == ROWS - 3
        rows = conn.execute("SELECT id, failed_sqlstate FROM leapfrog_quarantine.acct_m1 "
                            "ORDER BY id").fetchall()
        assert rows == [(BAD_BALANCE[0], "23514"), (BAD_BALANCE[1], "23514"),
                        (BAD_EMAIL, "23502")]


def test_api_errors(make_cluster):
    needs_real_extension()
    c, db = make_cluster(**{"leapfrog.background": "off"}), "frapi"
    _setup(c, db)
    with _as(c, db, "op") as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            conn.execute("SELECT leapfrog.start('x', %s, on_error => 'ignore')", [SCRIPT])
        conn.execute("SELECT leapfrog.start('acct_v2', %s)", [SCRIPT])
        with pytest.raises(psycopg.errors.UndefinedObject):
            conn.execute("SELECT leapfrog.resume('nope')")
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT leapfrog.quarantine_row('acct_v2', 'public.nope', '(0,1)')")
        with pytest.raises(psycopg.errors.UndefinedColumn):
            conn.execute("SELECT leapfrog.correct_row('acct_v2', 'public.acct', '(0,1)', "
                         "'{\"nope\": 1}')")
        with pytest.raises(psycopg.errors.NoDataFound):
            conn.execute("SELECT leapfrog.correct_row('acct_v2', 'public.acct', '(999,1)', "
                         "'{\"balance\": 1}')")
        with pytest.raises(psycopg.errors.WrongObjectType):
            conn.execute("SELECT leapfrog.retired_row('acct'::regclass, '(0,1)')")
        # A running migration is not resumed; the call says so.
        notices = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        conn.execute("SELECT leapfrog.resume('acct_v2')")
        assert any("running already" in n for n in notices)
        # Any row not migrated yet can be set aside, failed or not.
        q = conn.execute("SELECT leapfrog.quarantine_row('acct_v2', 'public.acct', '(0,1)')"
                         ).fetchone()[0]
        assert q == "leapfrog_quarantine.acct_m1"
        assert conn.execute("SELECT id, failed_sqlstate FROM leapfrog_quarantine.acct_m1"
                            ).fetchall() == [(1, "")]
        assert conn.execute("SELECT count(*) FROM acct WHERE id = 1").fetchone()[0] == 0
        # complete() migrates in the caller's transaction: it fails with the
        # row's error and records nothing.
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("SELECT leapfrog.complete('acct_v2')")
        assert conn.execute("SELECT count(*) FROM leapfrog.failed_rows").fetchone()[0] == 0


def _start_totals(conn, cust_column):
    """sale: 30 rows, cust = id % 3, amt = id; migration 'totals' into
    total(<cust_column>, amt), their sums per cust; sale dropped."""
    conn.execute("CREATE TABLE sale (id int PRIMARY KEY, cust int NOT NULL, amt int NOT NULL)")
    conn.execute("CREATE INDEX ON sale (cust)")
    conn.execute("INSERT INTO sale SELECT g, g % 3, g FROM generate_series(1, 30) g")
    conn.execute("""SELECT leapfrog.start('totals', $$
        CREATE TABLE total (%s, amt bigint NOT NULL);
        INSERT INTO total SELECT cust, sum(amt) FROM sale GROUP BY cust;
        DROP TABLE sale;
    $$)""" % cust_column)


def test_group_key_not_corrected(make_cluster):
    """A row of a GROUP BY mapping keeps its group: moving it to a group
    migrated already would add a second row for that group."""
    needs_real_extension()
    c = make_cluster(**{"leapfrog.background": "off"})
    c.create_database("frgroup")
    with c.connect("frgroup") as conn:
        _start_totals(conn, "cust int PRIMARY KEY")
        # group 1 migrates; row (0,3) (id 3, group 0) is still waiting
        assert conn.execute("SELECT amt FROM total WHERE cust = 1").fetchone()[0] == \
            sum(g for g in range(1, 31) if g % 3 == 1)
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            conn.execute("SELECT leapfrog.correct_row('totals', 'public.sale', '(0,3)', "
                         "'{\"cust\": 1}')")
        conn.execute("SELECT leapfrog.correct_row('totals', 'public.sale', '(0,3)', "
                     "'{\"amt\": 1003}')")
        conn.execute("SELECT leapfrog.complete('totals')")
        rows = conn.execute("SELECT cust, amt FROM total ORDER BY cust").fetchall()
        assert rows == [(0, sum(g for g in range(1, 31) if g % 3 == 0) + 1000),
                        (1, sum(g for g in range(1, 31) if g % 3 == 1)),
                        (2, sum(g for g in range(1, 31) if g % 3 == 2))]


def test_correction_during_a_claim_never_splits_a_group(make_cluster):
    """A statement that migrates a group claims its rows in ctid order,
    waiting like DELETE.  A correction of a later row of the group
    (an UPDATE of the retired row, to a new ctid) committing while the
    statement waits for that row used to leave the statement with the group
    minus that row: it computed the group from the rest, and the next round
    added the corrected row as a second group.  Now the statement fails with
    40001, and its retry computes the whole group."""
    needs_real_extension()
    c = make_cluster(**{"leapfrog.background": "off", "leapfrog.read_mode": "migrate"})
    c.create_database("frsplit")
    with c.connect("frsplit") as a, c.connect("frsplit") as b:
        # no primary key on the new table: a second row for a group would be
        # accepted, as it would be eagerly, and the test sees it
        _start_totals(a, "cust int NOT NULL")
        # group 0: ids 3, 6, ..., 30 at ctids (0,3), (0,6), ...; correct id 6
        a.execute("BEGIN")
        a.execute("SELECT leapfrog.correct_row('totals', 'public.sale', '(0,6)', "
                  "'{\"amt\": 1006}')")
        b_pid = b.execute("SELECT pg_backend_pid()").fetchone()[0]
        outcome = {}

        def read_group():
            try:
                outcome["rows"] = b.execute("SELECT amt FROM total WHERE cust = 0").fetchall()
            except psycopg.Error as e:
                outcome["error"] = e

        t = threading.Thread(target=read_group)
        t.start()
        # (polled from a connection of its own: a transaction sees one
        # snapshot of pg_stat_activity)
        wait_until(lambda: c.sql("SELECT wait_event_type FROM pg_stat_activity "
                                 "WHERE pid = %s", [b_pid], dbname="frsplit")[0][0] == "Lock",
                   30, what="the reader to wait for the corrected row")
        a.execute("COMMIT")
        t.join(60)
        assert isinstance(outcome.get("error"), psycopg.errors.SerializationFailure), outcome
        expected = sum(g for g in range(3, 31, 3)) - 6 + 1006
        assert b.execute("SELECT amt FROM total WHERE cust = 0").fetchall() == [(expected,)]
        a.execute("SELECT leapfrog.complete('totals')")
        assert a.execute("SELECT cust, count(*), sum(amt) FROM total GROUP BY cust "
                         "ORDER BY cust").fetchall() == [
            (0, 1, expected),
            (1, 1, sum(g for g in range(1, 31) if g % 3 == 1)),
            (2, 1, sum(g for g in range(1, 31) if g % 3 == 2))]


def test_quarantine_goes_only_into_the_owners_table(make_cluster):
    """Quarantine tables have predictable names, and a quarantine table's
    owner may rename it: another role could put a table of its own (with a
    trigger, running as the migration's owner) where the rows of this
    migration are set aside.  Rows go only into a table the migration's
    owner owns.  Simulated by creating the table under that name, owned by
    the other role."""
    needs_real_extension()
    c = make_cluster(**{"leapfrog.background": "off"})
    c.create_database("frq")
    with c.connect("frq") as conn:
        conn.execute("CREATE ROLE op_frq LOGIN")
        conn.execute("CREATE ROLE evil_frq LOGIN")
        conn.execute("GRANT CREATE ON SCHEMA public TO op_frq")
        conn.execute("SET ROLE op_frq")
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)")
        conn.execute("INSERT INTO t SELECT g, g FROM generate_series(1, 10) g")
        conn.execute("""SELECT leapfrog.start('tq', $$
            CREATE TABLE t2 (id int PRIMARY KEY, v int NOT NULL);
            INSERT INTO t2 SELECT id, v FROM t; DROP TABLE t; $$)""")
        conn.execute("RESET ROLE")
        mid = conn.execute("SELECT id FROM leapfrog.migration WHERE name = 'tq'").fetchone()[0]
        conn.execute("CREATE TABLE leapfrog_quarantine.t_m%d (id int, v int, failed_sqlstate text, "
                     "failed_error text, quarantined_at timestamptz)" % mid)
        conn.execute("ALTER TABLE leapfrog_quarantine.t_m%d OWNER TO evil_frq" % mid)
        conn.execute("SET ROLE op_frq")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT leapfrog.quarantine_row('tq', 'public.t', '(0,1)')")
        assert conn.execute("SELECT leapfrog.remaining('tq')").fetchone()[0] == 10
        conn.execute("RESET ROLE")
        assert conn.execute("SELECT count(*) FROM leapfrog_quarantine.t_m%d" % mid).fetchone()[0] == 0



def test_same_name_in_two_schemas_set_aside_apart(make_cluster):
    """Two inputs of one migration named alike in two schemas, with other
    columns, each with a row the new schema refuses: each row goes into a
    quarantine table of its own input (named with the input's oid), not
    into one table for both (which took the second input's row into the
    first's table, or failed on its columns)."""
    needs_real_extension()
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 0})
    c.create_database("frs")
    with c.connect("frs") as conn:
        conn.execute("CREATE SCHEMA s1")
        conn.execute("CREATE SCHEMA s2")
        conn.execute("CREATE TABLE s1.acct (id int PRIMARY KEY, balance int NOT NULL)")
        conn.execute("CREATE TABLE s2.acct (id int PRIMARY KEY, note text, balance int NOT NULL)")
        conn.execute("INSERT INTO s1.acct SELECT g, CASE WHEN g = 7 THEN -1 ELSE g END "
                     "FROM generate_series(1, 100) g")
        conn.execute("INSERT INTO s2.acct SELECT g, 'n' || g, CASE WHEN g = 9 THEN -2 ELSE g END "
                     "FROM generate_series(1, 100) g")
        oids = dict(conn.execute("SELECT relnamespace::regnamespace::text, oid FROM pg_class "
                                 "WHERE relname = 'acct'").fetchall())
        conn.execute("""SELECT leapfrog.start('two', $$
            CREATE TABLE s1.acct2 (id int PRIMARY KEY, balance int NOT NULL CHECK (balance >= 0));
            INSERT INTO s1.acct2 SELECT id, balance FROM s1.acct; DROP TABLE s1.acct;
            CREATE TABLE s2.acct2 (id int PRIMARY KEY, note text, balance int NOT NULL
                                   CHECK (balance >= 0));
            INSERT INTO s2.acct2 SELECT id, note, balance FROM s2.acct; DROP TABLE s2.acct;
            $$, on_error => 'quarantine')""")
        assert conn.execute("SELECT leapfrog.wait('two', 60)").fetchone()[0]
        mid = conn.execute("SELECT id FROM leapfrog.migration WHERE name = 'two'").fetchone()[0]
        assert conn.execute("SELECT count(*), sum(id) FROM s1.acct2").fetchone() == (99, 5050 - 7)
        assert conn.execute("SELECT count(*), sum(id) FROM s2.acct2").fetchone() == (99, 5050 - 9)
        q1 = "leapfrog_quarantine.acct_m%d_%d" % (mid, oids["s1"])
        q2 = "leapfrog_quarantine.acct_m%d_%d" % (mid, oids["s2"])
        assert conn.execute("SELECT id, balance, failed_sqlstate FROM %s" % q1).fetchall() == \
            [(7, -1, "23514")]
        assert conn.execute("SELECT id, note, balance, failed_sqlstate FROM %s" % q2).fetchall() == \
            [(9, "n9", -2, "23514")]


LIVE_SCRIPT = """
  CREATE TABLE line_total (o int PRIMARY KEY, n bigint NOT NULL,
                           amt bigint NOT NULL CHECK (amt < 1000));
  INSERT INTO line_total SELECT o, count(*), sum(amt) FROM line GROUP BY o;
"""


@pytest.mark.parametrize("on_error", ["fail", "quarantine"])
def test_group_of_a_live_table_set_aside(cluster, on_error):
    """A group of a table tracked in place that cannot be computed (its
    total breaks the new CHECK): its rows are listed as they are now; a
    correction is refused (the table is the application's, read as it was
    at start()); quarantine_row on any one row sets the whole group aside, its
    rows copied into the quarantine table and left in the table, and the
    application's writes of them go through.  Every other group equals the
    eager aggregate at start(); with on_error => 'quarantine' the worker
    does the same by itself."""
    c, db = cluster, "frlive" + on_error[0]
    c.create_database(db)
    bad = {7, 42}
    with c.connect(db) as conn:
        conn.execute("CREATE ROLE op_%s LOGIN" % db)
        conn.execute("GRANT CREATE ON SCHEMA public TO op_%s" % db)
        conn.execute("SET ROLE op_%s" % db)
        conn.execute("CREATE TABLE line (o int NOT NULL, n int NOT NULL, amt int)")
        conn.execute("INSERT INTO line SELECT o, n, CASE WHEN o = ANY(%s) THEN 400 ELSE n END "
                     "FROM generate_series(1, 500) o, generate_series(1, 3) n", [list(bad)])
        conn.execute("CREATE INDEX ON line (o)")
        conn.execute("CREATE TABLE eager AS SELECT o, count(*) AS n, sum(amt) AS amt "
                     "FROM line GROUP BY o")
        conn.execute("SELECT leapfrog.start('totals', %s, on_error => %s)", [LIVE_SCRIPT, on_error])
        assert c.sql("SELECT count(*) FROM leapfrog.input WHERE live_keys IS NOT NULL",
                     dbname=db)[0][0] == 1, "line is not tracked in place"
        if on_error == "fail":
            wait_until(lambda: _state(conn, "totals")[0] == "failed", 60,
                       what="the migration to fail on the bad groups")
            rows = conn.execute("SELECT input, ctid::text, row, sqlstate FROM leapfrog.failed_rows "
                                "ORDER BY ctid").fetchall()
            assert rows and {r[2]["o"] for r in rows} <= bad
            assert all(r[0] == "public.line" and r[3] == "23514" and r[2]["amt"] == 400
                       for r in rows)
            with pytest.raises(psycopg.errors.FeatureNotSupported):
                conn.execute("SELECT leapfrog.correct_row('totals', 'public.line', %s, "
                             "'{\"amt\": 1}')", [rows[0][1]])
            # one row of a group sets the group aside, and its other rows leave the list
            for o in sorted({r[2]["o"] for r in rows}):
                ctid = next(r[1] for r in rows if r[2]["o"] == o)
                q = conn.execute("SELECT leapfrog.quarantine_row('totals', 'public.line', %s)",
                                 [ctid]).fetchone()[0]
                assert q == "leapfrog_quarantine.line_m1"
            assert conn.execute("SELECT count(*) FROM leapfrog.failed_rows").fetchone()[0] == 0
            # the application's writes of a group set aside go through (before,
            # the trigger migrated the group first and failed as the worker did)
            conn.execute("UPDATE line SET amt = amt + 1 WHERE o = ANY(%s)", [list(bad)])
            conn.execute("SELECT leapfrog.resume('totals')")
        assert conn.execute("SELECT leapfrog.wait('totals', 60)").fetchone()[0]
        assert _state(conn, "totals")[:2] == ("done", 0)
        diff = conn.execute(
            "(SELECT * FROM line_total EXCEPT ALL SELECT * FROM eager WHERE o <> ALL(%s)) "
            "UNION ALL (SELECT * FROM eager WHERE o <> ALL(%s) EXCEPT ALL SELECT * FROM line_total)",
            [list(bad), list(bad)]).fetchall()
        assert diff == []
        assert conn.execute("SELECT o, count(*), sum(amt), min(failed_sqlstate) FROM "
                            "leapfrog_quarantine.line_m1 GROUP BY o ORDER BY o").fetchall() == \
            [(o, 3, 1200, "23514") for o in sorted(bad)]
        # the rows stay in the table, the application's
        assert conn.execute("SELECT count(*) FROM line WHERE o = ANY(%s)",
                            [list(bad)]).fetchone()[0] == 6
        assert conn.execute("SELECT count(*) FROM line_total WHERE o = ANY(%s)",
                            [list(bad)]).fetchone()[0] == 0


SHARED_SCRIPT = """
  CREATE TABLE line_total (o int PRIMARY KEY, n bigint NOT NULL,
                           amt bigint NOT NULL CHECK (amt < 1000));
  INSERT INTO line_total SELECT o, count(*), sum(amt) FROM line GROUP BY o;
  CREATE TABLE by_n (n int PRIMARY KEY, orders bigint NOT NULL, amt bigint NOT NULL);
  INSERT INTO by_n SELECT n, count(*), sum(amt) FROM line GROUP BY n;
"""


@pytest.mark.parametrize("on_error", ["fail", "quarantine"])
def test_group_of_a_shared_live_table_set_aside(cluster, on_error):
    """A table tracked in place for two GROUP BY mappings (src/live.c): a
    group of one that cannot be computed is set aside in that mapping
    only.  Its rows are also in groups of the other mapping (every order
    has a line 1, 2 and 3), which must migrate whole and equal the eager
    aggregate: setting the row's groups aside in every mapping would leave
    by_n without the groups n = 1, 2, 3, that is empty.  (Whether by_n's
    groups are still unmigrated when the worker sets the row aside depends
    on the workers' timing; regress live_shared pins that case.)"""
    c, db = cluster, "frshared" + on_error[0]
    c.create_database(db)
    bad = {7, 42}
    with c.connect(db) as conn:
        conn.execute("CREATE TABLE line (o int NOT NULL, n int NOT NULL, amt int)")
        # the bad orders' lines first: the worker's retry of its failed
        # batch, row by row, meets them before any other row of n = 1, 2, 3
        conn.execute("INSERT INTO line SELECT o, n, CASE WHEN o = ANY(%s) THEN 400 ELSE n END "
                     "FROM generate_series(1, 500) o(o), generate_series(1, 3) n(n) "
                     "ORDER BY o.o <> ALL(%s), o.o, n.n", [list(bad), list(bad)])
        conn.execute("CREATE INDEX ON line (o)")
        conn.execute("CREATE INDEX ON line (n)")
        conn.execute("CREATE TABLE eager AS SELECT o, count(*) AS n, sum(amt) AS amt "
                     "FROM line GROUP BY o")
        conn.execute("CREATE TABLE eager_n AS SELECT n, count(*) AS orders, sum(amt) AS amt "
                     "FROM line GROUP BY n")
        conn.execute("SELECT leapfrog.start('totals', %s, on_error => %s)",
                     [SHARED_SCRIPT, on_error])
        assert c.sql("SELECT count(*) FROM leapfrog.mapping WHERE done_keys IS NOT NULL",
                     dbname=db)[0][0] == 2, "line is not tracked in place for both mappings"
        if on_error == "fail":
            wait_until(lambda: _state(conn, "totals")[0] == "failed", 60,
                       what="the migration to fail on the bad groups")
            rows = conn.execute("SELECT ctid::text, row FROM leapfrog.failed_rows "
                                "ORDER BY ctid").fetchall()
            assert rows and {r[1]["o"] for r in rows} <= bad
            for o in sorted({r[1]["o"] for r in rows}):
                ctid = next(r[0] for r in rows if r[1]["o"] == o)
                conn.execute("SELECT leapfrog.quarantine_row('totals', 'public.line', %s)", [ctid])
            assert conn.execute("SELECT count(*) FROM leapfrog.failed_rows").fetchone()[0] == 0
            conn.execute("SELECT leapfrog.resume('totals')")
        assert conn.execute("SELECT leapfrog.wait('totals', 60)").fetchone()[0]
        assert _state(conn, "totals")[:2] == ("done", 0)
        diff = conn.execute(
            "(SELECT * FROM line_total EXCEPT ALL SELECT * FROM eager WHERE o <> ALL(%s)) "
            "UNION ALL (SELECT * FROM eager WHERE o <> ALL(%s) EXCEPT ALL SELECT * FROM line_total)",
            [list(bad), list(bad)]).fetchall()
        assert diff == []
        diff = conn.execute("(SELECT * FROM by_n EXCEPT ALL SELECT * FROM eager_n) UNION ALL "
                            "(SELECT * FROM eager_n EXCEPT ALL SELECT * FROM by_n)").fetchall()
        assert diff == [], "by_n lost groups with the bad orders' rows: %r" % diff
        assert conn.execute("SELECT o, count(*), sum(amt), min(failed_sqlstate) FROM "
                            "leapfrog_quarantine.line_m1 GROUP BY o ORDER BY o").fetchall() == \
            [(o, 3, 1200, "23514") for o in sorted(bad)]
