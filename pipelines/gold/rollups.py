"""Month rollups of gold.job_usage: per user, per account and per cluster (allocated vs used vs wasted)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipelines.gold.waste import SUMMED_COLUMNS, with_rounded

TOP_N = 5


def _sum(name: str) -> Column:
    return F.coalesce(F.sum(name), F.lit(0.0))


def _month_metrics() -> list[Column]:
    """The measures every month table carries (hours, dollars, counts), summed over its jobs."""
    gpu_job = F.col("alloc_gpus") > 0
    return [
        F.count(F.lit(1)).alias("jobs"),
        F.count_if(gpu_job).alias("gpu_jobs"),
        F.count_if(gpu_job & ~F.col("has_gpu_telemetry")).alias("gpu_jobs_no_telemetry"),
        F.count_if(gpu_job & (F.col("gpu_telemetry_source") == "jobstats")).alias("gpu_jobs_jobstats"),
        F.count_if(F.coalesce(F.col("has_gpu_source_conflict"), F.lit(False))).alias(
            "gpu_jobs_source_conflict"
        ),
        F.count_if(F.col("is_user_fixable_failure")).alias("failed_user_fixable_jobs"),
        *[_sum(name).alias(name) for name in SUMMED_COLUMNS],
        # GPU-hours of jobs whose utilisation is known: the base of the GPU figures.
        _sum(F.when(F.col("gpu_util_mean_pct").isNotNull(), F.col("gpu_alloc_h"))).alias("gpu_alloc_known_h"),
        # Coverage: the allocation-weighted share of GPU-time with samples.
        (
            F.sum(F.col("gpu_alloc_h") * F.col("gpu_coverage_pct"))
            / F.sum(F.when(gpu_job, F.col("gpu_alloc_h")))
        ).alias("gpu_coverage_pct"),
    ]


def _with_shares(df: DataFrame) -> DataFrame:
    """Efficiency and waste shares from the sums (null where the base is zero or unknown)."""

    def pct(part: str, whole: Column) -> Column:
        return F.when(whole > 0, F.col(part) / whole * 100.0)

    return df.select(
        "*",
        pct("cpu_used_core_h", F.col("cpu_used_core_h") + F.col("cpu_wasted_core_h")).alias("cpu_eff_pct"),
        pct("mem_used_gib_h", F.col("mem_used_gib_h") + F.col("mem_wasted_gib_h")).alias("mem_eff_pct"),
        pct("gpu_used_h", F.col("gpu_alloc_known_h")).alias("gpu_util_mean_pct"),
        pct("wasted_usd", F.col("alloc_usd")).alias("wasted_share_pct"),
    )


def _top(df: DataFrame, group: list[str], item: str, top_n: int, alias: str) -> DataFrame:
    """The top `top_n` `item`s by wasted dollars within each group, as an array of (item, wasted_usd)."""
    ranked = (
        df.groupBy(*group, item)
        .agg(F.sum("wasted_usd").alias("wasted_usd"))
        .filter(F.col("wasted_usd") > 0)
        .withColumn(
            "_rank",
            F.row_number().over(
                Window.partitionBy(*group).orderBy(F.desc("wasted_usd"), F.asc_nulls_last(item))
            ),
        )
        .filter(F.col("_rank") <= top_n)
    )
    return ranked.groupBy(*group).agg(
        F.transform(
            F.array_sort(
                F.collect_list(F.struct("_rank", F.col(item), F.round("wasted_usd", 6).alias("wasted_usd")))
            ),
            lambda s: F.struct(s[item].alias(item), s["wasted_usd"].alias("wasted_usd")),
        ).alias(alias)
    )


def _rollup(job_usage: DataFrame, group: list[str], top_item: str, top_alias: str, top_n: int) -> DataFrame:
    sums = job_usage.groupBy(*group).agg(*_month_metrics())
    top = _top(job_usage, group, top_item, top_n, top_alias)
    return with_rounded(
        _with_shares(sums)
        .join(top, on=group, how="left")
        .withColumn(top_alias, F.coalesce(F.col(top_alias), F.array().cast(top.schema[top_alias].dataType)))
    )


def user_month(job_usage: DataFrame, top_n: int = TOP_N) -> DataFrame:
    """gold.user_month: one row per (cluster, month, user) with the user's most wasteful jobs."""
    return _rollup(job_usage, ["cluster", "month", "user"], "job_id", "top_jobs", top_n)


def account_month(job_usage: DataFrame, top_n: int = TOP_N) -> DataFrame:
    """gold.account_month: one row per (cluster, month, account) with its most wasteful users."""
    return _rollup(job_usage, ["cluster", "month", "account"], "user", "top_users", top_n)


def cluster_month(
    job_usage: DataFrame, watermarks: DataFrame, price_sheet: str, top_n: int = TOP_N
) -> DataFrame:
    """gold.cluster_month: one row per (cluster, month), the headline, the top users, and the build's inputs.

    `watermarks` holds (cluster, month, source_watermark_ts): the latest silver `ingested_at` the month was
    built from; `price_sheet` the prices used (JSON). Either changing marks the month for a rebuild."""
    rolled = _rollup(job_usage, ["cluster", "month"], "user", "top_users", top_n)
    return rolled.join(watermarks, on=["cluster", "month"], how="left").withColumn(
        "price_sheet_json", F.lit(price_sheet)
    )


def partition_breakdown(job_usage: DataFrame) -> DataFrame:
    """Allocated and wasted dollars per partition (for `jobfit waste`), with the shares."""
    return with_rounded(
        _with_shares(job_usage.groupBy("cluster", "month", "partition").agg(*_month_metrics()))
    )


def pod_usage_breakdown(job_usage: DataFrame) -> DataFrame:
    """Kubernetes pods of gold.job_usage in one row (for `jobfit waste`): pods, pods with measured usage
    (CPU or memory, from silver.pod_usage), and per resource the allocated, used and wasted hours and wasted
    dollars of the pods whose use of it is known (an unmeasured pod is unknown, not idle)."""
    pods = job_usage.filter(F.col("source") == "k8s")
    cpu_known = F.col("cpu_used_core_h").isNotNull()
    mem_known = F.col("mem_used_gib_h").isNotNull()
    return with_rounded(
        pods.agg(
            F.count("*").alias("pods"),
            F.count(F.when(cpu_known | mem_known, 1)).alias("pods_with_usage"),
            F.count(F.when(cpu_known, 1)).alias("pods_with_cpu"),
            F.count(F.when(mem_known, 1)).alias("pods_with_memory"),
            F.sum(F.when(cpu_known, F.col("cpu_alloc_core_h"))).alias("cpu_alloc_core_h"),
            F.sum("cpu_used_core_h").alias("cpu_used_core_h"),
            F.sum("cpu_wasted_core_h").alias("cpu_wasted_core_h"),
            F.sum(F.when(cpu_known, F.col("cpu_wasted_usd"))).alias("cpu_wasted_usd"),
            F.sum(F.when(mem_known, F.col("mem_alloc_gib_h"))).alias("mem_alloc_gib_h"),
            F.sum("mem_used_gib_h").alias("mem_used_gib_h"),
            F.sum("mem_wasted_gib_h").alias("mem_wasted_gib_h"),
            F.sum(F.when(mem_known, F.col("mem_wasted_usd"))).alias("mem_wasted_usd"),
        )
    )
