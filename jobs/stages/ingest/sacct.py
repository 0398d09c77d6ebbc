"""`jobfit ingest sacct PATH... --cluster C [--format F1,F2,...]` — sacct dumps into bronze.sacct,
silver.jobs, silver.job_steps and quarantine.

Every line read is accounted for: skipped (header, comment, blank), quarantined (with its reason),
or a silver row that was inserted, updated, unchanged or superseded by a newer record of the same key
(the newer-wins rule of its TableSpec, `pipelines.schemas.NewerWins`). The run checks that these add up
to the lines read. A job whose script was ingested first takes its `script_hash` from silver.job_scripts
(`pipelines.silver.script_links`).

A job record whose AdminComment holds a Princeton jobstats summary (`JS1:...`) also lands in
silver.jobstats (`pipelines.silver.jobstats`); a summary that does not decode goes to quarantine (source
`jobstats`) with its reason while the job row lands as usual. Summaries are counted apart from lines.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.context import Context, DataError, UsageError
from jobs.io.tables import MergeCounts, conform, key_bounds, merge_into, read_table, table_exists
from jobs.io.validate import validate_batch
from jobs.stages.ingest.common import (
    IngestReport,
    InputRef,
    lines_frame,
    scan_inputs,
    write_bronze,
    write_quarantine,
)
from pipelines.schemas import SILVER_JOB_SCRIPTS, SILVER_JOB_STEPS, SILVER_JOBS, SILVER_JOBSTATS, TableSpec
from pipelines.silver import jobstats, sacct
from pipelines.silver.script_links import with_script_hash

SOURCE = "sacct"
JOBSTATS_SOURCE = "jobstats"  # quarantine source of a jobstats summary that does not decode
# Columns that record where a row came from, not what it says: they never make a row "changed".
_PROVENANCE = ("ingested_at", "source_file", "line_no")


@dataclass
class SacctReport(IngestReport):
    """IngestReport plus the lines that carry no record (headers, comments, blank lines)."""

    skipped: int = 0
    # AdminComment jobstats summaries of the batch's job records: decoded, quarantined (not lines: a job
    # whose summary is quarantined still counts as its silver.jobs row).
    jobstats: dict[str, int] = field(default_factory=lambda: {"decoded": 0, "quarantined": 0})
    # Wall seconds per phase of the run (PHASES, in order), for bench/ingest_sacct.py; not a count.
    phases_s: dict[str, float] = field(default_factory=dict)

    def text(self) -> str:
        return (
            super().text()
            + f"\n  skipped (headers, comments, blank lines): {self.skipped}"
            + f"\n  jobstats summaries (AdminComment JS1): {self.jobstats['decoded']} decoded, "
            + f"{self.jobstats['quarantined']} quarantined"
        )


PHASES = (
    "read",  # the files hashed on the driver, their lines read by Spark into a frame
    "spark_start",
    "bronze_write",
    "parse",  # lines to typed columns
    "dedup",  # the newest record per key within the batch
    "validate",  # Great Expectations
    "jobstats",  # AdminComment summaries decoded
    "quarantine",
    "silver_merge",
)


class _PhaseClock:
    """Wall seconds per phase: `lap(name)` charges the time since the previous lap to `name`. Spark is
    lazy, so each phase ends on an action (a count, a collect, a write) that does its work."""

    def __init__(self, into: dict[str, float]) -> None:
        self._into = into
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self._into[name] = round(self._into.get(name, 0.0) + now - self._last, 3)
        self._last = now


def _layouts(files: Sequence[InputRef], fmt: tuple[str, ...] | None) -> dict[str, sacct.Layout]:
    """Each file's field order (by content hash), from its first content line (a header) or `fmt`."""
    layouts: dict[str, sacct.Layout] = {}
    for order, f in enumerate(files):
        layout = sacct.detect_layout([f.first_line], fmt, order)
        if layout is None:
            raise UsageError(f"{f.name}: no sacct header line; give the field order with --format")
        missing = sacct.missing_required(layout)
        if missing:
            raise UsageError(f"{f.name}: the fields lack {', '.join(missing)}")
        layouts[f.sha256] = layout
    return layouts


def parse_files(bronze: DataFrame, layouts: dict[str, sacct.Layout]) -> DataFrame:
    """Every bronze line parsed, files with the same field order in one pass."""
    groups: dict[tuple[str, ...], dict[str, int]] = {}
    for sha, layout in layouts.items():
        groups.setdefault(layout.fields, {})[sha] = layout.file_order
    frames = [sacct.parse_lines(bronze, layouts[next(iter(orders))], orders) for orders in groups.values()]
    return reduce(lambda a, b: a.unionByName(b), frames)


