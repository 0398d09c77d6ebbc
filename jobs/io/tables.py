"""Delta table I/O: where each table lives, reading with its schema, idempotent MERGE writes, SQL names."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from conf import Settings
from jobs.context import DataError
from pipelines.schemas import BRONZE_SOURCES, TABLES, TableSpec, bronze_spec


@dataclass(frozen=True)
class MergeCounts:
    """What one MERGE did: rows inserted, updated, and source rows that changed nothing."""

    inserted: int = 0
    updated: int = 0
    unchanged: int = 0

    def __add__(self, other: MergeCounts) -> MergeCounts:
        return MergeCounts(
            self.inserted + other.inserted, self.updated + other.updated, self.unchanged + other.unchanged
        )


def spec_for(name: str) -> TableSpec:
    """The TableSpec of a table name such as `silver.jobs` or `bronze.sacct`."""
    if name.startswith("bronze."):
        return bronze_spec(name.split(".", 1)[1])
    if name not in TABLES:
        raise KeyError(f"unknown table {name!r}; known: {', '.join(sorted(TABLES))}")
    return TABLES[name]


def warehouse_root(settings: Settings) -> str:
    """The warehouse as a URI: `s3a://…`, `file:///…` as given; a plain path made absolute (Delta's
    path-based table API rejects relative paths such as ./warehouse)."""
    root = settings.warehouse.rstrip("/")
    return root if "://" in root or root.startswith("file:") else str(Path(root).resolve())


def table_path(settings: Settings, name: str) -> str:
    """Where a table lives under the warehouse URI: <warehouse>/<layer>/<table> (quarantine at the top)."""
    return f"{warehouse_root(settings)}/{name.replace('.', '/')}"


def table_exists(spark: SparkSession, settings: Settings, name: str) -> bool:
    """Whether the Delta table has been written at least once."""
    return DeltaTable.isDeltaTable(spark, table_path(settings, name))


def read_table(spark: SparkSession, settings: Settings, name: str) -> DataFrame:
    """The table as a DataFrame; an empty frame with the declared schema when it was never written. Columns
    declared since the table was written read as nulls until the next write adds them (`ensure_table`)."""
    spec = spec_for(name)
    if not table_exists(spark, settings, name):
        return spark.createDataFrame([], spec.schema)
    df = spark.read.format("delta").load(table_path(settings, name))
    missing = [f for f in spec.schema.fields if f.name not in df.columns]
    return df.select("*", *[F.lit(None).cast(f.dataType).alias(f.name) for f in missing]) if missing else df


def conform(df: DataFrame, spec: TableSpec) -> DataFrame:
    """Select the spec's columns in order, cast to its types; fails loudly on a missing column."""
    missing = [f.name for f in spec.schema.fields if f.name not in df.columns]
    if missing:
        raise ValueError(f"{spec.name}: frame lacks columns {missing}")
    return df.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in spec.schema.fields])


def ensure_table(spark: SparkSession, settings: Settings, spec: TableSpec) -> DeltaTable:
    """Create the table with its declared schema when missing, or add the columns a newer jobfit declares
    to a table an older one wrote (nullable, null in existing rows); return it."""
    path = table_path(settings, spec.name)
    if not DeltaTable.isDeltaTable(spark, path):
        return DeltaTable.createIfNotExists(spark).location(path).addColumns(spec.schema).execute()
    table = DeltaTable.forPath(spark, path)
    present = set(table.toDF().columns)
    missing = [f for f in spec.schema.fields if f.name not in present]
    if missing:
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({columns})")
        table = DeltaTable.forPath(spark, path)  # a handle taken before the change refuses to MERGE
    return table


def merge_into(
    spark: SparkSession,
    settings: Settings,
    name: str,
    df: DataFrame,
    update_when: str | None = None,
    insert_only: bool = False,
    target_filter: str | None = None,
) -> MergeCounts:
    """MERGE `df` into the table on its natural key: insert new keys; update matched rows where
    `update_when` (a SQL condition over `t.` target and `s.` source) holds, or always when it is None.
    `target_filter` (over `t.` only, e.g. the batch's time range) lets Delta skip target files that cannot
    match; it must hold for every target row a source row could match. The source must hold one row per
    key. A commit that conflicts with another writer's (two ingests at once) is retried (`_retrying`)."""
    spec = spec_for(name)
    source = conform(df, spec)
    on = " AND ".join(
        [*(f"t.`{k}` = s.`{k}`" for k in spec.key), *([target_filter] if target_filter else [])]
    )

    def attempt() -> None:
        merge = ensure_table(spark, settings, spec).alias("t").merge(source.alias("s"), on)
        if not insert_only:
            merge = merge.whenMatchedUpdateAll(condition=update_when)
        merge.whenNotMatchedInsertAll().execute()

    metrics = _retrying(spark, settings, name, "MERGE", attempt)
    if metrics is None:  # no commit: a MERGE that changed nothing (every key present, insert-only)
        return MergeCounts(unchanged=source.count())
    inserted = int(metrics.get("numTargetRowsInserted", 0))
    updated = int(metrics.get("numTargetRowsUpdated", 0))
    rows = int(metrics.get("numSourceRows", 0))
    return MergeCounts(inserted=inserted, updated=updated, unchanged=max(rows - inserted - updated, 0))


