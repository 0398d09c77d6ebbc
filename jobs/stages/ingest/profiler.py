"""`jobfit ingest profiler PATH... --cluster C [--job ID]`: PyTorch profiler traces (Chrome-trace JSON,
plain or gzip; a folder of per-rank `*.pt.trace.json[.gz]`) into silver.profiler_traces and
silver.profiler_events.

Each file is read twice as a stream (pipelines/silver/profiler.py): once for its hash and top-level facts,
once for its events, which are staged in batches of EVENT_BATCH rows, so memory does not grow with the file.
Traces land in groups (up to GROUP_TRACES traces or GROUP_EVENTS events): one commit replaces the group's
traces' events and one MERGE writes their rows, so a folder of many small per-rank traces costs a few
commits, not two per file.
A file that is not a readable trace (damaged gzip, truncated JSON, another document) goes to quarantine
with the reason; an event that cannot be read goes there too and the rest lands. A file whose content is
already in bronze.profiler is skipped. Attribution: --job, else a job id in the path, else the host and time
window against silver.jobs (docs/bottlenecks.md)."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import sys
import tempfile
import uuid
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd
from pyspark.sql import functions as F

from jobs.context import Context, UsageError
from jobs.io.tables import (
    conform,
    merge_into,
    read_table,
    remove_path,
    replace_where,
    sql_string,
    sweep_stale,
    warehouse_root,
)
from jobs.stages.ingest.common import (
    GZIP_MAGIC,
    IngestReport,
    _expand,
    append_bronze,
    known_files,
    write_quarantine,
)
from pipelines.schemas import (
    BRONZE_SCHEMA,
    QUARANTINE,
    SILVER_JOBS,
    SILVER_PROFILER_EVENTS,
    SILVER_PROFILER_TRACES,
)
from pipelines.silver.profiler import (
    EVENT_COLUMNS,
    EVENT_FIELDS,
    EventTally,
    Reject,
    TraceMeta,
    epoch_us,
    job_id_in_path,
    rank_in_name,
    read_trace_events,
    read_trace_meta,
    worker_in_name,
)
from pipelines.units import expand_hostlist

EVENT_BATCH = 200_000  # events per staged write: bounds the driver's memory
# Traces landed by one commit: a group closes at this many traces or staged events (or at the last file).
GROUP_TRACES = 256
GROUP_EVENTS = 2_000_000
# A staging folder nothing was written to for a day belongs to a run that was killed: the next run deletes it.
STAGING_MAX_AGE_S = 24 * 3600
_CHUNK = 1 << 20
_PANDAS_TYPES = {"long": "Int64", "int": "Int32", "double": "float64", "string": "object"}


class _Hashing:
    """A read-only stream that hashes and counts what is read through it."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.digest, self.size = raw, hashlib.sha256(), 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.digest.update(data)
        self.size += len(data)
        return data

    def drain(self) -> None:
        while self.read(_CHUNK):
            pass


def _open(path: Path) -> BinaryIO:
    """The file's decompressed bytes as a stream (gzip by its magic bytes, not its name)."""
    raw = path.open("rb")
    if raw.read(2) == GZIP_MAGIC:
        raw.seek(0)
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    raw.seek(0)
    return raw


@dataclass
class Scanned:
    """One input after the first pass: its hash and facts, or why it is not a trace."""

    path: Path
    name: str
    sha256: str = ""
    size: int = 0
    meta: TraceMeta | None = None
    error: str | None = None
    head: str = ""


def scan_trace(path: Path, name: str) -> Scanned:
    """First pass: hash the decompressed content and read the top-level facts; damaged files get an error."""
    out = Scanned(path, name)
    try:
        with path.open("rb") as f:
            out.head = f.read(300).decode("utf-8", errors="replace")
        with _open(path) as stream:
            hashing = _Hashing(stream)
            try:
                out.meta = read_trace_meta(hashing)  # type: ignore[arg-type]
            except ValueError as exc:
                out.error = _gzip_damage(path) or str(exc)
            hashing.drain()
            out.sha256, out.size = hashing.digest.hexdigest(), hashing.size
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        out.error = f"not a readable gzip file ({exc or type(exc).__name__})"
    except OSError as exc:
        raise UsageError(f"cannot read {name}: {exc.strerror or exc}") from exc
    if out.error and not out.sha256:
        out.sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _gzip_damage(path: Path) -> str | None:
    """Why a gzip file cannot be read to its end (a truncated copy), or None (intact, or not gzip)."""
    with path.open("rb") as raw:
        if raw.read(2) != GZIP_MAGIC:
            return None
    try:
        with gzip.open(path, "rb") as f:
            while f.read(_CHUNK):
                pass
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        return f"not a readable gzip file ({exc or type(exc).__name__})"
    return None


