"""Differential tests: leapfrog.start against the eager run of the same script.

For each seed, a seeded generator makes a source table (several column types,
NULLs), a single-table migration script (projection, computed columns,
renames, type changes, filters, splits, CTAS, same-name replacement) and a
workload on the new schema.  About an eighth of the seeds each (unit_kind)
are GROUP BY cases (several aggregates over one or two group columns with
NULL keys, WHERE and HAVING) and two-table join cases (inner, left, right or
comma joins on one or two key columns, fan-out on both sides, NULL keys,
keys of one side only), whose workloads address the new table by its unit
key, by a column of either input and by aggregate values (gen_unit_workload).
Some cases keep inputs live (_with_live: about 30% of the GROUP BY and join
cases, 15% of the row mappings that drop their source and do not rename,
alter or replace it): the script leaves out their DROP TABLE, and the
workload also reads and writes them (values, group and join keys, deletes,
inserts into existing and new groups); their final contents are compared too.
Some GROUP BY cases get a second GROUP BY or a row mapping of their input,
and some join cases a GROUP BY mapping of their input a (_with_shared_join),
so that the inputs are tracked by keys (test_differential_tracked); some
join cases that keep inputs live get NOT NULL key columns in them
(_with_join_in_place), so that they are tracked in place, not replaced.
Chains (test_differential_chain*, gen_chain_case): a second script, sometimes a
third, over the tables the first migration is still filling (renames, type
changes, added columns, indexes, splits and filters, a GROUP BY, the join of
two halves back into one), each started after the previous one's workload.
Database A runs the script eagerly, in one transaction; database B hands it
to leapfrog.start with the background worker off, so the workload's own
statements migrate the rows (its plain reads migrate them or compute them,
leapfrog.read_mode, half the seeds each: read_mode(); a third of the seeds
run the lazy side's plans in parallel workers: in_workers()).  Every statement's
result (rows, row count or SQLSTATE) must be the same in both, and so must the
final tables after leapfrog.complete().

Replay one seed:      LEAPFROG_DIFF_SEEDS=17 pytest test/python/test_differential.py
Chains:               LEAPFROG_DIFF_CHAIN_COUNT=200 pytest ... -k chain
More seeds:           LEAPFROG_DIFF_COUNT=500 LEAPFROG_DIFF_BASE=1000 pytest ...
Soak (make soak):     LEAPFROG_DIFF_BACKGROUND_COUNT=2000 LEAPFROG_DIFF_SNAPSHOT_COUNT=1000
                      LEAPFROG_DIFF_REPEAT=3 pytest ... -k "background or snapshots"
"""

import collections
import copy
import functools
import datetime as dt
import itertools
import os
import random
import re
import time
from decimal import Decimal

import psycopg
import pytest
from psycopg import sql

from support import (MOCK, RETIRED_SQL, assert_same_tables, needs_real_extension,
                     user_tables_state)

UTC = dt.timezone.utc


def _seeds():
    if os.environ.get("LEAPFROG_DIFF_SEEDS"):
        return [int(s) for s in os.environ["LEAPFROG_DIFF_SEEDS"].split(",") if s.strip()]
    base = int(os.environ.get("LEAPFROG_DIFF_BASE", "0"))
    count = int(os.environ.get("LEAPFROG_DIFF_COUNT", "40"))
    return list(range(base, base + count))


def _variant_seeds(offset, env, default_share):
    """Seeds of a variant (snapshots: 10000 on, background: 20000 on): the
    first default_share of _seeds(), or LEAPFROG_DIFF_<env> of them."""
    if os.environ.get("LEAPFROG_DIFF_SEEDS"):
        return _seeds()
    base = int(os.environ.get("LEAPFROG_DIFF_BASE", "0"))
    count = os.environ.get("LEAPFROG_DIFF_" + env)
    count = int(count) if count else max(1, int(len(_seeds()) * default_share))
    return [offset + base + k for k in range(count)]


def _repeated(seeds):
    """Each seed LEAPFROG_DIFF_REPEAT times (a soak replays timing-dependent
    cases: the background worker's progress differs from run to run)."""
    n = int(os.environ.get("LEAPFROG_DIFF_REPEAT", "1"))
    if n <= 1:
        return seeds
    return [pytest.param(s, id="%d-run%d" % (s, r)) for s in seeds for r in range(n)]


# ---------------------------------------------------------------------------
# Types: declared SQL type, value generator for data and workload parameters.

WORDS = ["alpha", "beta", "gamma", "delta", "apple", "mango", "zeta", "kilo",
         "omega", "", "b", "Mixed Case", "ünï", "x y", "m", "aa"]


def gen_value(rng, t):
    if t == "int":
        return rng.randint(-1000, 1000)
    if t == "bigint":
        return rng.randint(-10 ** 12, 10 ** 12)
    if t in ("numeric", "numeric(12,2)", "numeric(16,1)"):
        return Decimal(rng.randint(-1000000, 1000000)) / 100
    if t in ("text", "varchar(64)", "varchar(24)"):
        w = rng.choice(WORDS)
        return w if rng.random() < 0.5 else w + str(rng.randint(0, 99))
    if t == "bool":
        return rng.random() < 0.5
    if t == "date":
        return dt.date(2020, 1, 1) + dt.timedelta(days=rng.randint(0, 2000))
    if t == "timestamp":
        return dt.datetime(2020, 1, 1) + dt.timedelta(seconds=rng.randint(0, 2000 * 86400))
    if t == "timestamptz":
        return dt.datetime(2020, 1, 1, tzinfo=UTC) + dt.timedelta(
            seconds=rng.randint(0, 2000 * 86400))
    raise AssertionError(t)


SOURCE_TYPES = ["int", "bigint", "numeric(12,2)", "text", "varchar(24)", "bool",
                "date", "timestamptz"]


def _scale_free(c, d):
    """c as min, max or DISTINCT may read it: a numeric column without a
    declared scale holds equal values of different scales (0 and 0.0), and
    which one min() returns depends on the order of the rows (README)."""
    return "trim_scale(%s)" % c if d == "numeric" else c


def base_type(t):
    return {"numeric(12,2)": "numeric", "numeric(16,1)": "numeric",
            "varchar(24)": "varchar", "varchar(64)": "varchar"}.get(t, t)


# Immutable, error-free expressions over one source column {c} (and id), with
# their result type.  Every one is checked by test_expression_catalogue.
EXPRS = {
    "int": [("{c}", "int"), ("{c} + 1", "int"), ("{c} * 2", "int"), ("-{c}", "int"),
            ("abs({c})", "int"), ("{c} % 7", "int"), ("coalesce({c}, 0)", "int"),
            ("{c}::bigint * 3", "bigint"), ("{c}::numeric / 4", "numeric"),
            ("({c} > 0)", "bool"), ("{c}::text", "text"), ("greatest({c}, 0)", "int"),
            ("CASE WHEN {c} IS NULL THEN -1 ELSE {c} END", "int"), ("{c} + id", "int")],
    "bigint": [("{c}", "bigint"), ("{c} / 3", "bigint"), ("{c} + id", "bigint"),
               ("{c}::numeric(20,0)", "numeric"), ("{c}::text", "text"),
               ("coalesce({c}, -1)", "bigint")],
    "numeric": [("{c}", "numeric"), ("round({c}, 1)", "numeric"), ("{c} * 2", "numeric"),
                ("{c}::int", "int"), ("{c} + 0.5", "numeric"), ("coalesce({c}, 0)", "numeric"),
                ("{c}::text", "text"), ("trunc({c})", "numeric")],
    "text": [("{c}", "text"), ("upper({c})", "text"), ("length({c})", "int"),
             ("{c} || '!'", "text"), ("substr({c}, 1, 3)", "text"),
             ("coalesce({c}, '')", "text"), ("{c} || id::text", "text"),
             ("left({c}, 5)", "text"), ("({c} LIKE 'a%')", "bool"), ("md5({c})", "text"),
             ("reverse({c})", "text")],
    "varchar": [("{c}", "varchar(24)"), ("{c}::text", "text"), ("lower({c})", "text"),
                ("length({c})", "int"), ("{c} || 'v'", "text")],
    "bool": [("{c}", "bool"), ("NOT {c}", "bool"), ("coalesce({c}, false)", "bool"),
             ("CASE WHEN {c} THEN 1 ELSE 0 END", "int"), ("{c}::int", "int"),
             ("{c}::text", "text")],
    "date": [("{c}", "date"), ("{c} + 30", "date"), ("{c} - date '2020-01-01'", "int"),
             ("extract(year from {c})", "numeric"), ("{c}::timestamp", "timestamp")],
    "timestamptz": [("{c}", "timestamptz"), ("{c} AT TIME ZONE 'UTC'", "timestamp"),
                    ("({c} AT TIME ZONE 'UTC')::date", "date"),
                    ("({c} > '2022-01-01 00:00:00+00')", "bool")],
}

# Declared target types an expression's result may be changed to (assignment
# casts that are immutable and cannot fail on the generated data).
TYPE_CHANGES = {
    "int": ["bigint", "numeric", "text", "numeric(16,1)"],
    "bigint": ["numeric", "text"],
    "numeric": ["numeric(16,1)", "bigint", "text"],
    "text": ["varchar(64)"],
    "varchar": ["text"],
    "varchar(24)": ["text", "varchar(64)"],
    "varchar(64)": ["text"],
    "bool": ["text"],
    "date": ["timestamp"],
    "timestamp": ["date"],
}

# Filters on one source column.
def gen_filter_on(rng, col, t):
    bt = base_type(t)
    if bt == "int":
        return rng.choice(["{c} > %d" % rng.randint(-500, 500), "{c} IS NOT NULL",
                           "{c} %% 2 = 0", "{c} BETWEEN -300 AND 600"]).format(c=col)
    if bt == "bigint":
        return "%s < %d" % (col, rng.randint(-10 ** 11, 10 ** 12))
    if bt == "numeric":
        return "%s >= %s" % (col, Decimal(rng.randint(-500000, 500000)) / 100)
    if bt in ("text", "varchar"):
        return rng.choice(["{c} >= 'm'", "{c} IS NULL", "length({c}) > 3",
                           "{c} <> 'alpha'"]).replace("{c}", col)
    if bt == "bool":
        return rng.choice(["{c}", "NOT {c}", "{c} IS NOT TRUE"]).format(c=col)
    if bt == "date":
        return "%s < date '2022-06-01'" % col
    if bt == "timestamptz":
        return "%s >= '2021-03-01 00:00:00+00'" % col
    raise AssertionError(t)


def fmt(expr, col):
    return expr.replace("{c}", col)


# ---------------------------------------------------------------------------
# Cases

class Table:
    def __init__(self, name, cols, pk):
        self.name = name          # final name in the new schema
        self.cols = cols          # [(name, declared type)]
        self.pk = pk              # primary key on id?

    def col_names(self):
        return [c for c, _ in self.cols]


class Case:
    pass


