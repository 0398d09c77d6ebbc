"""`jobfit ingest logs PATH... --cluster C`: the tails of jobs' stdout/stderr files into silver.job_logs."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import pandas as pd
from pyspark.sql import functions as F

from jobs.context import Context, UsageError
from jobs.io.tables import merge_into
from jobs.stages.ingest.common import IngestReport, SourceFile, read_inputs, write_bronze, write_quarantine
from pipelines.gold.failures.logs import parse_log_file_name
from pipelines.schemas import BRONZE_SCHEMA, QUARANTINE, SILVER_JOB_LOGS


def _tail(f: SourceFile, tail_bytes: int) -> tuple[str, int, int, int]:
    """The file's last `tail_bytes` as text starting at a line boundary; its size, first tail line number."""
    data = "\n".join(f.lines).encode("utf-8")
    if len(data) <= tail_bytes:
        return data.decode("utf-8"), len(data), len(data), 1
    cut = data[-tail_bytes:]
    newline = cut.find(b"\n")
    cut = cut[newline + 1 :] if newline >= 0 else cut
    text = cut.decode("utf-8", errors="ignore")
    first_line = len(f.lines) - len(text.splitlines()) + 1
    return text, len(cut), len(data), first_line


def run(ctx: Context, paths: Sequence[str], cluster: str, tail_kb: int) -> IngestReport:
    """Read log files; keep each one's tail in bronze.logs and silver.job_logs; unnamed ones to quarantine."""
    if tail_kb < 1:
        raise UsageError(f"--tail-kb must be at least 1, got {tail_kb}")
    files = read_inputs(paths)
    report = IngestReport(source="logs", cluster=cluster, files=len(files), read=len(files))
    now = pd.Timestamp(ctx.now())
    rows, rejects, bronze = [], [], []
    for f in files:
        try:
            job_id, stream = parse_log_file_name(f.name)
        except ValueError as exc:
            rejects.append((cluster, "logs", f.name, 0, "\n".join(f.lines[-5:])[:2000], str(exc), now))
            continue
        text, tail_bytes, file_bytes, first = _tail(f, tail_kb * 1024)
        sha = f.sha256 if f.name != "<stdin>" else hashlib.sha256(text.encode()).hexdigest()
        rows.append((cluster, job_id, stream, text, tail_bytes, file_bytes, sha, f.name, now))
        bronze += [(cluster, f.name, sha, first + i, line, now) for i, line in enumerate(text.splitlines())]
    ctx.progress(f"logs: {len(rows)} file(s) named by job id, {len(rejects)} not")
    spark = ctx.spark
    if bronze:
        frame = spark.createDataFrame(pd.DataFrame(bronze, columns=BRONZE_SCHEMA.fieldNames()), BRONZE_SCHEMA)
        report.add("bronze.logs", write_bronze(ctx, "logs", frame))
    if rejects:
        frame = spark.createDataFrame(
            pd.DataFrame(rejects, columns=QUARANTINE.schema.fieldNames()), QUARANTINE.schema
        )
        report.quarantined = len(rejects)
        report.add(QUARANTINE.name, write_quarantine(ctx, frame))
    if rows:
        # The same job and stream twice in one call: the file given last wins.
        latest = {(r[0], r[1], r[2]): r for r in rows}
        report.superseded = len(rows) - len(latest)
        frame = spark.createDataFrame(
            pd.DataFrame(list(latest.values()), columns=SILVER_JOB_LOGS.schema.fieldNames()),
            SILVER_JOB_LOGS.schema,
        ).withColumn("ingested_at", F.col("ingested_at").cast("timestamp"))
        counts = merge_into(
            spark, ctx.settings, SILVER_JOB_LOGS.name, frame, update_when="t.file_sha256 <> s.file_sha256"
        )
        report.add(SILVER_JOB_LOGS.name, counts)
        report.inserted, report.updated, report.unchanged = counts.inserted, counts.updated, counts.unchanged
    return report
