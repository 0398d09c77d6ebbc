"""`jobfit ingest partitions PATH... --cluster C` — `scontrol show partition [-o]` dumps into
bronze.partitions, silver.partitions and quarantine.

A partition's row is replaced when a later dump shows it differently (an unchanged partition keeps its row
and its `ingested_at`, so gold is not rebuilt for nothing); of several records of one partition in a run,
the later file on the command line and the later line wins. Gold reads silver.partitions to resolve
`Timelimit = Partition_Limit` when the cluster yaml states no `max_time` for the partition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jobs.context import Context, UsageError
from jobs.io.tables import merge_into
from jobs.stages.ingest.common import IngestReport, bronze_frame, read_inputs, write_bronze, write_quarantine
from pipelines.schemas import QUARANTINE, SILVER_PARTITIONS
from pipelines.silver.partitions import PartitionRecord, parse_partitions

SOURCE = "partitions"
_CONTENT = ("max_time_s", "is_unlimited", "default_time_s", "state")


@dataclass
class PartitionsReport(IngestReport):
    """IngestReport plus the lines that start no record (block-form continuations, blank lines, comments)."""

    skipped: int = 0

    def text(self) -> str:
        return super().text() + f"\n  skipped (continuation, blank and comment lines): {self.skipped}"


def run(ctx: Context, paths: Sequence[str], cluster: str) -> IngestReport:
    """Ingest scontrol partition dumps; returns the counts (also printed)."""
    cluster = cluster.strip()
    if not cluster:
        raise UsageError("--cluster must not be empty")
    files = read_inputs(paths)
    report = PartitionsReport(source=SOURCE, cluster=cluster, files=len(files))
    now = ctx.now()
    good: dict[str, tuple[str, PartitionRecord]] = {}  # the last record of each partition
    bad: list[tuple[str, PartitionRecord]] = []
    records = 0
    for f in files:
        parsed, skipped = parse_partitions(f.lines)
        report.skipped += skipped
        records += len(parsed)
        for rec in parsed:
            if rec.reason is None and rec.partition is not None:
                good[rec.partition] = (f.name, rec)
            else:
                bad.append((f.name, rec))
    report.read = records
    report.superseded = records - len(good) - len(bad)
    if not files or not any(f.lines for f in files):
        ctx.progress("no lines to ingest")
        return report
    report.add("bronze.partitions", write_bronze(ctx, SOURCE, bronze_frame(ctx, files, cluster)))
    spark = ctx.spark
    if bad:
        rejects = spark.createDataFrame(
            [(cluster, SOURCE, name, r.line_no, r.raw, r.reason, now) for name, r in bad],
            QUARANTINE.schema,
        )
        report.quarantined = len(bad)
        report.add(QUARANTINE.name, write_quarantine(ctx, rejects))
    if good:
        rows = spark.createDataFrame(
            [
                (
                    cluster,
                    part,
                    r.max_time_s,
                    r.is_unlimited,
                    r.default_time_s,
                    r.state,
                    r.raw,
                    name,
                    r.line_no,
                    now,
                )
                for part, (name, r) in sorted(good.items())
            ],
            SILVER_PARTITIONS.schema,
        )
        changed = " OR ".join(f"NOT (t.{c} <=> s.{c})" for c in _CONTENT)
        counts = merge_into(spark, ctx.settings, SILVER_PARTITIONS.name, rows, update_when=changed)
        report.add(SILVER_PARTITIONS.name, counts)
        report.inserted, report.updated, report.unchanged = counts.inserted, counts.updated, counts.unchanged
    return report
