"""The launcher keeps track of the workers it starts.

A worker that dies before it clears its slot in shared memory (here: a FATAL
while connecting, because its database does not allow connections) used to
leave the slot marked "being launched" until the server restarted: its
database never got a worker again, and its migrations never completed in the
background.  The launcher now notices the exit through the worker's handle,
clears the slot and launches the worker again once it can connect.  A
dropped database's slot is given up: no worker is launched for it again.

A worker that exits on an error (here: pg_terminate_backend) while a
migration runs is launched again; it used to clear its slot as if it had
nothing left to do, and the migration got no worker until the next start().

A worker forked just before a configuration reload can lose the reload's
SIGHUP (PostgreSQL ignores SIGHUP while a background worker starts up).
With leapfrog.background = off at its fork it never migrated anything
(isolation spec rr_worker failed one run in about 36).  Workers also re-read
the configuration when the launcher has reloaded it; the test simulates the
lost signal by sending SIGHUP to the launcher alone.

While a transaction holds the last rows (it migrated them, and has not
committed), a pass of the workers finds nothing to claim and cannot
complete: they used to start the next pass at once, about 50,000 batch
transactions a second, for as long as the holder lasted (a prepared
transaction: hours).  A pass that claimed nothing now waits for the nap.

With leapfrog.background = off no worker stays: idle, they held slots of
max_worker_processes.  The launcher launches them again when a reload turns
it on.
"""

import os
import re
import signal
import time

from support import RETIRED_SQL, needs_real_extension, wait_until

SCRIPT = ("CREATE TABLE {new} (id int PRIMARY KEY, v int NOT NULL); "
          "INSERT INTO {new} SELECT id, v FROM {old}; DROP TABLE {old};")

WORKERS = ("SELECT count(*) FROM pg_stat_activity "
           "WHERE backend_type = 'leapfrog worker' AND datname = %s")


def _start(conn, old, new, rows=2000):
    conn.execute("CREATE TABLE %s (id int PRIMARY KEY, v int NOT NULL)" % old)
    conn.execute("INSERT INTO %s SELECT g, g FROM generate_series(1, %%s) g" % old, [rows])
    conn.execute("SELECT leapfrog.start(%s, %s)", [new, SCRIPT.format(new=new, old=old)])


def _assert_completed(conn, name, rows, why):
    """The migration completes in 60 s, with every row of the input exactly once."""
    assert conn.execute("SELECT leapfrog.wait(%s, 60)", [name]).fetchone()[0], why
    n, d, bad = conn.execute(
        "SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE v <> id) FROM %s" % name
    ).fetchone()
    assert (n, d, bad) == (rows, rows, 0)


def _failed_connections(c, dbname):
    return c.log_text().count('database "%s" is not currently accepting connections' % dbname)


def test_worker_that_fails_to_connect_is_launched_again(make_cluster):
    needs_real_extension()
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 0,
                        "log_min_messages": "log"})
    c.create_database("app")
    with c.connect("app") as conn:
        # A first migration, completed: its workers exit, nothing is running.
        _start(conn, "a", "a_v2")
        assert conn.execute("SELECT leapfrog.wait('a_v2', 60)").fetchone()[0]
        wait_until(lambda: conn.execute(WORKERS, ["app"]).fetchone()[0] == 0, 30,
                   what="the workers of app to exit")
        # New connections to app are refused from now on (this one stays).
        c.sql("ALTER DATABASE app ALLOW_CONNECTIONS false")
        _start(conn, "b", "b_v2")
        # The workers started for b_v2 cannot connect...
        wait_until(lambda: _failed_connections(c, "app") >= 1, 30,
                   what="a worker failing to connect")
        assert conn.execute("SELECT state FROM leapfrog.migrations WHERE name = 'b_v2'"
                            ).fetchone()[0] == "running"
        # ... until connections are allowed again: then b_v2 completes in
        # the background, by a worker launched after the failures.
        c.sql("ALTER DATABASE app ALLOW_CONNECTIONS true")
        _assert_completed(conn, "b_v2", 2000, "no worker was launched again after the failed ones")


