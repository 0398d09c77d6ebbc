"""Build gold.failures for one cluster-month (called by `jobfit failures` and `jobfit build`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from conf import ClusterConfig
from jobs.context import Context
from jobs.io.tables import month_predicate, read_table, replace_where
from pipelines.gold.failures.diagnose import (
    diagnose_failures,
    filter_diagnosable,
    gpu_signals,
    parse_job_log_text,
)
from pipelines.gold.failures.scoring import has_evidence
from pipelines.gold.failures.taxonomy import CAUSES
from pipelines.schemas import GOLD_FAILURES

TOP_USERS = 10


@dataclass
class FailureCounts:
    """What one build wrote: diagnosed jobs, jobs per cause, and the GPU-hours and USD they used."""

    cluster: str
    month: str
    jobs: int = 0
    by_cause: dict[str, int] = field(default_factory=dict)
    lost_gpu_hours: float = 0.0
    lost_usd: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def _keys(df: DataFrame, jobs: DataFrame) -> DataFrame:
    """Rows of `df` that belong to the selected jobs."""
    return df.join(jobs.select("cluster", "job_id"), on=["cluster", "job_id"], how="left_semi")


def diagnose(
    ctx: Context, cluster: str, config: ClusterConfig, month: str | None = None, job_id: str | None = None
) -> DataFrame:
    """gold.failures rows (not written) for the cluster's diagnosable jobs of a month, or for one job."""
    spark, settings = ctx.spark, ctx.settings
    jobs = read_table(spark, settings, "silver.jobs").where(F.col("cluster") == cluster)
    if job_id is not None:
        jobs = jobs.where(F.col("job_id") == job_id)
    jobs = filter_diagnosable(jobs, month).cache()
    steps = _keys(read_table(spark, settings, "silver.job_steps"), jobs)
    logs = parse_job_log_text(_keys(read_table(spark, settings, "silver.job_logs"), jobs))
    samples = _keys(
        read_table(spark, settings, "silver.gpu_samples").where(F.col("job_id").isNotNull()), jobs
    )
    scripts = (
        _keys(read_table(spark, settings, "silver.job_scripts"), jobs)
        .join(
            read_table(spark, settings, "silver.scripts").select(
                "cluster", "script_hash", "batch_size", F.col("text").alias("script_text")
            ),
            on=["cluster", "script_hash"],
            how="inner",
        )
        .select("cluster", "job_id", "batch_size", "script_text")
    )
    return diagnose_failures(jobs, steps, logs, gpu_signals(samples, jobs), scripts, config, ctx.now())


def build_failures(ctx: Context, cluster: str, month: str, config: ClusterConfig) -> FailureCounts:
    """Diagnose every failed/cancelled job of the cluster that ended in `month` (YYYY-MM) and replace that
    cluster-month of gold.failures with the result; returns the counts written."""
    ctx.progress(f"failures: diagnosing {cluster} {month} ...")
    rows = diagnose(ctx, cluster, config, month)
    predicate = month_predicate(cluster, month)
    replace_where(ctx.spark, ctx.settings, GOLD_FAILURES.name, rows, predicate)
    written = read_table(ctx.spark, ctx.settings, GOLD_FAILURES.name).where(predicate)
    summary = written.groupBy("cause").agg(
        F.count("*").alias("jobs"), F.sum("lost_gpu_hours").alias("gpu_h"), F.sum("lost_usd").alias("usd")
    )
    counts = FailureCounts(cluster=cluster, month=month)
    for r in summary.collect():
        counts.by_cause[r["cause"]] = int(r["jobs"])
        counts.jobs += int(r["jobs"])
        counts.lost_gpu_hours += float(r["gpu_h"] or 0.0)
        counts.lost_usd += float(r["usd"] or 0.0)
    counts.by_cause = dict(sorted(counts.by_cause.items(), key=lambda kv: -kv[1]))
    ctx.progress(f"failures: {counts.jobs} job(s) diagnosed into gold.failures")
    return counts


