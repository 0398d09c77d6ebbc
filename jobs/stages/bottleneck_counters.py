"""Counter findings for gold.job_bottlenecks (source `dcgm`): the jobs' DCGM profiling samples reduced on
Spark (`pipelines.gold.bottlenecks.counters.counter_profiles`), classified on the driver (one row per job)
and priced like the trace findings. `jobfit bottlenecks` runs it beside the trace analysis."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pyspark.sql import functions as F

from conf import ClusterConfig
from jobs.context import Context
from jobs.io.tables import read_table, replace_where, sql_string
from pipelines.gold.bottlenecks.counters import GB, CounterFinding, classify, counter_profiles
from pipelines.schemas import GOLD_JOB_BOTTLENECKS, SILVER_GPU_SAMPLES, SILVER_JOBS, SILVER_SCRIPTS

_JOB_COLUMNS = ("job_id", "user", "account", "alloc_gpus", "req_gpus", "elapsed_s", "gpu_model")


def build_counter_findings(
    ctx: Context, cluster: str, config: ClusterConfig, job_id: str | None = None, month: str | None = None
) -> dict[str, dict[str, Any]]:
    """Classify the selected jobs from their counters, replace their `dcgm` rows in gold.job_bottlenecks,
    and return per job id its `counters` summary and `findings` (docs/cli.md)."""
    spark, settings = ctx.spark, ctx.settings
    jobs = read_table(spark, settings, SILVER_JOBS.name).where(F.col("cluster") == cluster)
    jobs = jobs.select(
        *_JOB_COLUMNS,
        "script_hash",
        F.date_format(F.coalesce("end_ts", "start_ts"), "yyyy-MM").alias("month"),
    )
    if job_id is not None:
        jobs = jobs.where(F.col("job_id") == job_id)
    if month is not None:
        jobs = jobs.where(F.col("month") == month)
    samples = read_table(spark, settings, SILVER_GPU_SAMPLES.name).where(
        (F.col("cluster") == cluster)
        & F.col("job_id").isNotNull()
        & F.col("gr_engine_active_frac").isNotNull()
    )
    if job_id is not None:
        samples = samples.where(F.col("job_id") == job_id)
    scripts = read_table(spark, settings, SILVER_SCRIPTS.name).where(F.col("cluster") == cluster)
    profiles = (
        counter_profiles(samples.join(jobs.select("job_id"), on="job_id", how="left_semi"))
        .join(jobs, on="job_id", how="inner")
        .join(scripts.select("script_hash", "frameworks"), on="script_hash", how="left")
        .collect()
    )
    s, now = settings.bottlenecks, ctx.now()
    out: dict[str, dict[str, Any]] = {}
    rows = []
    for r in sorted(profiles, key=lambda r: r["job_id"]):
        p = r.asDict()
        known_script = p["script_hash"] is not None and p["frameworks"] is not None
        label, finding = classify(p, s, p["frameworks"] if known_script else None, p["alloc_gpus"])
        priced = _priced(finding, p, config) if finding else (None, None)
        out[p["job_id"]] = {
            "counters": _summary(p, label),
            "findings": [_json(finding, priced)] if finding else [],
        }
        if finding:
            rows.append(_row(cluster, p, finding, priced, now))
    where = f"cluster = {sql_string(cluster)} AND source = 'dcgm'"
    if job_id is not None:
        where += f" AND job_id = {sql_string(job_id)}"
    elif month is not None:
        where += f" AND month = {sql_string(month)}"
    replace_where(
        spark,
        settings,
        GOLD_JOB_BOTTLENECKS.name,
        spark.createDataFrame(rows, GOLD_JOB_BOTTLENECKS.schema),
        where,
    )
    return out


def _priced(f: CounterFinding, p: dict[str, Any], config: ClusterConfig) -> tuple[float | None, float | None]:
    """GPU-hours and USD: the share of the used GPUs' hours (all allocated GPUs' when none ran a kernel; GPUs
    that never ran are gold.job_usage's idle waste) at the job's GPU-hour price."""
    gpus = p["used_gpus"] or p["alloc_gpus"] or p["req_gpus"] or p["profiled_gpus"] or 0
    if not gpus or not p.get("elapsed_s"):
        return None, None
    hours = gpus * p["elapsed_s"] / 3600 * f.share_pct / 100
    return hours, hours * config.prices.gpu_hour_for(p.get("gpu_model"))


def _r(x: float | None, n: int = 3) -> float | None:
    return None if x is None else round(float(x), n)


def _summary(p: dict[str, Any], label: str | None) -> dict[str, Any]:
    """The `counters` object of a job in `jobfit bottlenecks --json`."""
    return {
        "class": label,
        "samples": p["samples"],
        "profiled_gpus": p["profiled_gpus"],
        "used_gpus": p["used_gpus"],
        **{k: _r(p[k]) for k in ("gr", "sm", "occupancy", "tensor", "fp32", "fp16", "fp64", "dram")},
        "pcie_gbps": _r((p["pcie_bps"] or 0) / GB, 2) if p["pcie_bps"] is not None else None,
        "nvlink_gbps": _r((p["nvlink_bps"] or 0) / GB, 2) if p["nvlink_bps"] is not None else None,
    }


def _json(f: CounterFinding, priced: tuple[float | None, float | None]) -> dict[str, Any]:
    return {
        "kind": f.kind,
        "source": "dcgm",
        "rank": None,
        "share_pct": _r(f.share_pct, 2),
        "evidence": f.evidence,
        "fix": f.fix,
        "file": None,
        "line": None,
        "gpu_hours_recoverable": _r(priced[0]),
        "usd_recoverable": _r(priced[1], 2),
    }


def _row(
    cluster: str,
    p: dict[str, Any],
    f: CounterFinding,
    priced: tuple[float | None, float | None],
    now: datetime,
) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "job_id": p["job_id"],
        "kind": f.kind,
        "month": p["month"] or now.strftime("%Y-%m"),
        "user": p["user"],
        "account": p["account"],
        "rank": None,
        "share_pct": float(f.share_pct),
        "evidence": f.evidence,
        "fix": f.fix,
        "code": None,
        "gpu_hours_recoverable": priced[0],
        "usd_recoverable": priced[1],
        "built_at": now,
        "source": "dcgm",
    }