def key_bounds(df: DataFrame, key: tuple[str, ...], alias: str = "t") -> str | None:
    """A `target_filter` for a MERGE of `df` on `key`: each key column of the target between the least and
    the greatest value `df` holds (equal when they are the same). A target row a source row matches has
    every key column equal to that row's, so it lies in every range: the filter never drops a match, and
    Delta skips the data files whose min/max statistics fall outside it (a day's new jobs touch the files
    of their own id range, not all of silver.jobs). Strings compare as strings (`"99" > "100"`): still
    correct, only less selective. Columns of other types, and columns `df` holds only nulls in, are left
    unbounded; None when nothing is bounded (an empty `df`).
    One pass over `df` (cache it first when it is expensive)."""
    types = dict(df.dtypes)
    bounded = [k for k in key if types.get(k) in ("string", "int", "bigint", "smallint", "tinyint")]
    if not bounded:
        return None
    row = df.agg(
        *(
            agg(k).alias(f"{name}_{i}")
            for i, k in enumerate(bounded)
            for name, agg in (("lo", F.min), ("hi", F.max))
        )
    ).first()
    terms = []
    for i, k in enumerate(bounded):
        lo, hi = (row[f"lo_{i}"], row[f"hi_{i}"]) if row is not None else (None, None)
        if lo is None:  # an empty frame, or only nulls (which match nothing)
            continue
        if isinstance(lo, str):
            lo, hi = sql_string(lo), sql_string(hi)
        column = f"{alias}.`{k}`" if alias else f"`{k}`"
        terms.append(f"{column} = {lo}" if lo == hi else f"{column} BETWEEN {lo} AND {hi}")
    return " AND ".join(terms) or None


def append_rows(spark: SparkSession, settings: Settings, name: str, df: DataFrame) -> int:
    """Append `df` to the table (created when missing) without a MERGE: for rows the caller knows are new
    (bronze lines of files not landed before). Returns the rows appended, from the commit's metrics."""
    spec = spec_for(name)
    rows = conform(df, spec)

    def attempt() -> None:
        ensure_table(spark, settings, spec)
        rows.write.format("delta").mode("append").save(table_path(settings, name))

    metrics = _retrying(spark, settings, name, "WRITE", attempt)
    return int((metrics or {}).get("numOutputRows", 0))


# Another writer's commit between this one's read and its commit (an Airflow backfill running two ingests
# into one warehouse): Delta refuses the later commit, which wrote nothing, and it is tried again on the
# table as it now is. Back-off doubles from 0.5 s; after the last attempt the conflict is an error.
COMMIT_ATTEMPTS = 6
# Two writers creating one table at once: the loser sees the other's table half-made (its _delta_log there,
# its first commit not yet), as "already exists", a non-empty location, or not found (a CI run, 2026-12-07).
_CREATE_RACES = frozenset(
    {"DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION", "DELTA_TABLE_ALREADY_EXISTS", "DELTA_TABLE_NOT_FOUND"}
)


def _retrying(
    spark: SparkSession, settings: Settings, name: str, operation: str, attempt: Callable[[], None]
) -> dict[str, str] | None:
    """Run `attempt()` (one Delta `operation` on table `name`, after creating or widening the table
    if need be) until it commits without a conflict; the operationMetrics of its commit (found by the
    token in the commit's userMetadata, so another writer's later commit is never read as this one's),
    or None when it wrote no commit."""
    from delta import exceptions as delta_errors
    from pyspark.errors import AnalysisException

    conflicts = tuple(
        getattr(delta_errors, name)
        for name in (
            "ConcurrentAppendException",
            "ConcurrentDeleteDeleteException",
            "ConcurrentDeleteReadException",
            "ConcurrentTransactionException",
            "ConcurrentWriteException",
            "MetadataChangedException",
            "ProtocolChangedException",
        )
    )
    key = "spark.databricks.delta.commitInfo.userMetadata"
    for tried in range(1, COMMIT_ATTEMPTS + 1):
        token = f"jobfit-{uuid.uuid4()}"
        spark.conf.set(key, token)
        try:
            attempt()
            break
        except (*conflicts, AnalysisException) as exc:
            # Two writers creating the table at once: the other one's first commit is on its way.
            creating = isinstance(exc, AnalysisException) and exc.getCondition() in _CREATE_RACES
            if not (creating or isinstance(exc, conflicts)):
                raise
            if tried == COMMIT_ATTEMPTS:
                raise DataError(
                    f"{name}: another writer kept committing to the table; gave up after {tried} attempts "
                    f"({type(exc).__name__}); this write did not land — run the command again "
                    "(re-runs are idempotent)"
                ) from None
            time.sleep(0.5 * 2 ** (tried - 1))
        finally:
            spark.conf.unset(key)
    history = DeltaTable.forPath(spark, table_path(settings, name)).history(50)
    ours = (F.col("userMetadata") == token) & (F.col("operation") == operation)
    mine = history.where(ours).select("operationMetrics").first()
    return dict(mine["operationMetrics"] or {}) if mine is not None else None