def _classify(ctx: Context, spec: TableSpec, batch: DataFrame, scope: str | None) -> DataFrame:
    """Each batch row against the stored table: insert (new key), unchanged (same content), update
    (newer, by the table's `NewerWins` rule) or superseded (the stored row is newer). `scope` (over `t.`,
    `key_bounds`) holds for every stored row a batch row can meet: Delta reads only the files it admits."""
    content = [f.name for f in spec.schema.fields if f.name not in _PROVENANCE]
    source = conform(batch, spec).withColumn("_hash", sacct.content_hash(batch, content))
    target = read_table(ctx.spark, ctx.settings, spec.name).alias("t")
    if scope is not None:
        target = target.where(F.expr(scope))
    target = target.select(
        *spec.key, "state", "end_ts", "start_ts", sacct.content_hash(target, content).alias("_hash")
    ).withColumn("_present", F.lit(True))
    joined = source.alias("s").join(target.alias("t"), list(spec.key), how="left")
    category = (
        F.when(F.col("t._present").isNull(), "insert")
        .when(F.col("s._hash") == F.col("t._hash"), "unchanged")
        .when(F.expr(spec.newer.sql("s", "t")), "update")
        .otherwise("superseded")
    )
    return joined.select(
        *[F.col(k) for k in spec.key],
        *[F.col(f"s.{f.name}") for f in spec.schema.fields if f.name not in spec.key],
        category.alias("_category"),
    )


def _write(ctx: Context, spec: TableSpec, batch: DataFrame, rows: int) -> tuple[MergeCounts, int]:
    """MERGE the batch's (`rows` rows) new and newer rows; (counts, rows superseded by the stored table)."""
    if rows == 0:
        return MergeCounts(), 0
    if not table_exists(ctx.spark, ctx.settings, spec.name):  # the first load: every row is new
        merge_into(ctx.spark, ctx.settings, spec.name, batch)
        return MergeCounts(inserted=rows), 0
    # The daily case is a small batch against a large table: bound both reads of it by the batch's keys.
    scope = key_bounds(batch, spec.key)
    classified = _classify(ctx, spec, batch, scope).persist(StorageLevel.MEMORY_AND_DISK)
    counts = Counter({r["_category"]: r["count"] for r in classified.groupBy("_category").count().collect()})
    if counts["insert"] or counts["update"]:
        changed = classified.where(F.col("_category").isin("insert", "update"))
        merge_into(
            ctx.spark,
            ctx.settings,
            spec.name,
            changed,
            update_when=spec.newer.sql("s", "t"),
            target_filter=scope,
        )
    classified.unpersist()
    return MergeCounts(counts["insert"], counts["update"], counts["unchanged"]), counts["superseded"]


