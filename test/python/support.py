"""What the Python tests share (imported as a module, not from conftest).

The clusters themselves come from python/leapfrog_cluster.py, the module the
benchmarks and the demo use too; the fixtures that make them are in
conftest.py.

Environment knobs:
  LEAPFROG_TEST_KEEP=1   keep the clusters' directories (printed at the end).
  LEAPFROG_TEST_CORES=1  start servers with pg_ctl -c (core files, see
                         /proc/sys/kernel/core_pattern).
  LEAPFROG_TEST_MOCK=1   harness self-check: no preload, and a PL/pgSQL
                         stand-in for the extension that runs scripts eagerly
                         (tests that need the real worker skip themselves).
"""

import os
import time
from pathlib import Path

import pytest

from leapfrog_cluster import Cluster, wait_until  # noqa: F401  (wait_until: for the tests)

HERE = Path(__file__).resolve().parent
MOCK = os.environ.get("LEAPFROG_TEST_MOCK") == "1"
KEEP = os.environ.get("LEAPFROG_TEST_KEEP") == "1"

# Settings of every test cluster, before the test's own.
TEST_SETTINGS = {
    "fsync": "off",
    # synchronous_commit must stay on: with it off, a crash restart loses
    # commits still in the WAL buffers, which the crash tests would rightly
    # report as lost updates.  fsync off is safe, as the OS page cache
    # survives a kill -9 of every server process.
    "full_page_writes": "off",
    "max_connections": 60,
    "shared_buffers": "64MB",
    "max_worker_processes": 16,
    "restart_after_crash": "on",
    "log_min_messages": "warning",
    "log_line_prefix": "%m [%p] %b ",
    "timezone": "UTC",
    "deadlock_timeout": "100ms",
}

RETIRED_SQL = ("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
               "WHERE n.nspname = 'leapfrog_retired' ORDER BY 1")


def install_extension(conn):
    """CREATE EXTENSION leapfrog (or the eager stand-in under LEAPFROG_TEST_MOCK)."""
    if MOCK:
        conn.execute((HERE / "mock_leapfrog.sql").read_text())
    else:
        conn.execute("CREATE EXTENSION leapfrog")


class TestCluster(Cluster):
    """A cluster with the test settings, whose databases get the extension."""

    __test__ = False        # not a test class for pytest

    def __init__(self, template, gucs, name="lf"):
        super().__init__(settings={**TEST_SETTINGS, **gucs}, preload=not MOCK,
                         template=template, name=name, keep=KEEP)
        self.init()

    def create_database(self, dbname, extension=True):
        super().create_database(dbname, setup=install_extension if extension else None)

    def set_gucs(self, **gucs):
        self.set_settings(**gucs)


def needs_real_extension():
    if MOCK:
        pytest.skip("needs the real extension (LEAPFROG_TEST_MOCK=1)")


def retired_tables_after_completion(cluster, dbname, timeout=30):
    """Relations left in leapfrog_retired, polled (bounded): per the contract,
    completion drops the retired tables at once only if nobody holds a lock on
    them, otherwise the worker retries every second."""
    left = None
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / 0.2) + 5):
        left = [r[0] for r in cluster.sql(RETIRED_SQL, dbname=dbname)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return left
