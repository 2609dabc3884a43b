"""Unit tests of the benchmark harness's arithmetic (no server needed):
pgbench log parsing, stall / window figures, migration script splitting.
Run: .venv/bin/python -m pytest bench/tests -q"""
import gzip
import os

from leapfrog_bench import metrics, report
from leapfrog_bench.migrations import MIGRATIONS
from leapfrog_bench.workload import parse_logs


def test_parse_logs(tmp_path):
    p = tmp_path / "pgbench_log.1"
    p.write_text("0 1 2500 0 1700000000 500000 0\n"
                 "1 1 failed 1 1700000001 0 3\n"
                 "2 1 1200 4 1700000000 100000 25 1\n")   # with --rate: lag column
    q = tmp_path / "pgbench_log.1.1.gz"
    with gzip.open(q, "wt") as f:
        f.write("3 1 900 2 1700000002 0 0\n")
    txs = parse_logs([str(p), str(q)])
    assert [t[0] for t in txs] == [1700000000.1, 1700000000.5, 1700000001.0, 1700000002.0]
    assert txs[0][1:] == (1200, 4, 1)
    assert txs[2][1] is None and txs[2][3] == 3


def test_compute_stall_and_window():
    t0 = 1000.0
    txs = []
    # 100 tx/s from 0 to 20 s, nothing from 10.0 to 13.5 s
    for i in range(2000):
        t = t0 + i / 100.0
        if 10.0 <= t - t0 < 13.5:
            continue
        txs.append((t, 2000 if i % 2 else 4000, i % 5, 0))
    res, series, cdf = metrics.compute(txs, t0, t0 + 5, t0 + 20, {"switch": t0 + 13.5,
                                                                   "start": t0 + 5})
    assert abs(res["longest_stall_s"] - 3.51) < 0.02
    assert abs(res["longest_stall_at_s"] - 4.99) < 0.02
    assert res["switch_s"] == 8.5 and res["complete_s"] is None
    assert res["committed"] == len([t for t in txs if t0 + 5 <= t[0] <= t0 + 20])
    assert 3.9 <= res["p99_ms"] <= 4.0 and res["p50_ms"] in (2.0, 3.0, 4.0)
    assert len(series) == 20 and series[11]["committed"] == 0 and series[3]["committed"] == 100
    assert series[5]["t_rel"] == 0
    assert len(cdf["new_order"]) == res["committed"] // 5 or abs(len(cdf["new_order"]) - res["committed"] / 5) <= 1


def test_compute_no_commit_at_all():
    res, series, _ = metrics.compute([], 0.0, 5.0, 20.0, {})
    assert res["longest_stall_s"] == 15.0 and res["committed"] == 0 and res["p99_ms"] is None


def test_scripts_split_and_creates():
    m = MIGRATIONS["split"]
    st = m.statements()
    assert [s.split()[0] for s in st] == ["CREATE", "CREATE", "CREATE", "INSERT", "INSERT", "DROP"]
    assert len(m.create_statements()) == 3
    j = MIGRATIONS["join"]
    assert [s.split()[0] for s in j.statements()][-2:] == ["DROP", "DROP"]
    assert "GROUP BY" in MIGRATIONS["aggregate"].script()


def test_ratio_format():
    assert report._ratio(None, 1) is None and report._ratio(1, 0) is None
    assert report._ratio(0, 0) == 1.0 and report._fmt(0.5) == "0.500" and report._fmt(None) == "n/a"


