"""Reads for train/evaluate/recommend: one cluster's jobs (scripts linked) and scripts as pandas frames."""

from __future__ import annotations

import pandas as pd
from pyspark.sql import functions as F

from conf import ClusterConfig
from jobs.context import Context, UsageError
from jobs.io.tables import read_table
from pipelines.silver.k8s_metrics import with_pod_usage
from pipelines.units import GIB

# The silver.jobs columns the feature table uses: a chosen subset of SILVER_JOBS.columns, not all of them
# (read_jobs brings only these to pandas).
JOB_COLUMNS = (
    "cluster",
    "job_id",
    "source",
    "job_name",
    "user",
    "account",
    "partition",
    "qos",
    "state",
    "submit_ts",
    "start_ts",
    "end_ts",
    "elapsed_s",
    "timelimit_s",
    "req_cpus",
    "alloc_cpus",
    "req_mem_bytes",
    "alloc_mem_bytes",
    "req_gpus",
    "alloc_gpus",
    "gpu_model",
    "nodes",
    "ntasks",
    "total_cpu_s",
    "max_rss_bytes",
    "gpu_mem_peak_bytes",
)


def read_jobs(ctx: Context, cluster: str, user: str | None = None) -> pd.DataFrame:
    """silver.jobs of a cluster (optionally one user) with `script_hash` filled from silver.job_scripts,
    pods' usage from silver.pod_usage and GPU memory peaks from telemetry (gold.job_usage)."""
    spark, settings = ctx.spark, ctx.settings
    jobs = read_table(spark, settings, "silver.jobs").filter(F.col("cluster") == cluster)
    if user is not None:
        jobs = jobs.filter(F.col("user") == user)
    links = (
        read_table(spark, settings, "silver.job_scripts")
        .filter(F.col("cluster") == cluster)
        .select("job_id", F.col("script_hash").alias("_linked_hash"))
    )
    # Kubernetes pods' measured CPU seconds and peak memory (silver.pod_usage) stand in their job rows.
    usage = read_table(spark, settings, "silver.pod_usage").filter(F.col("cluster") == cluster)
    jobs = with_pod_usage(jobs, usage)
    # GPU memory peaks measured by telemetry (DCGM samples, else jobstats summaries, as gold.job_usage
    # attributes them at build) count beside sacct's gres/gpumem: the larger is the job's peak, so a
    # cluster whose sacct records no GPU memory still trains the VRAM target.
    # The card's memory as measured (DCGM's FB_USED + FB_FREE, jobstats' total) is one card's request where
    # the job's GPU model is not in the conf by any name (a MIG slice, a gres type the conf lacks).
    telemetry = (
        read_table(spark, settings, "gold.job_usage")
        .filter((F.col("cluster") == cluster) & F.col("vram_peak_bytes").isNotNull())
        .groupBy("job_id")
        .agg(
            F.max("vram_peak_bytes").alias("_tel_vram_peak_bytes"),
            F.max("vram_card_bytes").alias("gpu_card_bytes"),
        )
    )
    jobs = (
        jobs.join(telemetry, on="job_id", how="left")
        .withColumn("gpu_mem_peak_bytes", F.greatest("gpu_mem_peak_bytes", "_tel_vram_peak_bytes"))
        .drop("_tel_vram_peak_bytes")
    )
    joined = jobs.join(links, on="job_id", how="left").select(
        *JOB_COLUMNS,
        "gpu_card_bytes",
        F.coalesce("script_hash", "_linked_hash").alias("script_hash"),
    )
    return joined.toPandas()


def read_scripts(ctx: Context, cluster: str) -> pd.DataFrame:
    """silver.scripts of a cluster."""
    return (
        read_table(ctx.spark, ctx.settings, "silver.scripts").filter(F.col("cluster") == cluster).toPandas()
    )


def read_job_sources(ctx: Context, cluster: str) -> pd.DataFrame:
    """The files each job's entry points read (silver.job_sources with silver.sources' text): job_id,
    path as the script names it, text. Empty where `ingest scripts --sources` kept none."""
    spark, settings = ctx.spark, ctx.settings
    links = read_table(spark, settings, "silver.job_sources").filter(F.col("cluster") == cluster)
    files = (
        read_table(spark, settings, "silver.sources")
        .filter(F.col("cluster") == cluster)
        .select("source_hash", "text")
    )
    return links.join(files, on="source_hash", how="inner").select("job_id", "path", "text").toPandas()


def gpu_memory_bytes(config: ClusterConfig) -> dict[str, float]:
    """GPU model -> memory per GPU in bytes, from the cluster conf (none for the default sheet): each
    model by its name and its lower-case name, and by its family as Slurm's gres types name it (`a100` for
    `A100-SXM4-80GB`) when that family has one size on this cluster — the size its partitions have, else
    the one size the conf lists (sacct's AllocTRES says `gres/gpu:a100`, never the conf's full name)."""
    cards = {name: spec.memory_gib * GIB for name, spec in config.gpu_models.items()}
    out = dict(cards)
    for name, mem in cards.items():
        out.setdefault(name.lower(), mem)
    used = {p.gpu_model for p in config.partitions.values() if p.gpu_model in cards}
    families: dict[str, list[tuple[bool, float]]] = {}
    for name, mem in cards.items():
        families.setdefault(name.lower().split("-")[0], []).append((name in used, mem))
    for family, sizes in families.items():
        picked = {mem for is_used, mem in sizes if is_used} or {mem for _, mem in sizes}
        if len(picked) == 1:
            out.setdefault(family, picked.pop())
    return out


def require_jobs(jobs: pd.DataFrame, cluster: str) -> None:
    """A UsageError when the cluster has no jobs at all (nothing ingested under that name)."""
    if len(jobs) == 0:
        raise UsageError(f"no jobs for cluster {cluster!r} in silver.jobs (ingest some first)")
