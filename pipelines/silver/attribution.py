"""Attribute GPU samples to jobs (pure; used by `jobfit ingest dcgm` and again by `jobfit build`).

Rules, in order:
1. `label`: the series carries a job label (dcgm-exporter's `hpc_job`, or Kubernetes `namespace/pod`). The
   label is the job id, except that a Slurm JobIDRaw (an array task's own number) becomes the task's
   job_id (`with_raw_job_ids_resolved`). A GPU shared by N jobs is exported as N copies of each series:
   each copy stays its own row (key includes `label_job`), so per-job GPU time must be divided by the
   copies at that timestamp (`pipelines.gold.waste.with_copies`), never summed.
2. `overlap`: no label; exactly one GPU job of the cluster ran on the sample's host at the sample's time
   (start_ts <= ts < end_ts, an open end for a running job; hosts from the job's expanded node_list). When
   the jobs frame has a `gpu_indices` column (e.g. `0,1` or `0-1`), a job only claims those GPU indices.
3. `ambiguous`: several candidate jobs; job_id stays null — never guessed.
4. `unattributed`: no candidate job.
Only jobs with GPUs (alloc_gpus, else req_gpus, above 0) are candidates for unlabelled samples."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.units import expand_hostlist_col

_KEY = ("cluster", "host", "device", "ts", "label_job")


def _gpu_index_array(text: F.Column) -> F.Column:
    """`0,2-3` (or Slurm's `IDX:0,2-3`) as an array of ints; null for null text."""
    items = F.split(F.regexp_replace(text, r"^IDX:|[()\s]", ""), ",")

    def bounds(item: F.Column) -> F.Column:
        parts = F.split(item, "-")
        lo = F.try_element_at(parts, F.lit(1)).try_cast("int")
        return F.sequence(lo, F.coalesce(F.try_element_at(parts, F.lit(2)).try_cast("int"), lo))

    ranges = F.transform(items, bounds)
    return F.when(text.isNotNull() & (F.trim(text) != ""), F.flatten(ranges))


def job_gpu_hosts(jobs: DataFrame) -> DataFrame:
    """(cluster, host, job_id, start_ts, end_ts, gpu_indices array or null) for jobs that hold GPUs."""
    gpus = F.coalesce(F.col("alloc_gpus"), F.col("req_gpus"), F.lit(0))
    idx = _gpu_index_array(F.col("gpu_indices")) if "gpu_indices" in jobs.columns else F.lit(None)
    return jobs.filter((gpus > 0) & F.col("start_ts").isNotNull() & F.col("node_list").isNotNull()).select(
        "cluster",
        "job_id",
        "start_ts",
        "end_ts",
        idx.cast("array<int>").alias("job_gpus"),
        F.explode(expand_hostlist_col(F.col("node_list"))).alias("host"),
    )


def with_raw_job_ids_resolved(samples: DataFrame, jobs: DataFrame) -> DataFrame:
    """Samples whose `job_id` is a job's Slurm JobIDRaw get that job's `job_id`.

    dcgm-exporter's hpc_job label carries SLURM_JOB_ID, which for an array task is its raw id (646000237),
    while silver.jobs keys the task as 646000236_2. An id that is itself a job's job_id is left alone."""
    own_ids = jobs.select("cluster", F.col("job_id").alias("job_id_raw"))
    raw = (
        jobs.filter(F.col("job_id_raw").isNotNull() & (F.col("job_id_raw") != F.col("job_id")))
        .select("cluster", "job_id_raw", F.col("job_id").alias("_resolved"))
        .join(own_ids, on=["cluster", "job_id_raw"], how="left_anti")
        .dropDuplicates(["cluster", "job_id_raw"])
    )
    return (
        samples.join(raw.withColumnRenamed("job_id_raw", "job_id"), on=["cluster", "job_id"], how="left")
        .withColumn("job_id", F.coalesce(F.col("_resolved"), F.col("job_id")))
        .drop("_resolved")
    )


def with_job_attribution(samples: DataFrame, jobs: DataFrame) -> DataFrame:
    """Samples with `job_id` and `attribution` (label | overlap | ambiguous | unattributed) set by the rules
    above; `samples` has silver.gpu_samples columns, `jobs` silver.jobs columns. Same rows, same order of
    columns; existing job_id/attribution values are recomputed."""
    columns = samples.columns
    labelled = (
        samples.filter(F.col("label_job") != "")
        .withColumn("job_id", F.col("label_job"))
        .withColumn("attribution", F.lit("label"))
    )
    if "job_id_raw" in jobs.columns:
        labelled = with_raw_job_ids_resolved(labelled, jobs)
    bare = samples.filter(F.col("label_job") == "").drop("job_id", "attribution")
    hosts = job_gpu_hosts(jobs).alias("j")
    s = bare.alias("s")
    on = (
        (F.col("s.cluster") == F.col("j.cluster"))
        & (F.col("s.host") == F.col("j.host"))
        & (F.col("s.ts") >= F.col("j.start_ts"))
        & (F.col("j.end_ts").isNull() | (F.col("s.ts") < F.col("j.end_ts")))
        & (
            F.col("j.job_gpus").isNull()
            | F.col("s.gpu").isNull()
            | F.array_contains("j.job_gpus", F.col("s.gpu"))
        )
    )
    candidates = (
        s.join(hosts, on=on, how="left")
        .groupBy(*[F.col(f"s.{k}") for k in _KEY])
        .agg(F.count_distinct(F.col("j.job_id")).alias("n_jobs"), F.min(F.col("j.job_id")).alias("only_job"))
    )
    decided = bare.join(candidates, on=list(_KEY), how="left").select(
        *[c for c in bare.columns],
        F.when(F.col("n_jobs") == 1, F.col("only_job")).alias("job_id"),
        F.when(F.col("n_jobs") == 1, "overlap")
        .when(F.col("n_jobs") > 1, "ambiguous")
        .otherwise("unattributed")
        .alias("attribution"),
    )
    return labelled.select(*columns).unionByName(decided.select(*columns))