def _fake_run(committed, kept, stall, t0):
    series = [{"t": i, "committed": committed // 10} for i in range(10)]
    return {"status": "ok", "committed": committed, "tps_window": committed / 10,
            "tps_window_vs_before": kept, "switch_s": 0.05, "complete_s": None,
            "longest_stall_s": stall, "p50_ms": 2.0, "p99_ms": 10.0 + stall, "notes": [],
            "_record": ("saturated", "split", "lazy", series, [(t0 + 1, 0.5)], t0, t0 + 2,
                        [committed], {"switch": t0 + 2.05})}


def test_median_of_interleaved_runs(tmp_path):
    from leapfrog_bench.runner import Runner
    r = Runner({"name": "t"}, str(tmp_path))
    runs = [_fake_run(900, 0.9, 0.03, 100.0), _fake_run(1200, 1.1, 0.01, 200.0),
            _fake_run(1000, 0.8, 0.02, 300.0)]
    m = r._median_of(runs)
    # figures are medians per figure; the plots keep the median-committed run
    assert m["committed"] == 1000 and m["tps_window_vs_before"] == 0.9
    assert m["longest_stall_s"] == 0.02 and m["complete_s"] is None
    assert [x["committed"] for x in m["runs"]] == [900, 1200, 1000]
    assert "_record" not in m
    assert r.cdfs[("saturated", "split", "lazy")] == [1000]
    assert r.markers[("saturated", "split", "lazy")]["start"] == 2.0
    assert len(r.series) == 10
    # one run: kept as is
    one = r._median_of([_fake_run(700, 0.7, 0.5, 0.0)])
    assert one["committed"] == 700 and "runs" not in one


def test_report_lists_rounds(tmp_path):
    from leapfrog_bench.runner import Runner
    r = Runner({"name": "t"}, str(tmp_path))
    lazy = r._median_of([_fake_run(900, 0.9, 0.03, 0.0), _fake_run(1100, 1.0, 0.02, 0.0)])
    eager = dict(lazy, runs=[{"committed": 1000}, {"committed": 1000}], committed=1000)
    r.results = {"saturated": {"split": {"eager": eager, "lazy": lazy}}}
    path = tmp_path / "summary.md"
    report.write_markdown(r, str(path), [])
    text = path.read_text()
    assert "| lazy/eager | 0.900 | 1.10 |" in text
    assert "2 runs each, in interleaved rounds" in text


def test_report_compares_lazy_variants_with_lazy(tmp_path):
    """lazy_migrate (and lazy_nobg) get their rounds and their ratios over
    eager and over lazy, as lazy gets its over eager."""
    from leapfrog_bench.runner import Runner
    r = Runner({"name": "t"}, str(tmp_path))
    lazy = r._median_of([_fake_run(900, 0.9, 0.03, 0.0), _fake_run(1100, 1.0, 0.02, 0.0)])
    other = r._median_of([_fake_run(990, 0.99, 0.03, 0.0), _fake_run(1210, 1.1, 0.02, 0.0)])
    eager = dict(lazy, runs=[{"committed": 1000}, {"committed": 1000}], committed=1000,
                 tps_window_vs_before=0.5)
    r.results = {"saturated": {"split": {"eager": eager, "lazy": lazy,
                                         "lazy_migrate": other}}}
    path = tmp_path / "summary.md"
    report.write_markdown(r, str(path), [])
    text = path.read_text()
    assert "| lazy_migrate/lazy | 1.10 | 1.10 |" in text            # committed per round
    assert "| lazy_migrate/eager | 0.990 | 1.21 |" in text
    assert "| lazy_migrate/lazy | 1.10 | 1.10 | " in text            # ratios of the medians
    assert "| lazy_migrate/eager | 1.10 | 2.09 | " in text
    assert "lazy/lazy" not in text and "| lazy_migrate | ok |" in text


def test_lazy_variant_runs_with_its_settings_and_says_which(tmp_path, monkeypatch):
    """lazy_variant: the server settings run.py's --variant-set gave it,
    applied for its runs only, and recorded in summary.json's meta."""
    from leapfrog_bench import strategies
    from leapfrog_bench.runner import Runner
    monkeypatch.setitem(strategies.LAZY_VARIANTS["lazy_variant"], "server_settings",
                        {"leapfrog.batch_size": "1000"})
    assert strategies.server_settings("lazy_variant") == {"leapfrog.batch_size": "1000"}
    assert strategies.server_settings("lazy") == {}
    r = Runner({"name": "t", "strategies": ["baseline", "lazy", "lazy_variant"]}, str(tmp_path))
    assert r.meta["variant_settings"] == {"leapfrog.batch_size": "1000"}


def test_client_settings_reach_pgbench_through_pgoptions(tmp_path, monkeypatch):
    from leapfrog_bench.strategies import DRIVERS, LAZY, Lazy, client_settings
    from leapfrog_bench.workload import PgbenchRun

    class FakeCluster:
        pgbench = "pgbench"

        def pgbench_conn_args(self, dbname):
            return [dbname]

    assert DRIVERS["lazy_migrate"] is Lazy and "lazy_migrate" in LAZY
    assert client_settings("lazy") == {} and client_settings("eager") == {}
    monkeypatch.setenv("PGOPTIONS", "-c work_mem=64MB")
    pg = PgbenchRun(FakeCluster(), "db", str(tmp_path / "a"), 1, 1, 1, 5,
                    settings={**client_settings("lazy_migrate"), "application_name": "a b"})
    assert pg.env["PGOPTIONS"] == ("-c work_mem=64MB -c leapfrog.read_mode=migrate "
                                   "-c application_name=a\\ b")
    monkeypatch.delenv("PGOPTIONS")
    pg = PgbenchRun(FakeCluster(), "db", str(tmp_path / "b"), 1, 1, 1, 5,
                    settings=client_settings("lazy"))
    assert "PGOPTIONS" not in pg.env


def test_lock_waits_count_client_backends_waiting_on_locks():
    from leapfrog_bench.waits import lock_waits
    row = ("client backend", "Lock", "transactionid", "SELECT tpcc_payment(1, 10);")
    lw = ("client backend", "LWLock", "WALWrite", "")
    av = ("autovacuum worker", "Lock", "relation", "")
    samples = [(1.0, [row, row]), (2.0, [row, lw, av]), (3.0, []), (9.0, [row])]
    assert lock_waits(samples, 1.5, 3.5) == 0.5
    assert lock_waits(samples, 0.0, 3.0) == 1.0
    assert lock_waits(samples, 4.0, 5.0) is None


def test_profiles_serialize_to_json():
    import json
    from leapfrog_bench.profiles import PROFILES
    from leapfrog_bench.runner import _jsonable
    for name, p in PROFILES.items():
        back = json.loads(json.dumps(_jsonable(p)))
        assert back["warehouses"] == p["warehouses"], name
    q = _jsonable(PROFILES["quick"])
    assert q["repeat"]["saturated/split"][0] == 3 and q["only"]["saturated/lazy_nobg"] == ["split"]


def test_runner_output_directory_is_absolute(tmp_path, monkeypatch):
    """pgbench runs in another directory: a relative --out must not reach it."""
    from leapfrog_bench.runner import Runner
    monkeypatch.chdir(tmp_path)
    r = Runner({"name": "t"}, "rel/out")
    assert r.out == os.path.join(os.getcwd(), "rel", "out") and os.path.isabs(r.out)


def test_lazy_progress_uses_loaded_row_count(tmp_path):
    """The lazy poller divides by the inputs' loaded row count, so it never
    reads tuples_total (which scans the inputs until a worker counted them)."""
    from leapfrog_bench.runner import Runner
    from leapfrog_bench.strategies import Lazy
    r = Runner({"name": "t"}, str(tmp_path))
    r.meta["load"] = {"rows": {"customer": 300, "order_line": 5000, "stock": 100}}
    assert r._input_rows(MIGRATIONS["split"]) == 300
    assert r._input_rows(MIGRATIONS["join"]) == 5100
    assert r._input_rows(None) is None      # the warm-up run migrates nothing
    del r.meta["load"]["rows"]["customer"]
    assert r._input_rows(MIGRATIONS["split"]) is None

    class FakeConn:
        closed = False

        def __init__(self):
            self.sql = []

        def execute(self, sql, args):
            self.sql.append(sql)
            return self

        def fetchone(self):
            return ("done", 300, None) if "tuples_total" not in self.sql[-1] else ("done", 300, None, 300)

    import threading
    drv = Lazy("", MIGRATIONS["split"], 0, threading.Event(), params={"input_rows": 600})
    conn = FakeConn()
    drv.poll(conn, "bench_split")
    assert "tuples_total" not in conn.sql[0]
    assert drv.progress[0][1] == 0.5 and drv.progress[-1][1] == 1.0 and "complete" in drv.events
    drv = Lazy("", MIGRATIONS["split"], 0, threading.Event(), params={"input_rows": None})
    conn = FakeConn()
    drv.poll(conn, "bench_split")
    assert "tuples_total" in conn.sql[0] and drv.progress[0][1] == 1.0


def test_multistep_copy_parts_cover_every_warehouse_once():
    from leapfrog_bench.strategies import warehouse_parts
    for w in (1, 2, 3, 10, 50):
        for k in (1, 2, 3, 4):
            parts = warehouse_parts(w, k)
            assert len(parts) == min(k, w)
            assert parts[0][0] == 0 and parts[-1][1] == 2**31 - 1
            assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))   # contiguous
            assert all(lo < hi for lo, hi in parts)
            owners = [sum(lo <= x < hi for lo, hi in parts) for x in range(0, w + 2)]
            assert owners == [1] * (w + 2)
    assert warehouse_parts(10, 2) == [(0, 6), (6, 2**31 - 1)]