def test_dropped_database_gets_no_worker(make_cluster):
    needs_real_extension()
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 0,
                        "log_min_messages": "log"})
    c.create_database("gone")
    with c.connect("gone") as conn:
        c.sql("ALTER DATABASE gone ALLOW_CONNECTIONS false")
        _start(conn, "a", "a_v2")
        wait_until(lambda: _failed_connections(c, "gone") >= 1, 30,
                   what="a worker failing to connect")
    c.drop_database("gone")
    # Once the launcher has seen the database gone, it launches nothing more
    # for it: no worker fails to connect to it any more.
    time.sleep(3)
    before = c.log_text().count("leapfrog worker")
    time.sleep(4)
    after = c.log_text().count("leapfrog worker")
    assert after == before, "workers are still launched for a dropped database"
    # The launcher still serves the other databases.
    c.create_database("app")
    with c.connect("app") as conn:
        _start(conn, "a", "a_v2")
        assert conn.execute("SELECT leapfrog.wait('a_v2', 60)").fetchone()[0]


def _worker_pids(conn, dbname):
    return {r[0] for r in conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'leapfrog worker' "
        "AND datname = %s", [dbname])}


def _remaining(conn, name):
    return conn.execute("SELECT leapfrog.remaining(%s)", [name]).fetchone()[0]


# Slow batches, so that the migration is still running when its workers die.
SLOW_WORKERS = {"leapfrog.background": "on", "leapfrog.background_delay": 0,
                "leapfrog.batch_size": 100, "leapfrog.background_naptime": 300}


def _terminate_workers(conn, what):
    """Terminate the database's workers; wait for one launched after them."""
    killed = _worker_pids(conn, "app")
    assert killed, "no worker to terminate"
    for pid in killed:
        conn.execute("SELECT pg_terminate_backend(%s)", [pid])
    wait_until(lambda: _worker_pids(conn, "app") - killed, 30, what=what)


def _finish_quickly(c, conn, why):
    """Unpace the workers; the 20000-row migration then completes whole."""
    c.set_gucs(**{"leapfrog.background_naptime": 0})
    c.sql("SELECT pg_reload_conf()")
    _assert_completed(conn, "a_v2", 20000, why)


def test_terminated_worker_is_launched_again(make_cluster):
    needs_real_extension()
    c = make_cluster(**SLOW_WORKERS)
    c.create_database("app")
    with c.connect("app") as conn:
        _start(conn, "a", "a_v2", rows=20000)
        wait_until(lambda: _remaining(conn, "a_v2") < 20000, 30,
                   what="the workers to begin")
        _terminate_workers(conn, "a worker launched after the terminated ones")
        # The new workers migrate: what is left goes down.
        left = _remaining(conn, "a_v2")
        wait_until(lambda: _remaining(conn, "a_v2") < left, 30,
                   what="the new workers to migrate")
        _finish_quickly(c, conn, "the migration did not complete after its workers were terminated")


def _launcher_sighup(conn):
    """A reload that reaches the launcher only, as if the workers had lost
    their SIGHUP (ALTER SYSTEM has written the setting)."""
    os.kill(_launcher_pid(conn), signal.SIGHUP)


EXIT_OFF = "exits: leapfrog.background is off"


def test_no_worker_stays_while_background_is_off(make_cluster):
    """A worker forked with leapfrog.background = off exits: idle, it held a
    slot of max_worker_processes, which parallel query draws from.  The
    reload that turns it on launches the workers again."""
    needs_real_extension()
    c = make_cluster(**{"leapfrog.background": "off", "leapfrog.background_delay": 0,
                        "log_min_messages": "debug1"})
    c.create_database("app")
    with c.connect("app") as conn:
        _start(conn, "a", "a_v2")
        # start()'s commit asks for workers: they start, and leave.
        wait_until(lambda: EXIT_OFF in c.log_text(), 30, what="a worker to exit")
        wait_until(lambda: not _worker_pids(conn, "app"), 30, what="no worker left")
        conn.execute("ALTER SYSTEM SET leapfrog.background = on")
        # Not reloaded: nothing migrates, and no worker comes.
        time.sleep(2)
        assert _remaining(conn, "a_v2") == 2000, "a setting was applied before any reload"
        assert not _worker_pids(conn, "app")
        conn.execute("SELECT pg_reload_conf()")
        _assert_completed(conn, "a_v2", 2000,
                          "no worker migrated after a reload turned leapfrog.background on")


