"""truth.parquet: what really happened to each job, and its waste by DESIGN.md's formulas."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.simulator.catalog import USER_FIXABLE
from jobs.simulator.model import Job
from jobs.simulator.sacct import main_step_rss_kib, main_step_tasks
from pipelines.units import GIB

TS = pa.timestamp("us")
SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("source", pa.string()),
        ("job_id", pa.string()),
        ("job_id_raw", pa.string()),
        ("array_job_id", pa.string()),
        ("user", pa.string()),
        ("account", pa.string()),
        ("partition", pa.string()),
        ("workload", pa.string()),
        ("script_hash", pa.string()),
        ("model_name", pa.string()),
        ("batch_size", pa.int64()),
        ("precision", pa.string()),
        ("n_ranks", pa.int64()),
        ("input_shards", pa.int64()),
        ("submit_ts", TS),
        ("start_ts", TS),
        ("end_ts", TS),
        ("state", pa.string()),
        ("runtime_s", pa.int64()),
        ("runtime_need_s", pa.int64()),
        ("timelimit_s", pa.int64()),
        ("req_cpus", pa.int64()),
        ("alloc_cpus", pa.int64()),
        ("cpus_used", pa.float64()),
        ("total_cpu_s", pa.float64()),
        ("req_mem_bytes", pa.int64()),
        ("limit_mem_bytes", pa.int64()),
        ("limit_cpu_cores", pa.float64()),
        ("peak_mem_bytes", pa.int64()),
        ("needed_mem_bytes", pa.int64()),
        ("alloc_gpus", pa.int64()),
        ("gpus_used", pa.int64()),
        ("idle_gpus", pa.int64()),
        ("gpu_model", pa.string()),
        ("mig_profile", pa.string()),
        ("vram_card_bytes", pa.int64()),
        ("peak_vram_bytes", pa.int64()),
        ("gpu_util_mean_pct", pa.float64()),
        ("gpu_util_per_gpu_pct", pa.list_(pa.float64())),
        ("telemetry_samples", pa.int64()),
        ("has_jobstats", pa.bool_()),  # the job's AdminComment carries a jobstats summary (no DCGM scrapes)
        ("has_hpc_job_label", pa.bool_()),
        ("nodes", pa.int64()),
        ("node_list", pa.string()),
        ("exclusive", pa.bool_()),
        ("failure_cause", pa.string()),
        ("failure_detail", pa.string()),
        # the user's innermost frame in the failure log's traceback (null when it prints none)
        ("tb_user_file", pa.string()),
        ("tb_user_line", pa.int64()),
        ("tb_user_function", pa.string()),
        ("xid", pa.int64()),
        ("is_failed", pa.bool_()),
        ("user_fixable", pa.bool_()),
        ("has_log", pa.bool_()),
        ("drifted", pa.bool_()),
        ("wasted_core_h", pa.float64()),
        ("wasted_mem_gib_h", pa.float64()),
        ("wasted_gpu_idle_h", pa.float64()),
        ("wasted_gpu_underuse_h", pa.float64()),
        ("failed_core_h", pa.float64()),
        ("failed_mem_gib_h", pa.float64()),
        ("failed_gpu_h", pa.float64()),
        # what held the GPUs back (jobs/simulator/counters.py; null: nothing), and its DCP samples written
        ("bottleneck", pa.string()),
        ("prof_samples", pa.int64()),
    ]
)


def recorded_peak_bytes(job: Job) -> int:
    """The job's peak memory as sacct lets anyone compute it: max over steps of MaxRSS x NTasks."""
    main = main_step_rss_kib(job) * 1024 * main_step_tasks(job)
    launcher = (12 * 1024**2 + job.job_id_raw % 40 * 1024**2) // 1024 * 1024 if job.uses_step0 else 0
    extern = (1024 + job.job_id_raw % 900) * 1024 // 1024 * 1024 * job.nodes
    return max(main, launcher, extern)


def with_waste(row: dict) -> dict:
    """Add DESIGN.md's waste figures to a truth row (hours; memory in GiB-hours)."""
    hours = row["runtime_s"] / 3600
    row["wasted_core_h"] = max(0.0, row["alloc_cpus"] * row["runtime_s"] - row["total_cpu_s"]) / 3600
    row["wasted_mem_gib_h"] = max(0, row["req_mem_bytes"] - row["peak_mem_bytes"]) / GIB * hours
    utils = row.get("gpu_util_per_gpu_pct") or []
    row["wasted_gpu_idle_h"] = (row.get("idle_gpus") or 0) * hours
    row["wasted_gpu_underuse_h"] = sum(hours * (1 - u / 100) for u in utils)
    blame = row["is_failed"] and row["user_fixable"]
    row["failed_core_h"] = row["alloc_cpus"] * hours if blame else 0.0
    row["failed_mem_gib_h"] = row["req_mem_bytes"] / GIB * hours if blame else 0.0
    row["failed_gpu_h"] = (row.get("alloc_gpus") or 0) * hours if blame else 0.0
    return row


