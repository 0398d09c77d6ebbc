"""The shared ingest path: read input files (plain, gzip, stdin), land raw lines in bronze, quarantine
rejects, print counts. Each source (`jobs/ingest_<source>.py`) adds its parse and silver writes.

Two ways in: `read_inputs` loads every file's lines on the driver (pods, scripts, SWF and job logs,
partitions); `scan_inputs` + `lines_frame` only hash the files on the driver and let Spark read their
lines (bulk sources: sacct dumps, DCGM telemetry, where the driver would otherwise hold every line)."""

from __future__ import annotations

import functools
import gzip
import hashlib
import sys
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from jobs.context import Context, UsageError
from jobs.io.tables import MergeCounts, key_bounds, merge_into, read_table, sql_string
from jobs.io.validate import validate
from pipelines.schemas import BRONZE_SCHEMA, QUARANTINE, SILVER_JOBS

GZIP_MAGIC = b"\x1f\x8b"
PARQUET_MAGIC = b"PAR1"
_CHUNK = 1 << 20
_HEAD_MAX = 8 << 20  # how far a file is searched for its first content line
# Hadoop paths cannot hold a colon (`node-2026-11-03T10:00:00Z.prom`) and read glob characters as globs.
HADOOP_UNSAFE = frozenset(":*?[]{}\\")


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
    """The paths with folders replaced by the files under them (sorted); a UsageError when none is given."""
    expanded: list[str] = []
    for raw in paths:
        path = Path(raw)
        if raw != "-" and path.is_dir():
            expanded.extend(str(p) for p in sorted(path.rglob("*")) if p.is_file())
        else:
            expanded.append(raw)
    if not expanded:
        raise UsageError("no input files given")
    return expanded


def read_source_file_bytes(name: str, data: bytes) -> bytes:
    """The content of an input: gunzipped when it starts with gzip's magic bytes."""
    if data[:2] != GZIP_MAGIC:
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:  # zlib.error: damaged inside, not only truncated
        raise UsageError(f"{name}: not a readable gzip file ({exc})") from exc


# Byte-order marks an exported file may start with (Windows tools write UTF-16 with one, Excel UTF-8 too).
_BOMS = ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))


