"""`jobfit ingest dcgm PATH... --cluster C`: dcgm-exporter scrapes or CSV archives into silver.gpu_samples,
attributed to silver.jobs (by the hpc_job / pod label, else by host and time overlap)."""

from __future__ import annotations

import argparse
import os
import re
from datetime import UTC, datetime

from pyspark.sql import functions as F

from jobs.context import Context
from jobs.ingest import IngestReport, SourceFile, bronze_frame, read_inputs, write_bronze, write_quarantine
from jobs.tables import merge_into, read_table
from jobs.validate import validate
from pipelines.attribution import with_job_attribution
from pipelines.dcgm import CSV_HEADER, SAMPLE_KEY, parse_dcgm_lines, pivot_samples
from pipelines.schemas import SILVER_GPU_SAMPLES, SILVER_JOBS

HELP = (
    "dcgm-exporter scrapes (Prometheus text) or CSV archives (timestamp,metric,labels,value) into "
    "silver.gpu_samples, attributed to jobs"
)
# A sample is rewritten only when it comes from another line or its attribution changed.
SAMPLES_UPDATE_WHEN = (
    "NOT (t.source_file <=> s.source_file AND t.line_no <=> s.line_no) "
    "OR NOT (t.job_id <=> s.job_id) OR t.attribution <> s.attribution"
)
_ISO_IN_NAME = re.compile(r"(\d{4}-\d{2}-\d{2})[T_ ](\d{2})[:\-]?(\d{2})[:\-]?(\d{2})")
_EPOCH_IN_NAME = re.compile(r"(?<!\d)(1\d{9})(?!\d)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options beyond PATH, --cluster and --json."""


def scrape_time(f: SourceFile, now: datetime) -> datetime:
    """When a file without per-line timestamps was scraped (UTC): a time in its name
    (`node1-2026-11-03T10:00:00Z.prom`, `node1.1762164000.prom`), else its modification time; stdin: now."""
    base = os.path.basename(f.name)
    if m := _ISO_IN_NAME.search(base):
        return datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}:{m.group(3)}:{m.group(4)}")
    if m := _EPOCH_IN_NAME.search(base):
        return datetime.fromtimestamp(int(m.group(1)), UTC).replace(tzinfo=None)
    if f.name != "<stdin>" and os.path.exists(f.name):
        return datetime.fromtimestamp(os.stat(f.name).st_mtime, UTC).replace(tzinfo=None)
    return now


def is_csv_archive(f: SourceFile) -> bool:
    """Whether the file is a CSV long-format archive (its first content line is the CSV header)."""
    first = next((line.strip() for line in f.lines if line.strip() and not line.startswith("#")), "")
    return first.lower() == CSV_HEADER


def run(ctx: Context, args: argparse.Namespace) -> IngestReport:
    """Land scrape lines in bronze.gpu_samples, parse and pivot them, attribute, MERGE into silver."""
    files = read_inputs(args.paths)
    report = IngestReport(source="dcgm", cluster=args.cluster, files=len(files))
    now = ctx.now()
    csv_files = [f.name for f in files if is_csv_archive(f)]
    scrape_ts = {f.name: scrape_time(f, now) for f in files if f.name not in csv_files}
    bronze = bronze_frame(ctx, files, args.cluster).cache()
    report.add("bronze.gpu_samples", write_bronze(ctx, "gpu_samples", bronze))
    samples, rejects, unkept = parse_dcgm_lines(bronze, scrape_ts, csv_files)
    samples = samples.cache()
    rejects = rejects.cache()
    report.quarantined = rejects.count()
    if report.quarantined:
        report.add("quarantine", write_quarantine(ctx, rejects))
    not_kept = {r["metric"]: r["count"] for r in unkept.collect()}
    per_metric = samples.groupBy(*SAMPLE_KEY, "metric").count()
    totals = per_metric.agg(F.sum("count").alias("lines"), F.count("*").alias("distinct")).first()
    kept_lines, distinct = int(totals["lines"] or 0), int(totals["distinct"])
    report.read = kept_lines + report.quarantined + sum(not_kept.values())
    report.superseded = kept_lines - distinct
    report.tables["metrics not kept (lines)"] = dict(sorted(not_kept.items()))
    jobs = read_table(ctx.spark, ctx.settings, SILVER_JOBS.name).filter(F.col("cluster") == args.cluster)
    rows = with_job_attribution(pivot_samples(samples), jobs).cache()
    report.tables["attribution (samples)"] = {
        r["attribution"]: r["count"] for r in rows.groupBy("attribution").count().collect()
    }
    ctx.progress(f"dcgm: {kept_lines} metric line(s) kept, {report.quarantined} quarantined")
    checked = validate(rows, SILVER_GPU_SAMPLES.name, "dcgm")
    if checked.rejected:
        write_quarantine(ctx, checked.rejects)
        report.quarantined += checked.rejected
    counts = merge_into(
        ctx.spark, ctx.settings, SILVER_GPU_SAMPLES.name, checked.valid, update_when=SAMPLES_UPDATE_WHEN
    )
    report.add(SILVER_GPU_SAMPLES.name, counts)
    report.inserted, report.updated, report.unchanged = counts.inserted, counts.updated, counts.unchanged
    for frame in (bronze, samples, rejects, rows):
        frame.unpersist()
    return report
