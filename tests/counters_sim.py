"""A simulated month's DCGM profiling counters scored against its truth, without a warehouse: the month's
scrapes through the DCGM parser (`parse_dcgm_lines`, `pivot_samples`) and `counter_profiles` on Spark, jobs
by their hpc_job label, each classified with its script's frameworks (`parse_script`). Used by
tests/test_bottleneck_counters.py and bench/bottleneck_counters.py; the warehouse path (ingest, MERGE,
`jobfit bottlenecks`) is the CLI test's."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf import BottleneckSettings, load_cluster
from jobs.context import Context
from jobs.simulator import simulate
from jobs.stages.ingest.common import lines_frame, scan_inputs
from pipelines.gold.bottlenecks.counters import classify, counter_profiles, precision_recall
from pipelines.silver.dcgm import parse_dcgm_lines, pivot_samples
from pipelines.silver.scripts import parse_script


def simulate_and_score(
    spark: SparkSession, out: Path, jobs: int, seed: int, interval_s: int, s: BottleneckSettings
) -> tuple[dict[str, Any], dict[str, str | None], dict[str, str | None]]:
    """(precision_recall's figures, found kind per job, true kind per job) of a simulated month in `out`
    whose hosts export the profiling fields four in five."""
    simulate(
        load_cluster("demo"), "2026-11", jobs, seed, out, dcgm_interval_s=interval_s, dcgm_prof_share=0.8
    )
    ctx = Context(environ={}, quiet=True)
    ctx.use_spark(spark)
    samples, _, _ = parse_dcgm_lines(lines_frame(ctx, scan_inputs([str(out / "dcgm")]), "demo"), {}, [])
    wide = pivot_samples(samples).withColumn("job_id", F.when(F.col("label_job") != "", F.col("label_job")))
    truth_rows = pq.read_table(out / "truth.parquet").to_pylist()
    by_raw = {r["job_id_raw"]: r for r in truth_rows if r["source"] == "slurm"}
    found: dict[str, str | None] = {}
    for p in counter_profiles(wide).collect():
        t = by_raw.get(p["job_id"])
        if t is None:
            continue
        text = (out / "scripts" / f"{t['job_id']}.sh").read_text()
        label, finding = classify(p.asDict(), s, parse_script(text).frameworks or "", t["alloc_gpus"])
        if label != "unclassified":
            found[t["job_id"]] = finding.kind if finding else None
    truth = {
        r["job_id"]: r["bottleneck"]
        for r in truth_rows
        if (r["prof_samples"] or 0) >= s.dcgm_min_samples and r["has_hpc_job_label"]
    }
    return precision_recall(found, truth), found, truth


def per_kind(found: dict[str, str | None], truth: dict[str, str | None]) -> list[tuple[str, int, int, int]]:
    """(kind, true, found, hits) per kind over the jobs in both."""
    jobs = sorted(set(found) & set(truth))
    kinds = sorted({k for j in jobs for k in (found[j], truth[j]) if k})
    return [
        (
            k,
            sum(1 for j in jobs if truth[j] == k),
            sum(1 for j in jobs if found[j] == k),
            sum(1 for j in jobs if truth[j] == k and found[j] == k),
        )
        for k in kinds
    ]


def misses(found: dict[str, str | None], truth: dict[str, str | None]) -> Counter:
    """(true kind or none, found kind or none) of every job classified wrongly."""
    jobs = set(found) & set(truth)
    return Counter((truth[j] or "none", found[j] or "none") for j in jobs if truth[j] != found[j])
