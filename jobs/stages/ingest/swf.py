"""`jobfit ingest swf PATH... --cluster C`: Parallel Workloads Archive SWF logs into silver.jobs."""

from __future__ import annotations

import argparse

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from jobs.context import Context
from jobs.io.tables import MergeCounts, merge_into
from jobs.io.validate import validate
from jobs.stages.ingest.common import IngestReport, bronze_frame, read_inputs, write_bronze, write_quarantine
from pipelines.schemas import SILVER_JOBS
from pipelines.silver.swf import parse_swf, parse_swf_header

HELP = "Standard Workload Format logs (Parallel Workloads Archive, .swf or .swf.gz) into silver.jobs"

# A row replaces the stored one unless the stored one is final and the new one is not (an older dump
# never overwrites a newer one), or it is the very same record (then it counts as unchanged).
JOBS_UPDATE_WHEN = (
    "(NOT t.is_final OR s.is_final) AND NOT (t.source_file <=> s.source_file AND t.line_no <=> s.line_no)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options beyond PATH, --cluster and --json."""


def latest_per_job(rows: DataFrame) -> DataFrame:
    """One row per (cluster, job_id): a final row over an active one, then the later line of the input."""
    order = Window.partitionBy("cluster", "job_id").orderBy(
        F.col("is_final").desc(), F.col("source_file").desc(), F.col("line_no").desc()
    )
    return rows.withColumn("_rank", F.row_number().over(order)).filter("_rank = 1").drop("_rank")


def merge_jobs(ctx: Context, rows: DataFrame, source: str) -> tuple[MergeCounts, int, int]:
    """Validate job rows (silver.jobs expectations; row failures to quarantine) and MERGE them into
    silver.jobs; returns the merge counts, rows superseded in this batch and rows rejected.
    `rows` carries silver.jobs columns plus `raw` (the record's text, for quarantine)."""
    rows = rows.cache()
    unique = latest_per_job(rows).cache()
    total, kept = rows.count(), unique.count()
    checked = validate(unique, SILVER_JOBS.name, source)
    if checked.rejected:
        write_quarantine(ctx, checked.rejects)
    counts = merge_into(
        ctx.spark, ctx.settings, SILVER_JOBS.name, checked.valid, update_when=JOBS_UPDATE_WHEN
    )
    rows.unpersist()
    unique.unpersist()
    return counts, total - kept, checked.rejected


def run(ctx: Context, args: argparse.Namespace) -> IngestReport:
    """Read SWF files, land their lines in bronze.swf, parse jobs into silver.jobs, quarantine bad lines."""
    files = read_inputs(args.paths)
    report = IngestReport(source="swf", cluster=args.cluster, files=len(files))
    headers = {f.name: parse_swf_header(f.lines) for f in files}
    for f in files:
        if headers[f.name].unix_start_time is None:
            ctx.progress(f"{f.name}: no UnixStartTime in the header; its records go to quarantine")
    report.read = sum(
        1 for f in files for line in f.lines if line.strip() and not line.lstrip().startswith(";")
    )
    ctx.progress(f"swf: {report.read} record(s) in {len(files)} file(s)")
    bronze = bronze_frame(ctx, files, args.cluster).cache()
    report.add("bronze.swf", write_bronze(ctx, "swf", bronze))
    rows, rejects = parse_swf(bronze, headers)
    rejects = rejects.cache()
    report.quarantined = rejects.count()
    if report.quarantined:
        report.add("quarantine", write_quarantine(ctx, rejects))
    counts, report.superseded, invalid = merge_jobs(ctx, rows, "swf")
    report.quarantined += invalid
    report.add(SILVER_JOBS.name, counts)
    report.inserted, report.updated, report.unchanged = counts.inserted, counts.updated, counts.unchanged
    bronze.unpersist()
    rejects.unpersist()
    return report