def decode_text(data: bytes) -> str:
    """An input's text: UTF-8, or the encoding its byte-order mark names (UTF-8 or UTF-16; the mark is
    dropped); undecodable bytes become U+FFFD, which the parsers then reject with the line."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    return data.decode("utf-8", errors="replace")


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
    data = read_source_file_bytes(name, data)
    text = decode_text(data)
    return SourceFile(name=name, sha256=hashlib.sha256(data).hexdigest(), lines=text.splitlines())


@dataclass(frozen=True)
class InputRef:
    """One input not loaded on the driver: its name, the sha256 of its (decompressed) content, its first
    content line and first four bytes (a format's magic number), and whether Spark's text reader yields
    exactly its lines (a plain file, or gzip named `*.gz`, with a path Hadoop accepts); `size` is the
    decompressed content's bytes; stdin's bytes are kept in `data`."""

    name: str
    sha256: str
    first_line: str
    magic: bytes
    spark_readable: bool
    data: bytes | None = None
    size: int = 0


def _first_content_line(head: bytes, whole: bool = True) -> str:
    """The first line that is not blank or a `#` comment, stripped; "" when there is none. Of a head cut
    from a longer file (`whole` False) only complete lines count: a line the cut ends in is not yet known."""
    text = decode_text(head)
    lines = text.splitlines()
    if not whole and lines and not text.endswith(("\n", "\r")):
        lines.pop()
    return next((ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")), "")


def scan_input(path: str) -> InputRef:
    """Hash one input in chunks (gzip by its magic bytes) and peek at its first content line."""
    if path == "-":
        data = read_source_file_bytes("<stdin>", sys.stdin.buffer.read())
        return InputRef(
            "<stdin>",
            hashlib.sha256(data).hexdigest(),
            _first_content_line(data[:_HEAD_MAX], whole=len(data) <= _HEAD_MAX),
            data[:4],
            False,
            data,
            len(data),
        )
    p = Path(path)
    if not p.exists():
        raise UsageError(f"no such file: {path}")
    if not p.is_file():
        raise UsageError(f"not a regular file: {path}")
    digest, head = hashlib.sha256(), b""
    try:
        with p.open("rb") as raw:
            is_gzip = raw.read(2) == GZIP_MAGIC
            raw.seek(0)
            stream = gzip.GzipFile(fileobj=raw) if is_gzip else raw
            size, first_line = 0, ""
            while chunk := stream.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                # The head grows until it holds a whole content line (comments may come first).
                if not first_line and len(head) < _HEAD_MAX:
                    head += chunk
                    first_line = _first_content_line(head, whole=False)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (EOFError, zlib.error) as exc:
        raise UsageError(f"{path}: not a readable gzip file ({exc})") from exc
    readable = (
        is_gzip == p.name.endswith(".gz")
        and not any(head.startswith(bom) for bom, _ in _BOMS)  # Spark's text reader reads UTF-8 only
        and not HADOOP_UNSAFE.intersection(str(p.resolve()))
    )
    if not is_gzip and head[:4] == PARQUET_MAGIC and (damage := parquet_damage(p)):
        raise UsageError(f"{path}: not a readable Parquet file ({damage})")
    first_line = first_line or _first_content_line(head, whole=len(head) == size)  # a last line without \n
    return InputRef(str(p), digest.hexdigest(), first_line, head[:4], readable, size=size)


def parquet_damage(path: Path) -> str | None:
    """Why a file that starts like Parquet cannot be read as one (a copy cut short, a damaged footer or
    page), or None. Decoded batch by batch on the driver before anything is written, so that Spark never
    meets it: its executor would log a Java stack trace on the terminal."""
    import pyarrow.parquet as pq

    try:
        with pq.ParquetFile(path) as archive:
            for _ in archive.iter_batches(batch_size=65536):
                pass
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError, its IO errors OSError
        text = "".join(c if c.isprintable() else " " for c in str(exc))  # thrift prints raw type bytes
        return " ".join(text.split()) or type(exc).__name__
    return None


def scan_inputs(paths: Iterable[str]) -> list[InputRef]:
    """Every input, directories expanded, hashed but not loaded; a UsageError (exit 2) for a missing one."""
    return [scan_input(p) for p in _expand(paths)]


def lines_frame(ctx: Context, refs: list[InputRef], cluster: str) -> DataFrame:
    """The inputs' lines as a bronze-shaped frame (cluster, source_file, file_sha256, line_no from 1, raw,
    ingested_at), read by Spark where it can; other inputs (stdin, gzip without `.gz`, a byte-order mark)
    go through the driver. A path given twice is read once.

    Spark reads line by line, a large file in parallel splits (Hadoop's reader breaks at \\n, \\r\\n and
    \\r, as str.splitlines does for the line breaks sacct and DCGM write; str.splitlines also breaks at
    \\v, \\f, \\x1c-\\x1e, \\x85 and U+2028/9). A line's number is its row within its split
    (`monotonically_increasing_id` counts a partition's rows in the order its splits are read) plus the
    lines of the file's earlier splits, counted first in one small aggregate."""
    now = ctx.now()
    spark = ctx.spark
    by_spark = list({str(Path(r.name).resolve()): r for r in refs if r.spark_readable}.values())
    frames: list[DataFrame] = []
    if by_spark:
        names = spark.createDataFrame(
            [(str(Path(r.name).resolve()), r.name, r.sha256) for r in by_spark],
            "path string, source_file string, file_sha256 string",
        )
        path = F.url_decode(F.regexp_replace(F.col("_metadata.file_path"), "^file:(//)?", ""))
        read = spark.read.text([str(Path(r.name).resolve()) for r in by_spark]).select(
            path.alias("path"),
            F.col("_metadata.file_block_start").alias("_split"),
            F.monotonically_increasing_id().alias("_row"),
            F.col("value").alias("raw"),
        )
        # Per split: the row id of its first line, and the lines of the same file before it.
        splits = read.groupBy("path", "_split").agg(F.min("_row").alias("_first"), F.count("*").alias("_n"))
        before = F.sum("_n").over(Window.partitionBy("path").orderBy("_split")) - F.col("_n")
        bases = splits.select("path", "_split", (F.col("_first") - before - 1).alias("_base"))
        frames.append(
            read.join(F.broadcast(bases.join(F.broadcast(names), on="path")), on=["path", "_split"]).select(
                F.lit(cluster).alias("cluster"),
                "source_file",
                "file_sha256",
                (F.col("_row") - F.col("_base")).alias("line_no"),
                "raw",
                F.lit(now).cast("timestamp").alias("ingested_at"),
            )
        )
    by_driver = [r for r in refs if not r.spark_readable]
    if by_driver:
        files = [
            SourceFile(r.name, r.sha256, decode_text(r.data).splitlines())
            if r.data is not None
            else read_source_file(r.name)
            for r in by_driver
        ]
        frames.append(bronze_frame(ctx, files, cluster))
    return union_all(frames) if frames else spark.createDataFrame([], BRONZE_SCHEMA)


def union_all(frames: list[DataFrame]) -> DataFrame:
    """The rows of several frames with the same columns (matched by name); at least one frame."""
    return functools.reduce(DataFrame.unionByName, frames)


def known_files(ctx: Context, source: str, cluster: str) -> set[str]:
    """Content hashes of the files already landed in bronze.<source> for the cluster."""
    bronze = read_table(ctx.spark, ctx.settings, f"bronze.{source}")
    rows = bronze.where(F.col("cluster") == cluster).select("file_sha256").distinct().collect()
    return {r["file_sha256"] for r in rows}


# Above this many input files a bronze MERGE bounds the hashes by their range instead of listing them.
BRONZE_SCOPE_IN_MAX = 1_000


def _bronze_scope(lines: DataFrame, hashes: Iterable[str] | None) -> str | None:
    """The target rows a bronze MERGE of `lines` can match: those of its files' hashes (Delta then reads
    only the bronze files holding those files' lines; each ingest writes its own). None when empty."""
    if hashes is None:
        hashes = [r["file_sha256"] for r in lines.select("file_sha256").distinct().collect()]
    hashes = sorted(set(hashes))
    if not hashes:
        return None
    if len(hashes) > BRONZE_SCOPE_IN_MAX:  # a long IN list costs more to plan than it saves
        return f"t.file_sha256 BETWEEN {sql_string(hashes[0])} AND {sql_string(hashes[-1])}"
    return f"t.file_sha256 IN ({', '.join(sql_string(h) for h in hashes)})"


def append_bronze(ctx: Context, source: str, lines: DataFrame, hashes: Iterable[str] | None = None) -> int:
    """Land the lines of files not yet in bronze.<source> (the caller skips known files); the rows added.

    An insert-only MERGE on (cluster, file_sha256, line_no), not a blind append: two runs given the same
    file at once both find it unknown, and two appends would both commit; the later MERGE conflicts with
    the earlier commit, is retried, and finds the lines there. `hashes` (the inputs' file_sha256) bound
    the target files Delta reads; without them they are collected from `lines`."""
    scope = _bronze_scope(lines, hashes)
    if scope is None:
        return 0
    counts = merge_into(
        ctx.spark, ctx.settings, f"bronze.{source}", lines, insert_only=True, target_filter=scope
    )
    return counts.inserted


def read_inputs(paths: Iterable[str]) -> list[SourceFile]:
    """All inputs, directories expanded; a UsageError (exit 2) for a missing or unreadable one."""
    return [read_source_file(p) for p in _expand(paths)]


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
    """Append raw lines to bronze.<source>; lines already there (same file content) add nothing. Only the
    bronze files holding lines of the same input files are read (`_bronze_scope`)."""
    scope = _bronze_scope(bronze, None)
    return merge_into(
        ctx.spark, ctx.settings, f"bronze.{source}", bronze, insert_only=True, target_filter=scope
    )


def write_quarantine(ctx: Context, rejects: DataFrame) -> MergeCounts:
    """Record rejected records with their reason; the same reject twice is stored once."""
    rejects = (
        rejects.withColumn("ingested_at", F.lit(ctx.now()).cast("timestamp"))
        if ("ingested_at" not in rejects.columns)
        else rejects
    )
    return merge_into(ctx.spark, ctx.settings, QUARANTINE.name, rejects, insert_only=True)


def merge_jobs(ctx: Context, rows: DataFrame, source: str) -> tuple[MergeCounts, int, int]:
    """Validate silver.jobs rows of a batch (row failures to quarantine) and MERGE them by the table's
    newer-wins rule: one row per job from the batch, then a stored row is replaced only by a newer one
    (the very same record again counts as unchanged). Returns the merge counts, the rows superseded
    within the batch and the rows rejected. `rows` carries silver.jobs columns plus `raw` (for quarantine)."""
    rule = SILVER_JOBS.newer
    assert rule is not None
    order = Window.partitionBy(*SILVER_JOBS.key).orderBy(
        *rule.newest_first(), F.col("source_file").desc(), F.col("line_no").desc()
    )
    rows = rows.cache()
    unique = rows.withColumn("_rank", F.row_number().over(order)).where("_rank = 1").drop("_rank").cache()
    total, kept = rows.count(), unique.count()
    checked = validate(unique, SILVER_JOBS.name, source)
    if checked.rejected:
        write_quarantine(ctx, checked.rejects)
    same_record = "t.source_file <=> s.source_file AND t.line_no <=> s.line_no"
    counts = merge_into(
        ctx.spark,
        ctx.settings,
        SILVER_JOBS.name,
        checked.valid,
        update_when=f"({rule.sql('s', 't')}) AND NOT ({same_record})",
        target_filter=key_bounds(unique, SILVER_JOBS.key),  # the valid rows' keys lie within these
    )
    rows.unpersist()
    unique.unpersist()
    return counts, total - kept, checked.rejected
