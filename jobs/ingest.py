"""The shared ingest path: read input files (plain, gzip, stdin), land raw lines in bronze, quarantine
rejects, print counts. Each source (`jobs/ingest_<source>.py`) adds its parse and silver writes."""

from __future__ import annotations

import gzip
import hashlib
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.context import Context, UsageError
from jobs.tables import MergeCounts, merge_into
from pipelines.schemas import BRONZE_SCHEMA, QUARANTINE

GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class SourceFile:
    """One input file's lines as read (decoded UTF-8, undecodable bytes replaced), with its content hash."""

    name: str
    sha256: str
    lines: list[str]


@dataclass
class IngestReport:
    """What one ingest did, printed at the end and returned with --json."""

    source: str
    cluster: str
    files: int = 0
    read: int = 0
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    quarantined: int = 0
    superseded: int = 0
    tables: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, table: str, counts: MergeCounts) -> None:
        self.tables[table] = {
            "inserted": counts.inserted,
            "updated": counts.updated,
            "unchanged": counts.unchanged,
        }

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)

    def text(self) -> str:
        head = (
            f"{self.source} → {self.cluster}: read {self.read} from {self.files} file(s); "
            f"inserted {self.inserted}, updated {self.updated}, unchanged {self.unchanged}, "
            f"superseded {self.superseded}, quarantined {self.quarantined}"
        )
        rows = [
            f"  {name}: " + ", ".join(f"{k} {v}" for k, v in c.items()) for name, c in self.tables.items()
        ]
        return "\n".join([head, *rows])


def _expand(paths: Iterable[str]) -> list[str]:
    expanded: list[str] = []
    for raw in paths:
        path = Path(raw)
        if raw != "-" and path.is_dir():
            expanded.extend(str(p) for p in sorted(path.rglob("*")) if p.is_file())
        else:
            expanded.append(raw)
    return expanded


def read_source_file(path: str) -> SourceFile:
    """Read one input (`-` is stdin; gzip is detected by its magic bytes, not its name)."""
    if path == "-":
        data, name = sys.stdin.buffer.read(), "<stdin>"
    else:
        p = Path(path)
        if not p.exists():
            raise UsageError(f"no such file: {path}")
        if not p.is_file():
            raise UsageError(f"not a regular file: {path}")
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
        name = str(p)
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise UsageError(f"{name}: not a readable gzip file ({exc})") from exc
    text = data.decode("utf-8", errors="replace")
    return SourceFile(name=name, sha256=hashlib.sha256(data).hexdigest(), lines=text.splitlines())


def read_inputs(paths: Iterable[str]) -> list[SourceFile]:
    """All inputs, directories expanded; a UsageError (exit 2) for a missing or unreadable one."""
    expanded = _expand(paths)
    if not expanded:
        raise UsageError("no input files given")
    return [read_source_file(p) for p in expanded]


def bronze_frame(ctx: Context, files: list[SourceFile], cluster: str) -> DataFrame:
    """Raw lines as a bronze frame: cluster, source_file, file_sha256, line_no (from 1), raw, ingested_at."""
    now = ctx.now()
    pdf = pd.DataFrame(
        {
            "cluster": [cluster for f in files for _ in f.lines],
            "source_file": [f.name for f in files for _ in f.lines],
            "file_sha256": [f.sha256 for f in files for _ in f.lines],
            "line_no": [i for f in files for i in range(1, len(f.lines) + 1)],
            "raw": [line for f in files for line in f.lines],
        }
    )
    pdf["ingested_at"] = pd.Timestamp(now)
    return ctx.spark.createDataFrame(pdf, schema=BRONZE_SCHEMA)


def write_bronze(ctx: Context, source: str, bronze: DataFrame) -> MergeCounts:
    """Append raw lines to bronze.<source>; lines already there (same file content) add nothing."""
    return merge_into(ctx.spark, ctx.settings, f"bronze.{source}", bronze, insert_only=True)


def write_quarantine(ctx: Context, rejects: DataFrame) -> MergeCounts:
    """Record rejected records with their reason; the same reject twice is stored once."""
    rejects = (
        rejects.withColumn("ingested_at", F.lit(ctx.now()).cast("timestamp"))
        if ("ingested_at" not in rejects.columns)
        else rejects
    )
    return merge_into(ctx.spark, ctx.settings, QUARANTINE.name, rejects, insert_only=True)
