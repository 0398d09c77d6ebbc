"""The gold build (`jobfit build`): silver → gold.job_usage, gold.failures and the month tables, per
cluster-month.

Incremental: a cluster-month is rebuilt when the latest `ingested_at` of the silver rows it reads (its jobs,
their steps, logs and pod usage, and the GPU samples inside its jobs' time span) differs from the watermark
stored in gold.cluster_month, or when the price sheet changed; `--month` always rebuilds that month. Every
write is a `replaceWhere` of one cluster-month, so building twice gives identical tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from conf import ClusterConfig
from jobs.context import Context
from jobs.io.tables import month_predicate, read_table, replace_where, table_exists
from jobs.stages.failures import build_failures
from pipelines.gold.rollups import account_month, cluster_month, user_month
from pipelines.gold.waste import job_usage, price_sheet_json
from pipelines.schemas import TABLES
from pipelines.silver.attribution import with_job_attribution
from pipelines.silver.k8s_metrics import with_pod_usage

# Silver tables keyed by job whose late rows change a month's gold (when they exist).
_PER_JOB_TABLES = ("silver.job_steps", "silver.job_logs", "silver.pod_usage", "silver.jobstats")
# Cluster-wide silver tables every month reads (a new partition dump may resolve Partition_Limit anywhere).
_CLUSTER_TABLES = ("silver.partitions",)
_GOLD_MONTH_TABLES = ("gold.job_usage", "gold.user_month", "gold.account_month", "gold.cluster_month")


@dataclass
class MonthBuilt:
    """One cluster-month written to gold, with its headline."""

    cluster: str
    month: str
    jobs: int = 0
    alloc_usd: float = 0.0
    wasted_usd: float = 0.0
    wasted_share_pct: float | None = None
    gpu_jobs_no_telemetry: int = 0
    gpu_jobs_jobstats: int = 0  # GPU jobs measured by jobstats summaries (no DCGM samples)
    gpu_jobs_source_conflict: int = 0  # jobstats and DCGM utilisation more than 10 points apart
    failures: dict[str, object] | None = None


@dataclass
class BuildReport:
    """What `jobfit build` did: months written, months already up to date, the price sheets used."""

    built: list[MonthBuilt] = field(default_factory=list)
    up_to_date: list[dict[str, str]] = field(default_factory=list)
    price_sheets: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "built": [m.__dict__ for m in self.built],
            "up_to_date": self.up_to_date,
            "price_sheets": self.price_sheets,
        }

    def text(self) -> str:
        lines = []
        for m in self.built:
            share = "n/a" if m.wasted_share_pct is None else f"{m.wasted_share_pct:.1f} %"
            lines.append(
                f"{m.cluster} {m.month}: built {m.jobs} job(s); ${m.alloc_usd:,.2f} allocated, "
                f"${m.wasted_usd:,.2f} wasted ({share}); "
                f"{m.gpu_jobs_no_telemetry} GPU job(s) without telemetry"
                + (f", {m.gpu_jobs_jobstats} from jobstats" if m.gpu_jobs_jobstats else "")
                + (
                    f"; {m.gpu_jobs_source_conflict} job(s) where jobstats and DCGM disagree"
                    if m.gpu_jobs_source_conflict
                    else ""
                )
            )
        lines += [f"{u['cluster']} {u['month']}: up to date" for u in self.up_to_date]
        return "\n".join(lines) if lines else "nothing to build: silver.jobs has no finished jobs"


def finished_jobs(jobs: DataFrame) -> DataFrame:
    """Finished jobs with their gold month (UTC month of end_ts)."""
    return jobs.filter(
        F.col("is_final") & F.col("start_ts").isNotNull() & F.col("end_ts").isNotNull()
    ).withColumn("month", F.date_format("end_ts", "yyyy-MM"))


def silver_watermarks(ctx: Context, cluster: str) -> DataFrame:
    """(cluster, month, source_watermark_ts): the latest silver ingested_at each cluster-month reads."""
    spark, settings = ctx.spark, ctx.settings
    jobs = finished_jobs(read_table(spark, settings, "silver.jobs").where(F.col("cluster") == cluster))
    spans = jobs.groupBy("cluster", "month").agg(
        F.min("start_ts").alias("_from"), F.max("end_ts").alias("_to"), F.max("ingested_at").alias("_jobs_at")
    )
    samples = read_table(spark, settings, "silver.gpu_samples").where(F.col("cluster") == cluster)
    sample_at = (
        spans.join(
            samples.select("cluster", "ts", "ingested_at"),
            on=(spans["cluster"] == samples["cluster"]) & samples["ts"].between(spans["_from"], spans["_to"]),
            how="inner",
        )
        .groupBy(spans["cluster"], spans["month"])
        .agg(F.max("ingested_at").alias("_at"))
    )
    marks = [spans.select("cluster", "month", F.col("_jobs_at").alias("_at")), sample_at]
    for name in _PER_JOB_TABLES:
        if name in TABLES and table_exists(spark, settings, name):
            per_job = read_table(spark, settings, name).where(F.col("cluster") == cluster)
            marks.append(
                per_job.join(jobs.select("cluster", "job_id", "month"), on=["cluster", "job_id"], how="inner")
                .groupBy("cluster", "month")
                .agg(F.max("ingested_at").alias("_at"))
            )
    for name in _CLUSTER_TABLES:
        if table_exists(spark, settings, name):
            at = read_table(spark, settings, name).where(F.col("cluster") == cluster)
            marks.append(
                spans.select("cluster", "month").join(
                    at.groupBy("cluster").agg(F.max("ingested_at").alias("_at")), on="cluster", how="inner"
                )
            )
    union = marks[0]
    for other in marks[1:]:
        union = union.unionByName(other)
    return union.groupBy("cluster", "month").agg(F.max("_at").alias("source_watermark_ts"))


def stale_months(ctx: Context, cluster: str, watermarks: dict[str, datetime], prices: str) -> list[str]:
    """Months whose gold is missing or was built from other silver data or other prices."""
    built: dict[str, tuple[datetime | None, str | None]] = {}
    if table_exists(ctx.spark, ctx.settings, "gold.cluster_month"):
        for r in (
            read_table(ctx.spark, ctx.settings, "gold.cluster_month")
            .where(F.col("cluster") == cluster)
            .select("month", "source_watermark_ts", "price_sheet_json")
            .collect()
        ):
            built[r["month"]] = (r["source_watermark_ts"], r["price_sheet_json"])
    return sorted(m for m, mark in watermarks.items() if built.get(m) != (mark, prices))


def _read_if_exists(ctx: Context, name: str, cluster: str) -> DataFrame | None:
    """A silver table's rows of one cluster, or None when nothing was ever ingested into it."""
    if not table_exists(ctx.spark, ctx.settings, name):
        return None
    return read_table(ctx.spark, ctx.settings, name).where(F.col("cluster") == cluster)