def _inputs(paths: Sequence[str], spool: Path) -> list[tuple[Path, str]]:
    """(path on disk, name shown) of every input; stdin is spooled to a file (read twice)."""
    out = []
    for raw in _expand(paths):
        if raw == "-":
            target = spool / "stdin.json"
            with target.open("wb") as f:
                shutil.copyfileobj(sys.stdin.buffer, f)
            out.append((target, "<stdin>"))
            continue
        p = Path(raw)
        if not p.exists():
            raise UsageError(f"no such file: {raw}")
        if not p.is_file():
            raise UsageError(f"not a regular file: {raw}")
        out.append((p, str(p)))
    return out


def _batches(rows: Iterator[tuple[Any, ...] | Reject], rejects: list[Reject]) -> Iterator[pd.DataFrame]:
    """Event rows in pandas frames of EVENT_BATCH rows; rejects set aside."""
    buf: list[tuple[Any, ...]] = []
    for row in rows:
        if isinstance(row, Reject):
            rejects.append(row)
            continue
        buf.append(row)
        if len(buf) >= EVENT_BATCH:
            yield _frame(buf)
            buf = []
    if buf:
        yield _frame(buf)


def _frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    pdf = pd.DataFrame(rows, columns=list(EVENT_COLUMNS))
    return pdf.astype({name: _PANDAS_TYPES[t] for name, t in EVENT_FIELDS})


def _ts(us: float | None) -> datetime | None:
    return None if us is None else datetime.fromtimestamp(us / 1e6, UTC).replace(tzinfo=None)


def attribute(
    ctx: Context,
    cluster: str,
    name: str,
    job: str | None,
    host: str | None,
    start: datetime | None,
    end: datetime | None,
) -> tuple[str | None, str, str]:
    """(job_id, attribution, detail) of one trace: --job, a job id in its path, else its host and time window
    against silver.jobs (exactly one job on that host running over the whole window)."""
    if job:
        return job, "flag", f"--job {job}"
    if (from_path := job_id_in_path(name)) is not None:
        return from_path, "path", f"job id {from_path} in the path"
    if host is None or start is None or end is None:
        missing = "host" if host is None else "time (no epoch timestamps or baseTimeNanoseconds)"
        return None, "unattributed", f"no --job, no job id in the path, and the trace gives no {missing}"
    jobs = read_table(ctx.spark, ctx.settings, SILVER_JOBS.name).where(
        (F.col("cluster") == cluster)
        & F.col("start_ts").isNotNull()
        & (F.col("start_ts") <= F.lit(start))
        & (F.col("end_ts").isNull() | (F.col("end_ts") >= F.lit(end)))
    )
    rows = jobs.select("job_id", "node_list").collect()
    short = host.split(".")[0]
    found = sorted(
        r["job_id"]
        for r in rows
        if {host, short} & {h.split(".")[0] for h in expand_hostlist(r["node_list"] or "")}
    )
    if len(found) == 1:
        return (
            found[0],
            "host_time",
            f"the one job on {short} over {start:%Y-%m-%d %H:%M:%S}–{end:%H:%M:%S} UTC",
        )
    if found:
        return None, "ambiguous", f"{len(found)} jobs on {short} in the window: {', '.join(found[:5])}"
    return (
        None,
        "unattributed",
        f"no job of {cluster} on {short} over {start:%Y-%m-%d %H:%M:%S}–{end:%H:%M:%S} UTC",
    )