def slurm_row(
    cluster: str, job: Job, script_hash: str, tel: dict | None, has_label: bool, jobstats: bool = False
) -> dict:
    """The truth row of a Slurm job (after its telemetry was generated). With a jobstats summary the
    recorded memory peak is its nodes' cgroup peaks (what jobstats measures), not MaxRSS x tasks."""
    p = job.params
    utils = [round(u, 6) for u in tel["util_means"]] if tel else []
    state = {
        "none": "COMPLETED",
        "time_limit": "TIMEOUT",
        "host_oom": "OUT_OF_MEMORY",
        "node_failure": "NODE_FAIL",
        "preemption": "PREEMPTED",
        "cancelled": "CANCELLED",
    }.get(job.cause, "FAILED")
    peak_vram = (
        tel["peak_mib"] * 1024**2 if tel and tel["samples"] else (job.peak_vram_bytes // 1024**2) * 1024**2
    )
    row = {
        "cluster": cluster,
        "source": "slurm",
        "job_id": job.job_id,
        "job_id_raw": str(job.job_id_raw),
        "array_job_id": str(job.array_job_id) if job.array_job_id is not None else None,
        "user": job.user.name,
        "account": job.user.account,
        "partition": job.partition,
        "workload": job.project.kind,
        "script_hash": script_hash,
        "model_name": str(p["model"]) if "model" in p else None,
        "batch_size": int(p["batch_size"]) if "batch_size" in p else None,
        "precision": str(p["precision"]) if "precision" in p else None,
        "n_ranks": job.ntasks if job.project.kind == "mpi_md" else (job.gpus_used or None),
        "input_shards": int(p["shards"]) if "shards" in p else None,
        "submit_ts": job.submit * 1_000_000,
        "start_ts": job.start * 1_000_000,
        "end_ts": job.end * 1_000_000,
        "state": state,
        "runtime_s": job.elapsed_s,
        "runtime_need_s": job.runtime_need_s,
        "timelimit_s": job.timelimit_s,
        "req_cpus": job.req_cpus,
        "alloc_cpus": job.alloc_cpus,
        "cpus_used": job.cpus_used,
        "total_cpu_s": job.cpus_used * job.elapsed_s,
        "req_mem_bytes": job.req_mem_node_bytes * job.nodes,
        "limit_mem_bytes": job.req_mem_node_bytes * job.nodes,
        "limit_cpu_cores": float(job.alloc_cpus),  # the job's cgroup holds exactly its allocated cores
        "peak_mem_bytes": job.peak_mem_node_bytes * job.nodes if jobstats else recorded_peak_bytes(job),
        "needed_mem_bytes": job.mem_need_node_bytes * job.nodes,
        "alloc_gpus": len(job.gpu_units) if job.is_gpu else 0,
        "gpus_used": job.gpus_used if job.is_gpu else 0,
        "idle_gpus": sum(1 for u in utils if u == 0) if job.is_gpu else 0,
        "gpu_model": job.gpu_model,
        "mig_profile": job.mig_profile,
        "vram_card_bytes": job.vram_card_bytes or None,
        "peak_vram_bytes": peak_vram if job.is_gpu else None,
        "gpu_util_mean_pct": sum(utils) / len(utils) if utils else None,
        "gpu_util_per_gpu_pct": utils if job.is_gpu else None,
        "telemetry_samples": tel["samples"] if tel else 0,
        "has_jobstats": jobstats,
        "has_hpc_job_label": has_label if job.is_gpu else None,
        "nodes": job.nodes,
        "node_list": ",".join(job.hosts),
        "exclusive": job.exclusive,
        "failure_cause": job.cause,
        "failure_detail": job.detail,
        "xid": job.xid,
        "is_failed": job.cause not in ("none", "cancelled"),
        "user_fixable": USER_FIXABLE[job.cause],
        "has_log": job.has_log,
        "drifted": job.user.drift_at is not None and job.submit >= job.user.drift_at,
        "bottleneck": tel.get("bottleneck") if tel else None,
        "prof_samples": tel.get("prof_samples", 0) if tel else 0,
    }
    return with_waste(row)


def pod_row(cluster: str, truth: dict) -> dict:
    """Complete a pod's truth row to the table's columns."""
    row = {name: None for name in SCHEMA.names}
    row.update(truth)
    row["cluster"] = cluster
    for key in ("submit_ts", "start_ts", "end_ts"):
        row[key] = truth[key] * 1_000_000
    row["gpu_util_per_gpu_pct"] = None
    row["idle_gpus"] = None
    row["telemetry_samples"] = 0
    row["has_jobstats"] = False
    row["exclusive"] = False
    row["has_log"] = False
    row["drifted"] = False
    return with_waste(row)


class TruthWriter:
    """Streams rows into truth.parquet in row groups, so a million jobs never sit in memory at once."""

    def __init__(self, path: Path, chunk: int = 20000) -> None:
        self.path = path
        self.chunk = chunk
        self.rows: list[dict] = []
        self.writer = pq.ParquetWriter(str(path), SCHEMA, compression="zstd")
        self.count = 0

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.chunk:
            self._flush()

    def _flush(self) -> None:
        if self.rows:
            self.writer.write_table(pa.Table.from_pylist(self.rows, schema=SCHEMA))
            self.count += len(self.rows)
            self.rows = []

    def close(self) -> None:
        self._flush()
        self.writer.close()
