"""summary.md: the figures of one run and the ratios between strategies
(all numbers from the same run)."""
from .cpu import KINDS as CPU_KINDS
from .strategies import LAZY, STRATEGIES as ORDER

COLS = [("switch_s", "switch s"), ("complete_s", "complete s"),
        ("longest_stall_s", "longest stall s"), ("committed", "committed"),
        ("tps_window", "tps"), ("tps_window_vs_before", "tps / own tps before"), ("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"),
        ("p99_ratio_vs_baseline", "p99 / baseline p99"),
        ("min_tps_5s_vs_rate", "lowest 5 s tps / rate"), ("failed", "failed"),
        ("schema_retries", "schema retries"), ("lock_waits", "lock waits"),
        ("deadlocks", "deadlocks")]
RATIOS = [("committed", "committed"),
          ("tps_window_vs_before", "tps kept (committed, corrected for drift)"),
          ("longest_stall_s", "longest stall"),
          ("p99_ms", "p99 latency"), ("switch_s", "switch time"), ("complete_s", "completion time")]
# Figures shown per round for strategies run several times.
ROUND_FIGURES = [("committed", "Committed"),
                 ("tps_window_vs_before", "Throughput kept (tps / own tps before)"),
                 ("p99_ms", "p99 ms"), ("min_tps_5s", "Lowest 5 s tps")]


def _fmt(v):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:.0f}"
        if abs(v) >= 1:
            return f"{v:.2f}"
        return f"{v:.3f}"
    return str(v)


def _ratio(a, b):
    if a is None or b is None:
        return None
    if b == 0:
        return None if a != 0 else 1.0
    return a / b


def _pairs(have, others):
    """The (lazy strategy, other strategy) pairs of the ratio tables, among
    the strategies in have: each lazy strategy over each of others, and each
    other lazy variant over lazy."""
    return [(lz, o) for lz in LAZY if lz in have
            for o in tuple(others) + (("lazy",) if lz != "lazy" else ()) if o in have]


