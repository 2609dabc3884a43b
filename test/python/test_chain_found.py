"""Chained migrations the differential generator found wrong, minimized.

test_differential.py's chains (test_differential_chain*, gen_chain_case)
turned these up; each is pinned here in test_chain.py's form (its Chain and
runner: eager scripts against leapfrog.start(), every statement and read
compared step by step, then the final tables), and fails on the build it
was found on:

- null_group_*: a GROUP BY over a table an earlier migration still fills,
  whose group key is NULL in some rows: the statement that needs the NULL
  group kills the server (SIGSEGV in pull_upstream, datumCopy of the NULL
  key).  About one chain seed in ten ran into it (seed 30012 first).
- test_group_chain_reads_compute: a plain read of that GROUP BY's table
  does not compute where reads must: on a hot standby it fails with 25006,
  in a READ ONLY transaction it migrates rows.  (A chained join computes.)
- test_group_chain_pulls_its_group: a statement on one group moved every
  row the earlier migration still held, not that group's (a precision
  limit, not a wrong answer).

All three fixed in 861cd8c.
"""

import pytest

import test_chain
from support import needs_real_extension
from test_chain import Chain, _outcome, busy, quiet  # noqa: F401 (fixtures)

NULL_KEYS = [
    "CREATE TABLE t (id int PRIMARY KEY, k text, v int)",
    "CREATE INDEX t_k ON t (k)",
    "INSERT INTO t SELECT g, CASE WHEN g % 4 = 0 THEN NULL ELSE 'k' || (g % 3) END, g "
    "FROM generate_series(1, 40) g",
]

FOUND = [
    Chain(
        # seed 30012 (and 30005, 30021, 30024, 30029, ...), minimized
        "null_group_over_retype",
        NULL_KEYS,
        [
            ("ALTER TABLE t ALTER COLUMN v TYPE bigint", [
                "UPDATE t SET v = v + 1 WHERE id IN (4, 5)",
            ]),
            ("""CREATE TABLE per_k (k text, n bigint, s numeric);
                CREATE UNIQUE INDEX ON per_k (k);
                INSERT INTO per_k SELECT k, count(*), sum(v) FROM t GROUP BY k;
                DROP TABLE t""", [
                "SELECT * FROM per_k WHERE k = 'k1'",
                "SELECT * FROM per_k WHERE k IS NULL",
                "UPDATE per_k SET n = n + 1 WHERE k IS NULL",
            ]),
        ],
        ["SELECT * FROM per_k ORDER BY k"],
    ),
    Chain(
        # the same through a live input (seeds 30021, 30024: a DELETE and a
        # read of the input the GROUP BY keeps)
        "null_group_over_split_live",
        NULL_KEYS,
        [
            ("""CREATE TABLE a (id int PRIMARY KEY, k text);
                CREATE TABLE b (id int PRIMARY KEY, v bigint);
                CREATE INDEX a_k ON a (k);
                INSERT INTO a SELECT id, k FROM t;
                INSERT INTO b SELECT id, v FROM t;
                DROP TABLE t""", [
                "UPDATE a SET k = NULL WHERE id = 5",
            ]),
            ("""CREATE TABLE per_k (k text, n bigint);
                CREATE UNIQUE INDEX ON per_k (k);
                INSERT INTO per_k SELECT k, count(*) FROM a GROUP BY k""", [
                "SELECT * FROM a WHERE id BETWEEN 1 AND 9 ORDER BY id",
                "DELETE FROM a WHERE id = 8",
                "SELECT * FROM per_k WHERE k IS NULL",
            ]),
        ],
        ["SELECT * FROM per_k ORDER BY k", "SELECT count(*), count(k) FROM a"],
    ),
]


