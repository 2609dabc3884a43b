"""Benchmark profiles.  Times are seconds.

loads: "saturated" = unthrottled clients (chapter's 700 TPS case, the
system's maximum); "rate" = fixed arrival rate at rate_fraction of the
saturated baseline's throughput (chapter's 450 TPS case: headroom).
"""

PROFILES = {
    # CI: about a minute on 2 cores; checks the harness end to end.
    "smoke": dict(
        warehouses=1, clients=4, threads=2, duration=12, migrate_at=4,
        loads=["saturated"], migrations=["split"],
        strategies=["baseline", "eager", "multistep", "lazy"],
        repeat={("saturated", "split"): (2, ["eager", "lazy"])},  # exercises the rounds
        shared_buffers="512MB", rate_fraction=0.65,
        multistep=dict(batch_size=1000, naptime_ms=0),
    ),
    # About 15 minutes: every migration and strategy at saturation, and the
    # split at a fixed rate with headroom.  W=10 (300k customers) makes the
    # eager split stall 2 to 3.5 s, about a sixth of the 17 s window.
    "quick": dict(
        warehouses=10, clients=8, threads=2, duration=25, migrate_at=8,
        loads=["saturated", "rate"], migrations=["split", "aggregate", "join"],
        rate_migrations=["split"],
        strategies=["baseline", "eager", "multistep", "lazy", "lazy_nobg"],
        # (load, strategy) -> migrations it runs for; keeps quick under 10 min
        only={("saturated", "lazy_nobg"): ["split"], ("rate", "lazy_nobg"): ["split"]},
        # (load, migration) -> (runs, strategies run that many times, in
        # interleaved rounds; medians reported): the split's comparison at
        # saturation is the headline figure, and the machine's drift between
        # single runs is as large as the differences it measures
        # the rate load's p99 is as noisy: lazy and lazy_nobg (and the
        # baseline, which runs again in every round) three times each too
        repeat={("saturated", "split"): (3, ["eager", "multistep", "lazy"]),
                ("rate", "split"): (3, ["lazy", "lazy_nobg"])},
        shared_buffers="2GB", rate_fraction=0.65,
        multistep=dict(batch_size=1000, naptime_ms=0),
    ),
    # As close to the chapter (W=50: 1.5M customers, 15M order lines) as
    # 2 cores allow: both loads, every migration, 240 s runs.
    "full": dict(
        warehouses=50, clients=16, threads=2, duration=240, migrate_at=30,
        loads=["saturated", "rate"], migrations=["split", "aggregate", "join"],
        strategies=["baseline", "eager", "multistep", "lazy", "lazy_nobg"],
        shared_buffers="6GB", rate_fraction=0.65,
        multistep=dict(batch_size=1000, naptime_ms=0),
    ),
}
