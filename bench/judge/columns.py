"""The per-run metric columns that ingest stores on each run (bench.judge.judgement computes
them, bench.store reads them): kept apart so a reader of stored results does not import the
bundle checks, pydantic schemas and numpy that judging a bundle needs."""

METRIC_COLUMNS = ("iterations", "iteration_median_s", "iteration_min_s", "iteration_max_s",
                  "device_bytes", "device_bytes_per_iteration", "logical_bytes_per_iteration",
                  "served_fraction", "scan_steal", "cgroup_scan_steal", "locked_fraction",
                  "mem_total_bytes", "mglru_loop_entry", "mglru_end")