def run(ctx: Context, paths: Sequence[str], cluster: str, job: str | None = None) -> IngestReport:
    """Scan, parse, attribute and land each new trace; quarantine what cannot be read."""
    if job is not None and not job.strip():
        raise UsageError("--job must not be empty")
    report = IngestReport(source="profiler", cluster=cluster)
    spark, now = ctx.spark, ctx.now()
    for folder in sweep_stale(spark, _staging_root(ctx), STAGING_MAX_AGE_S):
        ctx.progress(f"profiler: removed {folder}, left by a run killed over a day ago")
    with tempfile.TemporaryDirectory(prefix="jobfit-profiler-") as spool:
        inputs = _inputs(paths, Path(spool))
        report.files = len(inputs)
        known = known_files(ctx, "profiler", cluster)
        quarantine: list[tuple[Any, ...]] = []
        bronze: list[tuple[Any, ...]] = []
        attribution: dict[str, int] = {}
        skipped = 0
        group = _Group(ctx, cluster)
        for path, name in inputs:
            scanned = scan_trace(path, name)
            if scanned.error is not None:
                ctx.progress(f"profiler: {name}: {scanned.error}; quarantined")
                report.read += 1  # the file is the record read, and quarantined whole
                quarantine.append((cluster, "profiler", name, 0, scanned.head, scanned.error, now))
                continue
            if scanned.sha256 in known:
                skipped += 1
                continue
            known.add(scanned.sha256)
            counts = _stage_trace(ctx, group, job, scanned, quarantine, now)
            if group.full():
                group.land()
            report.read += counts["events"] + counts["rejected"]
            report.inserted += counts["events"]
            attribution[counts["attribution"]] = attribution.get(counts["attribution"], 0) + 1
            meta_json = json.dumps(
                {
                    "trace_id": scanned.sha256,
                    "bytes": scanned.size,
                    **(scanned.meta.extra if scanned.meta else {}),
                }
            )
            bronze.append((cluster, name, scanned.sha256, 0, meta_json, now))
        group.land()
        if skipped:
            report.tables["files already ingested"] = {"files": skipped}
            ctx.progress(f"profiler: {skipped} file(s) already ingested (same content), skipped")
        if attribution:
            report.tables["attribution (traces)"] = attribution
        if quarantine:
            report.quarantined = len(quarantine)
            frame = spark.createDataFrame(
                pd.DataFrame(quarantine, columns=QUARANTINE.schema.fieldNames()), QUARANTINE.schema
            )
            report.add(QUARANTINE.name, write_quarantine(ctx, frame))
        if bronze:
            frame = spark.createDataFrame(
                pd.DataFrame(bronze, columns=BRONZE_SCHEMA.fieldNames()), BRONZE_SCHEMA
            )
            appended = append_bronze(ctx, "profiler", frame, [row[2] for row in bronze])
            report.tables["bronze.profiler"] = {"inserted": appended, "updated": 0, "unchanged": 0}
    return report


class _Group:
    """Traces staged for one landing: their events in a staging folder of this run (parquet, appended in
    batches), their silver.profiler_traces rows in memory. `land` replaces the traces' events in one commit
    (a run cut short leaves nothing of the group half-landed; two runs landing the same trace at once each
    replace all of it: the later commit conflicts and is tried again, so its events land once) and MERGEs
    their rows."""

    def __init__(self, ctx: Context, cluster: str) -> None:
        self.ctx, self.cluster = ctx, cluster
        self.buffer: list[pd.DataFrame] = []
        self.buffered = 0
        self.rows: list[dict[str, Any]] = []
        self.events = 0
        self.staging: str | None = None

    def full(self) -> bool:
        return len(self.rows) >= GROUP_TRACES or self.events >= GROUP_EVENTS

    def stage(self, trace_id: str, pdf: pd.DataFrame) -> None:
        """Add a batch of one trace's events; written out once EVENT_BATCH rows are buffered."""
        self.buffer.append(pdf.assign(trace_id=trace_id))
        self.buffered += len(pdf)
        self.events += len(pdf)
        if self.buffered >= EVENT_BATCH:
            self._flush()

    def _flush(self) -> None:
        if not self.buffer:
            return
        spark = self.ctx.spark
        pdf = pd.concat(self.buffer, ignore_index=True)
        self.buffer, self.buffered = [], 0
        if self.staging is None:
            self.staging = f"{_staging_root(self.ctx)}/{uuid.uuid4().hex}"
        frame = spark.createDataFrame(pdf).withColumn("cluster", F.lit(self.cluster))
        conform(frame, SILVER_PROFILER_EVENTS).write.mode("append").parquet(self.staging)

    def land(self) -> None:
        """Commit the group (nothing when empty) and start a new one."""
        if not self.rows:
            return
        spark, settings = self.ctx.spark, self.ctx.settings
        ids = ", ".join(sql_string(r["trace_id"]) for r in self.rows)
        where = f"cluster = {sql_string(self.cluster)} AND trace_id IN ({ids})"
        try:
            self._flush()
            events = (
                spark.read.parquet(self.staging)
                if self.staging is not None
                else spark.createDataFrame([], SILVER_PROFILER_EVENTS.schema)
            )
            replace_where(spark, settings, SILVER_PROFILER_EVENTS.name, events, where, retry=True)
        finally:
            if self.staging is not None:
                remove_path(spark, self.staging)
        frame = spark.createDataFrame(self.rows, SILVER_PROFILER_TRACES.schema)
        merge_into(spark, settings, SILVER_PROFILER_TRACES.name, frame)
        self.ctx.progress(f"profiler: landed {len(self.rows)} trace(s), {self.events} event(s)")
        self.rows, self.events, self.staging = [], 0, None


