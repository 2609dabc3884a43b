#!/usr/bin/env python3
"""Leapfrog benchmark: TPC-C with live schema migrations, Leapfrog (lazy)
against eager and multi-step, as in the BullFrog chapter (section 4.4).

    python3 bench/run.py --profile smoke|quick|full [options]

Outputs go to bench/out/<profile>-<timestamp>/ (see bench/README.md).
Runs under /work/main/.venv (created with psycopg and matplotlib when missing).
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
VENV = os.path.join(REPO, ".venv")
# the project's shared Python modules (throwaway clusters)
sys.path.insert(0, os.path.join(REPO, "python"))


def ensure_venv():
    """Re-exec under the project venv when psycopg/matplotlib are missing."""
    try:
        import matplotlib  # noqa: F401
        import numpy  # noqa: F401
        import psycopg  # noqa: F401
        return
    except ImportError:
        pass
    py = os.path.join(VENV, "bin", "python")
    if os.environ.get("LEAPFROG_BENCH_REEXEC"):
        sys.exit("bench: psycopg/matplotlib still missing in " + VENV)
    if not os.path.exists(py):
        print(f"bench: creating {VENV}", flush=True)
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
    r = subprocess.run([py, "-c", "import psycopg, matplotlib, numpy"],
                       capture_output=True)
    if r.returncode != 0:
        print("bench: installing psycopg, matplotlib into the venv", flush=True)
        subprocess.check_call([py, "-m", "pip", "install", "-q", "-r",
                               os.path.join(HERE, "requirements.txt")])
    os.environ["LEAPFROG_BENCH_REEXEC"] = "1"
    os.execv(py, [py, os.path.abspath(__file__)] + sys.argv[1:])


def _setting(arg):
    name, eq, value = arg.partition("=")
    if not eq or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {arg!r}")
    return name, value


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="quick", choices=["smoke", "quick", "full"])
    ap.add_argument("--out", help="output directory (default bench/out/<profile>-<time>)")
    ap.add_argument("--migrations", help="comma list of split,aggregate,join")
    ap.add_argument("--strategies",
                    help="comma list of baseline,eager,multistep,lazy,lazy_nobg,lazy_migrate "
                         "(each runs on every chosen migration and load)")
    ap.add_argument("--loads", help="comma list of saturated,rate")
    ap.add_argument("--rounds", type=int,
                    help="run every chosen strategy but the baseline N times, in interleaved "
                         "rounds, on every load and migration (medians reported); replaces the "
                         "profile's repeated runs")
    ap.add_argument("--warehouses", type=int)
    ap.add_argument("--clients", type=int)
    ap.add_argument("--duration", type=int, help="seconds per run")
    ap.add_argument("--migrate-at", type=int, help="second of the run the migration starts")
    ap.add_argument("--rate-fraction", type=float,
                    help="the rate load's arrival rate, as a fraction of the saturated "
                         "baseline's tps measured just before (profile default 0.65)")
    ap.add_argument("--install", default="auto", choices=["auto", "yes", "no"],
                    help="run `make install` for the extension first (auto: if src/*.c exist; "
                         "a failed build only makes the lazy strategies unavailable)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", type=_setting,
                    help="extra server setting, e.g. leapfrog.background_workers=3 (repeatable)")
    ap.add_argument("--variant-set", action="append", default=[], metavar="NAME=VALUE",
                    type=_setting,
                    help="server setting of strategy lazy_variant only, e.g. "
                         "leapfrog.batch_size=1000 (repeatable): its effect against lazy, "
                         "in interleaved rounds")
    ap.add_argument("--keep-cluster", action="store_true", help="keep the cluster directory")
    ap.add_argument("--keep-raw", action="store_true",
                    help="keep pgbench logs uncompressed (and perf.data with --perf)")
    ap.add_argument("--perf", action="store_true",
                    help="sample the machine with `perf record -a` in every run's migration "
                         "window: raw/<load>/<run>/perf.json, by kind of process and function "
                         "(compare two with bench/perf_diff.py)")
    args = ap.parse_args()

    ensure_venv()
    from leapfrog_bench.migrations import MIGRATIONS
    from leapfrog_bench.profiles import PROFILES
    from leapfrog_bench.runner import Runner, try_install
    from leapfrog_bench.strategies import LAZY, LAZY_VARIANTS, STRATEGIES

    prof = dict(PROFILES[args.profile])
    prof["name"] = args.profile
    for k, a in (("migrations", args.migrations), ("strategies", args.strategies),
                 ("loads", args.loads)):
        if a:
            prof[k] = [x.strip() for x in a.split(",") if x.strip()]
            if k == "migrations":
                prof["rate_migrations"] = prof[k]
    for k, known in (("migrations", MIGRATIONS), ("strategies", STRATEGIES)):
        unknown = [x for x in prof[k] if x not in known]
        if unknown:
            ap.error(f"unknown {k}: {', '.join(unknown)} (known: {', '.join(known)})")
    if ("lazy_variant" in prof["strategies"]) != bool(args.variant_set):
        ap.error("--variant-set goes with strategy lazy_variant, and lazy_variant with it")
    LAZY_VARIANTS["lazy_variant"]["server_settings"].update(dict(args.variant_set))
    if args.strategies:
        # strategies named on the command line run on every chosen migration
        prof.pop("only", None)
    if "baseline" not in prof["strategies"]:
        prof["strategies"] = ["baseline"] + prof["strategies"]
    if args.rounds:
        prof["repeat"] = {(load, m): (args.rounds, [s for s in prof["strategies"]
                                                    if s != "baseline"])
                          for load in prof["loads"] for m in prof["migrations"]}
    for k, a in (("warehouses", args.warehouses), ("clients", args.clients),
                 ("duration", args.duration), ("migrate_at", args.migrate_at),
                 ("rate_fraction", args.rate_fraction)):
        if a:
            prof[k] = a
    prof["settings"] = dict(args.set)
    out = args.out or os.path.join(HERE, "out", f"{args.profile}-{time.strftime('%Y%m%d-%H%M%S')}")
    os.makedirs(out, exist_ok=True)
    logf = open(os.path.join(out, "run.log"), "a")

    def log(msg):
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    if args.install == "yes" or (args.install == "auto" and any(
            s in LAZY for s in prof["strategies"])):
        try_install(REPO, out, log)
    if args.perf:
        from leapfrog_bench import perf
        if not perf.available():
            ap.error("--perf: `perf record -a -e cpu-clock` does not run here "
                     "(install linux-perf; root, or kernel.perf_event_paranoid <= 0)")
    r = Runner(prof, out, log=log, keep_cluster=args.keep_cluster, keep_raw=args.keep_raw,
               perf_profile=args.perf).run()
    latest = os.path.join(HERE, "out", f"latest-{args.profile}")
    try:
        if os.path.islink(latest):
            os.remove(latest)
        os.symlink(os.path.abspath(out), latest)
    except OSError:
        pass
    if r.failures:
        log("FAILED (non-lazy strategies must run cleanly):\n  " + "\n  ".join(r.failures))
        return 1
    log(f"summary: {out}/summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
