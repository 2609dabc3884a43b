"""Figures of one run, from pgbench's per-transaction log.

Times are wall clock (pgbench logs the completion time of every
transaction; the drivers log their events with time.time()).  The window is
[migration start, end of the run]: the same length for every strategy of a
profile, so committed counts compare directly.
"""
import numpy as np


def _pct(a, q):
    return float(np.percentile(a, q)) if len(a) else None


def _r(x, nd=3):
    return None if x is None else round(float(x), nd)


def compute(txs, t_origin, t_m, t_end, events, new_order_script=0):
    """txs: [(end_epoch, latency_us|None, script_no, retries)]."""
    ends = np.array([t[0] for t in txs], dtype=float)
    lat = np.array([t[1] if t[1] is not None else np.nan for t in txs], dtype=float) / 1000.0
    script = np.array([t[2] for t in txs], dtype=int)
    ok = ~np.isnan(lat)

    # -- per second ------------------------------------------------------------
    nsec = int(np.ceil(t_end - t_origin))
    sec = np.floor(ends - t_origin).astype(int) if len(ends) else np.array([], dtype=int)
    series = []
    for s in range(nsec):
        m = sec == s
        mo = m & ok
        l = lat[mo]
        series.append({
            "t": s,
            "t_rel": round(s - (t_m - t_origin), 3),
            "committed": int(mo.sum()),
            "failed": int((m & ~ok).sum()),
            "new_order": int((mo & (script == new_order_script)).sum()),
            "p50_ms": _r(_pct(l, 50)),
            "p95_ms": _r(_pct(l, 95)),
            "p99_ms": _r(_pct(l, 99)),
        })

    # -- window ------------------------------------------------------------------
    w = (ends >= t_m) & (ends <= t_end)
    wok = w & ok
    lw = lat[wok]
    commits = np.sort(ends[wok])
    edges = np.concatenate([[t_m], commits, [t_end]])
    gaps = np.diff(edges)
    stall = float(gaps.max()) if len(gaps) else float(t_end - t_m)
    stall_at = float(edges[int(gaps.argmax())] - t_m) if len(gaps) else 0.0
    pre = (ends >= t_origin + 2) & (ends < t_m) & ok
    pre_span = max(1e-9, t_m - (t_origin + 2))
    no = wok & (script == new_order_script)

    # the lowest throughput over the window's whole 5 s slices: at a fixed
    # rate, keeping up with the arrivals means this equals the rate
    n5 = int((t_end - t_m) // 5)
    min_tps_5s = (min(int(((commits >= t_m + 5 * i) & (commits < t_m + 5 * (i + 1))).sum())
                      for i in range(n5)) / 5.0) if n5 else None

    def ev(k):
        return _r(events[k] - t_m) if k in events else None

    res = {
        "switch_s": ev("switch"),
        "complete_s": ev("complete"),
        "longest_stall_s": _r(stall),
        "longest_stall_at_s": _r(stall_at),
        "committed": int(wok.sum()),
        "failed": int((w & ~ok).sum()),
        "window_s": _r(t_end - t_m, 1),
        "tps_window": _r(wok.sum() / max(1e-9, t_end - t_m), 1),
        "tps_before": _r(pre.sum() / pre_span, 1),
        # throughput kept in the window relative to the same run before the
        # migration: insensitive to the machine's speed drifting between runs
        "tps_window_vs_before": _r((wok.sum() / max(1e-9, t_end - t_m)) / (pre.sum() / pre_span))
        if pre.sum() else None,
        "min_tps_5s": _r(min_tps_5s, 1),
        "p50_ms": _r(_pct(lw, 50)),
        "p95_ms": _r(_pct(lw, 95)),
        "p99_ms": _r(_pct(lw, 99)),
        "max_ms": _r(lw.max()) if len(lw) else None,
        "p99_new_order_ms": _r(_pct(lat[no], 99)),
        "retries": int(sum(t[3] for t, m in zip(txs, w) if m)),
    }
    cdf = np.sort(lat[no])
    cdf_all = np.sort(lw)
    return res, series, {"new_order": cdf, "all": cdf_all}
