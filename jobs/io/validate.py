"""Run a silver table's Great Expectations suite on a batch before it is written.

The batch's validated columns go to pandas (Arrow) and through GX's ephemeral context (GX 1.24 without
its Spark extra); flagged rows come back by their line identity (`source_file`, `line_no`), so the Spark
frame is split without any per-row Python. Row-level failures become quarantine records whose reason
names the failed expectation; a table-level failure raises DataError (exit 1) with a readable summary.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.context import DataError

ID_COLUMNS = ("source_file", "line_no")


@dataclass
class Validation:
    """One batch's outcome: the rows that passed, the quarantine records, counts per failed expectation."""

    valid: DataFrame
    rejects: DataFrame  # quarantine shape: cluster, source, source_file, line_no, raw, reason
    rows: int
    rejected: int
    failures: dict[str, int] = field(default_factory=dict)


def _gx_context():
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def run_suite(table: str, frame: pd.DataFrame) -> list[tuple[str, str, list[int], int]]:
    """Validate a pandas frame against the table's suite: (level, readable name, failing row positions,
    failing count) for every expectation that failed."""
    from pipelines.silver.expectations import TABLE, describe, suite_for

    suite = suite_for(table)
    context = _gx_context()
    asset = context.data_sources.add_pandas(f"{table}-batch").add_dataframe_asset(table)
    batch = asset.add_batch_definition_whole_dataframe("whole").get_batch(
        batch_parameters={"dataframe": frame.reset_index(drop=True)}
    )
    result = batch.validate(suite, result_format={"result_format": "COMPLETE"})
    failed = []
    for r in result.results:
        if r.success:
            continue
        config = r.expectation_config
        name = describe(config.type, config.kwargs)
        if r.exception_info and r.exception_info.get("raised_exception"):
            message = r.exception_info.get("exception_message", "")
            failed.append((TABLE, f"{name} could not be checked: {message}", [], 0))
            continue
        level = (config.meta or {}).get("level", TABLE)
        positions = [int(i) for i in r.result.get("unexpected_index_list") or []]
        failed.append((level, name, positions, int(r.result.get("unexpected_count") or len(positions))))
    return failed


def validate(df: DataFrame, table: str, source: str) -> Validation:
    """Split a batch bound for `table` into valid rows and quarantine records; raise DataError when the
    batch fails a table-level expectation or more than MAX_REJECT_SHARE of its rows are rejected.
    `df` must hold the table's validated columns, `cluster`, `raw` and the line identity columns."""
    # Great Expectations takes ~10 s to import: only a command that validates pays for it.
    from pipelines.silver.expectations import MAX_REJECT_SHARE, ROW, expectation_columns, suite_for

    columns = list(dict.fromkeys([*expectation_columns(suite_for(table)), *ID_COLUMNS]))
    frame = df.select(*columns).toPandas()
    rows = len(frame)
    failed = run_suite(table, frame) if rows else []
    table_failures = [f"{name} ({count} rows)" for level, name, _, count in failed if level != ROW]
    reasons: dict[int, list[str]] = {}
    for level, name, positions, _ in failed:
        if level == ROW:
            for pos in positions:
                reasons.setdefault(pos, []).append(f"failed expectation: {name}")
    share = len(reasons) / rows if rows else 0.0
    if share > MAX_REJECT_SHARE:
        table_failures.append(f"{len(reasons)} of {rows} rows failed row-level expectations")
    if table_failures:
        raise DataError(f"{table}: " + "; ".join(table_failures))
    failures = {name: count for level, name, _, count in failed if level == ROW}
    if not reasons:
        return Validation(df, _empty_rejects(df, source), rows, 0, failures)
    flagged = frame.loc[sorted(reasons), list(ID_COLUMNS)].copy()
    flagged["reason"] = ["; ".join(reasons[p]) for p in sorted(reasons)]
    bad = df.sparkSession.createDataFrame(flagged).withColumn("line_no", F.col("line_no").cast("long"))
    valid = df.join(F.broadcast(bad.select(*ID_COLUMNS)), list(ID_COLUMNS), how="left_anti")
    rejects = df.join(F.broadcast(bad), list(ID_COLUMNS), how="inner").select(
        "cluster", F.lit(source).alias("source"), "source_file", "line_no", "raw", "reason"
    )
    return Validation(valid, rejects, rows, len(reasons), failures)


def _empty_rejects(df: DataFrame, source: str) -> DataFrame:
    return df.limit(0).select(
        "cluster",
        F.lit(source).alias("source"),
        "source_file",
        "line_no",
        "raw",
        F.lit("").alias("reason"),
    )
