"""Fixtures of the Leapfrog Python tests: throwaway clusters.

Every test gets clusters of its own from ``make_cluster`` (or, for a module,
``module_cluster_factory``; hot standbys of a module's cluster from
``module_standby_factory``), with its own GUCs, e.g.

    c = make_cluster(**{"leapfrog.background": "off"})

Each is a copy of one initdb per session (support.TestCluster over
python/leapfrog_cluster.py): unix socket only, leapfrog preloaded.  What the
tests share otherwise is in support.py; knobs are listed there.
"""

import shutil
import tempfile
from pathlib import Path

import pytest

from leapfrog_cluster import give_away, make_template
from support import KEEP, TestCluster


@pytest.fixture(scope="session")
def pg_template():
    """One initdb per test session; clusters start from copies of it."""
    base = Path(tempfile.mkdtemp(prefix="lf-template-"))
    base.chmod(0o755)
    give_away(base)
    data = base / "data"
    make_template(data)
    yield data
    if not KEEP:
        shutil.rmtree(base, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _report_clusters(request, clusters):
    failed = any(getattr(request.node, "rep_" + w, None) is not None
                 and getattr(request.node, "rep_" + w).failed
                 for w in ("setup", "call"))
    for c in clusters:
        if failed:
            print("\n--- server log tail of %s ---\n%s" % (c.base, c.log_tail(60)))
        if KEEP:
            print("kept cluster in %s" % c.base)
        c.destroy()


@pytest.fixture
def make_cluster(pg_template, request):
    """Factory: make_cluster(**gucs) -> started cluster, destroyed after the test."""
    clusters = []

    def make(start=True, **gucs):
        c = TestCluster(pg_template, gucs)
        clusters.append(c)
        if start:
            c.start()
        return c

    yield make
    _report_clusters(request, clusters)


@pytest.fixture(scope="module")
def module_cluster_factory(pg_template, request):
    clusters = []

    def make(**gucs):
        c = TestCluster(pg_template, gucs)
        clusters.append(c)
        c.start()
        return c

    yield make
    for c in clusters:
        c.destroy()


@pytest.fixture(scope="module")
def module_standby_factory(module_cluster_factory):
    """Factory: make(primary, **gucs) -> a started hot standby of primary
    (Cluster.standby: pg_basebackup -R, leapfrog preloaded as on the
    primary, the primary's GUCs and the given ones); destroyed before the
    module's clusters."""
    standbys = []

    def make(primary, **gucs):
        s = primary.standby(settings=gucs)
        standbys.append(s)
        s.start()
        return s

    yield make
    for s in standbys:
        s.destroy()


def pytest_terminal_summary(terminalreporter):
    """The differential tests' tally: how many cases ran, and where the lazy
    run failed with 40001 while the eager one did not (permitted under
    REPEATABLE READ and SERIALIZABLE, and counted so that a soak reports it)."""
    import sys
    diff = sys.modules.get("test_differential")
    if diff is None or not diff.CASES_RUN:
        return
    runs = ", ".join("%s %d" % kv for kv in sorted(diff.CASES_RUN.items()))
    terminalreporter.write_line(
        "differential cases completed: %s; lazy-only 40001: %d statements in %d runs"
        % (runs, len(diff.SERIALIZATION_FAILURES),
           len({run for _, _, _, run in diff.SERIALIZATION_FAILURES})))
    if diff.CHAIN_ROWS_LEFT:
        # later starts of a chain where the first migration still held rows
        # (asserted without the worker; with it, timing decides)
        tally = {}
        for variant, _, _, left in diff.CHAIN_ROWS_LEFT:
            first = left.get(min(left)) if left else 0
            n, k = tally.get(variant, (0, 0))
            tally[variant] = (n + 1, k + (1 if first else 0))
        terminalreporter.write_line(
            "chained starts with rows left in the first migration: %s"
            % ", ".join("%s %d of %d" % (v, k, n) for v, (n, k) in sorted(tally.items())))