def test_stall_waits_name_what_the_stall_samples_show():
    from leapfrog_bench.waits import summarize
    lock = ("client backend", "Lock", "relation", "SELECT tpcc_payment(1, 10);")
    trunc = ("autovacuum worker", "IO", "DataFileTruncate", "autovacuum: VACUUM public.district")
    worker = ("leapfrog worker", "", "", "")
    samples = [(10.0, [worker]),                      # before the stall: not counted
               (10.6, [lock, lock, trunc]),           # a process counted once per sample
               (10.7, [lock, trunc]),
               (10.8, [trunc, worker]),
               (11.5, [worker])]                      # after it
    out = summarize(samples, 10.5, 11.0)
    assert out == ["3/3 samples: autovacuum worker IO/DataFileTruncate "
                   "autovacuum: VACUUM public.district",
                   "2/3 samples: client backend Lock/relation SELECT tpcc_payment(1, 10);",
                   "1/3 samples: leapfrog worker running"]
    assert summarize(samples, 20.0, 21.0) == []


def test_app_code_replaces_fragments_of_the_base():
    """Each migration's application code is tx_base.sql with the fragments its
    tx.sql names replaced: only the functions holding them are deployed, the
    markers are gone, and the old tables are no longer named where the new
    schema replaced them."""
    import re
    from leapfrog_bench.migrations import app_code
    expected = {"split": {"tpcc_new_order_impl", "tpcc_payment_impl", "tpcc_order_status_impl",
                          "tpcc_delivery_impl"},
                "aggregate": {"tpcc_new_order_impl", "tpcc_delivery_impl"},
                "join": {"tpcc_new_order_impl", "tpcc_order_status_impl", "tpcc_delivery_impl",
                         "tpcc_stock_level_impl"}}
    for name, functions in expected.items():
        code = app_code(name)
        assert set(re.findall(r"CREATE OR REPLACE FUNCTION (\w+)", code)) == functions, name
        assert "--@" not in code, name
    assert not re.search(r"\b(FROM|UPDATE) customer\b", app_code("split"))
    assert "INSERT INTO order_total" in app_code("aggregate")
    join = "".join(ln for ln in app_code("join").splitlines(keepends=True)
                   if not ln.lstrip().startswith("--"))
    assert not re.search(r"\b(stock|order_line)\b", join.replace("orderline_stock", ""))
    # the redeploy control: the same functions, unchanged
    for name, functions in expected.items():
        same = app_code(name, replace=False)
        assert set(re.findall(r"CREATE OR REPLACE FUNCTION (\w+)", same)) == functions, name
        assert "--@" not in same, name
    same = app_code("split", replace=False)
    assert re.search(r"\bFROM customer\b", same) and "customer_private" not in same


