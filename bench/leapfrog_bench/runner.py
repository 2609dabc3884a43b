"""One benchmark invocation: a throwaway cluster, one TPC-C load, then for
each load mode a baseline run and, for each migration, one run per strategy,
each on a fresh copy of the loaded database."""
import csv
import json
import os
import platform
import statistics
import subprocess
import threading
import time

import psycopg

from . import metrics, perf, plots, report, tpcc
from .cpu import KINDS, CpuSampler
from .waits import WaitSampler, blocks_between, lock_waits, summarize
from leapfrog_cluster import Cluster

from .settings import default_settings
from .migrations import MIGRATIONS
from .strategies import (DRIVERS, LAZY, LAZY_VARIANTS, client_settings, probe_lazy_support,
                         server_settings)
from .workload import PgbenchRun

TEMPLATE = "tpcc_tmpl"
# Figures that are medians when a strategy runs several times (repeat).
REPEATED_FIGURES = ("committed", "tps_window", "tps_window_vs_before", "switch_s", "complete_s",
                    "longest_stall_s", "p50_ms", "p99_ms", "failed", "retries", "lock_waits",
                    "deadlocks", "min_tps_5s", "min_tps_5s_vs_rate", "host_busy_before",
                    "host_busy", "blocks_per_txn") + \
    tuple(f"cpu_{k}_s" for k in KINDS)
RUNDB = "tpcc_run"