def run(ctx: Context, paths: Sequence[str], cluster: str, fmt: str | None = None) -> IngestReport:
    """Ingest the sacct files; returns the counts (also printed)."""
    cluster = cluster.strip()
    if not cluster:
        raise UsageError("--cluster must not be empty")
    try:
        fmt = sacct.split_format(fmt) if fmt else None
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    phases: dict[str, float] = {}
    clock = _PhaseClock(phases)
    distinct: dict[str, InputRef] = {}
    for ref in scan_inputs(paths):  # a path given twice is one input (its lines are read once)
        distinct.setdefault(str(Path(ref.name).resolve()), ref)
    files = list(distinct.values())
    layouts = _layouts(files, fmt)
    report = SacctReport(source=SOURCE, cluster=cluster, files=len(files))
    report.phases_s = phases
    if not any(f.size for f in files):
        ctx.progress("no lines to ingest")
        return report

    clock.lap("read")
    ctx.spark  # noqa: B018  (started here, when not yet running, so that its start is timed apart)
    clock.lap("spark_start")
    ctx.progress(f"reading {len(files)} file(s)")
    bronze = lines_frame(ctx, files, cluster).persist(StorageLevel.MEMORY_AND_DISK)
    report.read = bronze.count()
    clock.lap("read")
    report.tables["bronze.sacct"] = {"inserted": write_bronze(ctx, SOURCE, bronze).inserted}
    clock.lap("bronze_write")

    parsed = parse_files(bronze, layouts).persist(StorageLevel.MEMORY_AND_DISK)
    kinds = Counter({r["record"]: r["count"] for r in parsed.groupBy("record").count().collect()})
    report.skipped = kinds[sacct.SKIP]
    clock.lap("parse")

    ctx.progress("validating")
    steps = sacct.filter_latest(sacct.with_steps(parsed), SILVER_JOB_STEPS)
    steps = steps.persist(StorageLevel.MEMORY_AND_DISK)
    n_steps = steps.count()
    clock.lap("dedup")
    checked_steps = validate_batch(steps, n_steps, SILVER_JOB_STEPS.name, SOURCE)
    clock.lap("validate")
    # A job's peaks come from its steps that passed validation (a rejected step's values are not trusted).
    jobs = sacct.filter_latest(sacct.with_jobs(parsed, checked_steps.valid), SILVER_JOBS)
    if table_exists(ctx.spark, ctx.settings, SILVER_JOB_SCRIPTS.name):  # scripts ingested before the jobs
        links = read_table(ctx.spark, ctx.settings, SILVER_JOB_SCRIPTS.name)
        jobs = with_script_hash(jobs, links.where(F.col("cluster") == cluster))
    jobs = jobs.persist(StorageLevel.MEMORY_AND_DISK)
    n_jobs = jobs.count()
    clock.lap("dedup")
    checked_jobs = validate_batch(jobs, n_jobs, SILVER_JOBS.name, SOURCE)
    clock.lap("validate")
    # Rows of a key beaten by a newer row of the same key in this batch.
    superseded_in_batch = kinds[sacct.JOB] - checked_jobs.rows + kinds[sacct.STEP] - checked_steps.rows
    parse_rejects = parsed.where(F.col("record") == sacct.REJECT).select(
        "cluster", F.lit(SOURCE).alias("source"), "source_file", "line_no", "raw", "reason"
    )
    rejects = parse_rejects.unionByName(checked_jobs.rejects).unionByName(checked_steps.rejects)
    report.quarantined = kinds[sacct.REJECT] + checked_jobs.rejected + checked_steps.rejected

    summaries = jobstats.with_jobstats(checked_jobs.valid).persist(StorageLevel.MEMORY_AND_DISK)
    # Without an AdminComment field there is nothing to decode (and no Python worker to start).
    has_comments = any(f.lower() == "admincomment" for layout in layouts.values() for f in layout.fields)
    decoded = Counter(
        {
            r["ok"]: r["count"]
            for r in summaries.groupBy(F.col("error").isNull().alias("ok")).count().collect()
        }
        if has_comments
        else {}
    )
    report.jobstats = {"decoded": decoded[True], "quarantined": decoded[False]}
    clock.lap("jobstats")
    if decoded[False]:
        reason = F.concat(F.lit("bad jobstats AdminComment: "), F.col("error"))
        rejects = rejects.unionByName(
            summaries.where(F.col("error").isNotNull()).select(
                "cluster",
                F.lit(JOBSTATS_SOURCE).alias("source"),
                "source_file",
                "line_no",
                "raw",
                reason.alias("reason"),
            )
        )
    if report.quarantined or decoded[False]:
        write_quarantine(ctx, rejects)
    clock.lap("quarantine")

    ctx.progress("merging into silver")
    superseded = superseded_in_batch
    for spec, checked in ((SILVER_JOBS, checked_jobs), (SILVER_JOB_STEPS, checked_steps)):
        counts, lost_to_stored = _write(ctx, spec, checked.valid, checked.rows - checked.rejected)
        report.add(spec.name, counts)
        report.tables[spec.name]["superseded"] = lost_to_stored
        report.inserted += counts.inserted
        report.updated += counts.updated
        report.unchanged += counts.unchanged
        superseded += lost_to_stored
    report.superseded = superseded
    counts, lost_to_stored = _write(
        ctx, SILVER_JOBSTATS, summaries.where(F.col("error").isNull()), decoded[True]
    )
    report.add(SILVER_JOBSTATS.name, counts)
    report.tables[SILVER_JOBSTATS.name]["superseded"] = lost_to_stored
    for frame in (summaries, jobs, steps, parsed, bronze):
        frame.unpersist()
    clock.lap("silver_merge")

    accounted = (
        report.skipped + report.quarantined + report.inserted + report.updated + report.unchanged + superseded
    )
    if accounted != report.read:
        raise DataError(f"sacct: {report.read} lines read but {accounted} accounted for")
    return report