def gen_source(rng):
    """Columns, rows, and whether id is the primary key.  Without a key, some
    rows are exact duplicates: only their ctid tells them apart."""
    ncols = rng.randint(3, 7)
    cols = []
    for i in range(ncols):
        t = rng.choice(SOURCE_TYPES)
        cols.append(("c%d_%s" % (i, base_type(t)), t))
    nrows = rng.randint(30, 300) if rng.random() < 0.85 else rng.randint(1000, 2500)
    ids = rng.sample(range(1, nrows * 3), nrows)
    null_p = rng.choice([0.0, 0.1, 0.3])
    long_p = rng.choice([0.0, 0.0, 0.05])      # TOASTed text values
    rows = []
    for i in ids:
        row = [i]
        for _, t in cols:
            if rng.random() < null_p:
                row.append(None)
            elif t == "text" and rng.random() < long_p:
                LONG_COLS.add(cols[len(row) - 1][0])
                row.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789")
                                   for _ in range(rng.randint(3000, 9000))))
            else:
                row.append(gen_value(rng, t))
        rows.append(row)
    pk = rng.random() < 0.85
    if not pk:
        for r in rng.sample(rows, max(1, len(rows) // 10)):
            rows.insert(rng.randint(0, len(rows)), list(r))
    return cols, rows, pk


# Source columns holding long values in the case being generated: no type
# change of theirs to a bounded varchar.
LONG_COLS = set()


def gen_churn(rng, case):
    """Statements run on the source before start() in both databases: dead
    tuples, HOT chains and gaps, so ctids are not 1..n in order."""
    out = []
    if rng.random() < 0.4:
        c, _ = rng.choice(case.src_cols)
        out.append("UPDATE %s SET %s = %s WHERE id %% %d = 0" % (case.src, c, c, rng.randint(2, 6)))
    if rng.random() < 0.3:
        out.append("DELETE FROM %s WHERE id %% %d = 1" % (case.src, rng.randint(5, 13)))
    if out and rng.random() < 0.5:
        out.append("VACUUM %s" % case.src)
    if rng.random() < 0.2:
        c, _ = rng.choice(case.src_cols)
        out.append("UPDATE %s SET %s = NULL WHERE id %% 7 = 3" % (case.src, c))
    return [x.replace("%%", "%") for x in out]


def gen_mapping_cols(rng, src_cols, ncols, allow_change=True):
    """Columns of a target table: [(name, declared type, expr)]; id first."""
    out = [("id", "int", "id")]
    used = set(["id"])
    for k in range(ncols):
        scol, stype = rng.choice(src_cols)
        expr, rtype = rng.choice(EXPRS[base_type(stype)])
        name = rng.choice([scol, "%s_x%d" % (scol, k), "n%d" % k])
        if name in used:
            name = "n%d_%d" % (k, rng.randint(0, 999))
        used.add(name)
        decl = rtype
        if allow_change and rng.random() < 0.25 and rtype in TYPE_CHANGES:
            decl = rng.choice(TYPE_CHANGES[rtype])
            if scol in LONG_COLS and decl.startswith("varchar"):
                decl = rtype
        out.append((name, decl, fmt(expr, scol)))
    return out


def gen_filter(rng, src_cols):
    if rng.random() < 0.5:
        return None
    parts = []
    for _ in range(rng.randint(1, 2)):
        if rng.random() < 0.3:
            parts.append(rng.choice(["id %% 3 <> 1", "id > %d" % rng.randint(0, 400)]))
        else:
            c, t = rng.choice(src_cols)
            parts.append(gen_filter_on(rng, c, t))
    return (" AND " if rng.random() < 0.6 else " OR ").join("(%s)" % p for p in parts)


def create_table_sql(name, cols, pk, extra=None):
    defs = []
    for c, t, _ in cols:
        d = "%s %s" % (c, t)
        if c == "id" and pk:
            d += " PRIMARY KEY"
        defs.append(d)
    if extra:
        defs.append(extra)
    return "CREATE TABLE %s (%s);" % (name, ", ".join(defs))


def insert_select_sql(target, cols, src, where, rng, alias=False):
    exprs = [e for _, _, e in cols]
    src_ref = src
    if alias:
        src_ref = "%s s" % src
        exprs = [_alias_expr(e) for e in exprs]
    col_list = ""
    if rng.random() < 0.5:
        col_list = " (%s)" % ", ".join(c for c, _, _ in cols)
    s = "INSERT INTO %s%s SELECT %s FROM %s" % (target, col_list, ", ".join(exprs), src_ref)
    if where:
        s += " WHERE " + (_alias_expr(where) if alias else where)
    return s.replace("%%", "%") + ";"


def _alias_expr(e):
    # Qualify bare column references with the alias s (columns are c<digit>_...
    # or id); literals never contain such words.
    import re
    return re.sub(r"\b(id|c\d+_[a-z]+)\b", r"s.\1", e)


# Shares of the seeds that become GROUP BY and join cases (unit_kind): drawn
# from a stream of their own, and never from an 'alter' seed, so that every
# other seed keeps its case.
UNIT_KIND_SHARE = {"group": 0.14, "join": 0.14}


def unit_kind(seed):
    if random.Random("alter-kind-%d" % seed).random() < 0.15:
        return None
    r = random.Random("unit-kind-%d" % seed).random()
    if r < UNIT_KIND_SHARE["group"]:
        return "group"
    if r < UNIT_KIND_SHARE["group"] + UNIT_KIND_SHARE["join"]:
        return "join"
    return None


def gen_case(seed, snapshots=False):
    if unit_kind(seed):
        return gen_unit_case(seed, unit_kind(seed), snapshots)
    rng = random.Random(seed)
    LONG_COLS.clear()
    case = Case()
    case.seed = seed
    src = "src%d" % rng.randint(0, 9)
    case.src = src
    case.src_cols, case.rows, case.src_pk = gen_source(rng)
    case.churn = gen_churn(rng, case)
    case.name = "mig_%d" % seed
    keyed = case.src_pk     # may the new tables have a key on id?
    kind = rng.choice(["project", "same_name_a", "same_name_b", "split", "split",
                       "ctas", "ctas_same_name", "split_ctas"])
    if random.Random("alter-kind-%d" % seed).random() < 0.15:
        # Drawn apart, so that the other seeds keep their cases.
        kind = "alter"
    case.kind = kind
    stmts = []
    tables = []
    idx = []

    def maybe_index(created_as, final, cols):
        # Long (TOASTed, incompressible) strings cannot be indexed.
        cols = [c for c in cols if not (LONG_COLS and base_type(c[1]) in ("text", "varchar"))]
        if cols and rng.random() < 0.4:
            idx.append((created_as, final, rng.choice(cols)[0]))

    if kind == "alter":
        stmts, table = gen_alter(rng, case)
        tables.append(table)
    elif kind in ("project", "same_name_a", "same_name_b"):
        cols = gen_mapping_cols(rng, case.src_cols, rng.randint(1, 5))
        where = gen_filter(rng, case.src_cols)
        pk = keyed and rng.random() < 0.85
        extra = None
        extra_col = None
        if rng.random() < 0.3:
            # A column the INSERT leaves to its (immutable) default.
            extra_col = ("extra", "int")
            extra = "extra int DEFAULT 7"
        if kind == "project":
            final = "t_%s" % rng.choice(["new", "v2", "next"])
            stmts.append(create_table_sql(final, cols, pk, extra))
            stmts.append(insert_select_sql(final, cols, src, where, rng,
                                           alias=rng.random() < 0.3))
            if extra:  # column list is mandatory then
                stmts[-1] = _with_col_list(stmts[-1], cols)
            stmts.append("DROP TABLE %s;" % src)
        elif kind == "same_name_a":
            # new table under a temporary name, renamed over the old one
            final = src
            tmp = "%s_tmp" % src
            stmts.append(create_table_sql(tmp, cols, pk, extra))
            stmts.append(insert_select_sql(tmp, cols, src, where, rng))
            if extra:
                stmts[-1] = _with_col_list(stmts[-1], cols)
            stmts.append("DROP TABLE %s;" % src)
            stmts.append("ALTER TABLE %s RENAME TO %s;" % (tmp, src))
        else:
            # old table renamed out of the way, new one created under its name
            final = src
            old = "%s_old" % src
            stmts.append("ALTER TABLE %s RENAME TO %s;" % (src, old))
            stmts.append(create_table_sql(src, cols, pk, extra))
            stmts.append(insert_select_sql(src, cols, old, where, rng))
            if extra:
                stmts[-1] = _with_col_list(stmts[-1], cols)
            stmts.append("DROP TABLE %s;" % old)
        tcols = [(c, t) for c, t, _ in cols] + ([extra_col] if extra_col else [])
        tables.append(Table(final, tcols, pk))
        maybe_index({"same_name_a": "%s_tmp" % src}.get(kind, final), final, tcols)
    elif kind == "split":
        a_cols = gen_mapping_cols(rng, case.src_cols, rng.randint(1, 3))
        b_cols = gen_mapping_cols(rng, case.src_cols, rng.randint(1, 3))
        a_where = gen_filter(rng, case.src_cols)
        b_where = gen_filter(rng, case.src_cols) if rng.random() < 0.5 else None
        a_name = rng.choice(["part_a", src])
        b_name = "part_b"
        a_tmp = a_name if a_name != src else "%s_a" % src
        stmts.append(create_table_sql(a_tmp, a_cols, keyed))
        stmts.append(create_table_sql(b_name, b_cols, keyed and rng.random() < 0.9))
        b_pk = "PRIMARY KEY" in stmts[-1]
        stmts.append(insert_select_sql(a_tmp, a_cols, src, a_where, rng))
        stmts.append(insert_select_sql(b_name, b_cols, src, b_where, rng,
                                       alias=rng.random() < 0.3))
        stmts.append("DROP TABLE %s;" % src)
        if a_tmp != a_name:
            stmts.append("ALTER TABLE %s RENAME TO %s;" % (a_tmp, a_name))
        tables.append(Table(a_name, [(c, t) for c, t, _ in a_cols], keyed))
        tables.append(Table(b_name, [(c, t) for c, t, _ in b_cols], b_pk))
        maybe_index(a_tmp, a_name, tables[0].cols)
        maybe_index(b_name, b_name, tables[1].cols)
    elif kind in ("ctas", "ctas_same_name"):
        cols = gen_mapping_cols(rng, case.src_cols, rng.randint(1, 5), allow_change=False)
        where = gen_filter(rng, case.src_cols)
        if kind == "ctas":
            final = "t_ctas"
            stmts.append(_ctas(final, cols, src, where))
            stmts.append("DROP TABLE %s;" % src)
        else:
            final = src
            old = "%s_old" % src
            stmts.append("ALTER TABLE %s RENAME TO %s;" % (src, old))
            stmts.append(_ctas(final, cols, old, where))
            stmts.append("DROP TABLE %s;" % old)
        tcols = [(c, t) for c, t, _ in cols]
        tables.append(Table(final, tcols, False))
        if keyed and rng.random() < 0.4:
            # A unique index makes id a key: conflicts, ON CONFLICT.
            stmts.append("CREATE UNIQUE INDEX ON %s (id);" % final)
            tables[-1].pk = True
        elif rng.random() < 0.5:
            idx.append((final, final, "id"))
    else:  # split_ctas: one part by INSERT ... SELECT, one by CTAS
        a_cols = gen_mapping_cols(rng, case.src_cols, rng.randint(1, 3))
        b_cols = gen_mapping_cols(rng, case.src_cols, rng.randint(1, 3), allow_change=False)
        a_where = gen_filter(rng, case.src_cols)
        stmts.append(create_table_sql("part_a", a_cols, keyed))
        stmts.append(insert_select_sql("part_a", a_cols, src, a_where, rng))
        stmts.append(_ctas("part_b", b_cols, src, gen_filter(rng, case.src_cols)))
        stmts.append("DROP TABLE %s;" % src)
        tables.append(Table("part_a", [(c, t) for c, t, _ in a_cols], keyed))
        tables.append(Table("part_b", [(c, t) for c, t, _ in b_cols], False))
    # An index goes right after its table's creation (before the data), or
    # at the end of the script under the table's final name.
    for created_as, final, col in idx:
        pos = [k for k, s in enumerate(stmts)
               if s.startswith("CREATE TABLE %s " % created_as)]
        if pos and rng.random() < 0.5:
            stmts.insert(pos[0] + 1, "CREATE INDEX ON %s (%s);" % (created_as, col))
        else:
            stmts.append("CREATE INDEX ON %s (%s);" % (final, col))
    # Drawn apart, so that the cases above stay what they were for a seed.
    fkr = random.Random("fkey-%d" % seed)
    stmts = _with_fkey(fkr, case, stmts)
    if kind != "alter":
        stmts = _with_alters(random.Random("alter-%d" % seed), stmts, src, case.src_cols)
    case.script = "\n".join(stmts)
    case.tables = tables
    case.snapshots = snapshots
    case.workload = (gen_snapshot_workload if snapshots else gen_workload)(rng, case)
    _fkey_workload(fkr, case)
    _with_live(case)
    # A live input with a primary key that only row mappings read is
    # tracked in place by its keys (src/start.c, why_not_in_place), unless
    # the script replaces it.
    case.keyed = case.tracked = (src in case.live and case.src_pk and not any(
        re.match(r"CREATE (UNIQUE )?INDEX .* ON %s \(" % src, l) for l in case.script.split("\n")))
    if case.keyed:
        # early, a write of many rows' keys: each row is copied first, as it was
        kr = random.Random("keyed-%d" % seed)
        spots = [i for i, w in enumerate(case.workload) if w.session == 0] or [0]
        case.workload.insert(kr.choice(spots[:3]),
                             Stmt("UPDATE %s SET id = -id WHERE mod(id, 5) = %d AND id > 0"
                                  % (src, kr.randint(0, 4))))
    return case


def _with_fkey(fkr, case, stmts):
    """A new table's id references a live table, owners, with an action."""
    case.fk_action = None
    creates = [k for k, st in enumerate(stmts)
               if st.startswith("CREATE TABLE ") and " (id int" in st and " AS " not in st]
    if creates and fkr.random() < 0.3:
        case.fk_action = fkr.choice(["CASCADE", "SET NULL", "SET DEFAULT", "NO ACTION",
                                     "RESTRICT"])
        k = fkr.choice(creates)
        stmts = list(stmts)
        stmts[k] = stmts[k].replace(" (id int", " (id int REFERENCES owners (id) ON DELETE %s "
                                    "ON UPDATE %s" % (case.fk_action, case.fk_action), 1)
    return stmts


def _fkey_workload(fkr, case):
    """Deletes and key updates of owners: the action reaches rows of the new
    table that are not migrated yet."""
    if not case.fk_action:
        return
    ids = [r[0] for r in case.rows if r[0] is not None]
    for _ in range(fkr.randint(2, 6)):
        a = fkr.choice(ids)
        st = fkr.choice([
            Stmt("DELETE FROM owners WHERE id = %s", [a]),
            Stmt("UPDATE owners SET id = id + 100000 WHERE id = %s", [a]),
            Stmt("DELETE FROM owners WHERE id BETWEEN %s AND %s", [a, a + fkr.randint(1, 5)]),
            Stmt("DELETE FROM owners WHERE id = %s RETURNING id", [a])])
        spots = [i for i, w in enumerate(case.workload) if w.session == 0] or [0]
        case.workload.insert(fkr.choice(spots), st)


def gen_alter(rng, case):
    """ALTER TABLE on the source that PostgreSQL would carry out by reading
    it (type changes, SET NOT NULL, a CHECK, ADD COLUMN with a CHECK) and
    CREATE INDEX: Leapfrog replaces the table lazily.  Catalog changes
    (added columns, renames, dropped columns, dropped defaults) ride along.
    Only commands the data satisfies: a row that breaks them fails eager's
    start() but the lazy migration later, by design."""
    src = case.src
    cols = [["id", "int"]] + [[c, t] for c, t in case.src_cols]
    cmds = []
    # A live table's foreign key references the source (side.id, ON DELETE
    # CASCADE): it moves to the replacement, whose id keeps its type.
    case.side_fk = case.src_pk and random.Random("side-fk-%d" % case.seed).random() < 0.5
    for col in cols[1:]:
        c, t = col
        changes = TYPE_CHANGES.get(t) or TYPE_CHANGES.get(base_type(t))
        if changes and rng.random() < 0.35:
            new = rng.choice(changes)
            if c in LONG_COLS and new.startswith("varchar"):
                continue
            cmds.append("ALTER COLUMN %s TYPE %s" % (c, new))
            col[1] = new
    if rng.random() < 0.4 or not cmds:
        if case.side_fk:
            cmds.append("ALTER COLUMN id SET NOT NULL")
        elif rng.random() < 0.3:
            cmds.append("ALTER COLUMN id TYPE bigint USING id * 2")
            cols[0][1] = "bigint"
        else:
            cmds.append("ALTER COLUMN id TYPE bigint")
            cols[0][1] = "bigint"
    if rng.random() < 0.3:
        cmds.append("ALTER COLUMN id SET NOT NULL")
    if rng.random() < 0.3:
        cmds.append("ADD CONSTRAINT %s_id_pos CHECK (id > 0)" % src)
    if rng.random() < 0.3:
        k = rng.randint(0, 9)
        cmds.append("ADD COLUMN added int NOT NULL DEFAULT %d CHECK (added >= 0)" % k)
        cols.append(["added", "int"])
    # The two-step of migration linters: a CHECK added NOT VALID before
    # start() (in both databases), validated by the script.
    if random.Random("validate-%d" % case.seed).random() < 0.3:
        case.churn.append("ALTER TABLE %s ADD CONSTRAINT %s_nv CHECK (id <> 0) NOT VALID"
                          % (src, src))
        cmds.append("VALIDATE CONSTRAINT %s_nv" % src)
    rng.shuffle(cmds)
    stmts = ["ALTER TABLE %s %s;" % (src, ", ".join(cmds))]
    # Long (TOASTed, incompressible) strings cannot be indexed.
    indexable = [c for c in cols if c[0] not in LONG_COLS]
    if rng.random() < 0.4:
        stmts.append("CREATE INDEX ON %s (%s);" % (src, rng.choice(indexable)[0]))
    if rng.random() < 0.3:
        stmts.append("ALTER TABLE %s ADD COLUMN note text DEFAULT 'n';" % src)
        stmts.append("ALTER TABLE %s ALTER COLUMN note DROP DEFAULT;" % src)
        cols.append(["note", "text"])
    if len(cols) > 3 and rng.random() < 0.3:
        victim = rng.choice(cols[1:])
        stmts.append("ALTER TABLE %s DROP COLUMN %s;" % (src, victim[0]))
        cols.remove(victim)
    if len(cols) > 2 and rng.random() < 0.3:
        col = rng.choice(cols[1:])
        stmts.append("ALTER TABLE %s RENAME COLUMN %s TO %s_r;" % (src, col[0], col[0]))
        col[0] += "_r"
    return stmts, Table(src, [tuple(c) for c in cols], case.src_pk)


def _with_alters(rng, stmts, src, src_cols, keep=""):
    """ALTER TABLE in the script, drawn from their own stream so that the
    rest of a seed's case stays what it was: on the source before its
    mapping reads it (a dropped column, and an added one whose value is
    PostgreSQL's stored "missing" value: the retired table carries both to
    the migration steps), and on a new table before its mapping fills it (a
    column the INSERT leaves to its default)."""
    if rng.random() >= 0.3:
        return stmts
    body = "\n".join(stmts)
    pre = []
    unused = [c for c, _ in src_cols if not re.search(r"\b%s\b" % c, body + keep)]
    if unused and rng.random() < 0.6:
        pre.append("ALTER TABLE %s DROP COLUMN %s;" % (src, rng.choice(unused)))
    if rng.random() < 0.6:
        pre.append("ALTER TABLE %s ADD COLUMN lf_added int NOT NULL DEFAULT %d, "
                   "ADD COLUMN lf_stamp timestamptz DEFAULT now();" % (src, rng.randint(0, 9)))
    out = pre + list(stmts)
    creates = [k for k, st in enumerate(out)
               if st.startswith("CREATE TABLE ") and " AS " not in st]
    if creates and rng.random() < 0.5:
        k = rng.choice(creates)
        name = out[k].split()[2]
        out.insert(k + 1, "ALTER TABLE %s ADD COLUMN note text DEFAULT 'n'%s;"
                   % (name, ", ALTER COLUMN id SET DEFAULT 0" if " (id " in out[k] else ""))
    return out


def _with_col_list(stmt, cols):
    if stmt.startswith("INSERT INTO") and "(" not in stmt.split(" SELECT ")[0]:
        head, rest = stmt.split(" SELECT ", 1)
        return "%s (%s) SELECT %s" % (head, ", ".join(c for c, _, _ in cols), rest)
    return stmt


def _ctas(name, cols, src, where):
    s = "CREATE TABLE %s AS SELECT %s FROM %s" % (
        name, ", ".join("%s AS %s" % (e, c) for c, _, e in cols), src)
    if where:
        s += " WHERE " + where
    return s.replace("%%", "%") + ";"


# ---------------------------------------------------------------------------
# Workload

# A workload statement that completes the migration in the lazy run
# (leapfrog.complete) and does nothing in the eager one.
COMPLETE = "-- leapfrog.complete()"


class Stmt:
    def __init__(self, text, params=None, ordered=False, prepare=None, inline=False,
                 session=0):
        self.text = text
        self.params = params
        self.ordered = ordered
        self.prepare = prepare
        self.inline = inline
        self.session = session

    def __repr__(self):
        return "%sStmt(%r, %r%s%s%s)" % ("[s1] " if self.session else "", self.text, self.params,
                                          ", ordered" if self.ordered else "",
                                          ", prepare" if self.prepare else "",
                                          ", inline" if self.inline else "")


def gen_workload(rng, case):
    src_ids = [r[0] for r in case.rows]
    max_id = max(src_ids)
    fresh = list(range(max_id + 1, max_id + 200))
    rng.shuffle(fresh)
    id_pool = {"src": src_ids, "fresh": fresh}

    def some_id():
        r = rng.random()
        if r < 0.8:
            return rng.choice(src_ids)
        if r < 0.9:
            return rng.randint(0, max_id + 5)
        return rng.choice(fresh[:20])

    def id_range():
        a = rng.randint(0, max_id)
        return a, a + rng.randint(0, max(5, max_id // 6))

    tables = case.tables
    out = []
    n = rng.randint(20, 45)
    in_tx = False
    tx_left = 0
    savepoint = False
    cursors = 0
    for i in range(n):
        if not in_tx and rng.random() < 0.12:
            iso = rng.choice(["", " ISOLATION LEVEL REPEATABLE READ",
                              " ISOLATION LEVEL SERIALIZABLE", " ISOLATION LEVEL READ COMMITTED"])
            out.append(Stmt("BEGIN" + iso))
            in_tx = True
            tx_left = rng.randint(1, 4)
            savepoint = False
        t = rng.choice(tables)
        if in_tx and not savepoint and rng.random() < 0.25:
            # Rows migrated inside a subtransaction that may be rolled back.
            out.append(Stmt("SAVEPOINT lf_sp"))
            savepoint = True
        if in_tx and rng.random() < 0.1:
            cursors += 1
            cur = "lf_cur%d" % cursors
            a, b = id_range()
            out.append(Stmt("DECLARE %s CURSOR FOR SELECT * FROM %s WHERE id >= %d ORDER BY %s"
                            % (cur, t.name, a, ", ".join(t.col_names())), ordered=True))
            out.append(Stmt("FETCH %d FROM %s" % (rng.randint(1, 5), cur), ordered=True))
            out.append(Stmt("FETCH %d FROM %s" % (rng.randint(1, 5), cur), ordered=True))
            out.append(Stmt("CLOSE %s" % cur))
        else:
            out.append(gen_stmt(rng, t, tables, some_id, id_range, id_pool))
        if in_tx:
            tx_left -= 1
            if savepoint and rng.random() < 0.4:
                out.append(Stmt(rng.choice(["ROLLBACK TO SAVEPOINT lf_sp",
                                            "RELEASE SAVEPOINT lf_sp"])))
                savepoint = False
            if tx_left <= 0:
                out.append(Stmt(rng.choice(["COMMIT", "COMMIT", "ROLLBACK"])))
                in_tx = False
    if in_tx:
        out.append(Stmt("COMMIT"))
    # Prepared statements and PL/pgSQL (plan caching) on a table of the case.
    t = rng.choice(tables)
    lo, hi = id_range()
    for _ in range(rng.randint(0, 12)):
        a, b = id_range()
        out.insert(rng.randint(0, len(out)),
                   Stmt("SELECT count(*), min(id), max(id) FROM %s WHERE id BETWEEN %%s AND %%s"
                        % t.name, [a, b], prepare=True))
    if rng.random() < 0.5:
        fname = "lf_probe_%d" % case.seed
        out.insert(0, Stmt(
            "CREATE FUNCTION %s(lo int, hi int) RETURNS bigint LANGUAGE plpgsql AS "
            "$f$ BEGIN RETURN (SELECT count(*) FROM %s WHERE id BETWEEN lo AND hi); END $f$"
            % (fname, t.name)))
        for _ in range(rng.randint(2, 8)):
            a, b = id_range()
            out.insert(rng.randint(1, len(out)), Stmt("SELECT %s(%%s, %%s)" % fname, [a, b]))
    if rng.random() < 0.3:
        fname = "lf_touch_%d" % case.seed
        out.insert(0, Stmt(
            "CREATE FUNCTION %s(k int) RETURNS bigint LANGUAGE plpgsql AS "
            "$f$ DECLARE n bigint; BEGIN UPDATE %s SET id = id WHERE id = k; "
            "GET DIAGNOSTICS n = ROW_COUNT; RETURN n; END $f$" % (fname, t.name)))
        for _ in range(rng.randint(2, 8)):
            out.insert(rng.randint(1, len(out)), Stmt("SELECT %s(%%s)" % fname, [some_id()]))
    # Plan caching mode for the whole session (generic plans must migrate too).
    mode = rng.choice(["auto", "auto", "force_generic_plan", "force_custom_plan"])
    if mode != "auto":
        out.insert(0, Stmt("SET plan_cache_mode = %s" % mode))
    # One whole-table read, usually late.
    if rng.random() < 0.3:
        out.insert(rng.randint(len(out) // 2, len(out)),
                   Stmt("SELECT count(*) FROM %s" % rng.choice(tables).name))
    return out


def gen_snapshot_workload(rng, case):
    """Two sessions.  In each episode session 1 opens a REPEATABLE READ or
    SERIALIZABLE transaction and takes its snapshot (on a table the migration
    does not touch); session 0 then runs autocommit statements, which migrate
    and change rows; then session 1 reads (and sometimes writes) the same
    rows.  Eagerly, session 1 sees the rows as of its snapshot; the lazy run
    must give the same answer or fail with 40001."""
    src_ids = [r[0] for r in case.rows]
    max_id = max(src_ids)
    fresh = list(range(max_id + 1, max_id + 200))
    rng.shuffle(fresh)
    id_pool = {"src": src_ids, "fresh": fresh}

    def some_id():
        return rng.choice(src_ids) if rng.random() < 0.9 else rng.choice(fresh[:20])

    def id_range():
        a = rng.randint(0, max_id)
        return a, a + rng.randint(0, max(5, max_id // 8))

    out = []
    for _ in range(rng.randint(4, 9)):
        iso = rng.choice(["REPEATABLE READ", "SERIALIZABLE"])
        out.append(Stmt("BEGIN ISOLATION LEVEL " + iso, session=1))
        out.append(Stmt("SELECT count(*) FROM side", session=1))
        touched = []
        for _ in range(rng.randint(1, 4)):
            st = gen_stmt(rng, rng.choice(case.tables), case.tables, some_id, id_range, id_pool)
            out.append(st)
            touched += [p for p in (st.params or []) if isinstance(p, int)
                        and not isinstance(p, bool) and 0 <= p <= max_id + 200]
        for _ in range(rng.randint(1, 3)):
            t = rng.choice(case.tables)
            if touched and rng.random() < 0.6:
                st = Stmt("SELECT * FROM %s WHERE id = ANY(%%s)" % t.name, [sorted(set(touched))])
            else:
                st = gen_stmt(rng, t, case.tables, some_id, id_range, id_pool)
            st.session = 1
            out.append(st)
        out.append(Stmt(rng.choice(["COMMIT", "COMMIT", "ROLLBACK"]), session=1))
        for _ in range(rng.randint(0, 2)):
            out.append(gen_stmt(rng, rng.choice(case.tables), case.tables, some_id, id_range,
                                id_pool))
    # Drawn apart, so that the cases above stay what they were for a seed.
    extra = random.Random("snapshot-extras-%d" % case.seed)
    if extra.random() < 0.4:
        # The first episode's snapshot is taken before start() commits
        # (_run_case runs these two statements first).
        case.prestart = out[:2]
        out = out[2:]
    if extra.random() < 0.35:
        # The migration completes (lazy side only) while session 1 may hold
        # a snapshot that cannot see it.
        spots = [i for i, st in enumerate(out) if st.session == 0]
        if spots:
            out.insert(extra.choice(spots) + 1, Stmt(COMPLETE))
    return out


def _val_expr(rng, col, decl):
    bt = base_type(decl)
    choices = {
        "int": ["{c} + 1", "coalesce({c}, 0) - 3"],
        "bigint": ["{c} * 2", "{c} - 1"],
        "numeric": ["{c} + 1.25", "coalesce({c}, 0) * 2"],
        "text": ["{c} || 'u'", "upper({c})"],
        "varchar": ["{c} || 'u'", "lower({c})"],
        "bool": ["NOT {c}", "{c} IS NULL"],
        "date": ["{c} + 1"],
        "timestamp": ["{c} + interval '1 hour'"],
        "timestamptz": ["{c} + interval '1 day'"],
    }[bt]
    if rng.random() < 0.4:
        return "%s", [gen_value(rng, _gen_type(decl))]
    return rng.choice(choices).replace("{c}", col), []


def _gen_type(decl):
    bt = base_type(decl)
    return "numeric" if bt == "numeric" else ("text" if bt in ("varchar", "text") else bt)


def _row_values(rng, t, the_id):
    vals = []
    for c, d in t.cols:
        if c == "id":
            vals.append(the_id)
        elif rng.random() < 0.15:
            vals.append(None)
        else:
            vals.append(gen_value(rng, _gen_type(d)))
    return vals


def gen_stmt(rng, t, tables, some_id, id_range, id_pool):
    cols = t.col_names()
    others = [o for o in tables if o is not t]
    o = others[0] if others else None
    nonid = [(c, d) for c, d in t.cols if c != "id"] or [("id", "int")]
    # Draw a statement kind; joins with the other new table only when there
    # is one, ON CONFLICT only on tables with a primary key.
    for _ in range(20):
        r = rng.random()
        if 0.68 <= r < 0.76 and not t.pk:
            continue
        if 0.76 <= r < 0.86 and o is None:
            continue
        break
    prepare = True if rng.random() < 0.15 else None
    inline = rng.random() < 0.3
    total_order = "ORDER BY " + ", ".join(cols)
    if r < 0.12:
        return Stmt("SELECT * FROM %s WHERE id = %%s" % t.name, [some_id()],
                    prepare=prepare, inline=inline)
    if r < 0.22:
        a, b = id_range()
        return Stmt("SELECT * FROM %s WHERE id BETWEEN %%s AND %%s" % t.name, [a, b],
                    prepare=prepare, inline=inline)
    if r < 0.28:
        c, d = rng.choice(nonid)
        v = gen_value(rng, _gen_type(d))
        op = rng.choice(["<", ">=", "="])
        if base_type(d) == "bool":
            op = "="
        return Stmt("SELECT id, %s FROM %s WHERE %s %s %%s" % (c, t.name, c, op), [v],
                    inline=inline)
    if r < 0.32:
        lim = rng.randint(1, 20)
        off = rng.randint(0, 40)
        return Stmt("SELECT * FROM %s %s LIMIT %d OFFSET %d" % (t.name, total_order, lim, off),
                    ordered=True)
    if r < 0.37:
        c, d = rng.choice(nonid)
        aggs = "count(*), count(%s), min(%s), max(%s)" % (c, _scale_free(c, d),
                                                          _scale_free(c, d))
        if base_type(d) in ("int", "bigint", "numeric"):
            aggs += ", sum(%s)" % c
        a, b = id_range()
        return Stmt("SELECT %s FROM %s WHERE id < %%s" % (aggs, t.name), [b], inline=inline)
    if r < 0.47:
        c, d = rng.choice(nonid)
        if c == "id":
            return Stmt("UPDATE %s SET id = id + 100000 WHERE id = %%s RETURNING *" % t.name,
                        [some_id()])
        e, p = _val_expr(rng, c, d)
        if rng.random() < 0.7:
            return Stmt("UPDATE %s SET %s = %s WHERE id = %%s RETURNING *" % (t.name, c, e),
                        p + [some_id()], prepare=prepare, inline=inline)
        a, b = id_range()
        return Stmt("UPDATE %s SET %s = %s WHERE id BETWEEN %%s AND %%s" % (t.name, c, e),
                    p + [a, b], inline=inline)
    if r < 0.52:
        c, d = rng.choice(nonid)
        v = gen_value(rng, _gen_type(d))
        if base_type(d) == "bool":
            return Stmt("DELETE FROM %s WHERE %s IS NOT DISTINCT FROM %%s AND id < %%s RETURNING id"
                        % (t.name, c), [v, id_range()[1]])
        return Stmt("DELETE FROM %s WHERE %s > %%s RETURNING id" % (t.name, c), [v])
    if r < 0.58:
        if rng.random() < 0.6:
            return Stmt("DELETE FROM %s WHERE id = %%s RETURNING *" % t.name, [some_id()],
                        inline=inline)
        a, _ = id_range()
        return Stmt("DELETE FROM %s WHERE id BETWEEN %%s AND %%s" % t.name, [a, a + rng.randint(0, 8)])
    if r < 0.68:
        the_id = some_id() if rng.random() < 0.5 else id_pool["fresh"].pop()
        vals = _row_values(rng, t, the_id)
        return Stmt("INSERT INTO %s (%s) VALUES (%s) RETURNING *"
                    % (t.name, ", ".join(cols), ", ".join(["%s"] * len(cols))), vals,
                    inline=inline)
    if r < 0.76 and t.pk:
        the_id = some_id()
        vals = _row_values(rng, t, the_id)
        c, d = rng.choice(nonid)
        if c == "id" or rng.random() < 0.3:
            action = "DO NOTHING"
        else:
            action = "DO UPDATE SET %s = EXCLUDED.%s" % (c, c)
        return Stmt("INSERT INTO %s (%s) VALUES (%s) ON CONFLICT (id) %s RETURNING *"
                    % (t.name, ", ".join(cols), ", ".join(["%s"] * len(cols)), action), vals,
                    prepare=prepare, inline=inline)
    if r < 0.86 and o is not None:
        a, b = id_range()
        oc = rng.choice(o.col_names())
        tc = rng.choice(cols)
        j = rng.random()
        if j < 0.3:
            return Stmt("SELECT t.%s, o.%s FROM %s t JOIN %s o ON t.id = o.id "
                        "WHERE t.id BETWEEN %%s AND %%s" % (tc, oc, t.name, o.name), [a, b],
                        inline=inline)
        if j < 0.45:
            return Stmt("SELECT t.id, o.%s FROM %s t LEFT JOIN %s o ON t.id = o.id "
                        "WHERE t.id BETWEEN %%s AND %%s" % (oc, t.name, o.name), [a, b])
        if j < 0.55:
            return Stmt("SELECT id FROM %s t WHERE EXISTS (SELECT 1 FROM %s o WHERE o.id = t.id) "
                        "AND id < %%s" % (t.name, o.name), [b])
        if j < 0.62:
            return Stmt("SELECT count(*) FROM %s WHERE id NOT IN (SELECT id FROM %s WHERE id < %%s)"
                        % (t.name, o.name), [b])
        if j < 0.75:
            c, d = rng.choice(nonid)
            if c == "id":
                c, d = "id", "int"
                return Stmt("SELECT t.id FROM %s t, %s o WHERE t.id = o.id AND o.id = %%s"
                            % (t.name, o.name), [some_id()])
            e, p = _val_expr(rng, "t." + c, d)
            return Stmt("UPDATE %s t SET %s = %s FROM %s o WHERE t.id = o.id AND o.id BETWEEN %%s AND %%s"
                        % (t.name, c, e, o.name), p + [a, a + rng.randint(0, 10)])
        if j < 0.85:
            return Stmt("DELETE FROM %s t USING %s o WHERE t.id = o.id AND o.id = %%s RETURNING t.id"
                        % (t.name, o.name), [some_id()])
        return Stmt("SELECT o.id FROM %s o WHERE o.id IN (SELECT id FROM %s WHERE id BETWEEN %%s AND %%s)"
                    % (o.name, t.name), [a, b])
    return gen_stmt_more(rng, t, o or t, some_id, id_range, inline)


def gen_stmt_more(rng, t, o, some_id, id_range, inline):
    """CTEs, sub-queries, set operations, locking reads, INSERT ... SELECT,
    arrays of keys, and joins with a table the migration does not touch."""
    a, b = id_range()
    r = rng.random()
    if r < 0.12:
        return Stmt("WITH x AS (SELECT * FROM %s WHERE id BETWEEN %%s AND %%s) "
                    "SELECT count(*) FROM x" % t.name, [a, b], inline=inline)
    if r < 0.22:
        return Stmt("WITH d AS (DELETE FROM %s WHERE id = %%s RETURNING id) "
                    "SELECT count(*) FROM d" % t.name, [some_id()])
    if r < 0.32:
        return Stmt("SELECT t.id, (SELECT count(*) FROM %s o WHERE o.id <= t.id AND o.id > t.id - 20) "
                    "FROM %s t WHERE t.id BETWEEN %%s AND %%s" % (o.name, t.name), [a, b])
    if r < 0.42:
        return Stmt("SELECT id FROM %s WHERE id < %%s UNION SELECT id FROM %s WHERE id > %%s"
                    % (t.name, o.name), [a, b], inline=inline)
    if r < 0.52:
        return Stmt("SELECT id FROM %s WHERE id BETWEEN %%s AND %%s FOR UPDATE" % t.name, [a, b])
    if r < 0.62:
        return Stmt("INSERT INTO %s (id) SELECT id + 1000000 FROM %s WHERE id BETWEEN %%s AND %%s"
                    % (t.name, o.name), [a, a + rng.randint(0, 10)])
    if r < 0.72:
        ids = sorted({some_id() for _ in range(rng.randint(1, 6))})
        return Stmt("SELECT * FROM %s WHERE id = ANY(%%s)" % t.name, [ids], inline=inline)
    if r < 0.78:
        return Stmt("SELECT count(*) FROM %s t WHERE NOT EXISTS "
                    "(SELECT 1 FROM side s WHERE s.id = t.id) AND t.id < %%s" % t.name, [b])
    # Join with a table the migration does not touch.
    tag = rng.randint(0, 4)
    return Stmt("SELECT t.id, s.tag FROM %s t JOIN side s ON s.id = t.id WHERE s.tag = %%s"
                % t.name, [tag], inline=inline)


# ---------------------------------------------------------------------------
# GROUP BY and join cases (unit_kind): the unit that migrates is a group, or
# a join key with the rows of both inputs sharing it.  Their sources have key
# columns drawn from small domains (fan-out, NULL keys, keys on one side
# only), an index on the key of every input (start() requires it), and their
# workloads address the new table by its key, by a column of either side and
# by aggregate values (gen_unit_workload).

UNIT_KEY_TYPES = ["int", "int", "text", "varchar(24)", "date", "bigint", "numeric(12,2)",
                  "timestamptz", "bool"]
NUMERIC_TYPES = ("int", "bigint", "numeric")
SUM_TYPE = {"int": "bigint", "bigint": "numeric", "numeric": "numeric"}
ARRAY_TYPE = {"int": "int[]", "bigint": "bigint[]", "numeric": "numeric[]", "text": "text[]",
              "varchar": "varchar[]", "bool": "bool[]", "date": "date[]",
              "timestamptz": "timestamptz[]", "timestamp": "timestamp[]"}
# Type changes of a key column that keep distinct values distinct.
KEY_TYPE_CHANGES = {"int": ["bigint", "numeric", "text"], "bigint": ["numeric", "text"],
                    "text": ["varchar(64)"], "varchar(24)": ["text", "varchar(64)"],
                    "bool": ["text"], "date": ["timestamp"], "numeric(12,2)": ["text"]}
# The type min() and max() give (no varchar or typmod of their own).
MINMAX_TYPE = {"int": "int", "bigint": "bigint", "numeric": "numeric", "text": "text",
               "varchar": "text", "date": "date", "timestamptz": "timestamptz",
               "timestamp": "timestamp"}


def gen_domain(rng, t, n):
    """n distinct values of type t (bool: both)."""
    if t == "bool":
        return [False, True]
    out = []
    for _ in range(n * 20):
        v = gen_value(rng, _gen_type(t))
        if v not in out:
            out.append(v)
        if len(out) == n:
            break
    return out


def gen_unit_source(rng, prefix, key_cols, key_rows, nval, ids=None, dups=True):
    """A source of a GROUP BY or join case: id, the key columns (one tuple
    of key_rows per row), then nval value columns with NULLs.  Returns
    columns, rows and whether id is the primary key; without one (and
    dups), some rows are exact duplicates."""
    cols = list(key_cols)
    for _ in range(nval):
        t = rng.choice(SOURCE_TYPES)
        cols.append(("%s%d_%s" % (prefix, len(cols), base_type(t)), t))
    n = len(key_rows)
    if ids is None:
        ids = rng.sample(range(1, n * 3 + 2), n)
    null_p = rng.choice([0.0, 0.1, 0.3])
    rows = []
    for i, keys in zip(ids, key_rows):
        row = [i] + list(keys)
        for _, t in cols[len(key_cols):]:
            row.append(None if rng.random() < null_p else gen_value(rng, t))
        rows.append(row)
    pk = rng.random() < 0.85
    if not pk and dups and rows:
        for r in rng.sample(rows, max(1, len(rows) // 10)):
            rows.insert(rng.randint(0, len(rows)), list(r))
    return cols, rows, pk


def gen_unit_churn(rng, table, cols, nullable):
    """gen_churn for a source of a unit case: dead tuples and gaps; NULLs
    only in the columns that may take them."""
    out = []
    if rng.random() < 0.4:
        c = rng.choice(cols)[0]
        out.append("UPDATE %s SET %s = %s WHERE id %% %d = 0" % (table, c, c, rng.randint(2, 6)))
    if rng.random() < 0.3:
        out.append("DELETE FROM %s WHERE id %% %d = 1" % (table, rng.randint(5, 13)))
    if out and rng.random() < 0.5:
        out.append("VACUUM %s" % table)
    if nullable and rng.random() < 0.2:
        out.append("UPDATE %s SET %s = NULL WHERE id %% 7 = 3" % (table, rng.choice(nullable)))
    return [x.replace("%%", "%") for x in out]


def key_index_sql(rng, table, keys, cols, unique=False):
    """The index start() needs on an input's key: a btree whose leading
    columns are the key's, in any order (a trailing column or INCLUDE
    sometimes)."""
    keys = list(keys)
    rng.shuffle(keys)
    others = [c for c, _ in cols if c not in keys]
    tail = ""
    if not unique and others and rng.random() < 0.25:
        keys.append(rng.choice(others))
    elif others and rng.random() < 0.15:
        tail = " INCLUDE (%s)" % rng.choice(others)
    return "CREATE %sINDEX ON %s (%s)%s" % ("UNIQUE " if unique else "", table, ", ".join(keys),
                                            tail)


class UnitTable(Table):
    """A new table of a GROUP BY or join case, for gen_unit_stmt."""

    def __init__(self, name, cols, keys, unique, vals, dim=None, id_col=None):
        Table.__init__(self, name, cols, False)
        self.decl = dict(cols)
        self.keys = keys        # the columns that carry the unit's key
        self.unique = unique    # the columns of its primary key or unique index, or None
        self.vals = vals        # column -> values it likely holds (the source's)
        self.dim = dim          # the column the live table dim holds values of
        self.id_col = id_col    # a column of source ids (side.id holds some)


def _out_name(used, name):
    while name in used:
        name = "%s_%d" % (name, len(used))
    used.add(name)
    return name


def _agg_order(rng, x, cols):
    """An ORDER BY inside an aggregate that makes its result deterministic:
    ties are rows whose aggregated value x is equal (it ends with x, or
    with id, which only exact duplicates share)."""
    d = lambda: rng.choice(["", "", " DESC", " NULLS FIRST", " DESC NULLS LAST"])
    r = rng.random()
    if r < 0.35:
        return "ORDER BY %s%s" % (x, d())
    if r < 0.55:
        return "ORDER BY id%s" % d()
    y = rng.choice(cols)[0]
    return "ORDER BY %s%s, %s%s" % (y, d(), rng.choice([x, "id"]), d())


def gen_aggregate(rng, cols):
    """An aggregate over the source columns cols (id among them): its
    expression, result type, and whether a type change of the target
    column is safe.  No aggregate whose result depends on the order of the
    rows: string_agg and array_agg have a deterministic ORDER BY, sums are
    of integers and numerics."""
    for _ in range(100):
        c, t = rng.choice(cols)
        bt = base_type(t)
        num = bt in NUMERIC_TYPES
        ok = bt != "bigint"
        r = rng.random()
        if r < 0.08:
            return "count(*)", "bigint", True
        if r < 0.14:
            return "count(%s)" % c, "bigint", True
        if r < 0.22 and num:
            return "sum(%s)" % c, SUM_TYPE[bt], ok
        if r < 0.27 and num:
            return rng.choice(["avg(%s)", "round(avg(%s), 3)"]) % c, "numeric", ok
        if r < 0.37 and bt != "bool":
            return "%s(%s)" % (rng.choice(["min", "max"]), c), MINMAX_TYPE[bt], bt != "text"
        if r < 0.41 and bt == "bool":
            return "%s(%s)" % (rng.choice(["bool_and", "bool_or", "every"]), c), "bool", True
        if r < 0.49 and bt in ("text", "varchar", "int", "bigint", "numeric", "bool"):
            x = c if bt in ("text", "varchar") else "%s::text" % c
            return ("string_agg(%s, %s %s)" % (x, rng.choice(["','", "' '", "'|'"]),
                                               _agg_order(rng, x, cols)), "text", False)
        if r < 0.56:
            return "array_agg(%s %s)" % (c, _agg_order(rng, c, cols)), ARRAY_TYPE[bt], False
        if r < 0.62:
            k = rng.random()
            if k < 0.5 or not (num or bt in ("text", "varchar")):
                return "count(DISTINCT %s)" % c, "bigint", True
            if num:
                return "sum(DISTINCT %s)" % c, SUM_TYPE[bt], ok
            return ("string_agg(DISTINCT %s, ',' ORDER BY %s%s)"
                    % (c, c, rng.choice(["", " DESC"])), "text", False)
        if r < 0.72:
            fc, ft = rng.choice(cols)
            f = (gen_filter_on(rng, fc, ft) if fc != "id"
                 else "id %% %d <> 0" % rng.randint(2, 5)).replace("%%", "%")
            k = rng.random()
            if k < 0.35:
                return "count(*) FILTER (WHERE %s)" % f, "bigint", True
            if k < 0.6 and num:
                return "sum(%s) FILTER (WHERE %s)" % (c, f), SUM_TYPE[bt], ok
            if k < 0.8 and bt != "bool":
                return ("%s(%s) FILTER (WHERE %s)" % (rng.choice(["min", "max"]), c, f),
                        MINMAX_TYPE[bt], False)
            return ("array_agg(%s %s) FILTER (WHERE %s)" % (c, _agg_order(rng, c, cols), f),
                    ARRAY_TYPE[bt], False)
        if r < 0.8 and c != "id":
            e, et = rng.choice(EXPRS[bt])
            e = fmt(e, c)
            ebt = base_type(et)
            if ebt in NUMERIC_TYPES and rng.random() < 0.5:
                return "sum(%s)" % e, SUM_TYPE[ebt], False
            if ebt == "bool":
                return "bool_or(%s)" % e, "bool", True
            return "%s(%s)" % (rng.choice(["min", "max"]), e), MINMAX_TYPE[ebt], False
        if r < 0.85 and bt != "bool":
            return ("%s WITHIN GROUP (ORDER BY %s)"
                    % (rng.choice(["percentile_disc(0.5)", "percentile_disc(0.1)", "mode()"]), c),
                    MINMAX_TYPE[bt], False)
        if r < 0.9 and bt in ("int", "bigint", "numeric", "date"):
            return "max(%s) - min(%s)" % (c, c), {"date": "int"}.get(bt, bt), False
        if r < 0.94 and bt in ("int", "bigint"):
            return "%s(%s)" % (rng.choice(["bit_or", "bit_and"]), c), bt, False
        if r < 0.98 and num:
            return (rng.choice(["coalesce(sum(%s), 0) * 2", "sum(%s) / count(*)",
                                "coalesce(max({c}), 0) + count(*)".replace("{c}", "%s")]) % c,
                    SUM_TYPE[bt], False)
    return "count(*)", "bigint", True


def gen_having(rng, kcols, cols):
    parts = []
    for _ in range(rng.randint(1, 2)):
        c, t = rng.choice(cols)
        bt = base_type(t)
        r = rng.random()
        if r < 0.3:
            parts.append("count(*) %s %d" % (rng.choice([">", ">=", "<"]), rng.randint(1, 5)))
        elif r < 0.45 and bt in NUMERIC_TYPES:
            parts.append("sum(%s) > %s" % (c, gen_value(rng, "int")))
        elif r < 0.55 and bt == "bool":
            parts.append(rng.choice(["bool_or(%s)", "NOT bool_and(%s)"]) % c)
        elif r < 0.65:
            parts.append("count(DISTINCT %s) > 1" % c)
        elif r < 0.75:
            parts.append("%s(%s) IS NOT NULL" % (rng.choice(["min", "max"]) if bt != "bool"
                                                 else "bool_or", c))
        else:
            k, kt = rng.choice(kcols)
            parts.append(rng.choice(["%s IS NOT NULL" % k, "%s IS NULL" % k,
                                     gen_filter_on(rng, k, kt).replace("%%", "%")]))
    return (" AND " if rng.random() < 0.6 else " OR ").join("(%s)" % p for p in parts)


def _place_indexes(rng, stmts, idx):
    """An index goes right after its table's creation (before the data), or
    at the end of the script under the table's final name."""
    for created_as, final, sql_ in idx:
        pos = [k for k, s in enumerate(stmts) if s.startswith("CREATE TABLE %s " % created_as)]
        if pos and rng.random() < 0.5:
            stmts.insert(pos[0] + 1, sql_ % created_as + ";")
        else:
            stmts.append(sql_ % final + ";")
    return stmts


def _target_stmts(rng, src, kind_name, create, insert):
    """The script around a mapping from src into a new table: a new name, or
    the source's (the new table renamed over it, or the source renamed out
    of the way).  create(name) and insert(name, input) give the statements.
    Returns the statements, the name the table is created as, its final
    name, and the inputs' names as the mapping reads them."""
    r = rng.random()
    if r < 0.7:
        final = kind_name
        return [create(final), insert(final, src), "DROP TABLE %s;" % src], final, final, src
    if r < 0.85:
        tmp = "%s_tmp" % src
        return ([create(tmp), insert(tmp, src), "DROP TABLE %s;" % src,
                 "ALTER TABLE %s RENAME TO %s;" % (tmp, src)], tmp, src, src)
    old = "%s_old" % src
    return (["ALTER TABLE %s RENAME TO %s;" % (src, old), create(src), insert(src, old),
             "DROP TABLE %s;" % old], src, src, old)


def gen_group(rng, case):
    """INSERT INTO new SELECT <group columns>, <aggregates> FROM src [WHERE]
    GROUP BY <columns> [HAVING]; NULL group keys, several aggregates."""
    ngk = 1 if rng.random() < 0.6 else 2
    keys = []
    for i in range(ngk):
        t = rng.choice(UNIT_KEY_TYPES)
        d = rng.randint(2, 25) if ngk == 1 else rng.randint(2, 7)
        keys.append(("c%d_%s" % (i, base_type(t)), t, gen_domain(rng, t, d)))
    key_null_p = rng.choice([0.0, 0.0, 0.05, 0.2])
    nrows = rng.randint(20, 300) if rng.random() < 0.85 else rng.randint(800, 2000)
    key_rows = [tuple(None if rng.random() < key_null_p else rng.choice(dom)
                      for _, _, dom in keys) for _ in range(nrows)]
    src = "src%d" % rng.randint(0, 9)
    kcols = [(k, t) for k, t, _ in keys]
    cols, rows, pk = gen_unit_source(rng, "c", kcols, key_rows, rng.randint(2, 5))
    case.src, case.src_cols, case.rows, case.src_pk = src, cols, rows, pk
    case.input_keys = {src: [k for k, _ in kcols]}
    key_nulls = key_null_p > 0
    vcols = cols[ngk:]
    nullable = [c for c, _ in vcols] + ([k for k, _ in kcols] if key_nulls else [])
    case.churn = gen_unit_churn(rng, src, cols, nullable)
    case.churn.insert(rng.randint(0, len(case.churn)),
                      key_index_sql(rng, src, [k for k, _ in kcols], cols))
    if ngk == 2 and rng.random() < 0.2:
        # An index on one key column only: no use for the units.
        case.churn.insert(0, "CREATE INDEX ON %s (%s)" % (src, kcols[1][0]))

    # The target: the group columns (maybe renamed, or of another type), an
    # expression of one sometimes, and 2 to 6 aggregates.
    used = set()
    out = []        # (name, declared type, expression, values)
    key_out = []
    for k, t, dom in keys:
        name = _out_name(used, rng.choice([k, k, "g_" + k.split("_")[0]]))
        decl = t
        if rng.random() < 0.15 and t in KEY_TYPE_CHANGES:
            decl = rng.choice(KEY_TYPE_CHANGES[t])
        out.append((name, decl, k, dom if decl == t else None))
        key_out.append(name)
    if rng.random() < 0.2:
        k, t, _ = rng.choice(keys)
        e, et = rng.choice([x for x in EXPRS[base_type(t)] if "id" not in x[0]])
        out.append((_out_name(used, k.split("_")[0] + "_x"), et, fmt(e, k), None))
    agg_cols = [("id", "int")] + cols
    for _ in range(rng.randint(2, 6)):
        e, rt, can_change = gen_aggregate(rng, agg_cols)
        decl = rt
        if can_change and rng.random() < 0.2 and rt in TYPE_CHANGES:
            decl = rng.choice(TYPE_CHANGES[rt])
        out.append((_out_name(used, "a%d" % len(used)), decl, e, None))
    sel = list(out)
    if rng.random() < 0.3:
        rng.shuffle(sel)
    # The key: a primary key (no NULL groups then), a unique index (NULL
    # groups too), or none.
    mode = rng.random()
    where = gen_filter(rng, cols)
    wparts = ["(%s)" % where.replace("%%", "%")] if where else []
    having = gen_having(rng, kcols, cols) if rng.random() < 0.4 else None
    hparts = [having] if having else []
    pk_t = mode < 0.55
    if pk_t and key_nulls:
        for k, _ in kcols:
            (wparts if rng.random() < 0.6 else hparts).append("%s IS NOT NULL" % k)
    group_by = [k for k, _ in kcols]
    rng.shuffle(group_by)
    extra = rng.random() < 0.2
    col_list = extra or sel != out or rng.random() < 0.4
    create_cols = list(out)
    if col_list and rng.random() < 0.4:
        rng.shuffle(create_cols)

    def create(name):
        defs = ["%s %s" % (n, d) for n, d, _, _ in create_cols]
        if extra:
            defs.insert(rng.randint(0, len(defs)), "extra int DEFAULT 7")
        if pk_t:
            pkc = list(key_out)
            rng.shuffle(pkc)
            defs.append("PRIMARY KEY (%s)" % ", ".join(pkc))
        return "CREATE TABLE %s (%s);" % (name, ", ".join(defs))

    def insert(name, inp):
        s = "INSERT INTO %s%s SELECT %s FROM %s" % (
            name, " (%s)" % ", ".join(n for n, _, _, _ in sel) if col_list else "",
            ", ".join(e for _, _, e, _ in sel), inp)
        if wparts:
            s += " WHERE " + " AND ".join(wparts)
        s += " GROUP BY " + ", ".join(group_by)
        if hparts:
            s += " HAVING " + " AND ".join("(%s)" % h for h in hparts)
        return s + ";"

    stmts, created, final, _ = _target_stmts(rng, src, rng.choice(["t_group", "totals", "t_new"]),
                                              create, insert)
    unique = key_out if pk_t else None
    idx = []
    if not pk_t and mode < 0.85:
        cols_ = list(key_out)
        rng.shuffle(cols_)
        nnd = rng.random() < 0.4
        idx.append((created, final, "CREATE UNIQUE INDEX ON %%s (%s)%s"
                    % (", ".join(cols_), " NULLS NOT DISTINCT" if nnd else "")))
        unique = key_out
    elif rng.random() < 0.5:
        idx.append((created, final, "CREATE INDEX ON %%s (%s)"
                    % rng.choice([n for n, d, _, _ in out if not d.endswith("[]")])))
    stmts = _place_indexes(rng, stmts, idx)
    tcols = [(n, d) for n, d, _, _ in create_cols] + ([("extra", "int")] if extra else [])
    vals = {n: v for n, _, _, v in out if v}
    t = UnitTable(final, tcols, key_out, unique, vals,
                  dim=key_out[0] if key_out[0] in vals else None)
    return stmts, t


def gen_join(rng, case):
    """INSERT INTO new SELECT ... FROM a [INNER|LEFT|RIGHT] JOIN b ON a.k = b.k
    [AND ...] [WHERE ...], or FROM a, b WHERE ...: one or two key columns,
    fan-out on both sides, NULL keys, keys of one side only."""
    a = "src%d" % rng.randint(0, 9)
    b = "rel%d" % rng.randint(0, 9)
    fk = rng.random() < 0.25          # b's key is its id, its primary key
    nk = 1 if fk or rng.random() < 0.65 else 2
    na = rng.randint(20, 250) if rng.random() < 0.85 else rng.randint(600, 1500)
    nb = rng.randint(5, 120)
    null_a = rng.choice([0.0, 0.05, 0.2])
    null_b = rng.choice([0.0, 0.05, 0.2])
    b_unique = fk or rng.random() < 0.3
    if fk:
        b_ids = rng.sample(range(1, nb * 3 + 2), nb)
        a_keys = [("c0_int", "int")]
        b_keys = [("id", "int")]
        absent = [i for i in range(1, nb * 3 + 5) if i not in b_ids]
        doms = [b_ids]
        a_key_rows = [(None if rng.random() < null_a else
                       rng.choice(b_ids) if rng.random() < 0.85 else rng.choice(absent),)
                      for _ in range(na)]
        b_key_rows = [(i,) for i in b_ids]
        types = [("int", "int")]
    else:
        a_keys, b_keys, doms, types = [], [], [], []
        for i in range(nk):
            t = rng.choice([x for x in UNIT_KEY_TYPES if x != "bool"])
            tb = t
            if t == "int":
                # keys of two types, either side the wider (int values)
                r = rng.random()
                if r < 0.2:
                    tb = "bigint"
                elif r < 0.3:
                    t, tb = "bigint", "int"
            elif t in ("text", "varchar(24)") and rng.random() < 0.3:
                tb = {"text": "varchar(24)", "varchar(24)": "text"}[t]
            d = rng.randint(3, 40) if nk == 1 else rng.randint(2, 8)
            doms.append(gen_domain(rng, "int" if "int" in (t, tb) else t, d))
            types.append((t, tb))
            a_keys.append(("c%d_%s" % (i, base_type(t)), t))
            b_keys.append(("e%d_%s" % (i, base_type(tb)), tb))
        # Each side holds a part of the domain: keys of one side only.
        da = [rng.sample(d, max(1, int(len(d) * rng.uniform(0.5, 1.0)))) for d in doms]
        db = [rng.sample(d, max(1, int(len(d) * rng.uniform(0.5, 1.0)))) for d in doms]
        a_key_rows = [tuple(None if rng.random() < null_a else rng.choice(d) for d in da)
                      for _ in range(na)]
        if b_unique:
            combos = list(itertools.product(*db))
            rng.shuffle(combos)
            b_key_rows = combos[:nb]
            b_key_rows += [tuple(None if j == 0 or rng.random() < 0.5 else rng.choice(d)
                                 for j, d in enumerate(db))
                           for _ in range(rng.choice([0, 0, 1, 3]))]
            rng.shuffle(b_key_rows)
        else:
            b_key_rows = [tuple(None if rng.random() < null_b else rng.choice(d) for d in db)
                          for _ in range(nb)]
        # Fan-out on both sides, but a bounded join.
        def size():
            ca = collections.Counter(k for k in a_key_rows if None not in k)
            cb = collections.Counter(k for k in b_key_rows if None not in k)
            return sum(ca[k] * cb[k] for k in ca)
        while size() > 2500 and len(b_key_rows) > 3:
            b_key_rows = b_key_rows[: len(b_key_rows) // 2]
        b_ids = None
    a_cols, a_rows, a_pk = gen_unit_source(rng, "c", a_keys, a_key_rows, rng.randint(1, 4))
    b_cols, b_rows, b_pk = gen_unit_source(rng, "e", [] if fk else b_keys, b_key_rows
                                           if not fk else [() for _ in b_key_rows],
                                           rng.randint(1, 4), ids=b_ids, dups=not b_unique)
    if fk:
        b_pk = True
    case.src, case.src_cols, case.rows, case.src_pk = a, a_cols, a_rows, a_pk
    case.src_b, case.src_b_cols, case.rows_b, case.src_b_pk = b, b_cols, b_rows, b_pk
    case.input_keys = {a: [k for k, _ in a_keys], b: [k for k, _ in b_keys]}
    case.b_unique = b_unique
    case.churn = gen_unit_churn(rng, a, a_cols, [c for c, _ in a_cols])
    case.churn += gen_unit_churn(rng, b, b_cols, [c for c, _ in b_cols])
    if not fk:
        case.churn.insert(rng.randint(0, len(case.churn)),
                          key_index_sql(rng, b, [k for k, _ in b_keys], b_cols, unique=b_unique))
    case.churn.insert(rng.randint(0, len(case.churn)),
                      key_index_sql(rng, a, [k for k, _ in a_keys], a_cols))

    # The join: which table is on the left, the join type, aliases.
    qa, qb = rng.choice([(a, b), ("s", "r"), ("x", "y"), ("l", "o")])
    a_left = rng.random() < 0.6
    jt = rng.choice(["JOIN", "INNER JOIN", "LEFT JOIN", "LEFT OUTER JOIN", "RIGHT JOIN",
                     "RIGHT JOIN", ","])
    inner = jt in ("JOIN", "INNER JOIN", ",")
    a_preserved = not inner and (jt.startswith("LEFT") == a_left)
    b_preserved = not inner and not a_preserved

    def q(side, c):
        return "%s.%s" % (qa if side == "a" else qb, c)

    used = set()
    out = []      # (name, declared type, expression, values)
    a_ids = sorted({r[0] for r in a_rows})
    b_ids_all = sorted({r[0] for r in b_rows})
    if rng.random() < 0.9:
        out.append((_out_name(used, "id"), "int", q("a", "id"), a_ids))
    if rng.random() < 0.85 and not fk:
        out.append((_out_name(used, "b_id"), "int", q("b", "id"), b_ids_all))
    key_out = []
    for i in range(nk):
        r = rng.random()
        name = "b_id" if fk else "k%d" % i
        ta_, tb_ = types[i]
        if r < 0.4:
            out.append((_out_name(used, name), ta_, q("a", a_keys[i][0]), doms[i]))
        elif r < 0.75 or fk:
            out.append((_out_name(used, name), tb_, q("b", b_keys[i][0]), doms[i]))
        elif r < 0.9:
            out.append((_out_name(used, name), tb_, "coalesce(%s, %s)"
                        % (q("a", a_keys[i][0]), q("b", b_keys[i][0])), doms[i]))
        else:
            continue
        key_out.append(out[-1][0])
    for _ in range(rng.randint(1, 4)):
        side = rng.choice("ab")
        scols = (a_cols[len(a_keys):] if side == "a" else b_cols[0 if fk else len(b_keys):])
        if not scols:
            continue
        c, t = rng.choice(scols)
        e, et = rng.choice(EXPRS[base_type(t)])
        e = re.sub(r"\bid\b", q(side, "id"), e)
        decl = et
        if rng.random() < 0.2 and et in TYPE_CHANGES:
            decl = rng.choice(TYPE_CHANGES[et])
        srcrows = a_rows if side == "a" else b_rows
        scolnames = [x for x, _ in (a_cols if side == "a" else b_cols)]
        vals = None
        if e == "{c}" and decl == t:
            j = scolnames.index(c) + 1
            vals = sorted({r[j] for r in srcrows if r[j] is not None}, key=repr)
        out.append((_out_name(used, "%s_%s" % (side, c)), decl, fmt(e, q(side, c)), vals))
    if rng.random() < 0.25:
        ia = [c for c, t in a_cols if base_type(t) in ("int", "numeric")]
        ib = [c for c, t in b_cols if base_type(t) in ("int", "numeric")]
        if ia and ib:
            out.append((_out_name(used, "mix"), "numeric",
                        "%s + %s" % (q("a", rng.choice(ia)), q("b", rng.choice(ib))), None))
        else:
            out.append((_out_name(used, "mix"), "text", "coalesce(%s::text, '-') || '/' || "
                        "coalesce(%s::text, '-')" % (q("a", "id"), q("b", "id")), None))

    # ON: the key's equalities (either way round), and sometimes more.
    conds = []
    for i in range(nk):
        x, y = q("a", a_keys[i][0]), q("b", b_keys[i][0])
        conds.append("%s = %s" % ((x, y) if rng.random() < 0.6 else (y, x)))
    rng.shuffle(conds)
    if rng.random() < 0.3:
        side = rng.choice("ab")
        scols = a_cols if side == "a" else b_cols
        r = rng.random()
        if r < 0.7:
            c, t = rng.choice(scols)
            conds.append(gen_filter_on(rng, q(side, c), t).replace("%%", "%"))
        else:
            conds.append("%s %s %s" % (q("a", "id"), rng.choice(["<>", "<"]), q("b", "id")))
    where = []
    if rng.random() < 0.4:
        side = rng.choice("ab")
        scols = a_cols if side == "a" else b_cols
        c, t = rng.choice(scols)
        where.append(gen_filter_on(rng, q(side, c), t).replace("%%", "%"))
    if rng.random() < 0.1 and not inner:
        where.append("%s.id IS NULL" % (qb if a_preserved else qa))

    def ref(t_, qn):
        return t_ if qn == t_ else "%s %s" % (t_, qn)

    # The key of the new table.
    names = [n for n, _, _, _ in out]
    has_ab = "id" in names and "b_id" in names and not fk
    mode = rng.random()
    pk_def = None
    unique = None
    idx_sql = None
    if mode < 0.5 and has_ab and a_pk and b_pk and inner:
        pk_def = ["id", "b_id"]
    elif mode < 0.5 and "id" in names and a_pk and b_unique and not b_preserved:
        pk_def = ["id"]
    elif mode < 0.8 and has_ab and a_pk and b_pk:
        ucols = rng.sample(["id", "b_id"], 2)
        idx_sql = "CREATE UNIQUE INDEX ON %%s (%s)%s" % (
            ", ".join(ucols), " NULLS NOT DISTINCT" if rng.random() < 0.3 else "")
        unique = ["id", "b_id"]
    elif mode < 0.8 and fk and "id" in names and a_pk and not b_preserved:
        pk_def = ["id"]
    elif rng.random() < 0.6:
        idx_sql = "CREATE INDEX ON %%s (%s)" % rng.choice(
            [n for n in names if n in ("id", "b_id")] + key_out or names)
    if pk_def:
        unique = pk_def

    col_list = rng.random() < 0.4
    create_cols = list(out)
    if col_list and rng.random() < 0.4:
        rng.shuffle(create_cols)

    def create(name):
        defs = ["%s %s" % (n, d) for n, d, _, _ in create_cols]
        if pk_def == ["id"] and defs[0] == "id int" and rng.random() < 0.5:
            defs[0] = "id int PRIMARY KEY"
        elif pk_def:
            defs.append("PRIMARY KEY (%s)" % ", ".join(rng.sample(pk_def, len(pk_def))))
        return "CREATE TABLE %s (%s);" % (name, ", ".join(defs))

    def insert(name, inp):
        la, ra = (inp, b) if a_left else (b, inp)
        lq, rq = (qa, qb) if a_left else (qb, qa)
        lq = la if lq in (a, b) else lq
        rq = ra if rq in (a, b) else rq
        s = "INSERT INTO %s%s SELECT %s FROM " % (
            name, " (%s)" % ", ".join(n for n, _, _, _ in out) if col_list else "",
            ", ".join(e for _, _, e, _ in out))
        if jt == ",":
            s += "%s, %s WHERE %s" % (ref(la, lq), ref(ra, rq), " AND ".join(conds + where))
        else:
            s += "%s %s %s ON %s" % (ref(la, lq), jt, ref(ra, rq), " AND ".join(conds))
            if where:
                s += " WHERE " + " AND ".join(where)
        return s + ";"

    stmts, created, final, inp = _target_stmts(rng, a, rng.choice(["t_join", "joined", "t_new"]),
                                                create, insert)
    if qa == a and inp != a:
        # The source renamed out of the way: qualify with its new name.
        stmts = [s.replace("%s." % a, "%s." % inp) if s.startswith("INSERT") else s
                 for s in stmts]
    if rng.random() < 0.5:
        stmts.append("DROP TABLE %s;" % b)
    else:
        # The inputs dropped in the other order.
        stmts.insert(stmts.index("DROP TABLE %s;" % inp), "DROP TABLE %s;" % b)
    if idx_sql:
        stmts = _place_indexes(rng, stmts, [(created, final, idx_sql)])
    vals = {n: v for n, _, _, v in out if v}
    t = UnitTable(final, [(n, d) for n, d, _, _ in create_cols], key_out, unique, vals,
                  dim=key_out[0] if key_out else None,
                  id_col="id" if "id" in names else None)
    case.join_type = jt
    case.join_input = inp
    case.join_preserved = {x for x, kept in ((a, a_preserved), (b, b_preserved)) if kept}
    return stmts, t


def gen_unit_case(seed, kind, snapshots=False):
    rng = random.Random("unit-case-%d" % seed)
    LONG_COLS.clear()
    case = Case()
    case.seed = seed
    case.kind = kind
    case.name = "mig_%d" % seed
    if kind == "group":
        stmts, t = gen_group(rng, case)
    else:
        stmts, t = gen_join(rng, case)
    # A live table of key values, for joins of the new table with it.
    case.setup = []
    if t.dim:
        decl = t.decl[t.dim]
        keys = list(t.vals[t.dim]) + [gen_value(rng, _gen_type(decl)) for _ in range(3)]
        seen = []
        for k in keys:
            if k not in seen:
                seen.append(k)
        case.setup.append(("CREATE TABLE dim (k %s UNIQUE, label int)" % decl, None))
        for i, k in enumerate(seen):
            case.setup.append(("INSERT INTO dim VALUES (%s, %s)", [k, i % 4]))
        case.setup.append(("INSERT INTO dim VALUES (NULL, 0)", None))
    fkr = random.Random("fkey-%d" % seed)
    stmts = _with_fkey(fkr, case, stmts)
    # (A column the key's index holds is not dropped: the index would go.)
    stmts = _with_alters(random.Random("alter-%d" % seed), stmts, case.src, case.src_cols,
                         keep="\n".join(case.churn))
    case.script = "\n".join(stmts)
    case.tables = [t]
    case.snapshots = snapshots
    case.workload = (gen_unit_snapshot_workload if snapshots else gen_unit_workload)(rng, case)
    _fkey_workload(fkr, case)
    _with_live(case)
    _with_tracked_in_place(case)
    _with_shared_join(case)
    _with_join_in_place(case)
    return case


# ---------------------------------------------------------------------------
# Workloads of GROUP BY and join cases

def _is_array(decl):
    return decl.endswith("[]")


def _orderable(decl):
    return not _is_array(decl) and base_type(decl) != "bool"


def _pick(rng, t, c, null_p=0.0):
    """A value for column c of t: mostly one the source gave it."""
    decl = t.decl[c]
    if rng.random() < null_p:
        return None
    vals = t.vals.get(c)
    if vals and rng.random() < 0.85:
        return rng.choice(vals)
    if _is_array(decl):
        return [gen_value(rng, _gen_type(decl[:-2])) for _ in range(rng.randint(1, 3))]
    return gen_value(rng, _gen_type(decl))


def unit_pred(rng, t):
    """A WHERE clause on t: (text, params, single), single if it names one
    row of t's primary key or unique index at most."""
    scalar = [c for c in t.col_names() if not _is_array(t.decl[c])]
    orderable = [c for c in scalar if _orderable(t.decl[c])]
    r = rng.random()
    if r < 0.35 and t.keys:
        keys = list(t.keys)
        if len(keys) > 1 and rng.random() < 0.3:
            keys = [rng.choice(keys)]
        parts, params = [], []
        for k in keys:
            v = _pick(rng, t, k, null_p=0.1)
            if v is None:
                parts.append("%s IS NULL" % k)
            else:
                parts.append("%s = %%s" % k)
                params.append(v)
        return " AND ".join(parts), params, False
    if r < 0.47 and t.unique:
        params = [_pick(rng, t, c) for c in t.unique]
        return (" AND ".join("%s = %%s" % c for c in t.unique), params,
                None not in params)
    if r < 0.6:
        c = rng.choice(scalar)
        v = _pick(rng, t, c)
        if v is None:
            return "%s IS NULL" % c, [], False
        if rng.random() < 0.2:
            return "%s IS NOT DISTINCT FROM %%s" % c, [v], False
        return "%s = %%s" % c, [v], False
    if r < 0.75 and orderable:
        c = rng.choice(orderable)
        a, b = _pick(rng, t, c), _pick(rng, t, c)
        if a is None or b is None:
            return "%s IS NOT NULL" % c, [], False
        if rng.random() < 0.3:
            return "%s %s %%s" % (c, rng.choice(["<", ">=", ">"])), [a], False
        lo, hi = a, b
        try:
            lo, hi = sorted([a, b])
        except TypeError:
            pass
        return "%s BETWEEN %%s AND %%s" % c, [lo, hi], False
    if r < 0.85:
        c = rng.choice(t.keys or scalar)
        vs = [v for v in (_pick(rng, t, c) for _ in range(rng.randint(1, 5))) if v is not None]
        if not vs or _is_array(t.decl[c]):
            return "%s IS NULL" % c, [], False
        return "%s = ANY(%%s)" % c, [vs], False
    arrays = [c for c in t.col_names() if _is_array(t.decl[c])]
    if arrays and rng.random() < 0.4:
        c = rng.choice(arrays)
        if rng.random() < 0.5:
            return "cardinality(%s) > %d" % (c, rng.randint(1, 4)), [], False
        v = _pick(rng, t, c)
        return "%%s = ANY(%s)" % c, [v[0] if v else None], False
    c = rng.choice(scalar)
    bt = base_type(t.decl[c])
    if bt in NUMERIC_TYPES and rng.random() < 0.5:
        return "%s %%%% %d = 0" % (c, rng.randint(2, 4)), [], False
    return "%s IS %sNULL" % (c, rng.choice(["", "NOT "])), [], False


def _set_expr(rng, t, c):
    decl = t.decl[c]
    if _is_array(decl):
        return "NULL", []
    return _val_expr(rng, c, decl)


def _unit_row(rng, t):
    vals = []
    for c, d in t.cols:
        null_p = 0.05 if t.unique and c in t.unique else 0.2
        vals.append(_pick(rng, t, c, null_p))
    return vals


def gen_unit_stmt(rng, t, case):
    """A statement on the new table of a unit case; .probe is a read of the
    rows it addressed (for the snapshot variant)."""
    cols = t.col_names()
    order = "ORDER BY " + ", ".join(cols)
    pred, params, single = unit_pred(rng, t)
    probe = Stmt("SELECT * FROM %s WHERE %s" % (t.name, pred), params)
    inline = rng.random() < 0.3
    prepare = True if rng.random() < 0.15 else None
    scalar = [c for c in cols if not _is_array(t.decl[c])]
    # Columns an UPDATE may set: those of the unique key only by a
    # statement on one row (two rows of one statement must not meet there).
    settable = [c for c in cols if not (t.unique and c in t.unique and not single)]
    st = None
    r = rng.random()
    if r < 0.2:
        st = Stmt("SELECT * FROM %s WHERE %s" % (t.name, pred), params, prepare=prepare,
                  inline=inline)
    elif r < 0.25:
        sel = rng.sample(cols, rng.randint(1, len(cols)))
        st = Stmt("SELECT %s FROM %s WHERE %s" % (", ".join(sel), t.name, pred), params,
                  inline=inline)
    elif r < 0.29:
        st = Stmt("SELECT * FROM %s %s LIMIT %d OFFSET %d"
                  % (t.name, order, rng.randint(1, 20), rng.randint(0, 40)), ordered=True)
    elif r < 0.34:
        c = rng.choice(scalar)
        aggs = "count(*), count(%s)" % c
        if _orderable(t.decl[c]):
            aggs += ", min(%s), max(%s)" % ((_scale_free(c, t.decl[c]),) * 2)
        if base_type(t.decl[c]) in NUMERIC_TYPES:
            aggs += ", sum(%s)" % c
        st = Stmt("SELECT %s FROM %s WHERE %s" % (aggs, t.name, pred), params, inline=inline)
    elif r < 0.44 and settable:
        c = rng.choice(settable)
        e, p = _set_expr(rng, t, c)
        st = Stmt("UPDATE %s SET %s = %s WHERE %s%s" % (t.name, c, e, pred,
                                                        rng.choice([" RETURNING *", ""])),
                  p + params, prepare=prepare, inline=inline)
    elif r < 0.52:
        st = Stmt("DELETE FROM %s WHERE %s%s" % (t.name, pred,
                                                 rng.choice([" RETURNING *", ""])),
                  params, inline=inline)
    elif r < 0.6:
        st = Stmt("INSERT INTO %s (%s) VALUES (%s) RETURNING *"
                  % (t.name, ", ".join(cols), ", ".join(["%s"] * len(cols))),
                  _unit_row(rng, t), inline=inline)
        probe = _probe_row(t, st.params)
    elif r < 0.67 and t.unique:
        vals = _unit_row(rng, t)
        others = [c for c in cols if c not in t.unique]
        if not others or rng.random() < 0.35:
            action = "DO NOTHING"
        else:
            c = rng.choice(others)
            action = "DO UPDATE SET %s = EXCLUDED.%s" % (c, c)
            if rng.random() < 0.3:
                e, p = _set_expr(rng, t, c)
                if not p:
                    action = "DO UPDATE SET %s = %s" % (c, e.replace(c, "%s.%s" % (t.name, c)))
        st = Stmt("INSERT INTO %s (%s) VALUES (%s) ON CONFLICT (%s) %s RETURNING *"
                  % (t.name, ", ".join(cols), ", ".join(["%s"] * len(cols)),
                     ", ".join(t.unique), action), vals, prepare=prepare, inline=inline)
        probe = _probe_row(t, vals)
    elif r < 0.8:
        st = _unit_join_stmt(rng, t, pred, params)
    else:
        st = _unit_more_stmt(rng, t, pred, params)
    if st is None:
        st = Stmt("SELECT * FROM %s WHERE %s" % (t.name, pred), params, inline=inline)
    st.probe = probe
    return st


def _probe_row(t, vals):
    parts, params = [], []
    for c, v in zip(t.col_names(), vals):
        if c in (t.unique or t.keys) and not _is_array(t.decl[c]):
            if v is None:
                parts.append("%s IS NULL" % c)
            else:
                parts.append("%s = %%s" % c)
                params.append(v)
    return Stmt("SELECT * FROM %s WHERE %s" % (t.name, " AND ".join(parts) or "true"), params)


def _unit_join_stmt(rng, t, pred, params):
    """The new table joined with live tables (dim: key values; side: ids
    of the source), or with itself."""
    cols = t.col_names()
    tpred = re.sub(r"\b(%s)\b" % "|".join(map(re.escape, cols)), r"t.\1", pred)
    r = rng.random()
    label = rng.randint(0, 3)
    if t.dim and r < 0.6:
        d = t.dim
        j = rng.random()
        if j < 0.2:
            return Stmt("SELECT t.*, d.label FROM %s t JOIN dim d ON d.k = t.%s WHERE d.label = %%s"
                        % (t.name, d), [label], inline=rng.random() < 0.3)
        if j < 0.3:
            return Stmt("SELECT d.k, d.label, t.* FROM dim d LEFT JOIN %s t ON t.%s = d.k "
                        "WHERE d.label = %%s" % (t.name, d), [label])
        if j < 0.4:
            return Stmt("SELECT * FROM %s WHERE %s IN (SELECT k FROM dim WHERE label = %%s)"
                        % (t.name, d), [label])
        if j < 0.48:
            return Stmt("SELECT count(*) FROM %s t WHERE NOT EXISTS "
                        "(SELECT 1 FROM dim d WHERE d.k = t.%s) AND %s" % (t.name, d, tpred),
                        params)
        # (Several rows: not a column of the unique key.)
        free = [c for c in cols if c != d and c not in (t.unique or [])]
        if j < 0.62 and free:
            c = rng.choice(free)
            e, p = _set_expr(rng, t, c)
            e = re.sub(r"\b%s\b" % c, "t.%s" % c, e)
            return Stmt("UPDATE %s t SET %s = %s FROM dim d WHERE d.k = t.%s AND d.label = %%s"
                        % (t.name, c, e, d), p + [label])
        if j < 0.75:
            return Stmt("DELETE FROM %s t USING dim d WHERE d.k = t.%s AND d.k = %%s RETURNING t.*"
                        % (t.name, d), [_pick(rng, t, d)])
        if j < 0.85 and (not t.unique or t.unique == [d]):
            return Stmt("INSERT INTO %s (%s) SELECT k FROM dim WHERE label = %%s%s"
                        % (t.name, d, rng.choice(["", " ON CONFLICT DO NOTHING"])), [label])
        return Stmt("SELECT x.%s, (SELECT d.label FROM dim d WHERE d.k = x.%s) FROM %s x WHERE %s"
                    % (d, d, t.name, re.sub(r"\bt\.", "x.", tpred)), params)
    if t.id_col and r < 0.8:
        i = t.id_col
        if rng.random() < 0.5:
            return Stmt("SELECT t.*, s.tag FROM %s t JOIN side s ON s.id = t.%s WHERE s.tag = %%s"
                        % (t.name, i), [rng.randint(0, 4)])
        return Stmt("SELECT count(*) FROM %s t WHERE EXISTS "
                    "(SELECT 1 FROM side s WHERE s.id = t.%s) AND %s" % (t.name, i, tpred), params)
    k = rng.choice(t.keys or cols)
    return Stmt("SELECT x.%s, count(*) FROM %s x JOIN %s y ON x.%s = y.%s WHERE %s GROUP BY x.%s"
                % (k, t.name, t.name, k, k, re.sub(r"\bt\.", "x.", tpred), k), params)


def _unit_more_stmt(rng, t, pred, params):
    """CTEs, set operations, locking reads, INSERT ... SELECT."""
    cols = t.col_names()
    k = rng.choice(t.keys or cols)
    r = rng.random()
    if r < 0.2:
        return Stmt("WITH x AS (SELECT * FROM %s WHERE %s) SELECT count(*) FROM x"
                    % (t.name, pred), params, inline=rng.random() < 0.3)
    if r < 0.35:
        return Stmt("WITH d AS (DELETE FROM %s WHERE %s RETURNING *) SELECT count(*) FROM d"
                    % (t.name, pred), params)
    if r < 0.5:
        p2, params2, _ = unit_pred(rng, t)
        return Stmt("SELECT %s FROM %s WHERE %s UNION SELECT %s FROM %s WHERE %s"
                    % (k, t.name, pred, k, t.name, p2), params + params2)
    if r < 0.65:
        return Stmt("SELECT * FROM %s WHERE %s FOR UPDATE" % (t.name, pred), params)
    if r < 0.8:
        # A copy of rows, their unique key moved out of the way.
        sel = []
        for c in cols:
            if t.unique and c in t.unique and base_type(t.decl[c]) in ("int", "bigint"):
                sel.append("%s + 1000000" % c)
            else:
                sel.append(c)
        if t.unique and not [c for c in t.unique if base_type(t.decl[c]) in ("int", "bigint")]:
            return Stmt("INSERT INTO %s (%s) SELECT %s FROM %s WHERE %s ON CONFLICT DO NOTHING"
                        % (t.name, ", ".join(cols), ", ".join(cols), t.name, pred), params)
        return Stmt("INSERT INTO %s (%s) SELECT %s FROM %s WHERE %s"
                    % (t.name, ", ".join(cols), ", ".join(sel), t.name, pred), params)
    return Stmt("SELECT %s, count(*) FROM %s WHERE %s GROUP BY %s" % (k, t.name, pred, k),
                params)


def gen_unit_workload(rng, case):
    """gen_workload for a unit case: transactions, savepoints, cursors,
    prepared statements and PL/pgSQL around gen_unit_stmt."""
    t = case.tables[0]
    out = []
    in_tx = False
    tx_left = 0
    savepoint = False
    cursors = 0
    for _ in range(rng.randint(20, 45)):
        if not in_tx and rng.random() < 0.12:
            iso = rng.choice(["", " ISOLATION LEVEL REPEATABLE READ",
                              " ISOLATION LEVEL SERIALIZABLE", " ISOLATION LEVEL READ COMMITTED"])
            out.append(Stmt("BEGIN" + iso))
            in_tx = True
            tx_left = rng.randint(1, 4)
            savepoint = False
        if in_tx and not savepoint and rng.random() < 0.25:
            out.append(Stmt("SAVEPOINT lf_sp"))
            savepoint = True
        if in_tx and rng.random() < 0.1:
            cursors += 1
            cur = "lf_cur%d" % cursors
            pred, params, _ = unit_pred(rng, t)
            out.append(Stmt("DECLARE %s CURSOR FOR SELECT * FROM %s WHERE %s ORDER BY %s"
                            % (cur, t.name, pred, ", ".join(t.col_names())), params,
                            ordered=True, inline=True))
            out.append(Stmt("FETCH %d FROM %s" % (rng.randint(1, 5), cur), ordered=True))
            out.append(Stmt("FETCH %d FROM %s" % (rng.randint(1, 5), cur), ordered=True))
            out.append(Stmt("CLOSE %s" % cur))
        else:
            out.append(gen_unit_stmt(rng, t, case))
        if in_tx:
            tx_left -= 1
            if savepoint and rng.random() < 0.4:
                out.append(Stmt(rng.choice(["ROLLBACK TO SAVEPOINT lf_sp",
                                            "RELEASE SAVEPOINT lf_sp"])))
                savepoint = False
            if tx_left <= 0:
                out.append(Stmt(rng.choice(["COMMIT", "COMMIT", "ROLLBACK"])))
                in_tx = False
    if in_tx:
        out.append(Stmt("COMMIT"))
    # Prepared statements and PL/pgSQL (plan caching) by a column with values.
    byval = [c for c in t.col_names() if c in t.vals and _orderable(t.decl[c])]
    if byval:
        c = rng.choice(byval)
        for _ in range(rng.randint(0, 10)):
            lo, hi = _pick(rng, t, c), _pick(rng, t, c)
            try:
                lo, hi = sorted([lo, hi])
            except TypeError:
                pass
            out.insert(rng.randint(0, len(out)), Stmt(
                "SELECT count(*), min(%s), max(%s) FROM %s WHERE %s BETWEEN %%s AND %%s"
                % (c, c, t.name, c), [lo, hi], prepare=True))
        decl = t.decl[c]
        if rng.random() < 0.5:
            fname = "lf_probe_%d" % case.seed
            out.insert(0, Stmt(
                "CREATE FUNCTION %s(v %s) RETURNS bigint LANGUAGE plpgsql AS "
                "$f$ BEGIN RETURN (SELECT count(*) FROM %s WHERE %s = v); END $f$"
                % (fname, decl, t.name, c)))
            for _ in range(rng.randint(2, 8)):
                out.insert(rng.randint(1, len(out)),
                           Stmt("SELECT %s(%%s::%s)" % (fname, decl), [_pick(rng, t, c)]))
        if rng.random() < 0.3:
            fname = "lf_touch_%d" % case.seed
            out.insert(0, Stmt(
                "CREATE FUNCTION %s(v %s) RETURNS bigint LANGUAGE plpgsql AS "
                "$f$ DECLARE n bigint; BEGIN UPDATE %s SET %s = %s WHERE %s = v; "
                "GET DIAGNOSTICS n = ROW_COUNT; RETURN n; END $f$"
                % (fname, decl, t.name, c, c, c)))
            for _ in range(rng.randint(2, 8)):
                out.insert(rng.randint(1, len(out)),
                           Stmt("SELECT %s(%%s::%s)" % (fname, decl), [_pick(rng, t, c)]))
    mode = rng.choice(["auto", "auto", "force_generic_plan", "force_custom_plan"])
    if mode != "auto":
        out.insert(0, Stmt("SET plan_cache_mode = %s" % mode))
    if rng.random() < 0.3:
        out.insert(rng.randint(len(out) // 2, len(out)),
                   Stmt("SELECT count(*) FROM %s" % t.name))
    return out


def gen_unit_snapshot_workload(rng, case):
    """gen_snapshot_workload for a unit case: session 1's snapshot, session
    0's statements, then session 1 reads the rows they addressed."""
    t = case.tables[0]
    out = []
    for _ in range(rng.randint(4, 9)):
        iso = rng.choice(["REPEATABLE READ", "SERIALIZABLE"])
        out.append(Stmt("BEGIN ISOLATION LEVEL " + iso, session=1))
        out.append(Stmt("SELECT count(*) FROM side", session=1))
        probes = []
        for _ in range(rng.randint(1, 4)):
            st = gen_unit_stmt(rng, t, case)
            out.append(st)
            probes.append(st.probe)
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.6:
                p = rng.choice(probes)
                st = Stmt(p.text, p.params)
            else:
                st = gen_unit_stmt(rng, t, case)
            st.session = 1
            out.append(st)
        out.append(Stmt(rng.choice(["COMMIT", "COMMIT", "ROLLBACK"]), session=1))
        for _ in range(rng.randint(0, 2)):
            out.append(gen_unit_stmt(rng, t, case))
    extra = random.Random("snapshot-extras-%d" % case.seed)
    if extra.random() < 0.4:
        case.prestart = out[:2]
        out = out[2:]
    if extra.random() < 0.35:
        spots = [i for i, st in enumerate(out) if st.session == 0]
        if spots:
            out.insert(extra.choice(spots) + 1, Stmt(COMPLETE))
    return out


# ---------------------------------------------------------------------------
# Inputs that stay live: a mapping's input that the script does not drop.

# Shares of the cases whose script keeps one or both inputs (drawn from a
# stream of their own, so that every seed keeps the rest of its case).
LIVE_SHARE = {"group": 0.3, "join": 0.3, "rows": 0.15}


def _live_inputs(case):
    """The inputs whose DROP TABLE the script may leave out: dropped by name,
    never renamed, altered or replaced by a table of their name."""
    lines = case.script.split("\n")
    out = []
    for x in [case.src] + ([case.src_b] if getattr(case, "src_b", None) else []):
        if lines.count("DROP TABLE %s;" % x) != 1:
            continue
        if any(re.match(r"(ALTER TABLE %s |CREATE TABLE %s |CREATE TABLE %s$)" % (x, x, x), l)
               or l.endswith("RENAME TO %s;" % x) for l in lines):
            continue
        out.append(x)
    return out


def _with_live(case):
    """Leave out the DROP TABLE of one or both inputs of some cases, and add
    statements on them (reads, updates of values and keys, deletes, inserts
    into existing groups or join keys and new ones) to the workload, mixed
    with its statements on the new tables.  Eagerly the input is a table the
    script only read; the final state compares it too (public_tables)."""
    case.live = []
    lr = random.Random("live-%d" % case.seed)
    share = LIVE_SHARE.get(case.kind, LIVE_SHARE["rows"])
    if lr.random() >= share:
        return
    cand = _live_inputs(case)
    if not cand:
        return
    if len(cand) == 2 and lr.random() < 0.4:
        live = cand
    else:
        live = [lr.choice(cand)]
    lines = case.script.split("\n")
    for x in live:
        lines.remove("DROP TABLE %s;" % x)
    case.script = "\n".join(lines)
    case.live = live
    keys = getattr(case, "input_keys", {})
    for x in live:
        if x == case.src:
            cols, rows, pk = case.src_cols, case.rows, case.src_pk
        else:
            cols, rows, pk = case.src_b_cols, case.rows_b, case.src_b_pk
        unique = getattr(case, "b_unique", False) and x == getattr(case, "src_b", None)
        info = (x, [("id", "int")] + list(cols), rows, pk, keys.get(x, []), unique)
        for _ in range(lr.randint(8, 20)):
            st = _live_stmt(lr, info, case)
            spots = [i for i, w in enumerate(case.workload) if w.session == 0] or [0]
            # Before a statement of session 0, or at the end.
            case.workload.insert(lr.choice(spots + [len(case.workload)]), st)


def _with_tracked_in_place(case):
    """Some GROUP BY cases whose input stays live get NOT NULL group key
    columns (before start()), so that the input is tracked in place
    (src/live.c) rather than replaced; some of those, and some whose input
    the script drops, get a second GROUP BY mapping of the same input by
    other columns (sib_total, tracked with a table of done keys of its own;
    a dropped input is then tracked by keys too), and sometimes a row
    mapping (sib_rows, whose rows move with the first mapping's groups),
    read and written by the workload; a live input with one GROUP BY
    mapping may get the row mapping alone.  Half of them keep their NULL
    keys (the NULL group tracked as any other: src/leapfrog.h,
    LF_KEY_SIZE)."""
    case.tracked = case.shared = False
    tr = random.Random("tracked-%d" % case.seed)
    src = case.src
    if case.kind != "group" or tr.random() >= 0.6:
        return
    dropped = src not in case.live
    if dropped and (src not in _live_inputs(case) or tr.random() < 0.5):
        return          # a dropped input is tracked by keys only when shared
    names = ["id"] + [c for c, _ in case.src_cols]
    keys = case.input_keys[src]
    nulls = tr.random() < 0.5
    if not nulls and (any(r[names.index(k)] is None for r in case.rows for k in keys) or
                      any("SET %s = NULL" % k in st for st in case.churn for k in keys)):
        return
    if any(re.match(r"CREATE (UNIQUE )?INDEX .* ON %s \(" % src, l)
           for l in case.script.split("\n")):
        return          # the script replaces it
    not_null = list(keys)
    case.tracked = True
    if dropped or tr.random() < 0.6:
        col = keys[1] if len(keys) == 2 and tr.random() < 0.7 else "id"
        if col == "id" and not nulls and any(r[0] is None for r in case.rows):
            col = None
        if col is None and dropped:
            case.tracked = False
            return
        if col:
            not_null.append(col)
            if not (col == "id" and case.src_pk):
                case.churn.append("CREATE INDEX ON %s (%s)" % (src, col))
            sib = ("CREATE TABLE sib_total AS SELECT %s, count(*) AS n, "
                   "count(DISTINCT id) AS ids, max(id) AS top FROM %s GROUP BY %s;"
                   % (col, src, col))
            rows_too = tr.random() < 0.4
            if rows_too:
                # a row mapping too: its rows move with the first mapping's groups
                sib += "\nCREATE TABLE sib_rows AS SELECT * FROM %s WHERE id %% 3 <> 1;" % src
            if dropped:
                case.script = case.script.replace("DROP TABLE %s;" % src,
                                                  sib + "\nDROP TABLE %s;" % src)
            else:
                case.script += "\n" + sib
            case.shared = True
            if rows_too:
                _sib_rows_workload(tr, case)
            vals = [r[names.index(col)] for r in case.rows] or [0]
            for _ in range(tr.randint(4, 10)):
                r = tr.random()
                v = tr.choice(vals)
                if r < 0.45:
                    st = Stmt("SELECT * FROM sib_total WHERE %s = %%s" % col, [v])
                elif r < 0.6:
                    st = Stmt("SELECT count(*), sum(n), sum(ids), max(top) FROM sib_total")
                elif r < 0.8:
                    st = Stmt("UPDATE sib_total SET n = n + 1 WHERE %s = %%s RETURNING *" % col,
                              [v])
                elif dropped:
                    st = Stmt("SELECT %s, n FROM sib_total WHERE n > 1 ORDER BY 1" % col,
                              ordered=True)
                else:
                    st = Stmt("SELECT s.%s, s.n, t.n FROM sib_total s JOIN %s x ON x.%s = s.%s "
                              "JOIN LATERAL (SELECT count(*) AS n FROM %s y WHERE y.%s = s.%s) t "
                              "ON true WHERE x.id = %%s ORDER BY 1"
                              % (col, src, col, col, src, col, col),
                              [tr.choice([r[0] for r in case.rows] or [0])], ordered=True)
                spots = [i for i, w in enumerate(case.workload) if w.session == 0] or [0]
                case.workload.insert(tr.choice(spots + [len(case.workload)]), st)
    elif tr.random() < 0.5:
        # the row mapping alone: its rows move with the one mapping's groups
        case.script += "\nCREATE TABLE sib_rows AS SELECT * FROM %s WHERE id %% 3 <> 1;" % src
        case.shared = True
        _sib_rows_workload(tr, case)
    if not nulls:
        case.churn.append("ALTER TABLE %s %s" % (src, ", ".join(
            "ALTER COLUMN %s SET NOT NULL" % k for k in not_null)))


def _with_shared_join(case):
    """Some join cases get a GROUP BY mapping of the join's input a too (sib_total: by a key column
    or by id), so that a is read by two mappings whose units differ and is
    tracked by keys, the join's other input with it (src/start.c,
    track_shared_retired; a live input is replaced first); sometimes a row
    mapping of the other input too (sib_b, carried by the join's keys).
    Keys of two types (int and bigint, text and varchar) are held as the
    type the other converts to (src/units.c, describe_key_types).
    Half of them keep their NULL keys (NULL units: src/live.c,
    LF_KEY_SIZE); the others' key columns become NOT NULL before start()
    when no row or churn has a NULL key."""
    case.shared_join = False
    tr = random.Random("shared-join-%d" % case.seed)
    if case.kind != "join" or tr.random() >= 0.4:
        return
    a, b = case.src, case.src_b
    if case.join_input != a:
        return
    lines = case.script.split("\n")
    if any(re.match(r"(ALTER TABLE|CREATE (UNIQUE )?INDEX .* ON) (%s|%s)\b" % (a, b), l)
           for l in lines):
        return          # the script replaces one of them
    keys_a, keys_b = case.input_keys[a], case.input_keys[b]
    names_a = ["id"] + [c for c, _ in case.src_cols]
    names_b = ["id"] + [c for c, _ in case.src_b_cols]
    nulls = tr.random() < 0.5
    if not nulls and (
            any(r[names_a.index(k)] is None for r in case.rows for k in keys_a) or
            any(r[names_b.index(k)] is None for r in case.rows_b for k in keys_b) or
            any("SET %s = NULL" % k in st for st in case.churn for k in keys_a + keys_b)):
        return
    col = tr.choice(keys_a + ["id"])
    if col == "id" and any(r[0] is None for r in case.rows):
        col = keys_a[0]
    sib = ("CREATE TABLE sib_total AS SELECT %s, count(*) AS n, count(DISTINCT id) AS ids, "
           "max(id) AS top FROM %s GROUP BY %s;" % (col, a, col))
    rows_too = tr.random() < 0.4
    if rows_too:
        sib += "\nCREATE TABLE sib_b AS SELECT * FROM %s WHERE id %% 2 = 0;" % b
    drops = [i for i, l in enumerate(lines) if l in ("DROP TABLE %s;" % a, "DROP TABLE %s;" % b)]
    if drops:
        lines.insert(drops[0], sib)
    else:
        lines.append(sib)
    case.script = "\n".join(lines)
    if not (col == "id" and case.src_pk):
        case.churn.append("CREATE INDEX ON %s (%s)" % (a, col))
    if not nulls:
        case.churn.append("ALTER TABLE %s %s" % (a, ", ".join(
            "ALTER COLUMN %s SET NOT NULL" % k for k in dict.fromkeys(keys_a + [col]))))
        case.churn.append("ALTER TABLE %s %s" % (b, ", ".join(
            "ALTER COLUMN %s SET NOT NULL" % k for k in keys_b)))
    case.tracked = case.shared = case.shared_join = True
    vals = [r[names_a.index(col)] for r in case.rows] or [0]
    stmts = []
    for _ in range(tr.randint(4, 10)):
        r = tr.random()
        v = tr.choice(vals)
        if r < 0.45:
            stmts.append(Stmt("SELECT * FROM sib_total WHERE %s = %%s" % col, [v]))
        elif r < 0.6:
            stmts.append(Stmt("SELECT count(*), sum(n), sum(ids), max(top) FROM sib_total"))
        else:
            stmts.append(Stmt("UPDATE sib_total SET n = n + 1 WHERE %s = %%s RETURNING *" % col,
                              [v]))
    if rows_too:
        ids = [r[0] for r in case.rows_b] or [0]
        for _ in range(tr.randint(2, 5)):
            i = tr.choice(ids)
            stmts.append(Stmt("SELECT * FROM sib_b WHERE id = %s", [i]) if tr.random() < 0.6 else
                         Stmt("SELECT count(*), count(DISTINCT id) FROM sib_b"))
    for st in stmts:
        spots = [i for i, w in enumerate(case.workload) if w.session == 0] or [0]
        case.workload.insert(tr.choice(spots + [len(case.workload)]), st)


def _with_join_in_place(case):
    """Some join cases that keep inputs live (and share none with a GROUP
    BY: _with_shared_join) get NOT NULL key columns in each live input that
    the join preserves, so that it is tracked in place (src/live.c: its
    trigger claims the join key of each row written) rather than replaced;
    the other input, if dropped, is then tracked by the join's keys.  Rows
    with a NULL key go first (another row's key could break a unique index
    on the key); the workload's writes of a NULL key then fail alike on
    both sides (23502).  A live input the join does not preserve keeps its
    NULL keys half the time: such a row joins nothing, and is tracked in
    place all the same (lf_key_joins_nothing)."""
    case.join_in_place = False
    jr = random.Random("join-in-place-%d" % case.seed)
    if case.kind != "join" or not case.live or case.shared_join or jr.random() >= 0.6:
        return
    for x in case.live:
        if x not in case.join_preserved and jr.random() < 0.5:
            continue
        keys = case.input_keys[x]
        case.churn.append("DELETE FROM %s WHERE %s" % (
            x, " OR ".join("%s IS NULL" % k for k in keys)))
        case.churn.append("ALTER TABLE %s %s" % (x, ", ".join(
            "ALTER COLUMN %s SET NOT NULL" % k for k in keys)))
    case.tracked = case.join_in_place = True


def _sib_rows_workload(tr, case):
    """Reads and writes of sib_rows, the row mapping of a table tracked by
    keys, in the workload's first session."""
    ids = [r[0] for r in case.rows] or [0]
    for _ in range(tr.randint(3, 6)):
        r = tr.random()
        i = tr.choice(ids)
        st = (Stmt("SELECT * FROM sib_rows WHERE id = %s", [i]) if r < 0.5 else
              Stmt("UPDATE sib_rows SET id = id WHERE id = %s RETURNING id", [i])
              if r < 0.8 else Stmt("SELECT count(*), count(DISTINCT id) FROM sib_rows"))
        spots = [i for i, w in enumerate(case.workload) if w.session == 0] or [0]
        case.workload.insert(tr.choice(spots + [len(case.workload)]), st)


def _live_stmt(rng, info, case):
    name, cols, rows, pk, keys, unique = info
    names = [c for c, _ in cols]
    decl = dict(cols)
    ids = [r[0] for r in rows if r[0] is not None] or [1]
    max_id = max(ids)

    def some_id():
        return rng.choice(ids) if rng.random() < 0.85 else rng.randint(max_id + 1, max_id + 60)

    def value(c):
        if rng.random() < 0.1:
            return None
        if rng.random() < 0.6 and rows:
            return rng.choice(rows)[names.index(c)]
        return gen_value(rng, _gen_type(decl[c]))

    def key_pred():
        """A group or join key of a row (NULL ones too), or one no row has."""
        if not keys:
            c = rng.choice(names)
            keys_ = [c]
        else:
            keys_ = keys
        row = rng.choice(rows) if rows and rng.random() < 0.85 else None
        parts, params = [], []
        for k in keys_:
            v = row[names.index(k)] if row else gen_value(rng, _gen_type(decl[k]))
            if v is None:
                parts.append("%s IS NULL" % k)
            else:
                parts.append("%s = %%s" % k)
                params.append(v)
        return " AND ".join(parts), params

    values = [c for c in names if c != "id" and c not in keys]
    ret = rng.choice(["", " RETURNING *", " RETURNING id"])
    r = rng.random()
    if r < 0.1:
        return Stmt("SELECT * FROM %s WHERE id = %%s" % name, [some_id()])
    if r < 0.2:
        p, params = key_pred()
        return Stmt("SELECT * FROM %s WHERE %s" % (name, p), params,
                    inline=rng.random() < 0.3)
    if r < 0.26:
        g = ", ".join(keys) if keys else rng.choice(names)
        return Stmt("SELECT %s, count(*), count(id), min(id), max(id) FROM %s GROUP BY %s"
                    % (g, name, g))
    if r < 0.3:
        t = case.tables[0]
        if "id" in t.col_names():
            return Stmt("SELECT count(*), count(n.id) FROM %s s LEFT JOIN %s n ON n.id = s.id "
                        "WHERE s.id %% %d = 0" % (name, t.name, rng.randint(1, 4)))
        return Stmt("SELECT count(*) FROM %s" % name)
    if r < 0.42 and values:
        c = rng.choice(values)
        return Stmt("UPDATE %s SET %s = %%s WHERE id = %%s%s" % (name, c, ret),
                    [value(c), some_id()])
    if r < 0.5 and values:
        c = rng.choice(values)
        p, params = key_pred()
        return Stmt("UPDATE %s SET %s = %%s WHERE %s%s" % (name, c, p, ret),
                    [value(c)] + params)
    if r < 0.62 and keys:
        # A row moves to another group or join key (existing or new).
        row = rng.choice(rows) if rows else None
        sets, params = [], []
        for k in rng.sample(keys, rng.randint(1, len(keys))):
            if k == "id":
                sets.append("id = id + 100000")
                continue
            v = (row[names.index(k)] if row and rng.random() < 0.7
                 else gen_value(rng, _gen_type(decl[k])) if rng.random() < 0.9 else None)
            sets.append("%s = %%s" % k)
            params.append(v)
        return Stmt("UPDATE %s SET %s WHERE id = %%s%s" % (name, ", ".join(sets), ret),
                    params + [some_id()])
    if r < 0.66 and pk:
        return Stmt("UPDATE %s SET id = id + 100000 WHERE id = %%s%s" % (name, ret),
                    [some_id()])
    if r < 0.74:
        if rng.random() < 0.5:
            return Stmt("DELETE FROM %s WHERE id = %%s%s" % (name, ret), [some_id()])
        p, params = key_pred()
        return Stmt("DELETE FROM %s WHERE %s%s" % (name, p, ret), params)
    # A new row: in an existing group or join key (all the key of one row),
    # or in a new one.
    new_id = max_id + 100 + rng.randint(0, 5000)
    row = rng.choice(rows) if rows else None
    existing = row is not None and rng.random() < (0.3 if unique else 0.6)
    vals = []
    for c in names:
        if c == "id":
            vals.append(new_id if not (keys == ["id"] and existing) else row[0])
        elif c in keys and existing:
            vals.append(row[names.index(c)])
        else:
            vals.append(value(c))
    n = 1 if rng.random() < 0.7 else 2
    params = list(vals)
    if n == 2:
        vals2 = list(vals)
        vals2[0] = new_id + 1 if vals[0] == new_id else new_id
        params += vals2
    return Stmt("INSERT INTO %s (%s) VALUES %s%s" % (
        name, ", ".join(names), ", ".join(["(%s)" % ", ".join(["%s"] * len(names))] * n), ret),
        params, inline=rng.random() < 0.2)


# ---------------------------------------------------------------------------
# Running

def run_stmt(conn, st):
    """Execute and return a comparable outcome."""
    try:
        if st.inline and st.params:
            q = psycopg.ClientCursor(conn).mogrify(st.text, st.params)
            cur = conn.execute(q)
        else:
            cur = conn.execute(st.text, st.params, prepare=st.prepare)
        if cur.description is not None:
            # repr: Decimal('1.50') and Decimal('1.5') must not compare equal.
            rows = [tuple(repr(v) for v in r) for r in cur.fetchall()]
            if not st.ordered:
                rows.sort()
            return ("rows", [(d.name, d.type_code) for d in cur.description], rows)
        return ("count", cur.rowcount)
    except psycopg.errors.QueryCanceled as e:
        raise AssertionError("statement timed out: %r (%s)" % (st, e))
    except psycopg.Error as e:
        return ("error", e.sqlstate)


def table_state(conn, tables):
    state = {}
    for name in tables:
        cols = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod), attnotnull, "
            "pg_get_expr(d.adbin, d.adrelid) "
            "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
            "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            [name]).fetchall()
        rows = [tuple(repr(v) for v in r) for r in conn.execute(
            sql.SQL("SELECT * FROM {}").format(sql.Identifier(name))).fetchall()]
        rows.sort()
        idx = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename = %s ORDER BY 1", [name]).fetchall()
        state[name] = {"columns": cols, "rows": rows, "indexes": idx}
    return state


def public_tables(conn):
    return [r[0] for r in conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
        "ORDER BY 1").fetchall()]


def _load_table(conn, name, cols, rows, pk):
    conn.execute("CREATE TABLE %s (id int%s, %s)" % (
        name, " PRIMARY KEY" if pk else "", ", ".join("%s %s" % c for c in cols)))
    names = ["id"] + [c for c, _ in cols]
    with conn.cursor().copy("COPY %s (%s) FROM STDIN" % (name, ", ".join(names))) as cp:
        for r in rows:
            cp.write_row(r)


def load_source(conn, case):
    conn.execute("SET TimeZone = 'UTC'")
    _load_table(conn, case.src, case.src_cols, case.rows, case.src_pk)
    if getattr(case, "src_b", None):
        # The other input of a join case.
        _load_table(conn, case.src_b, case.src_b_cols, case.rows_b, case.src_b_pk)
    if getattr(case, "fk_action", None):
        # Every id a row or the workload can use (the fresh ones included).
        ids = [r[0] for r in case.rows if r[0] is not None] or [0]
        conn.execute("CREATE TABLE owners (id int PRIMARY KEY)")
        conn.execute("INSERT INTO owners SELECT generate_series(%s::int, %s::int)",
                     [min(min(ids), 0), max(ids) + 300])
    conn.execute("CREATE TABLE side (id int PRIMARY KEY%s, tag int)"
                 % (" REFERENCES %s (id) ON DELETE CASCADE" % case.src
                    if getattr(case, "side_fk", False) else ""))
    conn.execute("INSERT INTO side SELECT DISTINCT id, id %% 5 FROM %s WHERE id %% 2 = 0"
                 % case.src)
    for text, params in getattr(case, "setup", []):
        conn.execute(text, params)
    for st in case.churn:
        conn.execute(st)
    conn.execute("ANALYZE")


def describe(case, upto=None):
    if getattr(case, "steps", None):
        return describe_chain(case, upto)
    wl = case.workload if upto is None else case.workload[: upto + 1]
    return ("seed=%d kind=%s%s %s (replay: LEAPFROG_DIFF_SEEDS=%d pytest %s)\n"
            "source %s(id int%s, %s), %d rows%s\n--- script ---\n%s\n--- workload ---\n%s"
            % (case.seed, case.kind, " snapshots" if case.snapshots else "", _modes(case.seed),
               case.seed,
               __file__ + ("::test_differential_snapshots" if case.snapshots
                           else "::test_differential_background"
                           if getattr(case, "background", False)
                           else "::test_differential"), case.src,
               " PRIMARY KEY" if case.src_pk else "",
               ", ".join("%s %s" % c for c in case.src_cols), len(case.rows),
               ("\nsource %s(id int%s, %s), %d rows" % (
                   case.src_b, " PRIMARY KEY" if case.src_b_pk else "",
                   ", ".join("%s %s" % c for c in case.src_b_cols), len(case.rows_b))
                if getattr(case, "src_b", None) else "")
               + "".join("\nthen: %s%s" % (c, " %r" % (p,) if p else "")
                         for c, p in getattr(case, "setup", []))
               + "".join("\nthen: " + c for c in case.churn)
               + ("\nside.id references the source, ON DELETE CASCADE"
                  if getattr(case, "side_fk", False) else ""), case.script,
               "".join("before start: %r\n" % s for s in getattr(case, "prestart", []))
               + "\n".join("%3d %r" % (i, s) for i, s in enumerate(wl))))


@pytest.fixture(scope="module")
def diff_cluster(module_cluster_factory):
    return module_cluster_factory(**{"leapfrog.background": "off"})


def read_mode(seed):
    """How the lazy side's plain reads get rows not migrated yet: half the
    seeds migrate them, half compute them (their own random stream, so the
    cases themselves do not change); LEAPFROG_DIFF_READ_MODE forces one."""
    if os.environ.get("LEAPFROG_DIFF_READ_MODE"):
        return os.environ["LEAPFROG_DIFF_READ_MODE"]
    return "compute" if random.Random(seed * 7919 + 17).random() < 0.5 else "migrate"


def in_workers(seed):
    """Whether the lazy side's plans run in parallel workers
    (force_parallel_mode = regress): a third of the seeds, from their own
    random stream.  A worker restores the leader's active snapshot and
    starts with an empty cache of migrations, which twice gave wrong answers
    the leader did not.  LEAPFROG_DIFF_PARALLEL=on or off forces it."""
    if os.environ.get("LEAPFROG_DIFF_PARALLEL"):
        return os.environ["LEAPFROG_DIFF_PARALLEL"] == "on"
    return random.Random(seed * 104729 + 3).random() < 1 / 3


def _modes(seed):
    return "read_mode=%s%s" % (read_mode(seed), " in_workers" if in_workers(seed) else "")


def _session(cluster, db, schema):
    conn = cluster.connect(db, autocommit=True, prepare_threshold=None)
    conn.execute("SET TimeZone = 'UTC'")
    # The cases are small: any statement taking seconds is stuck.
    conn.execute("SET statement_timeout = '10s'")
    conn.execute("SET lock_timeout = '8s'")
    conn.execute("SET search_path = %s" % schema)
    return conn


# Each case runs in its own schema of two long-lived databases (one CREATE
# DATABASE per case would dominate the run time); after a failure both
# databases are made anew so that nothing a failed case left behind leaks.
EAGER_DB, LAZY_DB = "eager", "lazy"


_RUNS = itertools.count(1)


def run_case(cluster, case):
    cluster.wait_ready(60)     # a previous case may have crashed the server
    # Migration names stay in the catalog: a case run again needs a new one.
    case.name = "mig_%d_%d" % (case.seed, next(_RUNS))
    log_pos = len(cluster.log_text())
    schema = "s%d" % case.seed
    ok = False
    try:
        if not getattr(cluster, "diff_dbs_ready", False):
            cluster.create_database(EAGER_DB, extension=False)
            cluster.create_database(LAZY_DB, extension=True)
            cluster.diff_dbs_ready = True
        for db in (EAGER_DB, LAZY_DB):
            cluster.sql("DROP SCHEMA IF EXISTS %s CASCADE" % schema, dbname=db)
            cluster.sql("CREATE SCHEMA %s" % schema, dbname=db)
        a = _session(cluster, EAGER_DB, schema)
        b = _session(cluster, LAZY_DB, schema)
        a2 = _session(cluster, EAGER_DB, schema)
        b2 = _session(cluster, LAZY_DB, schema)
        for conn in (b, b2):
            conn.execute("SET leapfrog.read_mode = %s" % read_mode(case.seed))
            if in_workers(case.seed):
                conn.execute("SET force_parallel_mode = regress")
        try:
            _run_case(a, b, case, a2, b2)
        finally:
            for conn in (a, b, a2, b2):
                conn.close()
        ok = True
    except (AssertionError, psycopg.Error) as e:
        msg = str(e)
        if isinstance(e, psycopg.Error):
            msg = "%s (SQLSTATE %s): %s\n%s" % (type(e).__name__, e.sqlstate, msg, describe(case))
        raise AssertionError(msg + _log_excerpt(cluster, log_pos)) from None
    finally:
        try:
            cluster.wait_ready(60)
            if ok:
                for db in (EAGER_DB, LAZY_DB):
                    cluster.sql("DROP SCHEMA %s CASCADE" % schema, dbname=db)
            else:
                cluster.diff_dbs_ready = False
        except Exception:
            cluster.diff_dbs_ready = False


def _log_excerpt(cluster, pos, n=25):
    lines = []
    keep = False
    for l in cluster.log_text()[pos:].splitlines():
        if re.search(r"\b(ERROR|PANIC|FATAL|WARNING):|TRAP|terminated by", l):
            keep = True
        elif re.search(r"\b(LOG|DEBUG\d?|NOTICE|INFO|STATEMENT):", l) or not re.search(
                r"\b(DETAIL|CONTEXT|HINT):", l):
            keep = False
            continue
        if keep:
            lines.append(l)
    if not lines:
        return ""
    return "\n--- server log during the case (last %d of %d lines) ---\n%s" % (
        min(n, len(lines)), len(lines), "\n".join(lines[-n:]))


def failure_signature(cluster, case):
    try:
        run_case(cluster, case)
        return None
    except AssertionError as e:
        first = str(e).splitlines()[0]
        return re.sub(r"\d+", "N", first.split(":")[0])


def minimize(cluster, case, budget=250, seconds=150):
    """Greedy delta debugging: drop workload statements, then source rows,
    while the same kind of failure persists.  Returns the reduced case."""
    sig = failure_signature(cluster, case)
    if sig is None:
        return case, None
    runs = 0
    deadline = time.monotonic() + seconds
    # (a chain's workloads are its steps', the last first)
    owners = ([(st, "workload") for st in reversed(case.steps)] if getattr(case, "steps", None)
              else [(case, "workload")]) + [(case, "rows"), (case, "rows_b")]
    for obj, attr in owners:
        if not hasattr(obj, attr):
            continue
        items = list(getattr(obj, attr))
        chunk = max(1, len(items) // 2)
        while chunk >= 1 and runs < budget and time.monotonic() < deadline:
            i = 0
            while i < len(items) and runs < budget and time.monotonic() < deadline:
                trial = items[:i] + items[i + chunk:]
                if attr != "workload" and not trial:
                    i += chunk
                    continue
                setattr(obj, attr, trial)
                runs += 1
                if failure_signature(cluster, case) == sig:
                    items = trial
                else:
                    i += chunk
            chunk //= 2
        setattr(obj, attr, items)
    return case, sig


SERIALIZATION_FAILURES = []   # (variant, seed, statement, run) where only the lazy run gave 40001
CASES_RUN = {}                # variant, and "variant group|join" -> cases that ran to the end


def _variant(case):
    return ("snapshots" if case.snapshots else
            "background" if getattr(case, "background", False) else "plain")


def _run_case(a, b, case, a2=None, b2=None):
    if getattr(case, "steps", None):
        return _run_chain(a, b, case, a2, b2)
    load_source(a, case)
    load_source(b, case)
    iso = {0: "", 1: ""}            # the session's explicit transaction, if any
    for st in getattr(case, "prestart", []):
        # Session 1 takes its snapshot before the script runs (or start()).
        assert st.session == 1, st
        for conn in (a2, b2):
            conn.execute(st.text)
        if st.text.startswith("BEGIN"):
            iso[1] = st.text
    # Eager oracle: the script as plain SQL in one transaction.
    with a.transaction():
        a.execute(case.script)
    if getattr(case, "join_in_place", False):
        # each live input of the join is tracked in place (a worker may
        # complete the migration right after start(): asked of the plan)
        tracked = {r[0].split(".")[-1] for r in b.execute(
            "SELECT input FROM leapfrog.plan(%s) WHERE action = 'track'", [case.script])}
        assert set(case.live) <= tracked, "not tracked in place: %r\n%s" % (
            sorted(set(case.live) - tracked), describe(case))
    try:
        b.execute("SELECT leapfrog.start(%s, %s)", [case.name, case.script])
    except psycopg.Error as e:
        raise AssertionError("leapfrog.start failed: %s %s\n%s"
                             % (e.sqlstate, e, describe(case)))
    assert public_tables(a) == public_tables(b), \
        "tables after start differ: %r vs %r\n%s" % (public_tables(a), public_tables(b),
                                                     describe(case))
    if getattr(case, "tracked", False):
        # the case is what it was made to be: every mapping of src tracked by keys
        untracked = b.execute(
            "SELECT p.target_relid::regclass::text FROM leapfrog.mapping p"
            " JOIN leapfrog.migration m ON m.id = p.migration_id"
            " JOIN leapfrog.input i ON i.migration_id = m.id AND i.relid = p.input_relid"
            " WHERE m.name = %s AND i.orig_name LIKE ANY (%s) AND p.done_keys IS NULL",
            [case.name, ["%." + case.src] + (["%." + case.src_b]
                                             if getattr(case, "shared_join", False) else [])]
        ).fetchall()
        assert not untracked, "not tracked by keys: %r\n%s" % (untracked, describe(case))
    conns = {0: (a, b), 1: (a2, b2)}
    diverged = {0: False, 1: False}  # a (permitted) 40001 in the lazy run only
    _run_workload(case, case.workload, conns, iso, diverged, case.name)
    _finish_case(a, b, case, a2, b2)


def _run_workload(case, workload, conns, iso, diverged, name, step=None):
    """The workload's statements in both databases (conns: session ->
    (eager, lazy)), compared one by one; COMPLETE completes migration name
    in the lazy one.  iso and diverged: each session's open transaction and
    whether only its lazy run failed with 40001 in it (kept across calls)."""
    for i, st in enumerate(workload):
        ea, lz = conns[st.session]
        if st.text == COMPLETE:
            lz.execute("SELECT leapfrog.complete(%s)", [name])
            continue
        ends_tx = st.text in ("COMMIT", "ROLLBACK")
        if st.text.startswith("BEGIN"):
            iso[st.session] = st.text
        if diverged[st.session]:
            if ends_tx:
                # Close the transaction the same way in both: roll back.
                ea.execute("ROLLBACK")
                lz.execute("ROLLBACK")
                diverged[st.session] = False
                iso[st.session] = ""
            continue
        ra = run_stmt(ea, st)
        rb = run_stmt(lz, st)
        if ends_tx:
            iso[st.session] = ""
        if ra != rb:
            if (rb == ("error", "40001") and not ends_tx
                    and ("REPEATABLE" in iso[st.session] or "SERIALIZABLE" in iso[st.session])):
                SERIALIZATION_FAILURES.append((_variant(case), case.seed,
                                               i if step is None else (step, i), case.name))
                diverged[st.session] = True
                continue
            raise AssertionError(
                "statement %s differs\n  %r\n  eager: %r\n  lazy:  %r\n%s"
                % (i if step is None else "%d of step %d" % (i, step + 1), st, _short(ra),
                   _short(rb), describe(case, i if step is None else (step, i))))


def _finish_case(a, b, case, a2, b2):
    """After the workload: the migration done (the worker's or complete()),
    the final tables the eager ones, leapfrog_retired empty."""
    # Any transaction the workload left open is closed the same way in both.
    for c in (a, b, a2, b2):
        if c is not None and c.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            c.execute("ROLLBACK")
    if getattr(case, "background", False):
        done = b.execute("SELECT leapfrog.wait(%s, 60)", [case.name]).fetchone()[0]
        assert done, "the worker did not finish in 60s\n%s" % describe(case)
    else:
        remaining = b.execute("SELECT leapfrog.remaining(%s)", [case.name]).fetchone()[0]
        # (A live input's rows move twice: into the mappings, into its copy;
        # a row of a table tracked by keys counts once per mapping.)
        bound = (len(case.rows) + len(getattr(case, "rows_b", []))) * (
            2 if getattr(case, "live", None) or getattr(case, "shared", False) else 1)
        assert 0 <= remaining <= bound, \
            describe(case)
        b.execute("SELECT leapfrog.complete(%s)", [case.name])
    sa = table_state(a, public_tables(a))
    sb = table_state(b, public_tables(b))
    for name in sa:
        for part in ("columns", "rows", "indexes"):
            if sa[name][part] != sb.get(name, {}).get(part):
                raise AssertionError("final %s of %s differ\n  eager: %r\n  lazy:  %r\n%s"
                                     % (part, name, _short(sa[name][part]),
                                        _short(sb.get(name, {}).get(part)), describe(case)))
    assert set(sa) == set(sb), describe(case)
    st = b.execute("SELECT state, error FROM leapfrog.migrations WHERE name = %s",
                   [case.name]).fetchall()
    assert st == [("done", None)], "migration state after complete: %r\n%s" % (st, describe(case))
    for _ in range(75):     # completion may leave the drop to the worker (bounded poll)
        left = b.execute(RETIRED_SQL).fetchall()
        if not left:
            break
        time.sleep(0.2)
    assert left == [], "leapfrog_retired not empty 15s after complete: %r\n%s" % (
        left, describe(case))
    CASES_RUN[_variant(case)] = CASES_RUN.get(_variant(case), 0) + 1
    if case.kind in ("group", "join"):
        key = "%s %s" % (_variant(case), case.kind)
        CASES_RUN[key] = CASES_RUN.get(key, 0) + 1
    if getattr(case, "live", None):
        key = "%s live" % _variant(case)
        CASES_RUN[key] = CASES_RUN.get(key, 0) + 1


def _short(x, n=1500):
    s = repr(x)
    return s if len(s) <= n else s[:n] + "...(%d chars)" % len(s)


def _snapshot_seeds():
    return _repeated(_variant_seeds(10_000, "SNAPSHOT_COUNT", 1 / 2))


@pytest.fixture(scope="module")
def diff_cluster_bg(module_cluster_factory):
    return module_cluster_factory(**{"leapfrog.background": "on",
                                     "leapfrog.background_delay": 0,
                                     "leapfrog.batch_size": 5,
                                     "leapfrog.background_naptime": 25})


def _background_seeds():
    return _repeated(_variant_seeds(20_000, "BACKGROUND_COUNT", 1 / 4))


@pytest.mark.parametrize("seed", _background_seeds())
def test_differential_background(diff_cluster_bg, seed):
    """The same, with the background worker migrating (small batches) while
    the workload runs; a lazy-only 40001 is permitted inside REPEATABLE READ
    and SERIALIZABLE transactions."""
    needs_real_extension()
    case = gen_case(seed)
    case.background = True
    run_case(diff_cluster_bg, case)


@pytest.mark.parametrize("seed", _snapshot_seeds())
def test_differential_snapshots(diff_cluster, seed):
    """Two sessions: RR/SERIALIZABLE snapshots taken before other sessions
    migrate and change the rows they then read."""
    case = gen_case(seed, snapshots=True)
    try:
        run_case(diff_cluster, case)
    except AssertionError as e:
        if os.environ.get("LEAPFROG_DIFF_MINIMIZE") != "1":
            raise
        small, sig = minimize(diff_cluster, gen_case(seed, snapshots=True))
        try:
            run_case(diff_cluster, small)
            reduced = "(the reduced case passed: flaky?)"
        except AssertionError as e2:
            reduced = str(e2)
        raise AssertionError("%s\n\n=== minimized (%s) ===\n%s" % (e, sig, reduced)) from None
    print("seed %d: lazy-only 40001 at statements %r" % (
        seed, [i for _, s_, i, _ in SERIALIZATION_FAILURES if s_ == seed]))


def _tracked_kind(case):
    """Which way _with_tracked_in_place made a case: "shared" (a second
    GROUP BY mapping of the input), "rows" (a row mapping of the live
    input beside its one GROUP BY mapping), "single"; "keyed" for a live
    input only row mappings read (gen_case); or None."""
    if not getattr(case, "tracked", False):
        return None
    if getattr(case, "keyed", False):
        return "keyed"
    if getattr(case, "shared_join", False):
        return "join"
    if getattr(case, "join_in_place", False):
        return "live_join"
    if not case.shared:
        return "single"
    return "shared" if "sib_total" in case.script else "rows"


def _tracked_seeds():
    """Cases whose input is tracked by keys (GROUP BY cases, about 1% of the
    seeds: _with_tracked_in_place; row cases of a live input with a primary
    key: gen_case), found by generating cases from 70000 on:
    LEAPFROG_DIFF_TRACKED_COUNT of them (default 18), a sixth of each
    kind (_tracked_kind; "join": a join case whose input a GROUP BY mapping
    reads too, _with_shared_join; "live_join": a join case whose live
    inputs are tracked in place, _with_join_in_place); odd seeds run with
    the worker."""
    if os.environ.get("LEAPFROG_DIFF_SEEDS"):
        return _seeds()
    base = 70_000 + int(os.environ.get("LEAPFROG_DIFF_BASE", "0"))
    count = int(os.environ.get("LEAPFROG_DIFF_TRACKED_COUNT", "18"))
    quota = {"shared": count - 5 * (count // 6), "rows": count // 6, "single": count // 6,
             "keyed": count // 6, "join": count // 6, "live_join": count // 6}
    found = {k: [] for k in quota}
    seed = base
    while any(len(found[k]) < quota[k] for k in quota) and seed < base + 2000 * count:
        kind = None
        if unit_kind(seed) in ("group", "join"):
            kind = _tracked_kind(gen_unit_case(seed, unit_kind(seed)))
        elif unit_kind(seed) is None and len(found["keyed"]) < quota["keyed"]:
            kind = _tracked_kind(gen_case(seed))
        if kind and len(found[kind]) < quota[kind]:
            found[kind].append(seed)
        seed += 1
    return _repeated(sorted(sum(found.values(), [])))


@pytest.mark.parametrize("seed", _tracked_seeds())
def test_differential_tracked(request, seed):
    """GROUP BY cases whose input stays live with NOT NULL group keys, so
    tracked in place (src/live.c), some with a second GROUP BY mapping of
    the same input (a table of done keys each) or a row mapping of it
    (carried by the GROUP BY mapping's groups), and cases whose input is
    dropped and read by two GROUP BY mappings (retired, tracked by keys);
    row cases whose live input has a primary key (tracked by it); join
    cases whose input a GROUP BY mapping reads too (both inputs tracked by
    keys, in place or retired); join cases whose live inputs have NOT NULL
    keys (tracked in place); with and without the worker."""
    needs_real_extension()
    case = gen_case(seed)
    if not getattr(case, "tracked", False):
        # only a seed given by hand can be one (_tracked_seeds picks tracked ones)
        assert os.environ.get("LEAPFROG_DIFF_SEEDS"), "seed %d is not a tracked case" % seed
        pytest.skip("seed %d (LEAPFROG_DIFF_SEEDS) is not a tracked case" % seed)
    case.background = seed % 2 == 1
    run_case(request.getfixturevalue("diff_cluster_bg" if case.background else "diff_cluster"),
             case)


@pytest.mark.parametrize("seed", _seeds())
def test_differential(diff_cluster, seed):
    case = gen_case(seed)
    try:
        run_case(diff_cluster, case)
    except AssertionError as e:
        if os.environ.get("LEAPFROG_DIFF_MINIMIZE") != "1":
            raise
        small, sig = minimize(diff_cluster, gen_case(seed))
        try:
            run_case(diff_cluster, small)
            reduced = "(the reduced case passed: flaky?)"
        except AssertionError as e2:
            reduced = str(e2)
        raise AssertionError("%s\n\n=== minimized (%s) ===\n%s" % (e, sig, reduced)) from None


def test_expression_catalogue(diff_cluster):
    """Every generated expression must be immutable (usable in an index)."""
    db = "catalogue"
    diff_cluster.create_database(db, extension=False)
    try:
        with diff_cluster.connect(db) as c:
            c.execute("CREATE TABLE s (id int, %s)" % ", ".join(
                "c_%s %s" % (base_type(t), t) for t in SOURCE_TYPES))
            bad = []
            for t, exprs in EXPRS.items():
                for e, rtype in exprs:
                    x = fmt(e, "c_%s" % t)
                    try:
                        c.execute("CREATE INDEX ON s ((%s))" % x)
                        got = c.execute("SELECT pg_typeof(%s)::text FROM (SELECT (NULL::s).*) s"
                                        % x).fetchone()[0]
                        want = {"int": "integer", "bool": "boolean",
                                "timestamp": "timestamp without time zone",
                                "timestamptz": "timestamp with time zone",
                                "varchar(24)": "character varying"}.get(rtype, rtype)
                        if got != want:
                            bad.append((x, "type %s, catalogue says %s" % (got, rtype)))
                    except psycopg.Error as err:
                        bad.append((x, str(err).strip()))
            assert not bad, bad
    finally:
        diff_cluster.drop_database(db)


# ---------------------------------------------------------------------------
# Chained migrations: a second script over the tables the first one is still
# filling, started after the first one's workload, then its own workload;
# sometimes a third.  The first step is a case of gen_case (any kind; a
# prefix of its workload, the statements that address rows by key: others
# migrate much or all of a table, and nothing would be left for the next
# step); the later scripts are drawn over the tables as they stand (chain_step):
# renames of tables and columns, type changes, columns added with a constant
# default, indexes (all lazy replacements of a table being filled), a split
# or a filter into new tables (its input dropped, or kept live), a GROUP BY
# over a new table (its key's index made by the script that fills it), the
# join of two new tables back into one (the revert of a split), renaming the
# result to the old name.  GROUP BY and join mappings read tables filled at
# any depth.  test_differential_chain_refusals: what is still refused.
# Eagerly each script runs in one transaction at its moment; lazily through
# leapfrog.start(), with no migration finished in between but by the worker
# (the background variant).  Before each later start, every earlier
# migration that moves rows still runs and the first still holds rows, which
# travel the whole chain (asserted without the worker: else the chain checks
# nothing; with it, CHAIN_ROWS_LEFT records them).  Workloads before the
# last step address rows by key (_narrow), run statements on at most a
# third of the first migration's units (_unit_budget), and leave alone the
# targets of a GROUP BY or join over a table still being filled, whose
# statements move every row the earlier migration holds; the chain neither
# indexes nor narrows a GROUP BY's text aggregates (_short_col).  The
# snapshot variant adds a second session whose REPEATABLE READ or
# SERIALIZABLE snapshot, taken before a later start(), reads that step's
# tables (a lazy-only 40001 permitted).
# Counts: LEAPFROG_DIFF_CHAIN_COUNT, LEAPFROG_DIFF_CHAIN_BACKGROUND_COUNT,
# LEAPFROG_DIFF_CHAIN_SNAPSHOT_COUNT (default an eighth of
# LEAPFROG_DIFF_BACKGROUND_COUNT when that is set, as make soak does),
# LEAPFROG_DIFF_CHAIN_REFUSAL_COUNT.

CHAIN_STEPS = {2: 0.6, 3: 0.4}       # shares of chains of 2 and 3 migrations

# Type changes of a column of a table being filled, by its declared type:
# immutable casts that cannot fail on the values the cases hold (no varchar
# of a bound a long value could pass, no text of a date, whose text depends
# on DateStyle); INJECTIVE for a column of a unique key.
CHAIN_TYPE_CHANGES = {
    "int": ["bigint", "numeric", "text", "numeric(16,1)"],
    "bigint": ["numeric", "text"],
    "numeric": ["text", "bigint"],
    "numeric(12,2)": ["numeric", "numeric(16,1)", "text"],
    "numeric(16,1)": ["numeric", "text"],
    "varchar(24)": ["text", "varchar(64)"],
    "varchar(64)": ["text"],
    "bool": ["text"],
    "date": ["timestamp"],
}
INJECTIVE = {"int": ["bigint", "numeric", "text"], "bigint": ["numeric", "text"],
             "numeric": ["text"], "numeric(12,2)": ["numeric", "text"],
             "numeric(16,1)": ["numeric", "text"], "varchar(24)": ["text", "varchar(64)"],
             "varchar(64)": ["text"], "bool": ["text"], "date": ["timestamp"]}
FIXED_TABLES = {"side", "owners", "dim"}
# EXPRS less the narrowing casts: a numeric column of a chain may hold a
# bigint's values (a type change, a sum).
CHAIN_EXPRS = {t: [x for x in exprs if x[0] != "{c}::int"] for t, exprs in EXPRS.items()}


class ChainStep:
    def __init__(self, script, workload, ops):
        self.script = script
        self.workload = workload
        self.ops = ops          # what the script does, for describe() and the tally


def _mappable(t):
    """Columns of t an expression, a filter or an aggregate may read."""
    return [(c, d) for c, d in t.cols if c != "id" and base_type(d) in EXPRS]


def _indexable(d):
    return not _is_array(d) and not (LONG_COLS and base_type(d) in ("text", "varchar"))


def _short_col(t, c, d):
    """Whether column c (type d) of a chain table may be indexed or narrowed
    (varchar(64)): not a GROUP BY's text aggregate (a string_agg is as long
    as its group), nor anything drawn from one (t.long)."""
    return _indexable(d) and c not in getattr(t, "long", ())


def _chain_cols(rng, t, n, allow_change=True, natural=None, long=None):
    """Columns of a new table filled from t: [(name, declared type, expr)].
    The columns that identify a row come first as plain copies (id; a unit
    table's key and id columns), then n drawn as gen_mapping_cols draws.
    natural, a dict, gets each column's expression type (a CTAS's); long, a
    set, the columns drawn from t's long ones (_short_col)."""
    keep = ["id"] if "id" in t.decl else []
    if isinstance(t, UnitTable):
        for c in (t.keys or []) + (t.unique or []) + [t.id_col]:
            if c and c not in keep:
                keep.append(c)
    out = [(c, t.decl[c], c) for c in keep]
    if natural is not None:
        natural.update((c, t.decl[c]) for c in keep)
    src = _mappable(t)
    used = set(keep)
    for k in range(n if src else 0):
        scol, stype = rng.choice(src)
        exprs = [x for x in CHAIN_EXPRS[base_type(stype)]
                 if "id" in t.decl or not re.search(r"\bid\b", x[0])]
        expr, rtype = rng.choice(exprs)
        if expr == "{c}" and base_type(stype) == "varchar":
            rtype = stype       # a copy keeps its bound: varchar(64) too
        name = rng.choice([scol, "%s_x%d" % (scol[:20], k), "n%d" % k])
        while name in used:
            name = "n%d_%d" % (k, rng.randint(0, 999))
        used.add(name)
        decl = rtype
        if scol in getattr(t, "long", ()):
            if long is not None:
                long.add(name)
        elif allow_change and not LONG_COLS and rng.random() < 0.25 and rtype in TYPE_CHANGES:
            decl = rng.choice(TYPE_CHANGES[rtype])
        out.append((name, decl, fmt(expr, scol)))
        if natural is not None:
            natural[name] = rtype
    return out


def _chain_filter(rng, t):
    if rng.random() < 0.5:
        return None
    src = _mappable(t)
    if "id" in t.decl and (not src or rng.random() < 0.3):
        return rng.choice(["id %% 3 <> 1", "id > %d" % rng.randint(0, 400)]).replace("%%", "%")
    if not src:
        return None
    c, d = rng.choice(src)
    return gen_filter_on(rng, c, d).replace("%%", "%")


def _chain_aggregate(rng, cols):
    """An aggregate whose result does not depend on the order of the rows,
    even where ids repeat (no ORDER BY id): (expression, result type)."""
    c, d = rng.choice(cols)
    bt = base_type(d)
    r = rng.random()
    if r < 0.15:
        return "count(*)", "bigint"
    if r < 0.25:
        return "count(%s)" % c, "bigint"
    if r < 0.45 and bt in NUMERIC_TYPES:
        return rng.choice(["sum(%s)", "sum(DISTINCT %s)"]) % _scale_free(c, d), SUM_TYPE[bt]
    if r < 0.55 and bt in NUMERIC_TYPES:
        return "avg(%s)" % c, "numeric"
    if r < 0.7 and bt != "bool":
        return "%s(%s)" % (rng.choice(["min", "max"]), _scale_free(c, d)), MINMAX_TYPE[bt]
    if r < 0.75 and bt == "bool":
        return "%s(%s)" % (rng.choice(["bool_and", "bool_or"]), c), "bool"
    if r < 0.85 and bt in ("text", "varchar", "int", "bigint", "numeric", "bool"):
        # (no date or timestamptz: their text depends on settings, not immutable)
        x = c if bt in ("text", "varchar") else "%s::text" % c
        return "string_agg(%s, ',' ORDER BY %s%s)" % (x, x, rng.choice(["", " DESC"])), "text"
    if r < 0.92:
        # (numeric: 1.5 and 1.50 are equal, and differ)
        return "array_agg(%s ORDER BY %s%s)" % (
            c, c, ", %s::text" % c if bt == "numeric" else ""), ARRAY_TYPE[bt]
    return "count(DISTINCT %s)" % c, "bigint"


def _rename_col(t, c, new):
    t.cols = [(new if x == c else x, d) for x, d in t.cols]
    t.decl = dict(t.cols)
    if c in getattr(t, "long", ()):
        t.long = (t.long - {c}) | {new}
    t.fill_col[new] = t.fill_col.pop(c)
    if isinstance(t, UnitTable):
        t.keys = [new if x == c else x for x in t.keys]
        t.unique = [new if x == c else x for x in t.unique] if t.unique else t.unique
        if c in t.vals:
            t.vals[new] = t.vals.pop(c)
        t.dim = new if t.dim == c else t.dim
        t.id_col = new if t.id_col == c else t.id_col


def _chain_tables(case):
    """The first migration's tables, as chain_step draws over them: its new
    tables, and the inputs it keeps live (replaced lazily: also filled by
    it).  Each with the step filling it (filled_by), its name and columns at
    the end of that step's script (fill_name, fill_col: for an index that
    script makes), the columns with an index of their own (indexed),
    whether it may be dropped and whether its id may change type."""
    out = []
    src_vals = {}
    for j, (c, _) in enumerate(case.src_cols):
        src_vals[c] = sorted({r[j + 1] for r in case.rows if r[j + 1] is not None}, key=repr)
    for t in case.tables:
        t = copy.deepcopy(t)
        if not isinstance(t, UnitTable):
            t.decl = dict(t.cols)
        out.append(t)
    for x in getattr(case, "live", []):
        if x == case.src:
            cols, pk = case.src_cols, case.src_pk
        else:
            cols, pk = case.src_b_cols, case.src_b_pk
        t = Table(x, [("id", "int")] + list(cols), pk)
        t.decl = dict(t.cols)
        t.live_input = True
        t.keys_index = getattr(case, "input_keys", {}).get(x, [])
        out.append(t)
    for t in out:
        t.filled_by = 0
        t.fill_name = t.name
        t.fill_col = {c: c for c, _ in t.cols}
        t.live_at = None
        t.indexed = set()
        if getattr(t, "pk", False) and "id" in t.decl:
            t.indexed.add("id")
        if isinstance(t, UnitTable) and t.unique and len(t.unique) == 1:
            t.indexed.add(t.unique[0])
        # a GROUP BY's text aggregates (string_agg) may be long: _short_col
        t.long = {c for c, d in t.cols if case.kind == "group" and isinstance(t, UnitTable)
                  and c not in (t.keys or []) + (t.unique or [])
                  and base_type(d) in ("text", "varchar")}
        if len(getattr(t, "keys_index", [])) == 1:
            t.indexed.add(t.keys_index[0])
        # A source named after the source keeps its values (a heuristic: the
        # workload finds rows by them more often).
        if not isinstance(t, UnitTable):
            t.vals = {c: src_vals[c] for c, d in t.cols if c in src_vals}
        t.nodrop = getattr(case, "side_fk", False) and t.name == case.src
        t.fixed_id = bool(getattr(case, "fk_action", None)) or t.nodrop
    return out


def _can_index(t, col):
    """Whether _ensure_index can give t an index on col: not on a table the
    script that fills it keeps live (its mapping, which comes first, fixes
    the table), unless there is one."""
    return col in t.indexed or t.live_at is None or t.live_at != t.filled_by


def _ensure_index(rng, case, steps, t, col):
    """An index on t (col), made at the end of the script that fills t (for
    an input the first migration keeps live, by the statements before it):
    a GROUP BY or join mapping needs one on its key."""
    if col in t.indexed:
        return
    assert _can_index(t, col)
    if getattr(t, "live_input", False) and t.filled_by == 0:
        case.churn.append("CREATE INDEX ON %s (%s)" % (t.fill_name, t.fill_col[col]))
    else:
        steps[t.filled_by].script += "\nCREATE INDEX ON %s (%s);" % (t.fill_name,
                                                                    t.fill_col[col])
    t.indexed.add(col)


def _new_name(rng, tables, base, extra=()):
    used = {t.name for t in tables} | FIXED_TABLES | set(extra)
    name = base
    while name in used:
        name = "%s_%d" % (base, rng.randint(0, 99))
    return name


def chain_step(rng, case, steps, tables, s):
    """The script of chain step s (1 or 2) over tables (updated in place):
    its statements and ops."""
    stmts, ops = [], []
    touched = set()         # read or altered by the step's main statements
    # (a statement on a GROUP BY or join target over a table still being
    # filled, or on its live input, moves every row the earlier migration
    # still holds: the step's own workload leaves them alone, if a step
    # follows; so does a live input of the first migration's units, whose
    # rows move with whole groups or join keys)
    case.quiet = {t.name for t in tables if getattr(t, "live_input", False)
                  and case.kind in ("group", "join")}
    groupable = [(t, c) for t in tables for c, d in _mappable(t)
                 if _short_col(t, c, d) and _can_index(t, c)]
    pairs = [(x, y) for x in tables for y in tables
             if x is not y and not isinstance(x, UnitTable) and not isinstance(y, UnitTable)
             and "id" in x.decl and "id" in y.decl and not x.nodrop and not y.nodrop
             and _can_index(x, "id") and _can_index(y, "id")]
    r = rng.random()
    if pairs and r < 0.45:
        main = "join"
    elif groupable and r < 0.55:
        main = "group"
    elif r < 0.72:
        main = "split"
    else:
        main = "alter"
    if main == "split" and not [t for t in tables if not t.nodrop]:
        main = "alter"

    if main == "join":
        x, y = rng.choice(pairs)
        for t in (x, y):
            _ensure_index(rng, case, steps, t, "id")
        jt = rng.choice(["LEFT JOIN", "LEFT JOIN", "JOIN", "RIGHT JOIN"])
        cols = [("id", x.decl["id"], "a.id" if jt != "RIGHT JOIN" else "b.id")]
        used = {"id"}
        for t, q in ((x, "a"), (y, "b")):
            for c, d in t.cols:
                if c == "id" or rng.random() < 0.15:
                    continue
                name = c if c not in used else "%s_%s" % (q, c)
                used.add(name)
                cols.append((name, d, "%s.%s" % (q, c)))
        pk = x.pk and y.pk
        old = case.src if rng.random() < 0.5 else None
        if old and old in {t.name for t in tables if t not in (x, y)} | FIXED_TABLES:
            old = None
        final = old or _new_name(rng, tables, "joined%d" % s)
        tmp = final if final not in (x.name, y.name) else _new_name(rng, tables, final + "_tmp")
        stmts.append(create_table_sql(tmp, cols, pk))
        sel = ", ".join(e for _, _, e in cols)
        frm = "%s a %s %s b ON %s" % (x.name, jt, y.name,
                                      rng.choice(["a.id = b.id", "b.id = a.id"]))
        stmts.append("INSERT INTO %s SELECT %s FROM %s;" % (tmp, sel, frm))
        drops = ["DROP TABLE %s;" % x.name, "DROP TABLE %s;" % y.name]
        rng.shuffle(drops)
        stmts += drops
        if tmp != final:
            stmts.append("ALTER TABLE %s RENAME TO %s;" % (tmp, final))
        if not pk and rng.random() < 0.5:
            stmts.append("CREATE INDEX ON %s (id);" % final)
        for t in (x, y):
            tables.remove(t)
        case.quiet.add(final)
        n = Table(final, [(c, d) for c, d, _ in cols], pk)
        n.decl = dict(n.cols)
        n.vals = {c: x.vals.get(c) or y.vals.get(c) for c, _ in n.cols
                  if x.vals.get(c) or y.vals.get(c)}
        n.long = {c for c, _, e in cols
                  if e.split(".")[1] in getattr(x if e.startswith("a.") else y, "long", ())}
        tables.append(n)
        ops.append("join %s %s %s -> %s" % (x.name, jt, y.name, final))
        touched |= {final}
        new = [n]
    elif main == "group":
        # keys of few values mostly (groups of several rows)
        w = [5 if base_type(t.decl[c]) == "bool" or c in getattr(t, "keys", []) or c in
             getattr(t, "keys_index", []) else 3 if base_type(t.decl[c]) in ("text", "varchar")
             else 1 for t, c in groupable]
        t, k = rng.choices(groupable, weights=w)[0]
        _ensure_index(rng, case, steps, t, k)
        acols = _mappable(t) + ([("id", t.decl["id"])] if "id" in t.decl else [])
        used = {k}
        cols = [(k, t.decl[k], k), (_out_name(used, "n"), "bigint", "count(*)")]
        for _ in range(rng.randint(1, 3)):
            e, rt = _chain_aggregate(rng, acols)
            name = _out_name(used, "a%d" % len(used))
            cols.append((name, rt, e))
        drop = not t.nodrop and rng.random() < 0.6
        final = _new_name(rng, tables, "per_%s" % k[:12])
        keyed = rng.random() < 0.5
        where = ""
        if keyed:
            where = " WHERE %s IS NOT NULL" % k
        f = _chain_filter(rng, t) if rng.random() < 0.5 else None
        if f and not (f.startswith("id ") and "id" not in t.decl):
            where = (where + " AND (%s)" % f) if where else " WHERE %s" % f
        having = " HAVING count(*) %s %d" % (rng.choice([">", ">="]), rng.randint(1, 3)) \
            if rng.random() < 0.25 else ""
        defs = ", ".join("%s %s%s" % (c, d, " PRIMARY KEY" if keyed and c == k else "")
                         for c, d, _ in cols)
        if rng.random() < 0.3:
            stmts.append("CREATE TABLE %s AS SELECT %s FROM %s%s GROUP BY %s%s;" % (
                final, ", ".join("%s AS %s" % (e, c) for c, _, e in cols), t.name, where, k,
                having))
            stmts.append("CREATE UNIQUE INDEX ON %s (%s);" % (final, k))
            keyed = False
        else:
            stmts.append("CREATE TABLE %s (%s);" % (final, defs))
            if not keyed:
                stmts.append("CREATE UNIQUE INDEX ON %s (%s);" % (final, k))
            stmts.append("INSERT INTO %s SELECT %s FROM %s%s GROUP BY %s%s;" % (
                final, ", ".join(e for _, _, e in cols), t.name, where, k, having))
        if drop:
            stmts.append("DROP TABLE %s;" % t.name)
            tables.remove(t)
        else:
            t.filled_by = t.live_at = s    # a live input: replaced lazily, filled by this step
            case.quiet.add(t.name)
        case.quiet.add(final)
        decls = [(c, d) for c, d, _ in cols]
        n = UnitTable(final, decls, [k], [k], {k: t.vals[k]} if t.vals.get(k) else {},
                      dim=t.dim if isinstance(t, UnitTable) and t.dim == k else None)
        n.long = {c for c, d in decls if c != k and base_type(d) in ("text", "varchar")}
        tables.append(n)
        ops.append("group %s by %s -> %s%s" % (t.name, k, final, "" if drop else " (live)"))
        touched |= {t.name, final}
        new = [n]
    elif main == "split":
        t = rng.choice([x for x in tables if not x.nodrop])
        nparts = 1 if rng.random() < 0.35 else 2
        drop = rng.random() < 0.75
        same = drop and rng.random() < 0.3
        new, made = [], []
        for p in range(nparts):
            natural = {}
            long = set()
            cols = _chain_cols(rng, t, rng.randint(1, 3), natural=natural, long=long)
            where = _chain_filter(rng, t)
            if same and p == 0:
                final = t.name
                tmp = _new_name(rng, tables, t.name + "_tmp")
            else:
                final = tmp = _new_name(rng, tables, "%s_%s" % (t.name[:10], "ab"[p]), made)
            made.append(final)
            pk = t.pk and "id" in t.decl and not isinstance(t, UnitTable) \
                and rng.random() < 0.85
            ctas = rng.random() < 0.2
            if ctas:
                # (a CTAS's columns take their expressions' types)
                cols = [(c, natural[c], e) for c, _, e in cols]
                stmts.append(_ctas(tmp, cols, t.name, where))
                pk = False
            else:
                stmts.append(create_table_sql(tmp, cols, pk))
                if rng.random() < 0.3:
                    c = rng.choice(cols)
                    if _indexable(c[1]) and c[0] not in long:
                        stmts.append("CREATE INDEX ON %s (%s);" % (tmp, c[0]))
                s_ = insert_select_sql(tmp, cols, t.name, where, rng)
                stmts.append(s_)
            if isinstance(t, UnitTable):
                keys = [c for c in t.keys if c in [x for x, _, _ in cols]]
                uniq = t.unique if t.unique and all(
                    c in [x for x, _, _ in cols] for c in t.unique) else None
                if uniq and not ctas and rng.random() < 0.7:
                    stmts.append("CREATE UNIQUE INDEX ON %s (%s);" % (tmp, ", ".join(uniq)))
                else:
                    uniq = None
                n = UnitTable(final, [(c, d) for c, d, _ in cols], keys, uniq,
                              {c: v for c, v in t.vals.items()
                               if c in [x for x, _, e in cols if e == x]},
                              dim=t.dim if t.dim in keys else None,
                              id_col=t.id_col if t.id_col in [x for x, _, _ in cols] else None)
            else:
                n = Table(final, [(c, d) for c, d, _ in cols], pk)
                n.decl = dict(n.cols)
                n.vals = {c: v for c, v in t.vals.items()
                          if c in [x for x, _, e in cols if e == x]}
            n.tmp = tmp
            n.long = long
            new.append(n)
        if drop:
            stmts.append("DROP TABLE %s;" % t.name)
            tables.remove(t)
        else:
            t.filled_by = t.live_at = s
        for n in new:
            if n.tmp != n.name:
                stmts.append("ALTER TABLE %s RENAME TO %s;" % (n.tmp, n.name))
        tables.extend(new)
        ops.append("%s %s -> %s%s" % ("split" if nparts == 2 else "filter", t.name,
                                      ", ".join(n.name for n in new),
                                      "" if drop else " (live)"))
        touched |= {t.name} | {n.name for n in new}
    else:
        new = []
    for n in new:
        n.filled_by = s
        n.live_at = None
        n.fill_col = {c: c for c, _ in n.cols}
        n.indexed = set()
        n.nodrop = False
        n.fixed_id = False
        if not hasattr(n, "vals"):
            n.vals = {}
    # ALTER TABLE of tables the main statements leave alone (all of them
    # replaced lazily: they are being filled), and renames.
    rest = [t for t in tables if t.name not in touched]
    nalter = 1 if main == "alter" else (rng.randint(0, 1) if rest else 0)
    if main == "alter" and rng.random() < 0.3:
        nalter = 2
    for t in rng.sample(rest, min(nalter, len(rest))):
        stmts += chain_alter(rng, t, tables, s, ops)
    # names as the step's script leaves them, for an index a later step needs
    for t in tables:
        if t.filled_by == s:
            t.fill_name = t.name
            t.fill_col = {c: c for c, _ in t.cols}
    return stmts, ops


def chain_alter(rng, t, tables, s, ops):
    """ALTER TABLE and CREATE INDEX on t: type changes first (one
    statement), an added column, an index, a column renamed, the table
    renamed."""
    stmts, what = [], []
    if rng.random() < 0.2:
        return chain_rename(rng, t, tables, s, ops)
    uniq = set((t.unique or []) if isinstance(t, UnitTable) else
               (["id"] if t.pk else []))
    cmds = []
    for c, d in list(t.cols):
        if c == "id" and (t.fixed_id or getattr(t, "live_input", False)) or c == "added":
            continue        # (added: gen_alter's, with a CHECK)
        table = INJECTIVE if c in uniq else CHAIN_TYPE_CHANGES
        if c == "id":
            ch = ["bigint"] if d == "int" else []
        else:
            ch = table.get(d) or []
        if ch and rng.random() < 0.3:
            new = rng.choice(ch)
            cmds.append("ALTER COLUMN %s TYPE %s" % (c, new))
            t.cols = [(x, new if x == c else dx) for x, dx in t.cols]
            # (values of the old type no longer find rows; nor does dim)
            t.vals.pop(c, None)
            if getattr(t, "dim", None) == c:
                t.dim = None
    if cmds:
        stmts.append("ALTER TABLE %s %s;" % (t.name, ", ".join(cmds)))
        what.append("retype")
    r = rng.random()
    if r < 0.35 or not stmts:
        k = rng.randint(0, 9)
        name = "add%d" % s
        kind = rng.random()
        if kind < 0.4:
            stmts.append("ALTER TABLE %s ADD COLUMN %s int NOT NULL DEFAULT %d;" % (t.name, name, k))
            t.cols.append((name, "int"))
        elif kind < 0.7:
            stmts.append("ALTER TABLE %s ADD COLUMN %s text DEFAULT 'd%d';" % (t.name, name, k))
            t.cols.append((name, "text"))
        else:
            stmts.append("ALTER TABLE %s ADD COLUMN %s numeric(12,2) DEFAULT %d.5;"
                         % (t.name, name, k))
            t.cols.append((name, "numeric(12,2)"))
        what.append("add column")
    idx = [c for c, d in t.cols if _short_col(t, c, d)]
    if idx and rng.random() < 0.4:
        c = rng.choice(idx)
        stmts.append("CREATE INDEX ON %s (%s);" % (t.name, c))
        what.append("index")
    t.decl = dict(t.cols)
    for c, _ in t.cols:
        t.fill_col.setdefault(c, c)
    # (replaced lazily: filled by this step from now on)
    t.filled_by = s
    more = []
    if rng.random() < 0.4:
        more = chain_rename(rng, t, tables, s, [])
        what.append("renames")
    ops.append("alter %s: %s" % (t.name, ", ".join(what)))
    return stmts + more


def chain_rename(rng, t, tables, s, ops):
    """A column of t renamed, or t itself, or both: catalog changes (a
    script of renames only moves nothing, and is done at start())."""
    stmts = []
    old = t.name
    others = [c for c, _ in t.cols if c != "id"]
    r = rng.random()
    if others and r < 0.7:
        c = rng.choice(others)
        new = "%s_r%d" % (c[:20], s)
        stmts.append("ALTER TABLE %s RENAME COLUMN %s TO %s;" % (t.name, c, new))
        _rename_col(t, c, new)
    if not stmts or r > 0.4:
        new = _new_name(rng, tables, "%s_r%d" % (t.name[:20], s))
        stmts.append("ALTER TABLE %s RENAME TO %s;" % (t.name, new))
        t.name = new
    ops.append("rename %s%s" % (old, " -> %s" % t.name if t.name != old else " column"))
    return stmts


def _whole_table_read(st, names):
    """A read of a whole table of the chain (it migrates every row where
    reads migrate: nothing would be left for the next step)."""
    t = st.text
    if not t.startswith(("SELECT", "WITH", "DECLARE")):
        return False
    if " WHERE " not in t and any(re.search(r"\bFROM %s\b" % re.escape(n), t) for n in names):
        return True
    return " NOT IN (" in t or " GROUP BY " in t and " WHERE " not in t


def _narrow(st, t):
    """A statement that addresses rows of t by its id or unit key (so that
    the migrations keep rows for the next step): an INSERT ... VALUES, or a
    WHERE on such a column, with no OR, NOT or sub-query beside it."""
    if st.text.startswith("INSERT"):
        # (INSERT ... SELECT: keys unknown before it runs, the whole input;
        # a conflict on a retyped key is not pushed down either)
        return " VALUES " in st.text and not (
            isinstance(t, UnitTable) and (getattr(t, "nnd", False) or not _many_units(t)))
    if re.search(r" JOIN |, side |\(SELECT ", st.text):
        return False
    m = re.search(r" WHERE (.*)$", st.text)
    if not m or re.search(r" OR | NOT |SELECT|JOIN| FROM ", m.group(1)):
        return False
    ok = r"(\w+\.)?%s (= %%s|= ANY|IS NULL)"
    if not isinstance(t, UnitTable):
        return bool(re.match(r"(\w+\.)?id (= %s|= ANY|BETWEEN)", m.group(1)))
    # every column of the unit key bound, none of them retyped by the
    # mapping (a condition on an expression of the input is not pushed down),
    # and units enough (of two groups, one is half the input)
    for keys in (t.keys, t.unique or []):
        if keys and all(re.search(ok % re.escape(k), m.group(1)) for k in keys) and \
                _many_units(t, keys):
            return True
    return False


def _many_units(t, keys=None):
    """Whether t's unit key (or keys) takes values enough that one unit is a
    small part of the input, none of its columns retyped by the mapping."""
    keys = keys if keys is not None else (t.unique or t.keys)
    return all(k in t.vals for k in keys) and \
        functools.reduce(lambda x, k: x * len(t.vals[k]), keys, 1) >= 6


def _unit_budget(tables):
    """{unit table of the first migration: the statements on it that the
    workloads before the last step may run}: a third of its units, since
    each such statement migrates a unit or two (by key, or by a row whose
    unit it is), so that units are left for the next step."""
    out = {}
    for t in tables:
        if isinstance(t, UnitTable) and all(k in t.vals for k in t.keys):
            units = functools.reduce(lambda x, k: x * len(t.vals[k]), t.keys, 1)
            out[t.name] = max(1, units // 3)
    return out


def _within_budget(budget, st, names):
    """Whether st, which names tables names, fits the budget (then it is
    charged: two for a list of keys)."""
    cost = 2 if "= ANY(" in st.text else 1
    hit = [x for x in set(names) if x in budget]
    if any(budget[x] < cost for x in hit):
        return False
    for x in hit:
        budget[x] -= cost
    return True


def gen_chain_workload(rng, case, tables, n, final):
    """Statements over the chain's tables after a step: gen_stmt on tables
    with ids, gen_unit_stmt on tables of a unit key; transactions at every
    isolation level, savepoints, prepared statements.  Reads of whole tables
    only after the last step (final)."""
    src_ids = [r[0] for r in case.rows] or [1]
    max_id = max(src_ids)
    fresh = list(range(max_id + 1, max_id + 200))
    rng.shuffle(fresh)
    id_pool = {"src": src_ids, "fresh": fresh}

    def some_id():
        r = rng.random()
        if r < 0.8:
            return rng.choice(src_ids)
        if r < 0.9:
            return rng.randint(0, max_id + 5)
        return rng.choice(fresh[:20])

    def id_range():
        a = rng.randint(0, max_id)
        return a, a + rng.randint(0, max(5, max_id // 6))

    rows = [t for t in tables if not isinstance(t, UnitTable) and "id" in t.decl]
    out = []
    if not tables:
        return out
    in_tx, tx_left, savepoint = False, 0, False
    for _ in range(n):
        if not in_tx and rng.random() < 0.12:
            out.append(Stmt("BEGIN" + rng.choice(
                ["", " ISOLATION LEVEL REPEATABLE READ", " ISOLATION LEVEL SERIALIZABLE",
                 " ISOLATION LEVEL READ COMMITTED"])))
            in_tx, tx_left, savepoint = True, rng.randint(1, 4), False
        if in_tx and not savepoint and rng.random() < 0.2:
            out.append(Stmt("SAVEPOINT lf_sp"))
            savepoint = True
        for _ in range(10):
            t = rng.choice(tables)
            if isinstance(t, UnitTable) or "id" not in t.decl:
                if not isinstance(t, UnitTable):
                    continue
                st = gen_unit_stmt(rng, t, case)
            else:
                st = gen_stmt(rng, t, rows, some_id, id_range, id_pool)
            # a statement on a later table migrates the first migration's
            # units it needs too (through the chain): charged to them all
            if final or _narrow(st, t) and _within_budget(case.unit_budget, st,
                                                          [t.name] + list(case.unit_budget)):
                break
        else:
            continue
        out.append(st)
        if in_tx:
            tx_left -= 1
            if savepoint and rng.random() < 0.4:
                out.append(Stmt(rng.choice(["ROLLBACK TO SAVEPOINT lf_sp",
                                            "RELEASE SAVEPOINT lf_sp"])))
                savepoint = False
            if tx_left <= 0:
                out.append(Stmt(rng.choice(["COMMIT", "COMMIT", "ROLLBACK"])))
                in_tx = False
    if in_tx:
        out.append(Stmt("COMMIT"))
    if final and rng.random() < 0.4:
        out.append(Stmt("SELECT count(*) FROM %s" % rng.choice(tables).name))
    return out


def _chain_seeds(env, offset, default):
    """Seeds of a chain variant: LEAPFROG_DIFF_<env> of them from offset;
    by default an eighth of LEAPFROG_DIFF_BACKGROUND_COUNT if that is set
    (make soak), else default."""
    if os.environ.get("LEAPFROG_DIFF_SEEDS"):
        return _seeds()
    base = int(os.environ.get("LEAPFROG_DIFF_BASE", "0"))
    count = os.environ.get("LEAPFROG_DIFF_" + env)
    if count is None and os.environ.get("LEAPFROG_DIFF_BACKGROUND_COUNT"):
        count = int(os.environ["LEAPFROG_DIFF_BACKGROUND_COUNT"]) // 8
    count = int(count) if count is not None else default
    return [offset + base + k for k in range(count)]


def _snapshot_episode(rng, case, tables, before, wl, last):
    """Session 1 takes a REPEATABLE READ or SERIALIZABLE snapshot at the end
    of the previous step's workload (before: before the script starts), then
    reads the step's tables, at a point outside session 0's transactions,
    and ends its transaction at once (reads that migrate lock the rows they
    move until then: session 0 must not need them meanwhile, as the existing
    snapshot workloads do; nor may the next script need its locks)."""
    before += [Stmt("BEGIN ISOLATION LEVEL " + rng.choice(["REPEATABLE READ", "SERIALIZABLE"]),
                    session=1),
               Stmt("SELECT count(*) FROM side", session=1)]
    # positions outside session 0's transactions
    spots, depth = [0], 0
    for i, st in enumerate(wl):
        depth = 1 if st.text.startswith("BEGIN") else (
            0 if st.text in ("COMMIT", "ROLLBACK") else depth)
        if not depth:
            spots.append(i + 1)
    reads = []
    for _ in range(rng.randint(2, 5)):
        t = rng.choice(tables)
        for _ in range(20):
            st = gen_chain_workload(rng, case, [t], 1, last)
            st = [x for x in st if x.text.startswith(("SELECT", "WITH"))
                  and " FOR UPDATE" not in x.text and "DELETE" not in x.text
                  and "INSERT" not in x.text and not re.match(r"SELECT lf_", x.text)]
            if st:
                st[0].session = 1
                reads.append(st[0])
                break
    at = rng.choice(spots)
    wl[at:at] = reads + [Stmt(rng.choice(["COMMIT", "COMMIT", "ROLLBACK"]), session=1)]


def gen_chain_case(seed, snapshots=False):
    """A chain of 2 or 3 migrations: gen_case(seed) first, then chain_step;
    with snapshots, session 1 reads each later step's tables in a snapshot
    taken before its start (_snapshot_episode)."""
    case = gen_case(seed)
    rng = random.Random("chain-%d" % seed)
    # The first workload: a prefix of gen_case's (less its reads of whole
    # tables) that ends outside a transaction, so that rows are left.
    first, cuts, depth = [], [0], 0
    tables = _chain_tables(case)
    by_name = {t.name: t for t in tables}
    case.unit_budget = _unit_budget(tables)
    # whole reads of these move every unit; sib_rows' rows move with the
    # first mapping's groups (_with_tracked_in_place), so reading it all does too
    whole = [t.name for t in case.tables] + case.live + \
        (["sib_rows"] if "CREATE TABLE sib_rows " in case.script else [])
    for st in case.workload:
        if re.match(r"SELECT lf_\w+\(", st.text):
            continue        # (PL/pgSQL: statements the filter cannot see)
        named = re.findall(r"\b(?:UPDATE|FROM|JOIN|INTO) (\w+)", st.text)
        if any(x in by_name and not _narrow(st, by_name[x]) for x in named):
            continue
        if _whole_table_read(st, whole):
            continue
        if not _within_budget(case.unit_budget, st, named):
            continue
        first.append(st)
        depth = 1 if st.text.startswith("BEGIN") else (
            0 if st.text in ("COMMIT", "ROLLBACK") else depth)
        if not depth:
            cuts.append(len(first))
    k = rng.randint(6, 18)
    first = first[: max([c for c in cuts if c <= k])]
    steps = [ChainStep(case.script, first, ["%s%s" % (case.kind, " live" if case.live else "")])]
    nsteps = 2 if rng.random() < CHAIN_STEPS[2] else 3
    for s in range(1, nsteps):
        stmts, ops = chain_step(rng, case, steps, tables, s)
        last = s == nsteps - 1
        wl = gen_chain_workload(rng, case, [t for t in tables
                                            if last or t.name not in case.quiet],
                                rng.randint(12, 30) if last else rng.randint(6, 16), last)
        if snapshots and tables:
            _snapshot_episode(random.Random("chain-snapshots-%d-%d" % (seed, s)), case,
                              [t for t in tables if last or t.name not in case.quiet] or tables,
                              steps[-1].workload, wl, last)
        steps.append(ChainStep("\n".join(stmts), wl, ops))
        steps[-1].after = copy.deepcopy(tables)
    case.steps = steps
    case.kind = "chain"
    case.snapshots = snapshots
    return case


def describe_chain(case, upto=None):
    """The chain: source, each step's script and workload (up to (step,
    statement) upto)."""
    out = ["seed=%d chain of %d (%s) %s (replay: LEAPFROG_DIFF_SEEDS=%d pytest "
           "%s::test_differential_chain%s)" % (
               case.seed, len(case.steps), "; ".join(", ".join(st.ops) for st in case.steps),
               _modes(case.seed), case.seed, __file__,
               "_background" if getattr(case, "background", False) else
               "_snapshots" if case.snapshots else ""),
           "source %s(id int%s, %s), %d rows" % (
               case.src, " PRIMARY KEY" if case.src_pk else "",
               ", ".join("%s %s" % c for c in case.src_cols), len(case.rows))]
    if getattr(case, "src_b", None):
        out.append("source %s(id int%s, %s), %d rows" % (
            case.src_b, " PRIMARY KEY" if case.src_b_pk else "",
            ", ".join("%s %s" % c for c in case.src_b_cols), len(case.rows_b)))
    out += ["then: %s%s" % (c, " %r" % (p,) if p else "") for c, p in getattr(case, "setup", [])]
    out += ["then: " + c for c in case.churn]
    if getattr(case, "side_fk", False):
        out.append("side.id references the source, ON DELETE CASCADE")
    for k, st in enumerate(case.steps):
        wl = st.workload
        if upto is not None:
            if k > upto[0]:
                break
            if k == upto[0]:
                wl = wl[: upto[1] + 1]
        out.append("--- script %d (%s) ---\n%s" % (k + 1, ", ".join(st.ops), st.script))
        out.append("--- workload %d ---\n%s" % (
            k + 1, "\n".join("%3d %r" % (i, s) for i, s in enumerate(wl))))
    return "\n".join(out)


CHAIN_ROWS_LEFT = []      # (variant, seed, step, {migration: rows its inputs hold})


def _moves(step):
    """Whether a step's migration moves rows (a script of renames only is
    done at start())."""
    return any(not op.startswith("rename ") for op in step.ops)


def _chain_rows_left(b, names):
    """{migration: rows left in its retired inputs} of the running ones.
    (leapfrog.remaining() counts them as they are: a count(*) of a retired
    table that an earlier migration still fills would compute or migrate
    that migration's rows.)"""
    return dict(b.execute(
        "SELECT name, leapfrog.remaining(name) FROM leapfrog.migrations "
        "WHERE name = ANY(%s) AND state = 'running' ORDER BY name", [names]).fetchall())


def _run_chain(a, b, case, a2, b2):
    load_source(a, case)
    load_source(b, case)
    conns = {0: (a, b), 1: (a2, b2)}
    iso = {0: "", 1: ""}
    diverged = {0: False, 1: False}
    names = []
    for k, st in enumerate(case.steps):
        name = "%s_%d" % (case.name, k + 1)
        if k:
            left = _chain_rows_left(b, names)
            CHAIN_ROWS_LEFT.append((_variant(case), case.seed, k + 1, left))
            if not getattr(case, "background", False):
                # every earlier migration that moves rows still runs, and the
                # first still holds some, which travel the whole chain: else
                # the step checks nothing
                moving = [n for n, s_ in zip(names, case.steps) if _moves(s_)]
                assert sorted(left) == moving and left.get(names[0], 0) > 0, \
                    "before step %d: rows left %r: nothing to check\n%s" % (
                        k + 1, left, describe(case))
        try:
            with a.transaction():
                a.execute(st.script)
        except psycopg.Error as e:
            raise AssertionError("the eager script %d failed (a generator bug): %s %s\n%s"
                                 % (k + 1, e.sqlstate, e, describe(case)))
        # The chain draws over the first migration's live inputs as tables it
        # fills (_chain_tables): replaced, as a user who chains onto them
        # asks for (one tracked in place may not be read by a later one).
        replace_live = k == 0 and getattr(case, "live", [])
        try:
            if replace_live:
                b.execute("SET leapfrog.track_live_inputs = off")
            b.execute("SELECT leapfrog.start(%s, %s)", [name, st.script])
            if replace_live:
                b.execute("RESET leapfrog.track_live_inputs")
        except psycopg.Error as e:
            raise AssertionError("leapfrog.start of step %d failed: %s %s\n%s"
                                 % (k + 1, e.sqlstate, e, describe(case)))
        names.append(name)
        assert public_tables(a) == public_tables(b), \
            "tables after start %d differ: %r vs %r\n%s" % (
                k + 1, public_tables(a), public_tables(b), describe(case))
        _run_workload(case, st.workload, conns, iso, diverged, name, step=k)
    if getattr(case, "before_finish", None):
        names += case.before_finish(a, b, names)
    for c in (a, b, a2, b2):
        if c is not None and c.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            c.execute("ROLLBACK")
    if getattr(case, "background", False):
        for name in names:
            done = b.execute("SELECT leapfrog.wait(%s, 60)", [name]).fetchone()[0]
            assert done, "the worker did not finish %s in 60s\n%s" % (name, describe(case))
    else:
        # the last completes the earlier ones it waits for first
        after = b.execute("SELECT after FROM leapfrog.migrations WHERE name = %s",
                          [names[-1]]).fetchone()[0]
        b.execute("SELECT leapfrog.complete(%s)", [names[-1]])
        st = b.execute("SELECT name, state FROM leapfrog.migrations WHERE name = ANY(%s) "
                       "ORDER BY name", [after + names[-1:]]).fetchall()
        assert all(s_ == "done" for _, s_ in st), \
            "complete(%s) left %r\n%s" % (names[-1], st, describe(case))
        for name in names:
            b.execute("SELECT leapfrog.complete(%s)", [name])
    schema = a.execute("SELECT current_schema()").fetchone()[0]
    assert_same_tables(user_tables_state(a, [schema]), user_tables_state(b, [schema]),
                       "final tables\n%s" % describe(case))
    st = b.execute("SELECT name, state, error, after FROM leapfrog.migrations "
                   "WHERE name = ANY(%s) ORDER BY name", [names]).fetchall()
    assert st == [(n, "done", None, []) for n in sorted(names)], \
        "migrations after the chain: %r\n%s" % (st, describe(case))
    for _ in range(75):     # completion may leave the drop to the worker (bounded poll)
        left = b.execute(RETIRED_SQL).fetchall()
        if not left:
            break
        time.sleep(0.2)
    assert left == [], "leapfrog_retired not empty 15s after the chain: %r\n%s" % (
        left, describe(case))
    for key in (_variant(case) + " chain", "%s chain of %d" % (_variant(case), len(names))):
        CASES_RUN[key] = CASES_RUN.get(key, 0) + 1


@pytest.mark.parametrize("seed", _repeated(_chain_seeds("CHAIN_COUNT", 30_000, 30)))
def test_differential_chain(diff_cluster, seed):
    """Chains of 2 and 3 migrations, background off (the statements migrate
    every row that moves before complete())."""
    needs_real_extension()
    case = gen_chain_case(seed)
    try:
        run_case(diff_cluster, case)
    except AssertionError as e:
        if os.environ.get("LEAPFROG_DIFF_MINIMIZE") != "1":
            raise
        small, sig = minimize(diff_cluster, gen_chain_case(seed))
        try:
            run_case(diff_cluster, small)
            reduced = "(the reduced case passed: flaky?)"
        except AssertionError as e2:
            reduced = str(e2)
        raise AssertionError("%s\n\n=== minimized (%s) ===\n%s" % (e, sig, reduced)) from None


@pytest.mark.parametrize("seed", _repeated(_chain_seeds("CHAIN_SNAPSHOT_COUNT", 60_000, 10)))
def test_differential_chain_snapshots(diff_cluster, seed):
    """Two sessions: snapshots (REPEATABLE READ, SERIALIZABLE) taken before a
    later script's start() read its tables after it; eagerly they see them
    as of the snapshot, lazily the same or 40001."""
    needs_real_extension()
    run_case(diff_cluster, gen_chain_case(seed, snapshots=True))


@pytest.fixture(scope="module")
def diff_cluster_chain_bg(module_cluster_factory):
    """The worker in small batches, starting a migration a moment after its
    start(): the first workload of a chain runs before the worker moves
    rows, the later ones race it."""
    return module_cluster_factory(**{"leapfrog.background": "on",
                                     "leapfrog.background_delay": 800,
                                     "leapfrog.batch_size": 5,
                                     "leapfrog.background_naptime": 25})


@pytest.mark.parametrize("seed", _repeated(_chain_seeds("CHAIN_BACKGROUND_COUNT", 40_000, 12)))
def test_differential_chain_background(diff_cluster_chain_bg, seed):
    """The same with the worker migrating meanwhile: it runs a migration of
    the chain once the ones filling its inputs are done."""
    needs_real_extension()
    case = gen_chain_case(seed)
    case.background = True
    run_case(diff_cluster_chain_bg, case)


def _refusal_target(case):
    """For the refusal check: a table the second step fills (from a table
    the first still fills) with an index of its own, and its key."""
    for t in case.steps[1].after:
        if t.filled_by != 1:
            continue
        if not isinstance(t, UnitTable) and t.pk and "id" in t.decl:
            return t, "id"
        if isinstance(t, UnitTable) and t.unique and len(t.unique) == 1:
            return t, t.unique[0]
    return None


def _refusal_seeds():
    if os.environ.get("LEAPFROG_DIFF_SEEDS"):
        return _seeds()
    n = int(os.environ.get("LEAPFROG_DIFF_CHAIN_REFUSAL_COUNT", "3"))
    out, seed = [], 50_000 + int(os.environ.get("LEAPFROG_DIFF_BASE", "0"))
    while len(out) < n:
        case = gen_chain_case(seed)
        if len(case.steps) == 3 and _refusal_target(case):
            out.append(seed)
        seed += 1
    return out


@pytest.mark.parametrize("seed", _refusal_seeds())
def test_differential_chain_refusals(diff_cluster, seed):
    """What the generator never makes is refused, and changes nothing: after
    two steps of a generated chain, with the first migration still holding
    rows, the DROP of a table the second one fills, and of one the first
    fills, by scripts that do not read them (0A000: their rows would be
    lost).  A GROUP BY over the table the second one fills (three deep) then
    starts, and the chain ends as eagerly."""
    needs_real_extension()
    case = gen_chain_case(seed)
    if len(case.steps) < 3 or not _refusal_target(case):
        pytest.skip("seed %d: no chain of three with a table for the check" % seed)
    case.steps = case.steps[:2]     # (a chain of three: the second workload keeps rows)
    t, k = _refusal_target(case)
    drops = ["DROP TABLE %s" % t.name] + ["DROP TABLE %s" % x.name for x in case.steps[1].after
                                          if x.filled_by == 0 and not x.nodrop][:1]
    group = ("CREATE TABLE deep_g AS SELECT %s, count(*) AS n FROM %s GROUP BY %s"
             % (k, t.name, k))

    def refusals(a, b, names):
        before = b.execute("SELECT name, state FROM leapfrog.migrations ORDER BY 1").fetchall()
        left = _chain_rows_left(b, names)
        assert left.get(names[0], 0) > 0, "nothing left in the first migration: %r\n%s" % (
            left, describe(case))
        for script in drops:
            try:
                b.execute("SELECT leapfrog.start(%s, %s)", [case.name + "_refused", script])
            except psycopg.errors.FeatureNotSupported as e:
                assert "still filling" in str(e), "%s: %s\n%s" % (script, e, describe(case))
            else:
                raise AssertionError("not refused (%r, rows left %r): %s\n%s"
                                     % (before, left, script, describe(case)))
        assert b.execute("SELECT name, state FROM leapfrog.migrations ORDER BY 1"
                         ).fetchall() == before
        assert public_tables(a) == public_tables(b)
        with a.transaction():
            a.execute(group)
        b.execute("SELECT leapfrog.start(%s, %s)", [case.name + "_g", group])
        for q in ("SELECT * FROM deep_g ORDER BY 1", "SELECT count(*), sum(n) FROM deep_g"):
            ra, rb = run_stmt(a, Stmt(q, ordered=True)), run_stmt(b, Stmt(q, ordered=True))
            assert ra == rb, "%s: eager %r, lazy %r\n%s" % (q, _short(ra), _short(rb),
                                                            describe(case))
        return [case.name + "_g"]

    case.before_finish = refusals
    run_case(diff_cluster, case)