def test_parked_database_dropped_gets_no_worker(make_cluster):
    """A database whose workers left their migration while
    leapfrog.background was off (their slot parked), dropped before the
    reload that turns it on: the launcher frees the slot instead of
    launching workers that cannot connect ("database ... does not exist")."""
    needs_real_extension()
    c = make_cluster(**{"leapfrog.background": "off", "leapfrog.background_delay": 0,
                        "log_min_messages": "debug1"})
    c.create_database("gone")
    with c.connect("gone") as conn:
        _start(conn, "a", "a_v2")
        wait_until(lambda: EXIT_OFF in c.log_text(), 30, what="a worker to exit")
        wait_until(lambda: not _worker_pids(conn, "gone"), 30, what="no worker left")
    c.drop_database("gone")
    c.sql("ALTER SYSTEM SET leapfrog.background = on")
    c.sql("SELECT pg_reload_conf()")
    time.sleep(3)
    assert not re.search(r"FATAL:  database \d+ does not exist", c.log_text()), \
        "a worker was launched for a dropped database"
    # The launcher still serves the other databases.
    c.create_database("app")
    with c.connect("app") as conn:
        _start(conn, "a", "a_v2")
        assert conn.execute("SELECT leapfrog.wait('a_v2', 60)").fetchone()[0]


def test_retired_table_left_by_complete_is_dropped_while_background_is_off(make_cluster):
    """complete() drops the retired tables only if nobody holds a lock on
    them; a worker retries the rest.  With no worker staying while
    leapfrog.background is off, complete() asks for one at commit, which
    drops them once the lock is gone and exits."""
    needs_real_extension()
    c = make_cluster(**{"leapfrog.background": "off", "log_min_messages": "debug1"})
    c.create_database("app")
    with c.connect("app") as conn, c.connect("app") as reader:
        _start(conn, "a", "a_v2")
        wait_until(lambda: not _worker_pids(conn, "app"), 30, what="no worker left")
        retired = [r[0] for r in conn.execute(RETIRED_SQL)]
        table = conn.execute("SELECT relname FROM pg_class WHERE relkind = 'r' AND "
                             "relnamespace = 'leapfrog_retired'::regnamespace").fetchall()
        assert len(table) == 1, table
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM leapfrog_retired.%s" % table[0][0])
        conn.execute("SELECT leapfrog.complete('a_v2')")
        _assert_completed(conn, "a_v2", 2000, "complete() did not complete")
        time.sleep(1.5)
        assert [r[0] for r in conn.execute(RETIRED_SQL)] == retired, \
            "a retired table was dropped while a transaction held a lock on it"
        reader.execute("COMMIT")
        wait_until(lambda: not list(conn.execute(RETIRED_SQL)), 30,
                   what="a worker to drop the retired table")
        wait_until(lambda: not _worker_pids(conn, "app"), 30, what="the worker to exit")


def test_worker_that_missed_a_reload_reads_it_through_the_launcher(make_cluster):
    """Running workers whose SIGHUP was lost read the launcher's reload:
    turned off, they exit; turned on again, the launcher launches them."""
    needs_real_extension()
    c = make_cluster(**SLOW_WORKERS, **{"log_min_messages": "debug1"})
    c.create_database("app")
    with c.connect("app") as conn:
        _start(conn, "a", "a_v2", rows=20000)
        wait_until(lambda: _remaining(conn, "a_v2") < 20000, 30, what="the workers to begin")
        conn.execute("ALTER SYSTEM SET leapfrog.background = off")
        _launcher_sighup(conn)
        wait_until(lambda: not _worker_pids(conn, "app"), 30,
                   what="the workers to exit after the launcher's reload")
        assert EXIT_OFF in c.log_text()
        left = _remaining(conn, "a_v2")
        assert left > 0, "completed before the reload: nothing to test"
        time.sleep(1)
        assert _remaining(conn, "a_v2") == left, "rows migrated with leapfrog.background off"
        conn.execute("ALTER SYSTEM SET leapfrog.background = on")
        _launcher_sighup(conn)
        wait_until(lambda: _remaining(conn, "a_v2") < left, 30,
                   what="the workers the launcher launched again to migrate")
        _finish_quickly(c, conn, "the migration did not complete after the workers came back")


def _launcher_pid(conn):
    row = conn.execute("SELECT pid FROM pg_stat_activity "
                       "WHERE backend_type = 'leapfrog launcher'").fetchone()
    return row[0] if row else None