def partition_limits(ctx: Context, cluster: str) -> dict[str, int | None]:
    """Partition → MaxTime seconds (None: UNLIMITED) from the ingested `scontrol show partition` dumps."""
    dumped = _read_if_exists(ctx, "silver.partitions", cluster)
    if dumped is None:
        return {}
    rows = dumped.where(F.col("max_time_s").isNotNull() | F.col("is_unlimited")).collect()
    return {r["partition"]: r["max_time_s"] for r in rows}


def build_month(
    ctx: Context, cluster: str, month: str, config: ClusterConfig, watermark: datetime | None
) -> MonthBuilt:
    """Rebuild one cluster-month of gold: failures, job usage, rollups, priced by `config`."""
    spark, settings = ctx.spark, ctx.settings
    ctx.progress(f"build: {cluster} {month} ...")
    all_jobs = read_table(spark, settings, "silver.jobs").where(F.col("cluster") == cluster)
    jobs = finished_jobs(all_jobs).where(F.col("month") == month).drop("month").cache()
    span = jobs.agg(F.min("start_ts").alias("lo"), F.max("end_ts").alias("hi")).first()
    samples = read_table(spark, settings, "silver.gpu_samples").where(F.col("cluster") == cluster)
    if span is not None and span["lo"] is not None:
        samples = samples.where(F.col("ts").between(span["lo"], span["hi"]))
        overlapping = all_jobs.where(
            (F.col("start_ts") <= span["hi"]) & (F.coalesce("end_ts", F.lit(span["hi"])) >= span["lo"])
        )
        # Re-attribute against the jobs as they are now: a late sacct dump may claim unattributed samples.
        samples = with_job_attribution(samples, overlapping)
    else:
        samples = samples.limit(0)

    failures_counts = build_failures(ctx, cluster, month, config).as_dict()
    failures = read_table(spark, settings, "gold.failures").where(month_predicate(cluster, month))

    # A pod's CPU seconds and peak working set come from silver.pod_usage (jobfit ingest k8s-metrics).
    pod_usage = read_table(spark, settings, "silver.pod_usage").where(F.col("cluster") == cluster)
    jobstats = _read_if_exists(ctx, "silver.jobstats", cluster)
    usage = job_usage(
        with_pod_usage(jobs, pod_usage),
        samples,
        config,
        failures,
        jobstats=jobstats,
        partition_limits=partition_limits(ctx, cluster),
    )
    predicate = month_predicate(cluster, month)
    replace_where(spark, settings, "gold.job_usage", usage, predicate)
    written = read_table(spark, settings, "gold.job_usage").where(predicate).cache()
    marks = spark.createDataFrame(
        [(cluster, month, watermark)], "cluster string, month string, source_watermark_ts timestamp"
    )
    replace_where(spark, settings, "gold.user_month", user_month(written), predicate)
    replace_where(spark, settings, "gold.account_month", account_month(written), predicate)
    replace_where(
        spark,
        settings,
        "gold.cluster_month",
        cluster_month(written, marks, price_sheet_json(config)),
        predicate,
    )
    head = read_table(spark, settings, "gold.cluster_month").where(predicate).first()
    written.unpersist()
    jobs.unpersist()
    result = MonthBuilt(cluster=cluster, month=month, failures=failures_counts)
    if head is not None:
        result.jobs = int(head["jobs"])
        result.alloc_usd = float(head["alloc_usd"])
        result.wasted_usd = float(head["wasted_usd"])
        result.wasted_share_pct = head["wasted_share_pct"]
        result.gpu_jobs_no_telemetry = int(head["gpu_jobs_no_telemetry"])
        result.gpu_jobs_jobstats = int(head["gpu_jobs_jobstats"])
        result.gpu_jobs_source_conflict = int(head["gpu_jobs_source_conflict"])
    return result


def build(ctx: Context, cluster: str | None, month: str | None) -> BuildReport:
    """Build gold for one cluster (or every cluster in silver.jobs), one month or every stale month."""
    spark, settings = ctx.spark, ctx.settings
    report = BuildReport()
    if cluster is not None:
        clusters = [cluster]
    else:
        jobs = read_table(spark, settings, "silver.jobs")
        clusters = sorted(r["cluster"] for r in jobs.select("cluster").distinct().collect())
    for name in clusters:
        config, sheet = ctx.cluster_config(name)
        report.price_sheets[name] = sheet
        prices = price_sheet_json(config)
        watermarks = {r["month"]: r["source_watermark_ts"] for r in silver_watermarks(ctx, name).collect()}
        if month is not None:
            months = [month]
        else:
            months = stale_months(ctx, name, watermarks, prices)
            report.up_to_date += [
                {"cluster": name, "month": m} for m in sorted(set(watermarks) - set(months))
            ]
        for m in months:
            report.built.append(build_month(ctx, name, m, config, watermarks.get(m)))
    return report
