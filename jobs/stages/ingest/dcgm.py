"""`jobfit ingest dcgm PATH... --cluster C`: dcgm-exporter scrapes or archives (CSV or Parquet long format)
into silver.gpu_samples, attributed to silver.jobs (by the hpc_job / pod label, else by host and time
overlap). Lines are read by Spark, not the driver; a file whose content is already in bronze is skipped
(`jobfit build` re-attributes samples against the jobs known then, so nothing is lost by not re-reading)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.context import Context, UsageError
from jobs.io.tables import merge_into, read_table, sql_string
from jobs.io.validate import validate_batch
from jobs.stages.ingest.common import (
    IngestReport,
    InputRef,
    append_bronze,
    known_files,
    lines_frame,
    scan_inputs,
    union_all,
    write_quarantine,
)
from pipelines.schemas import SILVER_GPU_SAMPLES, SILVER_JOBS
from pipelines.silver.attribution import with_job_attribution
from pipelines.silver.dcgm import (
    CSV_HEADER,
    archive_rows_as_lines,
    check_dcgm_lines,
    line_tally,
    pivot_samples,
    rejects_of,
    samples_of,
)

# A sample is rewritten only when it comes from another line or its attribution changed.
SAMPLES_UPDATE_WHEN = (
    "NOT (t.source_file <=> s.source_file AND t.line_no <=> s.line_no) "
    "OR NOT (t.job_id <=> s.job_id) OR t.attribution <> s.attribution"
)
_ISO_IN_NAME = re.compile(r"(\d{4}-\d{2}-\d{2})[T_ ](\d{2})[:\-]?(\d{2})[:\-]?(\d{2})")
_EPOCH_IN_NAME = re.compile(r"(?<!\d)(1\d{9})(?!\d)")


PARQUET_MAGIC = b"PAR1"


def scrape_time(name: str, now: datetime) -> datetime:
    """When a file without per-line timestamps was scraped (UTC): a time in its name
    (`node1-2026-11-03T10:00:00Z.prom`, `node1.1762164000.prom`), else its modification time; stdin: now."""
    base = os.path.basename(name)
    if m := _ISO_IN_NAME.search(base):
        return datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}:{m.group(3)}:{m.group(4)}")
    if m := _EPOCH_IN_NAME.search(base):
        return datetime.fromtimestamp(int(m.group(1)), UTC).replace(tzinfo=None)
    if name != "<stdin>" and os.path.exists(name):
        return datetime.fromtimestamp(os.stat(name).st_mtime, UTC).replace(tzinfo=None)
    return now


def parquet_lines(
    ctx: Context, refs: list[InputRef], cluster: str, what: str = "a DCGM archive"
) -> DataFrame:
    """Parquet archives' rows as bronze-shaped lines (rendered in the CSV archive form; line_no = row + 1);
    `what` names the archive in the error for one without the long-format columns."""
    spark, now = ctx.spark, ctx.now()
    frames = []
    for ref in refs:
        try:
            rows = spark.read.parquet(str(Path(ref.name).resolve()))
            rendered = archive_rows_as_lines(rows.select("*", "_metadata.row_index"))
        except ValueError as exc:
            raise UsageError(f"{ref.name}: {exc} ({what} has timestamp, metric, labels, value)") from exc
        frames.append(
            rendered.select(
                F.lit(cluster).alias("cluster"),
                F.lit(ref.name).alias("source_file"),
                F.lit(ref.sha256).alias("file_sha256"),
                (F.col("row_index") + 1).cast("long").alias("line_no"),
                "raw",
                F.lit(now).cast("timestamp").alias("ingested_at"),
            )
        )
    return union_all(frames)


def run(ctx: Context, paths: Sequence[str], cluster: str) -> IngestReport:
    """Parse new files' lines, pivot, attribute, MERGE into silver.gpu_samples, quarantine rejects, and
    land the lines in bronze.gpu_samples last (a file whose content is in bronze is skipped next time)."""
    refs = scan_inputs(paths)
    report = IngestReport(source="dcgm", cluster=cluster, files=len(refs))
    now = ctx.now()
    known = known_files(ctx, "gpu_samples", cluster)
    new: dict[str, InputRef] = {}
    for ref in refs:
        if ref.sha256 not in known:
            new.setdefault(ref.sha256, ref)
    skipped = [r for r in refs if r.sha256 in known or new.get(r.sha256) is not r]
    if skipped:
        report.tables["files already ingested"] = {"files": len(skipped)}
        ctx.progress(f"dcgm: {len(skipped)} file(s) already ingested (same content), skipped")
    fresh = list(new.values())
    if not fresh:
        return report
    # Parquet is read by Spark from its path: stdin cannot be an archive.
    archives = [r for r in fresh if r.data is None and r.magic == PARQUET_MAGIC]
    texts = [r for r in fresh if r not in archives]
    csv_files = [r.name for r in texts if r.first_line.lower() == CSV_HEADER] + [r.name for r in archives]
    scrape_ts = {r.name: scrape_time(r.name, now) for r in texts if r.name not in csv_files}
    parts = ([lines_frame(ctx, texts, cluster)] if texts else []) + (
        [parquet_lines(ctx, archives, cluster)] if archives else []
    )
    lines = union_all(parts)
    checked = check_dcgm_lines(lines, scrape_ts, csv_files).persist(StorageLevel.MEMORY_AND_DISK)
    tally = line_tally(checked).collect()
    report.quarantined = sum(r["count"] for r in tally if r["outcome"] == "rejected")
    kept_lines = sum(r["count"] for r in tally if r["outcome"] == "kept")
    not_kept = {r["metric"]: r["count"] for r in tally if r["outcome"] == "not kept"}
    report.read = kept_lines + report.quarantined + sum(not_kept.values())
    report.tables["metrics not kept (lines)"] = dict(sorted(not_kept.items()))
    ctx.progress(f"dcgm: {kept_lines} metric line(s) kept, {report.quarantined} quarantined")
    jobs = read_table(ctx.spark, ctx.settings, SILVER_JOBS.name).filter(F.col("cluster") == cluster)
    rows = with_job_attribution(pivot_samples(samples_of(checked)), jobs).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    summary = (
        rows.groupBy("attribution")
        .agg(
            F.count("*").alias("samples"),
            F.sum("superseded_lines").alias("superseded"),
            F.min("ts").alias("lo"),
            F.max("ts").alias("hi"),
        )
        .collect()
    )
    report.tables["attribution (samples)"] = {r["attribution"]: r["samples"] for r in summary}
    report.superseded = sum(int(r["superseded"] or 0) for r in summary)
    # A sample's metrics come on one line each: the sample counts once, its other lines are folded into it.
    samples = sum(r["samples"] for r in summary)
    report.tables["lines folded into samples"] = {"lines": kept_lines - report.superseded - samples}
    checked_rows = validate_batch(rows, samples, SILVER_GPU_SAMPLES.name, "dcgm")
    if summary:
        lo, hi = min(r["lo"] for r in summary), max(r["hi"] for r in summary)
        span = f"t.cluster = {sql_string(cluster)} AND t.ts BETWEEN '{lo}' AND '{hi}'"
        counts = merge_into(
            ctx.spark,
            ctx.settings,
            SILVER_GPU_SAMPLES.name,
            checked_rows.valid,
            update_when=SAMPLES_UPDATE_WHEN,
            target_filter=span,
        )
        report.add(SILVER_GPU_SAMPLES.name, counts)
        report.inserted, report.updated, report.unchanged = counts.inserted, counts.updated, counts.unchanged
    rejects = rejects_of(checked)
    if checked_rows.rejected:
        rejects = rejects.unionByName(checked_rows.rejects.withColumn("ingested_at", F.lit(now)))
        report.quarantined += checked_rows.rejected
    if report.quarantined:
        report.add("quarantine", write_quarantine(ctx, rejects))
    appended = append_bronze(ctx, "gpu_samples", lines)
    report.tables["bronze.gpu_samples"] = {"inserted": appended, "updated": 0, "unchanged": 0}
    checked.unpersist()
    rows.unpersist()
    return report
