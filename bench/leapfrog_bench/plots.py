"""PNG figures in the style of the BullFrog chapter (figures 4.3-4.8):
throughput over time with the migration start (purple circle) and each
strategy's end (its own circle) marked, and the CDF of NewOrder latency in
the window per strategy."""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .strategies import LAZY, STRATEGIES as ORDER  # noqa: E402

STYLE = {
    "baseline": dict(color="#555555", ls="-", label="no migration"),
    "redeploy": dict(color="#555555", ls="--", label="code redeployed, no migration"),
    "eager": dict(color="#d62728", ls="-", label="eager"),
    "multistep": dict(color="#1f77b4", ls="-", label="multi-step"),
    "lazy": dict(color="#2ca02c", ls="-", label="lazy (Leapfrog)"),
    "lazy_nobg": dict(color="#2ca02c", ls=":", label="lazy, no background"),
    "lazy_migrate": dict(color="#17becf", ls="--", label="lazy, reads migrate"),
    "lazy_unpaced": dict(color="#9467bd", ls="--", label="lazy, workers not paced"),
    "lazy_variant": dict(color="#8c564b", ls="--", label="lazy, --variant-set settings"),
}
LOAD_TITLE = {"saturated": "unthrottled clients (saturation)",
              "rate": "fixed request rate (headroom)"}


def _series(runner, load, mig, strat):
    rows = [r for r in runner.series
            if r["load"] == load and r["migration"] == mig and r["strategy"] == strat]
    t = np.array([r["t"] + 0.5 for r in rows])
    return rows, t


def _ok(runner, load, mig, strat):
    r = runner.results.get(load, {}).get(mig, {}).get(strat)
    return r is not None and r.get("committed") is not None


def throughput_figure(runner, load, path):
    migs = list(runner.results[load].keys())
    fig, axes = plt.subplots(len(migs), 1, figsize=(10, 3.2 * len(migs)), squeeze=False)
    for ax, mig in zip(axes[:, 0], migs):
        start_marked = False
        ymax = 1
        xmax = 1
        for s in ORDER:
            if not _ok(runner, load, mig, s):
                continue
            rows, t = _series(runner, load, mig, s)
            y = np.array([r["committed"] for r in rows])
            if len(y):
                ymax = max(ymax, y.max())
            st = STYLE[s]
            ax.plot(t, y, color=st["color"], ls=st["ls"], lw=1.4, label=st["label"])
            mk = runner.markers.get((load, mig, s), {})
            if not start_marked and "start" in mk:
                i = min(len(y) - 1, int(mk["start"]))
                ax.plot([mk["start"]], [y[i] if len(y) else 0], "o", ms=11, mfc="none",
                        mec="purple", mew=2.2, zorder=5)
                ax.axvline(mk["start"], color="purple", lw=0.7, ls="--", alpha=0.6)
                start_marked = True
            if s != "baseline" and "complete" in mk and len(y):
                tc = mk["complete"]
                if tc <= len(y):
                    i = min(len(y) - 1, int(tc))
                    ax.plot([tc], [y[i]], "o", ms=9, mfc="none", mec=st["color"], mew=2, zorder=5)
                else:  # finished after the end of the run
                    ax.annotate(f"done at {tc:.0f}s", xy=(len(y), 0), xytext=(len(y) - 0.5, 0),
                                fontsize=7, color=st["color"], ha="right", va="bottom")
            xmax = max(xmax, len(y))
        ax.set_title(runner_title(mig), fontsize=10)
        ax.set_ylabel("Txns/sec")
        ax.set_ylim(0, ymax * 1.15)
        ax.set_xlim(0, xmax)
        ax.grid(alpha=0.3)
        notes = [f"{STYLE[s]['label']}: {runner.results[load][mig][s]['status']}"
                 for s in ORDER if s in runner.results[load][mig] and not _ok(runner, load, mig, s)]
        if notes:
            ax.text(0.01, 0.04, "; ".join(notes), transform=ax.transAxes, fontsize=7,
                    color="#444444")
        ax.legend(fontsize=7, loc="upper right", ncol=3)
    axes[-1, 0].set_xlabel("Seconds (purple circle: migration start; "
                           "coloured circles: migration complete)")
    fig.suptitle(f"Throughput during migration: {LOAD_TITLE.get(load, load)}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def runner_title(mig):
    from .migrations import MIGRATIONS
    return MIGRATIONS[mig].title if mig in MIGRATIONS else mig


def cdf_figure(runner, load, path):
    migs = list(runner.results[load].keys())
    fig, axes = plt.subplots(1, len(migs), figsize=(4.6 * len(migs), 3.6), squeeze=False)
    for ax, mig in zip(axes[0], migs):
        for s in ORDER:
            if not _ok(runner, load, mig, s):
                continue
            d = runner.cdfs.get((load, mig, s), {}).get("new_order")
            if d is None or not len(d):
                continue
            y = np.arange(1, len(d) + 1) / len(d)
            st = STYLE[s]
            ax.plot(np.maximum(d, 0.01), y, color=st["color"], ls=st["ls"], lw=1.5,
                    label=st["label"])
        ax.set_xscale("log")
        ax.set_xlabel("NewOrder latency (ms), migration window")
        ax.set_ylabel("Fraction of transactions")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3, which="both")
        ax.set_title(mig, fontsize=10)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Latency during migration: {LOAD_TITLE.get(load, load)}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def p99_figure(runner, load, path):
    migs = list(runner.results[load].keys())
    fig, axes = plt.subplots(len(migs), 1, figsize=(10, 2.6 * len(migs)), squeeze=False)
    for ax, mig in zip(axes[:, 0], migs):
        for s in ORDER:
            if not _ok(runner, load, mig, s):
                continue
            rows, t = _series(runner, load, mig, s)
            y = np.array([r["p99_ms"] if r["p99_ms"] is not None else np.nan for r in rows])
            st = STYLE[s]
            ax.plot(t, y, color=st["color"], ls=st["ls"], lw=1.2, label=st["label"])
        mk = runner.markers.get((load, mig, "baseline"), {})
        if "start" in mk:
            ax.axvline(mk["start"], color="purple", lw=0.7, ls="--")
        ax.set_yscale("log")
        ax.set_ylabel("p99 latency (ms)")
        ax.set_title(runner_title(mig), fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="upper right", ncol=3)
    axes[-1, 0].set_xlabel("Seconds")
    fig.suptitle(f"Per-second p99 latency: {LOAD_TITLE.get(load, load)}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def progress_figure(runner, load, path):
    migs = list(runner.results[load].keys())
    fig, ax = plt.subplots(figsize=(10, 3.2))
    any_ = False
    for mig in migs:
        for s in ("multistep",) + LAZY:
            pr = runner.progress.get((load, mig, s))
            if not pr:
                continue
            t, f = zip(*pr)
            st = STYLE[s]
            ax.plot(t, f, ls=st["ls"], lw=1.4, label=f"{mig} {st['label']}")
            any_ = True
    if not any_:
        plt.close(fig)
        return False
    ax.set_xlabel("Seconds")
    ax.set_ylabel("Fraction migrated")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(f"Migration progress: {LOAD_TITLE.get(load, load)}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def render_all(runner, out):
    figs = []
    for load in runner.results:
        if not runner.results[load]:
            continue
        for kind, fn in (("throughput", throughput_figure), ("latency_cdf", cdf_figure),
                         ("p99", p99_figure), ("progress", progress_figure)):
            name = f"{kind}_{load}.png"
            r = fn(runner, load, os.path.join(out, name))
            if r is not False:
                figs.append(name)
    return figs