def test_cpu_by_kind_counts_each_process_once():
    from leapfrog_bench.cpu import CpuSampler, _kind
    assert _kind("postgres: leapfrog worker 1 for database 16384 ") == "workers"
    assert _kind("postgres: autovacuum worker tpcc_run ") == "autovacuum"
    assert _kind("postgres: checkpointer ") == "other"
    assert _kind("postgres: bench tpcc_run [local] SELECT ") == "clients"
    s = CpuSampler("/nonexistent")
    # (time, {pid: (kind, cpu s)}, the postmaster's reaped children's cpu s)
    s.samples = [
        (9.0, {1: ("other", 0.5), 10: ("clients", 1.0)}, 0.0),
        (10.0, {1: ("other", 0.5), 10: ("clients", 2.0), 20: ("workers", 3.0),
                30: ("autovacuum", 0.2)}, 0.0),
        (11.0, {1: ("other", 0.6), 10: ("clients", 2.5), 20: ("workers", 4.0),
                40: ("workers", 0.5)}, 0.5),       # 30 exited: 0.5 s in all
        (12.0, {1: ("other", 0.7), 10: ("clients", 3.0), 40: ("workers", 1.5)}, 4.9),
    ]                                              # 20 exited at 4.4 s
    got = s.by_kind(9.5, 12.5)
    assert got == {"clients": 1.0, "workers": 1.5, "autovacuum": 0.0, "other": 0.2,
                   "exited": 1.7}                  # 30: 0.3 after the first sample; 20: 1.4
    assert s.by_kind(11.5, 12.5) is None           # one sample: no interval


def test_cpu_host_busy_is_the_share_between_the_samples_inside():
    from leapfrog_bench.cpu import CpuSampler, _host
    busy, total = _host()
    assert 0 <= busy <= total and total > 0
    s = CpuSampler("/nonexistent")
    s.host = [(9.0, 100, 1000), (10.0, 150, 1200), (11.0, 310, 1400), (12.0, 320, 1600)]
    assert s.host_busy(9.5, 11.5) == 0.8           # (310 - 150) / (1400 - 1200)
    assert s.host_busy(9.0, 12.0) == round(220 / 600, 3)
    assert s.host_busy(11.5, 12.5) is None