def write_markdown(runner, path, figs):
    m = runner.meta
    L = []
    L.append(f"# Leapfrog benchmark: profile `{m.get('profile')}`\n")
    p = m.get("params", {})
    ld = m.get("load", {})
    L.append(f"TPC-C with W={p.get('warehouses')} warehouses "
             f"({ld.get('rows', {}).get('customer', '?')} customers, "
             f"{ld.get('rows', {}).get('order_line', '?')} order lines, "
             f"{ld.get('rows', {}).get('stock', '?')} stock rows; "
             f"{(ld.get('db_bytes') or 0) / 2**30:.2f} GiB), {p.get('clients')} pgbench clients, "
             f"{p.get('duration')} s per run, migration at t={p.get('migrate_at')} s; "
             f"window = migration start to end of run "
             f"({p.get('duration', 0) - p.get('migrate_at', 0)} s). "
             f"Host: {m.get('host', {}).get('cpus')} CPUs, {m.get('host', {}).get('mem_gib')} GiB. "
             f"Total time {m.get('total_s')} s.\n")
    if m.get("saturated_tps"):
        L.append(f"Saturated throughput (baseline, before the migration point): "
                 f"{m['saturated_tps']} tps"
                 + (f"; fixed-rate runs at {m['rate_tps']} tps ({p.get('rate_fraction')} of it)"
                    if m.get("rate_tps") else "")
                 + (f", then per round {', '.join(str(r) for r in m['rate_tps_rounds'][1:])} tps "
                    "(the same fraction of a short saturated run before each round)"
                    if len(m.get("rate_tps_rounds", [])) > 1 else "") + ".\n")
    ls = m.get("lazy_support", {})
    if ls:
        L.append("Leapfrog support: " + ", ".join(
            f"{k}: {v['state']}" + (f" ({v['reason']})" if v.get("reason") else "")
            for k, v in ls.items()) + "\n")
    for load, migs in runner.results.items():
        L.append(f"\n## Load: {load}\n")
        for mig, strats in migs.items():
            L.append(f"\n### {mig}\n")
            L.append("| strategy | status | " + " | ".join(c[1] for c in COLS) + " |")
            L.append("|---|---|" + "---|" * len(COLS))
            for s in ORDER:
                if s not in strats:
                    continue
                r = strats[s]
                L.append(f"| {s} | {r.get('status')} | "
                         + " | ".join(_fmt(r.get(c[0])) for c in COLS) + " |")
            if any(strats[s].get("cpu_clients_s") is not None for s in strats):
                L.append("\nServer CPU in the window, seconds, by process (medians where "
                         "repeated; bench/leapfrog_bench/cpu.py):\n")
                L.append("| strategy | " + " | ".join(CPU_KINDS) + " | total | "
                         "machine busy before / in the window | buffer pages read per "
                         "committed transaction |")
                L.append("|---|" + "---|" * (len(CPU_KINDS) + 3))
                for s in ORDER:
                    if s in strats and strats[s].get("cpu_clients_s") is not None:
                        v = [strats[s].get(f"cpu_{k}_s") for k in CPU_KINDS]
                        L.append(f"| {s} | " + " | ".join(_fmt(x) for x in v) + " | "
                                 + _fmt(sum(x or 0.0 for x in v)) + " | "
                                 + _fmt(strats[s].get("host_busy_before")) + " / "
                                 + _fmt(strats[s].get("host_busy")) + " | "
                                 + _fmt(strats[s].get("blocks_per_txn")) + " |")
            notes = [f"- {s}: {strats[s]['reason']}" for s in ORDER
                     if s in strats and strats[s].get("reason")]
            if notes:
                L.append("\n" + "\n".join(notes))
            reps = [s for s in ORDER if s in strats and strats[s].get("runs")]
            if reps:
                n = max(len(strats[s]["runs"]) for s in reps)
                L.append(f"\n{', '.join(reps)}: {n} runs each, in interleaved rounds; the table "
                         "shows medians (the plots show the run with the median committed count). "
                         "Per round:")
                for key, title in ROUND_FIGURES:
                    L.append(f"\n| {title} | " + " | ".join(f"round {i + 1}" for i in range(n))
                             + " |")
                    L.append("|---|" + "---|" * n)
                    for s in reps:
                        L.append(f"| {s} | " + " | ".join(_fmt(r.get(key))
                                                          for r in strats[s]["runs"]) + " |")
                    for lz, other in _pairs(reps, ("eager", "multistep", "baseline", "redeploy")):
                        per = [_ratio(a.get(key), b.get(key)) for a, b in
                               zip(strats[lz]["runs"], strats[other]["runs"])]
                        L.append(f"| {lz}/{other} | " + " | ".join(_fmt(x) for x in per) + " |")
            L.append("\nRatios (lazy over the other strategy, same invocation"
                     + ("; of the medians where repeated" if reps else "")
                     + "; n/a where a side did not run or has no value):\n")
            L.append("| ratio | " + " | ".join(r[1] for r in RATIOS) + " |")
            L.append("|---|" + "---|" * len(RATIOS))
            for lz, other in _pairs(strats, ("eager", "multistep", "baseline", "redeploy")):
                a, b = strats[lz], strats[other]
                L.append(f"| {lz}/{other} | " + " | ".join(
                    _fmt(_ratio(a.get(k), b.get(k))) for k, _ in RATIOS) + " |")
    L.append("\n## Figures\n")
    for f in figs:
        L.append(f"![{f}]({f})\n")
    L.append("\n## How to read\n")
    L.append("- switch s: from the migration's start until the new schema answered "
             "(switch committed and a query on a new table returned).\n"
             "- complete s: until nothing was left to migrate (eager: commit; multi-step: "
             "cut-over; lazy: leapfrog.migrations state done); n/a if not within the window.\n"
             "- longest stall s: the longest interval in the window with no committed "
             "transaction.\n"
             "- committed: transactions committed in the window; p99 over the window's "
             "transactions (at a fixed rate pgbench counts latency from the scheduled start, "
             "so queueing shows).\n"
             "- lowest 5 s tps / rate (fixed-rate load): the lowest throughput over the window's "
             "whole 5-second slices, over the arrival rate; 1 (or a hair under) means the "
             "sessions kept up with the arrivals all through the migration.\n"
             "- tps / own tps before: the window's throughput over the same run's throughput "
             "before the migration (from second 2 to the migration point). The machine is shared "
             "and its speed drifts between runs by up to a few tens of percent; this ratio, and "
             "its ratio between strategies (\"tps kept\"), cancels that drift, where raw "
             "committed counts of two runs do not.\n"
             "- schema retries: calls of the old code that failed because the schema switched "
             "under them and were re-run with the new code.\n"
             "- lock waits: client sessions waiting on a lock (row, transaction, relation, "
             "advisory), on average over the window's 100 ms samples of pg_stat_activity; "
             "deadlocks: those detected in the run's database (pg_stat_database), retried "
             "ones included.\n"
             "- lazy_migrate: lazy with the clients' leapfrog.read_mode = migrate (plain reads "
             "migrate the rows they need instead of computing them, the default).\n"
             "- lazy_unpaced: lazy with leapfrog.background_min_share = 1 (the workers run flat "
             "out whatever the load, as before pacing).\n"
             "- lazy_variant: lazy with the server settings given to bench/run.py as "
             "--variant-set (in meta.variant_settings of summary.json).\n")
    with open(path, "w") as f:
        f.write("\n".join(L))