def test_workers_of_a_restarted_launcher_are_launched_again(make_cluster):
    """The launcher is restarted after an error (here: pg_terminate_backend),
    and its record of the workers it started dies with it.  The workers it
    left keep running; one that then exits on an error leaves its pid for
    the launcher (worker_exit).  The new launcher used to have no handle for
    it, never cleared the slot, and its database never got that worker
    again: the migration stopped."""
    needs_real_extension()
    c = make_cluster(**SLOW_WORKERS)
    c.create_database("app")
    with c.connect("app") as conn:
        _start(conn, "a", "a_v2", rows=20000)
        wait_until(lambda: _remaining(conn, "a_v2") < 20000, 30, what="the workers to begin")
        old_launcher = _launcher_pid(conn)
        conn.execute("SELECT pg_terminate_backend(%s)", [old_launcher])
        wait_until(lambda: _launcher_pid(conn) not in (None, old_launcher), 30,
                   what="the launcher to be restarted")
        _terminate_workers(conn, "a worker launched by the new launcher")
        _finish_quickly(c, conn, "the migration did not complete after the launcher restarted")


def test_finished_input_row_naming_a_user_table_never_drops_it(make_cluster):
    """A finished migration's input row outlives its retired table; after the
    OIDs wrap around its OID may name a user's table.  The workers drop the
    retired tables that completions left behind, by those rows: they must
    drop only tables still in leapfrog_retired.  Simulated by pointing a
    finished migration's row at a user table."""
    needs_real_extension()
    c = make_cluster(**{"leapfrog.background": "on", "leapfrog.background_delay": 0})
    c.create_database("app")
    with c.connect("app") as conn:
        _start(conn, "a", "a_v2")
        _assert_completed(conn, "a_v2", 2000, "the first migration did not complete")
        conn.execute("CREATE TABLE precious (id int PRIMARY KEY)")
        conn.execute("INSERT INTO precious SELECT generate_series(1, 10)")
        conn.execute("INSERT INTO leapfrog.input (migration_id, relid, orig_name) "
                     "SELECT id, 'public.precious'::regclass, 'public.gone' "
                     "FROM leapfrog.migration WHERE name = 'a_v2'")
        # A second migration's workers look for leftovers, and again before
        # they exit once it is done.
        _start(conn, "b", "b_v2")
        _assert_completed(conn, "b_v2", 2000, "the second migration did not complete")
        wait_until(lambda: not _worker_pids(conn, "app"), 60, what="the workers to exit")
        assert conn.execute("SELECT count(*) FROM precious").fetchone()[0] == 10
        # the retired tables of both migrations are gone
        assert conn.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n "
                            "ON n.oid = c.relnamespace WHERE n.nspname = 'leapfrog_retired' "
                            "AND c.relkind = 'r'").fetchone()[0] == 0


def test_workers_do_not_spin_while_a_transaction_holds_the_last_rows(make_cluster):
    needs_real_extension()
    # The workers come only once row 1 is held: with them on from start(),
    # they once migrated all 2000 rows (in 94 ms) before the holder's UPDATE.
    c = make_cluster(**{"leapfrog.background": "off", "leapfrog.background_delay": 0,
                        "leapfrog.read_mode": "migrate", "log_min_messages": "debug1"})
    c.create_database("held")
    commits = "SELECT xact_commit FROM pg_stat_database WHERE datname = 'held'"
    with c.connect("held") as conn, c.connect("held") as holder:
        _start(conn, "h", "h_v2")
        holder.autocommit = False
        holder.execute("UPDATE h_v2 SET v = v WHERE id = 1")    # migrates row 1, holds it
        wait_until(lambda: EXIT_OFF in c.log_text(), 30, what="a worker to exit")
        wait_until(lambda: not _worker_pids(conn, "held"), 30, what="no worker left")
        conn.execute("ALTER SYSTEM SET leapfrog.background = on")
        conn.execute("SELECT pg_reload_conf()")
        wait_until(lambda: conn.execute("SELECT leapfrog.remaining('h_v2')").fetchone()[0] == 1,
                   60, what="the workers to migrate every row but the held one")
        conn.execute("SELECT pg_stat_clear_snapshot()")
        before = conn.execute(commits).fetchone()[0]
        time.sleep(3)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        during = conn.execute(commits).fetchone()[0] - before
        # a few passes a second (the nap is 1 s), against about 150,000
        assert during < 1000, "%d transactions in 3 s while the last row was held" % during
        holder.commit()
        _assert_completed(conn, "h_v2", 2000, "the holder committed")