def test_switch_latency_places_transactions_by_scheduled_start(tmp_path):
    """pgbench's logged time at a fixed rate already runs from the
    scheduled start: a transaction is placed at end - time, with latency
    time (the lag column is part of it, not added); failed ones are left
    out."""
    import switch_latency
    p = tmp_path / "pgbench_log.7"
    p.write_text("0 1 1000 0 1700000000 500000 0 0\n"        # first: 0.499 s, 1 ms
                 "1 1 250000 2 1700000009 0 200000 0\n"      # 8.75 s, 250 ms, lag included
                 "2 1 failed 1 1700000010 0 0 1\n")
    rows = switch_latency.load(str(tmp_path))
    assert [(round(s, 3), lat, sc) for s, lat, sc in rows] == [(0.0, 1.0, 0), (8.251, 250.0, 2)]


def test_perf_profile_splits_samples_by_kind_of_process(tmp_path):
    """`perf report`'s lines go to the kind of the process that took them:
    the server's processes by CpuSampler's kinds, pid 0 idle, any other
    process host; perf_diff prints them per committed transaction."""
    import json
    import subprocess
    import sys
    from leapfrog_bench.cpu import CpuSampler
    from leapfrog_bench.perf import parse_report
    s = CpuSampler("/nonexistent")
    s.samples = [(1.0, {10: ("clients", 1.0), 20: ("workers", 0.1)}, 0.0),
                 (2.0, {10: ("clients", 2.0), 30: ("autovacuum", 0.1)}, 0.0)]
    kinds = s.kind_of_pid()
    assert kinds == {10: "clients", 20: "workers", 30: "autovacuum"}
    text = ("# header\n"
            "  40 \t     10:postgres \t/usr/lib/postgresql/15/bin/postgres\t[.] _bt_compare\n"
            "  10 \t     10:postgres \t[kernel.kallsyms]\t[k] copy_folio_from_iter_atomic\n"
            "   5 \t     20:postgres \t/usr/lib/postgresql/15/lib/leapfrog.so\t[.] lf_step\n"
            "  99 \t      0:swapper  \t[kernel.kallsyms]\t[k] pv_native_safe_halt\n"
            "   7 \t   4242:pgbench  \t/usr/bin/pgbench\t[.] doCustom\n"
            "   3 \t     10:postgres \t/usr/lib/postgresql/15/bin/postgres\t[.] _bt_compare\n")
    got = parse_report(text, kinds)
    assert got == {"clients": {"postgres [.] _bt_compare": 43,
                               "[kernel.kallsyms] [k] copy_folio_from_iter_atomic": 10},
                   "workers": {"leapfrog.so [.] lf_step": 5},
                   "idle": {"[kernel.kallsyms] [k] pv_native_safe_halt": 99},
                   "host": {"pgbench [.] doCustom": 7}}
    # perf_diff: 499 samples per CPU second, so 499 samples over 1000
    # committed transactions are 1000 us per transaction
    for name, n, committed in (("a.json", 499, 1000), ("b.json", 998, 1000),
                               ("a2.json", 499, 500), ("b2.json", 499, 1000),
                               ("a3.json", 499, 1000), ("b3.json", 1497, 1000)):
        (tmp_path / name).write_text(json.dumps({
            "frequency_hz": 499, "committed": committed, "seconds": 10,
            "samples": {"clients": n}, "by_kind": {"clients": {"postgres [.] f": n}}}))
    script = os.path.join(os.path.dirname(__file__), "..", "perf_diff.py")

    def diff(*names):
        return subprocess.run([sys.executable, script, *[str(tmp_path / n) for n in names]],
                              capture_output=True, text=True)
    out = diff("a.json", "b.json").stdout
    assert "1     clients          1000.0     2000.0   2.00   (1000, 1000)" in out
    assert "  1000.0   2000.0  +1000.0  postgres [.] f" in out
    # three pairs: differences +1000, -1000 (A's 499 samples over 500
    # committed are 2000 us), +2000: their median, and the range
    out = diff("a.json", "b.json", "a2.json", "b2.json", "a3.json", "b3.json").stdout
    assert "  1000.0   2000.0  +1000.0 -1000.0 +2000.0  postgres [.] f" in out
    assert diff("a.json", "b.json", "a2.json").returncode != 0


def test_blocks_between_is_the_difference_of_the_samples_inside():
    from leapfrog_bench.waits import blocks_between
    blocks = [(9.0, 100), (10.0, 150), (11.0, 400), (12.0, 900)]
    assert blocks_between(blocks, 9.5, 11.5) == 250
    assert blocks_between(blocks, 9.0, 12.0) == 800
    assert blocks_between(blocks, 11.5, 12.5) is None