class Runner:
    def __init__(self, prof, outdir, log=print, keep_cluster=False, keep_raw=False,
                 perf_profile=False):
        self.p = prof
        # absolute: pgbench runs in another directory and reads its scripts
        # from here (a relative --out made every run commit nothing)
        self.out = os.path.abspath(outdir)
        self.log = log
        self.keep_cluster = keep_cluster
        self.keep_raw = keep_raw
        self.perf_profile = perf_profile
        self.results = {}      # load -> migration -> strategy -> dict
        self.series = []       # timeseries rows
        self.cdfs = {}         # (load, migration, strategy) -> arrays
        self.progress = {}     # (load, migration, strategy) -> [(t_rel, frac)]
        self.markers = {}      # (load, migration, strategy) -> {start,complete,...} t from origin
        self.meta = {}
        if "lazy_variant" in self.p.get("strategies", ()):
            self.meta["variant_settings"] = dict(LAZY_VARIANTS["lazy_variant"]["server_settings"])
        self.failures = []
        self._crash_lines = 0

    # ----------------------------------------------------------------------
    def run(self):
        os.makedirs(self.out, exist_ok=True)
        t0 = time.time()
        settings = default_settings(self.p["shared_buffers"])
        settings.update(self.p.get("settings", {}))
        self.cluster = Cluster(settings=settings, keep=self.keep_cluster, log=self.log)
        self.log(f"cluster: {self.cluster.dir} port {self.cluster.port}, "
                 f"leapfrog preloaded: {self.cluster.leapfrog}")
        try:
            self.cluster.init().start()
            self.cluster.wait_ready()
            self._run_all()
        finally:
            try:
                with open(self.cluster.logfile, errors="replace") as src, \
                        open(os.path.join(self.out, "server.log"), "w") as dst:
                    dst.write(src.read()[-2_000_000:])
            except OSError:
                pass
            self.cluster.destroy()
        self.meta["total_s"] = round(time.time() - t0, 1)
        self.write_outputs()
        self.log(f"done in {self.meta['total_s']}s: {self.out}")
        return self

    def _run_all(self):
        p = self.p
        leapfrog = self.cluster.leapfrog
        self.meta.update({
            "profile": p.get("name"),
            "params": _jsonable({k: v for k, v in p.items() if k != "name"}),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                     "mem_gib": _mem_gib()},
            "leapfrog_preloaded": leapfrog,
            "server_settings": self.cluster.settings,
        })
        # Which migrations Leapfrog accepts (0A000 -> not supported).
        lazy_support = {}
        if any(s in LAZY for s in p["strategies"]):
            if not leapfrog:
                for m in p["migrations"]:
                    lazy_support[m] = ("unavailable", "leapfrog extension not installed "
                                       "(make install) or not loadable")
            else:
                tpcc.create_schema_only(self.cluster, "tpcc_probe", leapfrog=True)
                for m in p["migrations"]:
                    lazy_support[m] = probe_lazy_support(self.cluster.conninfo("tpcc_probe"),
                                                         MIGRATIONS[m])
                    self.log(f"leapfrog.start on {m}: {lazy_support[m][0]}"
                             + (f" ({lazy_support[m][1]})" if lazy_support[m][1] else ""))
                self._drop_db("tpcc_probe")
        self.meta["lazy_support"] = {m: {"state": s, "reason": r}
                                     for m, (s, r) in lazy_support.items()}
        self.meta["load"] = tpcc.create_template(
            self.cluster, TEMPLATE, p["warehouses"], workers=max(1, min(4, os.cpu_count() or 2)),
            leapfrog=leapfrog, log=self.log)

        # Warm-up (not recorded): the first run after the load is otherwise
        # slower than the rest and would skew the baseline.
        self.log("warm-up run (not recorded)")
        self.run_one("warmup", None, None, "baseline", duration=min(8, p["duration"]),
                     record=False)
        rate = None
        for load in p["loads"]:
            self.results[load] = {}
            if load == "rate":
                # 65% of a short saturated run right now: the saturated
                # load's baseline may be minutes old
                rate = self._calibrate_rate(fresh=True)
                self.meta["rate_tps"] = rate
                self.meta["rate_tps_rounds"] = [rate]
            migs = p["migrations"] if load != "rate" else p.get("rate_migrations", p["migrations"])
            self.log(f"== load {load}" + (f" at {rate} tps" if load == "rate" else " (unthrottled)"))
            base = self.run_one(load, rate if load == "rate" else None, None, "baseline")
            if load == "saturated":
                self.meta["saturated_tps"] = base["tps_before"]
            for m in migs:
                self.results[load][m] = {"baseline": dict(base)}
                self._copy_series(load, "baseline", m)
                todo = []
                for s in p["strategies"]:
                    if s == "baseline":
                        continue
                    only = p.get("only", {}).get((load, s))
                    if only is not None and m not in only:
                        continue
                    if s in LAZY and lazy_support.get(m, ("supported",))[0] != "supported":
                        st, reason = lazy_support[m]
                        self.results[load][m][s] = _na(st, reason)
                        self.log(f"  {m:9s} {s:10s} {st}: {reason}")
                        continue
                    todo.append(s)
                # Strategies repeated for this (load, migration) run in
                # interleaved rounds, so drift of the machine's speed hits
                # them alike; each reports the median of its runs.
                # The baseline runs again in every round after the first, so
                # that each round's ratios to it compare runs minutes apart.
                nrep, rep_strats = p.get("repeat", {}).get((load, m), (1, []))
                runs = {s: [] for s in todo}
                base_runs = [base]
                for rnd in range(max(1, nrep)):
                    if rnd > 0:
                        self.log(f"  round {rnd + 1} of {nrep}: {', '.join(rep_strats)}")
                        if load == "rate":
                            # the machine's speed drifts by a third within
                            # minutes: each round's rate is 65% of its own
                            # short saturated run
                            rate = self._calibrate_rate(fresh=True)
                            self.meta["rate_tps_rounds"].append(rate)
                            self.log(f"  round {rnd + 1} at {rate} tps")
                        if "baseline" in p["strategies"]:
                            base_runs.append(self.run_one(load, rate if load == "rate" else None,
                                                          None, "baseline", record=False, rnd=rnd))
                    for s in todo:
                        if rnd > 0 and s not in rep_strats:
                            continue
                        r = self.safe_run_one(load, rate if load == "rate" else None, m, s,
                                              defer=True, rnd=rnd)
                        if (r.get("tps_before") is not None and base.get("tps_before")
                                and r["tps_before"] < 0.6 * base["tps_before"]):
                            r["notes"].append(
                                f"throughput before the migration was {r['tps_before']} tps, under "
                                f"60% of the baseline's {base['tps_before']}: the machine was "
                                "probably busy with something else; rerun before trusting this row")
                            self.log("    warning: " + r["notes"][-1])
                        runs[s].append(r)
                if len(base_runs) > 1:
                    self.results[load][m]["baseline"] = self._median_figures(dict(base), base_runs)
                base_m = self.results[load][m]["baseline"]
                for s in todo:
                    r = self._median_of(runs[s])
                    if r.get("p99_ms") and base_m.get("p99_ms"):
                        r["p99_ratio_vs_baseline"] = round(r["p99_ms"] / base_m["p99_ms"], 2)
                    self.results[load][m][s] = r

    def _median_of(self, runs):
        """One run: as is.  Several: the figures are medians over the runs,
        the series and plots are those of the run with the median committed
        count, and `runs` lists every run's figures."""
        ok = sorted((r for r in runs if r.get("status") == "ok" and r.get("committed") is not None),
                    key=lambda r: r["committed"])
        rep = dict(runs[0] if len(runs) == 1 or not ok else ok[(len(ok) - 1) // 2])
        rec = rep.pop("_record", None)
        if rec:
            self._record(*rec)
        if len(runs) == 1 or not ok:
            return rep
        return self._median_figures(rep, runs)

    def _median_figures(self, rep, runs):
        """rep with the medians of the runs' figures, and `runs`."""
        ok = [r for r in runs if r.get("status") == "ok" and r.get("committed") is not None]
        for k in REPEATED_FIGURES:
            vals = [r.get(k) for r in ok]
            if any(v is None for v in vals):
                rep[k] = None if all(v is None for v in vals) else rep.get(k)
            else:
                rep[k] = statistics.median(vals)
        rep["runs"] = [{k: r.get(k) for k in ("status",) + REPEATED_FIGURES} for r in runs]
        if len(ok) < len(runs):
            rep["notes"] = rep.get("notes", []) + [
                f"{len(runs) - len(ok)} of {len(runs)} runs did not end ok: medians over the others"]
        return rep

    def _background_workers(self):
        """Leapfrog's background workers per database in this cluster: the
        multi-step copy gets as many connections (same means for both)."""
        return int(self.cluster.settings.get("leapfrog.background_workers", 2))

    def _input_rows(self, mig):
        """Rows of the migration's inputs as loaded (None if not known)."""
        rows = self.meta.get("load", {}).get("rows", {})
        if mig is None or not all(t in rows for t in mig.inputs):
            return None
        return sum(rows[t] for t in mig.inputs)

    def _calibrate_rate(self, fresh=False):
        sat = None if fresh else self.meta.get("saturated_tps")
        if not sat:
            self.log("calibrating: short unthrottled baseline")
            r = self.run_one("calibration", None, None, "baseline",
                             duration=min(20, self.p["duration"]), record=False)
            sat = r["tps_before"] or r["tps_window"]
            self.meta.setdefault("saturated_tps", sat)
        return max(1, int(round(sat * self.p["rate_fraction"])))

    def _drop_db(self, name):
        self.cluster.wait_ready()
        with psycopg.connect(self.cluster.conninfo(), autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def _set_server(self, strat=None):
        """The server settings of a lazy strategy (none: the defaults)."""
        if not self.cluster.leapfrog:
            return
        self.cluster.wait_ready()
        want = server_settings(strat) if strat else {}
        with psycopg.connect(self.cluster.conninfo(), autocommit=True) as c:
            for name in sorted({k for v in LAZY_VARIANTS.values() for k in v["server_settings"]}):
                if name in want:
                    c.execute(f"ALTER SYSTEM SET {name} = '{want[name]}'")
                else:
                    c.execute(f"ALTER SYSTEM RESET {name}")
            c.execute("SELECT pg_reload_conf()")

    def safe_run_one(self, load, rate, mname, strat, defer=False, rnd=0):
        """A lazy run that leaves the server unusable (the extension crashing
        in a loop, say) is reported as failed; the cluster is restarted and
        the suite goes on.  Other strategies' errors are the harness's own."""
        try:
            return self.run_one(load, rate, mname, strat, defer=defer, rnd=rnd)
        except Exception as e:  # noqa: BLE001
            if strat not in LAZY:
                raise
            self.log(f"  {mname:9s} {strat:10s} failed: {type(e).__name__}: {e}; restarting server")
            try:
                self.cluster.restart(mode="immediate")
                self._set_server()
            except Exception as e2:  # noqa: BLE001
                self.log(f"    restart failed: {e2}")
                raise
            return {**_na("failed", f"{type(e).__name__}: {str(e).splitlines()[0]}"),
                    "load": load}

    # ----------------------------------------------------------------------
    def run_one(self, load, rate, mname, strat, duration=None, record=True, defer=False, rnd=0):
        """One pgbench run.  record: keep its series, CDF and markers for the
        outputs; defer: return them in the result (`_record`) instead, for
        the caller to keep one run of several (_median_of)."""
        p = self.p
        duration = duration or p["duration"]
        migrate_at = p["migrate_at"] if duration == p["duration"] else duration / 2
        label = f"{load}/{mname or 'none'}/{strat}"
        rundir = os.path.join(self.out, "raw", load, f"{mname or 'none'}_{strat}"
                              + (f"_round{rnd + 1}" if rnd else ""))
        self._drop_db(RUNDB)
        with psycopg.connect(self.cluster.conninfo(), autocommit=True) as c:
            c.execute(f"CREATE DATABASE {RUNDB} TEMPLATE {TEMPLATE} STRATEGY FILE_COPY")
        with psycopg.connect(self.cluster.conninfo(RUNDB), autocommit=True) as c:
            c.execute("SELECT count(pg_prewarm(oid)) FROM pg_class WHERE relkind IN ('r', 'i')"
                      " AND relnamespace = 'public'::regnamespace")
        if strat in LAZY:
            self._set_server(strat)
        mig = MIGRATIONS[mname] if mname else None
        pg = PgbenchRun(self.cluster, RUNDB, rundir, p["warehouses"], p["clients"],
                        p["threads"], duration, rate=rate, settings=client_settings(strat))
        stop = threading.Event()
        waits = WaitSampler(self.cluster.conninfo(), datname=RUNDB)
        waits.start()
        cpu = CpuSampler(self.cluster.datadir)
        cpu.start()
        pg.start()
        t_origin = pg.t_start
        t_m = t_origin + migrate_at
        t_end = t_origin + duration
        drv = DRIVERS[strat](self.cluster.conninfo(RUNDB), mig, t_m, stop,
                             params={"copy_connections": self._background_workers(),
                                     **p.get("multistep", {}), "warehouses": p["warehouses"],
                                     "input_rows": self._input_rows(mig)},
                             log=self.log)
        drv.start()
        window = None
        if self.perf_profile:
            window = perf.PerfWindow(os.path.join(rundir, "perf.data"), t_m, t_end)
            window.start()
        try:
            pg.wait(timeout=duration + 3600)
        finally:
            pg.kill()
            stop.set()
        drv.join(timeout=3600)
        waits.stop()
        cpu.stop()
        if window:
            window.join(timeout=60)
        if drv.is_alive():
            drv.status, drv.error = "failed", "driver still running an hour after the load ended"
        extra = {}
        crashes = self.cluster.crashes_in_log()[self._crash_lines:]
        if crashes:
            self._crash_lines += len(crashes)
            extra["server_crash"] = crashes[:3]
        try:
            self.cluster.wait_ready()
            with psycopg.connect(self.cluster.conninfo(RUNDB), autocommit=True) as c:
                extra["schema_retries"] = c.execute(
                    "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM tpcc_schema_retries"
                ).fetchone()[0]
                extra["deadlocks"] = _deadlocks(c)
                if strat in LAZY and drv.status == "ok" and "complete" not in drv.events:
                    extra["remaining_at_end"] = c.execute(
                        "SELECT leapfrog.remaining(%s)", (f"bench_{mname}",)).fetchone()[0]
        except psycopg.Error as e:
            extra["post_run_error"] = str(e).splitlines()[0]
        if strat in LAZY:
            self._set_server()
        txs = pg.parse()
        res, series, cdf = metrics.compute(txs, t_origin, t_m, t_end, drv.events,
                                           tpcc.NEW_ORDER_SCRIPT_NO)
        pgs = pg.summary()
        waits.write_csv(os.path.join(rundir, "waits.csv"), t_origin)
        if res.get("longest_stall_s") is not None:
            t_a = t_m + (res.get("longest_stall_at_s") or 0.0)
            res["stall_waits"] = summarize(waits.samples, t_a, t_a + res["longest_stall_s"])
        res.update({
            "status": drv.status, "reason": drv.error, "load": load,
            "rate_tps": rate, "client_settings": client_settings(strat), "pgbench": pgs,
            "lock_waits": lock_waits(waits.samples, t_m, t_end), **extra,
            **{f"cpu_{k}_s": v for k, v in (cpu.by_kind(t_m, t_end) or {}).items()},
            # the first second of the load is its warm-up (connections, caches)
            "host_busy_before": cpu.host_busy(t_origin + 1, t_m),
            "host_busy": cpu.host_busy(t_m, t_end),
            "events_s": {k: round(v - t_m, 3) for k, v in drv.events.items()},
            "notes": drv.notes,
        })
        blocks = blocks_between(waits.blocks, t_m, t_end)
        res["blocks_per_txn"] = round(blocks / res["committed"], 1) \
            if blocks is not None and res.get("committed") else None
        if window:
            res["perf_samples"] = perf.write_profile(rundir, window, cpu, res["committed"],
                                                     keep_data=self.keep_raw)
        if rate and res.get("min_tps_5s") is not None:
            res["min_tps_5s_vs_rate"] = round(res["min_tps_5s"] / rate, 3)
        if extra.get("server_crash"):
            res["status"] = "failed"
            res["reason"] = "server crashed: " + extra["server_crash"][0][-300:]
        elif pgs["aborted_clients"] and res["status"] == "ok":
            res["status"] = "failed"
            res["reason"] = f"{pgs['aborted_clients']} pgbench clients aborted: " + \
                "; ".join(pgs["errors_sample"][:2])
        if res["status"] == "failed" and strat not in LAZY:
            self.failures.append(f"{label}: {res['reason']}")
        if not self.keep_raw:
            pg.compress_logs()
        self.log(f"  {(mname or 'none'):9s} {strat:10s} {res['status']:6s} "
                 f"committed={res['committed']} tps_before={res['tps_before']} "
                 f"switch={res['switch_s']} complete={res['complete_s']} "
                 f"stall={res['longest_stall_s']} p99={res['p99_ms']}ms "
                 f"failed={res['failed']} retries={res['retries']}/"
                 f"{res.get('schema_retries')} lock_waits={res['lock_waits']} "
                 f"deadlocks={res.get('deadlocks')} cpu_s=" +
                 "/".join(str(res.get(f"cpu_{k}_s")) for k in KINDS) + f" ({'/'.join(KINDS)}) "
                 f"host_busy={res['host_busy_before']}/{res['host_busy']} (before/window) "
                 f"blocks/txn={res['blocks_per_txn']}")
        if (res.get("longest_stall_s") or 0) >= 0.25:
            for line in res.get("stall_waits") or ["(no sample during the stall)"]:
                self.log(f"      during the stall: {line}")
        if record:
            rec = (load, mname, strat, series, drv.progress, t_origin, t_m, cdf, drv.events)
            if defer:
                res["_record"] = rec
            else:
                self._record(*rec)
        return res

    def _record(self, load, mname, strat, series, progress, t_origin, t_m, cdf, events):
        if mname:
            self._store_series(load, mname, strat, series, progress, t_origin, t_m)
        else:
            self._baseline_series = (series, t_origin, t_m)
        self.cdfs[(load, mname, strat)] = cdf
        self.markers[(load, mname, strat)] = {"start": t_m - t_origin,
                                              **{k: v - t_origin for k, v in events.items()}}

    def _store_series(self, load, mname, strat, series, progress, t_origin, t_m):
        prog = {}
        for t, f in progress:
            prog[int(t - t_origin)] = f
        last = None
        for row in series:
            if row["t"] in prog:
                last = prog[row["t"]]
            self.series.append({"load": load, "migration": mname, "strategy": strat,
                                **row, "progress": last})
        self.progress[(load, mname, strat)] = [(t - t_origin, f) for t, f in progress]

    def _copy_series(self, load, strat, mname):
        series, t_origin, t_m = self._baseline_series
        self._store_series(load, mname, strat, series, [], t_origin, t_m)
        self.cdfs[(load, mname, "baseline")] = self.cdfs[(load, None, "baseline")]
        self.markers[(load, mname, "baseline")] = self.markers[(load, None, "baseline")]

    # ----------------------------------------------------------------------
    def write_outputs(self):
        out = self.out
        cols = ["load", "migration", "strategy", "t", "t_rel", "committed", "failed",
                "new_order", "p50_ms", "p95_ms", "p99_ms", "progress"]
        with open(os.path.join(out, "timeseries.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            for r in self.series:
                w.writerow(r)
        primary = "saturated" if "saturated" in self.results else next(iter(self.results), None)
        summary = {}
        if primary:
            for m, strats in self.results[primary].items():
                summary[m] = strats
        summary["primary_load"] = primary
        summary["by_load"] = self.results
        summary["meta"] = self.meta
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2, default=_json_default)
        figs = plots.render_all(self, out)
        report.write_markdown(self, os.path.join(out, "summary.md"), figs)


def _deadlocks(c):
    """Deadlocks detected in the run's database (a fresh copy: its statistics
    start at zero), once the load's sessions are gone (a backend reports its
    counts when it exits)."""
    for _ in range(50):
        if not c.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                         " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
                         ).fetchone()[0]:
            break
        time.sleep(0.1)
    return c.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
                     ).fetchone()[0]


def _na(state, reason):
    return {"status": state, "reason": reason, "switch_s": None, "complete_s": None,
            "longest_stall_s": None, "committed": None, "p99_ms": None}


def _jsonable(o):
    """Profile parameters for summary.json: tuple keys ((load, strategy))
    become "load/strategy"."""
    if isinstance(o, dict):
        return {"/".join(map(str, k)) if isinstance(k, tuple) else k: _jsonable(v)
                for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    return o


def _mem_gib():
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        return round(kb / 2**20, 1)
    except (OSError, ValueError, IndexError):
        return None


def _json_default(o):
    try:
        import numpy as np
        if isinstance(o, np.generic):
            return o.item()
    except ImportError:
        pass
    return str(o)


def try_install(repo, out, log=print):
    """`make install` of the extension, when its sources exist; failure only
    means the lazy strategies are reported unavailable."""
    import glob
    if not glob.glob(os.path.join(repo, "src", "*.c")):
        log("no src/*.c: not building the extension")
        return False
    log("make install (extension) ...")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "make-install.log"), "w") as f:
        r = subprocess.run(["make", "-C", repo, "install"], stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        log(f"make install failed (see {out}/make-install.log): lazy strategies unavailable")
        return False
    return True