def _filesystem(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """Hadoop's FileSystem for `path` (a local path or any Hadoop URI: s3a://, abfss://) and the path as
    Hadoop's Path, through the session's JVM and its Hadoop configuration."""
    sc = spark.sparkContext
    target = sc._jvm.org.apache.hadoop.fs.Path(path)  # type: ignore[union-attr]
    return target.getFileSystem(sc._jsc.hadoopConfiguration()), target  # type: ignore[union-attr]


def remove_path(spark: SparkSession, path: str) -> None:
    """Delete a folder of the warehouse (a local path or any Hadoop URI: s3a://, abfss://) and its files."""
    fs, target = _filesystem(spark, path)
    fs.delete(target, True)


def sweep_stale(spark: SparkSession, folder: str, max_age_s: float) -> list[str]:
    """Delete the sub-folders of `folder` in which nothing was written for `max_age_s` seconds (what runs
    killed mid-way left behind); the deleted paths. A sub-folder's age is that of its newest file (object
    stores give folders no time of their own), so a run still writing keeps its folder."""
    fs, root = _filesystem(spark, folder)
    if not fs.exists(root):
        return []
    cutoff_ms = (time.time() - max_age_s) * 1000
    swept = []
    for child in fs.listStatus(root):
        if not child.isDirectory():
            continue
        newest = child.getModificationTime()
        files = fs.listFiles(child.getPath(), True)
        while files.hasNext():
            newest = max(newest, files.next().getModificationTime())
        if newest < cutoff_ms:
            fs.delete(child.getPath(), True)
            swept.append(str(child.getPath()))
    return swept


def sql_string(value: str) -> str:
    """`value` as a Spark SQL string literal (backslashes and quotes escaped), for predicates in text."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def month_predicate(cluster: str, month: str) -> str:
    """The replaceWhere predicate of one cluster-month."""
    return f"cluster = {sql_string(cluster)} AND month = {sql_string(month)}"


def replace_where(
    spark: SparkSession, settings: Settings, name: str, df: DataFrame, predicate: str, retry: bool = False
) -> None:
    """Overwrite exactly the rows matching `predicate` (e.g. one cluster-month) with `df`: rerunnable. With
    `retry`, a commit refused because another writer committed meanwhile is tried again (`_retrying`)."""
    spec = spec_for(name)

    def attempt() -> None:
        ensure_table(spark, settings, spec)
        (
            conform(df, spec)
            .write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", predicate)
            .save(table_path(settings, name))
        )

    if retry:
        _retrying(spark, settings, name, "WRITE", attempt)
    else:
        attempt()


def register_tables(spark: SparkSession, settings: Settings, keep: bool = False) -> list[str]:
    """Make every written table queryable by name in Spark SQL (`silver.jobs`, `gold.job_usage`, ...), in
    the session catalog (so every session of the SparkContext sees them, Spark Connect's too). Returns the
    names registered; with `keep`, a name already in the catalog is left as it is and not returned."""
    names = sorted(set(TABLES) | {f"bronze.{source}" for source in BRONZE_SOURCES})
    known = _catalog_tables(spark) if keep else set()
    registered = []
    for name in names:
        if name in known:
            continue
        if keep:
            _forget_delta_log(spark, table_path(settings, name))
        if not table_exists(spark, settings, name):
            continue
        if "." in name:
            spark.sql(f"CREATE DATABASE IF NOT EXISTS `{name.split('.')[0]}`")
        # Re-point the name each time: the warehouse may differ between calls in one session.
        spark.sql(f"DROP TABLE IF EXISTS {name}")
        spark.sql(f"CREATE TABLE {name} USING DELTA LOCATION '{table_path(settings, name)}'")
        registered.append(name)
    return registered


def _forget_delta_log(spark: SparkSession, path: str) -> None:
    """Drop Delta's cached log of a path, so a table written there by another process since this session
    last looked is seen (the cache keeps answering "no table" for a path it once found empty)."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    jpath = jvm.org.apache.hadoop.fs.Path(path)
    jvm.org.apache.spark.sql.delta.DeltaLog.invalidateCache(spark._jsparkSession, jpath)  # type: ignore[attr-defined]


def _catalog_tables(spark: SparkSession) -> set[str]:
    """The tables in the session catalog, named as register_tables names them (`gold.x`; `quarantine` in the
    default database). From the catalog's metadata alone: unlike `Catalog.tableExists`, no table is read."""
    names = set()
    for (database,) in spark.sql("SHOW DATABASES").collect():
        for row in spark.sql(f"SHOW TABLES IN `{database}`").collect():
            if not row.isTemporary:
                names.add(row.tableName if database == "default" else f"{database}.{row.tableName}")
    return names