@pytest.mark.parametrize("read_mode", ["migrate", "compute"])
@pytest.mark.parametrize("chain", FOUND, ids=[c.name for c in FOUND])
def test_found_equals_eager(quiet, chain, read_mode):
    quiet.wait_ready(60)        # (after a crash of an earlier case)
    test_chain.test_chain_equals_eager(quiet, chain, read_mode)


@pytest.mark.parametrize("chain", FOUND, ids=[c.name for c in FOUND])
def test_found_in_background(busy, chain):
    busy.wait_ready(60)
    test_chain.test_chain_in_background(busy, chain)


GROUP_CHAIN = [
    "CREATE TABLE t (id int PRIMARY KEY, k text NOT NULL, v int)",
    "CREATE INDEX t_k ON t (k)",
    "INSERT INTO t SELECT g, 'k' || (g % 50), g FROM generate_series(1, 20000) g",
    "SELECT leapfrog.start('retype', 'ALTER TABLE t ALTER COLUMN v TYPE bigint')",
    """SELECT leapfrog.start('per_k', $$
         CREATE TABLE per_k (k text PRIMARY KEY, n bigint, s numeric);
         INSERT INTO per_k SELECT k, count(*), sum(v) FROM t GROUP BY k;
         DROP TABLE t
       $$)""",
]
GROUP_EAGER = [
    "CREATE TABLE per_k AS SELECT 'k' || (g % 50) AS k, count(*) AS n, sum(g::bigint) AS s "
    "FROM generate_series(1, 20000) g GROUP BY 1",
]
GROUP_READS = ["SELECT * FROM per_k WHERE k = 'k7'", "SELECT count(*), sum(n), sum(s) FROM per_k",
               "SELECT * FROM per_k WHERE n > 0 ORDER BY k LIMIT 3"]


def _left(conn):
    return conn.execute("SELECT leapfrog.remaining('retype'), leapfrog.remaining('per_k')"
                        ).fetchone()


def test_group_chain_reads_compute(module_cluster_factory, module_standby_factory):
    """Reads of a GROUP BY over a table still being filled compute (README,
    "Chained migrations": reads compute through the chain): on a hot
    standby they give the eager answers; in a READ ONLY transaction they
    move nothing."""
    needs_real_extension()
    primary = module_cluster_factory(**{"leapfrog.background": "off"})
    standby = module_standby_factory(primary, hot_standby_feedback="on")
    primary.create_database("grp_e")
    primary.create_database("grp")
    with primary.connect("grp_e") as eager, primary.connect("grp") as lazy:
        for st in GROUP_EAGER:
            eager.execute(st)
        for st in GROUP_CHAIN:
            lazy.execute(st)
        want = [_outcome(eager, q) for q in GROUP_READS]
        before = _left(lazy)
        with lazy.transaction():
            lazy.execute("SET TRANSACTION READ ONLY")
            got = [_outcome(lazy, q) for q in GROUP_READS]
        assert got == want
        assert _left(lazy) == before, "a READ ONLY read moved rows: %r, then %r" % (
            before, _left(lazy))
    standby.wait_replay(primary)
    with standby.connect("grp") as s:
        assert [_outcome(s, q) for q in GROUP_READS] == want


def test_group_chain_pulls_its_group(quiet):
    """A statement on one group (400 of 20000 input rows) moves that group's
    rows through the chain, not every row the earlier migration holds."""
    quiet.create_database("grp_pull")
    with quiet.connect("grp_pull") as lazy:
        for st in GROUP_CHAIN:
            lazy.execute(st)
        assert _left(lazy) == (20000, 0)
        lazy.execute("UPDATE per_k SET n = n + 1 WHERE k = 'k8'")
        retype, per_k = _left(lazy)
        assert retype >= 20000 - 2 * 400, "one group moved %d rows of 'retype'" % (
            20000 - retype)
        lazy.execute("SELECT leapfrog.complete('per_k')")
        assert lazy.execute("SELECT count(*), sum(n), max(n) FROM per_k").fetchone() == \
            (50, 20001, 401)
