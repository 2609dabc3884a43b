"""Server settings of the benchmark clusters (python/leapfrog_cluster.py makes
the clusters themselves)."""


def default_settings(shared_buffers="2GB"):
    """Server settings for a benchmark on 2 cores / 24 GB.  Durability is off
    (throwaway cluster): the figures measure CPU, locking and I/O through the
    page cache, the same for every strategy.  wal_level stays at replica, as
    on any server with a standby or WAL archiving: minimal would skip the WAL
    of tables created in the writing transaction, which only the eager
    script's copy is (measured at W=10: its stall 2.2-2.7 s at minimal, 3.1-3.4 s
    at replica)."""
    return {
        "max_connections": "100",
        "shared_buffers": shared_buffers,
        "effective_cache_size": "16GB",
        "work_mem": "32MB",
        "maintenance_work_mem": "1GB",
        "max_wal_size": "32GB",
        "min_wal_size": "1GB",
        "checkpoint_timeout": "1h",
        "fsync": "off",
        "full_page_writes": "off",
        "synchronous_commit": "off",
        "wal_level": "replica",
        "jit": "off",
        "max_parallel_workers_per_gather": "0",
        "max_parallel_maintenance_workers": "1",
        "max_worker_processes": "16",
        "deadlock_timeout": "200ms",
        "autovacuum_naptime": "10s",
        "log_min_messages": "warning",
        "log_min_error_statement": "panic",
        "log_line_prefix": "%m [%p] %d ",
    }