def score_against_truth(
    ctx: Context, cluster: str, month: str, truth_path: str
) -> list[tuple[str, str, bool]]:
    """(true cause, diagnosed cause, evidence archived) for every job of the cluster-month that the
    simulator's truth.parquet marks as failed or cancelled, or that gold.failures diagnosed ("none" on the
    side without a cause). `evidence archived` is `pipelines.gold.failures.scoring.has_evidence` of the
    truth row."""
    truth = (
        ctx.spark.read.parquet(truth_path)
        .where((F.col("cluster") == cluster) & (F.date_format("end_ts", "yyyy-MM") == month))
        .select(
            "job_id",
            F.col("failure_cause").alias("truth"),
            "source",
            "state",
            "has_log",
            F.coalesce("telemetry_samples", F.lit(0)).alias("samples"),
        )
    )
    diagnosed = (
        read_table(ctx.spark, ctx.settings, GOLD_FAILURES.name)
        .where((F.col("cluster") == cluster) & (F.col("month") == month))
        .select("job_id", F.col("cause").alias("predicted"))
    )
    out = []
    for r in truth.join(diagnosed, on="job_id", how="full_outer").collect():
        t, p = r["truth"] or "none", r["predicted"] or "none"
        if (t, p) == ("none", "none"):
            continue
        seen = r["source"] is None or has_evidence(
            r["source"], r["state"], bool(r["has_log"]), r["samples"], t
        )
        out.append((t, p, seen))
    return out


def failures_summary(ctx: Context, cluster: str, month: str) -> dict[str, object]:
    """Build the cluster-month's gold.failures and summarise it: totals, per cause, top users, and the
    price sheet the dollars came from (docs/cli.md shape)."""
    config, sheet = ctx.cluster_config(cluster)
    counts = build_failures(ctx, cluster, month, config)
    rows = read_table(ctx.spark, ctx.settings, GOLD_FAILURES.name).where(month_predicate(cluster, month))
    summary = _summary(rows, cluster, month)
    summary["jobs"] = counts.jobs
    summary["price_sheet"] = sheet
    return summary


def _summary(rows: DataFrame, cluster: str, month: str) -> dict[str, object]:
    """Totals, per-cause figures and the top users by lost dollars, in one pass per grouping."""
    measures = [
        F.count("*").alias("jobs"),
        F.sum(F.col("user_fixable").cast("int")).alias("user_fixable"),
        F.sum("lost_gpu_hours").alias("lost_gpu_hours"),
        F.sum("lost_core_hours").alias("lost_core_hours"),
        F.sum("lost_usd").alias("lost_usd"),
    ]
    by_cause = {
        r["cause"]: {
            "title": CAUSES[r["cause"]].title,
            "jobs": r["jobs"],
            "user_fixable": r["user_fixable"],
            "lost_gpu_hours": round(r["lost_gpu_hours"] or 0.0, 2),
            "lost_core_hours": round(r["lost_core_hours"] or 0.0, 2),
            "lost_usd": round(r["lost_usd"] or 0.0, 2),
            "mean_confidence": round(r["mean_confidence"], 2),
        }
        for r in rows.groupBy("cause")
        .agg(*measures, F.avg("confidence").alias("mean_confidence"))
        .orderBy(F.desc("jobs"), "cause")
        .collect()
    }
    users = (
        rows.groupBy("user")
        .agg(*measures, F.mode("cause").alias("top_cause"))
        .orderBy(F.desc("lost_usd"), F.desc("jobs"), "user")
        .limit(TOP_USERS)
        .collect()
    )
    top_users = [
        {
            "user": r["user"],
            "jobs": r["jobs"],
            "user_fixable": r["user_fixable"],
            "lost_gpu_hours": round(r["lost_gpu_hours"] or 0.0, 2),
            "lost_usd": round(r["lost_usd"] or 0.0, 2),
            "top_cause": r["top_cause"],
        }
        for r in users
    ]
    return {
        "cluster": cluster,
        "month": month,
        "jobs": sum(c["jobs"] for c in by_cause.values()),
        "user_fixable_jobs": sum(c["user_fixable"] for c in by_cause.values()),
        "lost_gpu_hours": round(sum(c["lost_gpu_hours"] for c in by_cause.values()), 2),
        "lost_core_hours": round(sum(c["lost_core_hours"] for c in by_cause.values()), 2),
        "lost_usd": round(sum(c["lost_usd"] for c in by_cause.values()), 2),
        "by_cause": by_cause,
        "top_users": top_users,
    }
