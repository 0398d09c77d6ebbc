"""`jobfit ingest swf PATH... --cluster C`: Parallel Workloads Archive SWF logs into silver.jobs."""

from __future__ import annotations

from collections.abc import Sequence

from jobs.context import Context
from jobs.stages.ingest.common import (
    IngestReport,
    bronze_frame,
    merge_jobs,
    read_inputs,
    write_bronze,
    write_quarantine,
)
from pipelines.schemas import SILVER_JOBS
from pipelines.silver.swf import parse_swf, parse_swf_header


def run(ctx: Context, paths: Sequence[str], cluster: str) -> IngestReport:
    """Read SWF files, land their lines in bronze.swf, parse jobs into silver.jobs, quarantine bad lines."""
    files = read_inputs(paths)
    report = IngestReport(source="swf", cluster=cluster, files=len(files))
    headers = {f.name: parse_swf_header(f.lines) for f in files}
    for f in files:
        if headers[f.name].unix_start_time is None:
            ctx.progress(f"{f.name}: no UnixStartTime in the header; its records go to quarantine")
    report.read = sum(
        1 for f in files for line in f.lines if line.strip() and not line.lstrip().startswith(";")
    )
    ctx.progress(f"swf: {report.read} record(s) in {len(files)} file(s)")
    bronze = bronze_frame(ctx, files, cluster).cache()
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