def _stage_trace(
    ctx: Context,
    group: _Group,
    job: str | None,
    scanned: Scanned,
    quarantine: list[tuple[Any, ...]],
    now: datetime,
) -> dict[str, Any]:
    """Second pass over one trace: its events staged in the group, its silver.profiler_traces row added
    to it; returns the counts."""
    cluster = group.cluster
    meta = scanned.meta or TraceMeta()
    tally, rejects = EventTally(), []
    with _open(scanned.path) as stream:
        for pdf in _batches(read_trace_events(stream, tally), rejects):
            group.stage(scanned.sha256, pdf)
    for r in rejects:
        quarantine.append((cluster, "profiler", scanned.name, r.event_no + 1, r.raw, r.reason, now))
    host, pid = meta.host, None
    name_host, name_pid = worker_in_name(scanned.name)
    host = host or name_host
    main_pid = max(tally.pids, key=lambda p: tally.pids[p]) if tally.pids else None
    pid = int(main_pid) if main_pid is not None and main_pid.isdigit() else name_pid
    start = epoch_us(tally.min_ts_us, meta.base_time_ns) if tally.min_ts_us is not None else None
    end = epoch_us(tally.max_end_us, meta.base_time_ns) if tally.max_end_us is not None else None
    job_id, how, detail = attribute(ctx, cluster, scanned.name, job, host, _ts(start), _ts(end))
    rank = meta.rank if meta.rank is not None else rank_in_name(scanned.name)
    group.rows.append(
        {
            "cluster": cluster,
            "trace_id": scanned.sha256,
            "source_file": scanned.name,
            "file_bytes": scanned.size,
            "schema_gen": "legacy" if tally.legacy else "kineto",
            "rank": rank,
            "world_size": meta.world_size,
            "backend": meta.backend,
            "host": host,
            "pid": pid,
            "device_name": meta.device_name,
            "compute_major": meta.compute_major,
            "compute_minor": meta.compute_minor,
            "device_mem_bytes": meta.device_mem_bytes,
            "start_ts": _ts(start),
            "end_ts": _ts(end),
            "events": tally.kept,
            "rejected_events": tally.rejected,
            "has_steps": tally.has_steps,
            "has_stacks": tally.has_stacks or tally.has_python,
            "job_id": job_id,
            "attribution": how,
            "attribution_detail": detail,
            "ingested_at": now,
        }
    )
    ctx.progress(
        f"profiler: {scanned.name}: {tally.kept} event(s), {tally.rejected} quarantined; "
        f"rank {rank if rank is not None else '?'}, {how}"
        + (f" to job {job_id}" if job_id else f" ({detail})")
    )
    return {"events": tally.kept, "rejected": tally.rejected, "attribution": how}


def _staging_root(ctx: Context) -> str:
    """Where runs stage a group's events before the one commit that lands them."""
    return f"{warehouse_root(ctx.settings)}/_staging/profiler"
