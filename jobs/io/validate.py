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
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

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


# From this many rows a batch is validated in Spark (`validate_in_spark`: the verdicts compiled to Spark,
# Great Expectations on a sample) rather than by Great Expectations over the whole batch in pandas. Below
# it the pandas path is faster: on the 120-job month of tests/data/ingest_equivalence the Spark path made
# the whole ingest 1.6-1.8x slower (two runs each, same session), its extra Spark jobs costing more than
# the pandas conversion they save. Above it the pandas path also brings the whole batch to the driver: a
# million jobs' DCGM samples (82.9M lines) passed spark.driver.maxResultSize (docs/scale.md).
SPARK_VALIDATE_MIN_ROWS = 100_000


def validate_batch(df: DataFrame, rows: int, table: str, source: str) -> Validation:
    """The batch's verdicts by the faster path for its size, `rows` (same valid rows, quarantine and
    counts either way); `df` should be persisted."""
    if rows >= SPARK_VALIDATE_MIN_ROWS:
        return validate_in_spark(df, table, source)
    return validate(df, table, source)


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


# ---- the same suites, computed in Spark ----------------------------------------------------------------
# A million-row batch costs more to cross to pandas than the rest of an ingest. `validate_in_spark` compiles
# a suite's expectations (the kinds below, with GX's pandas semantics) to Spark predicates, computes every
# row's verdict and the counts in Spark, and runs GX itself on a sample of the batch (its flagged rows and
# its first rows), raising if GX and the compiled predicates disagree on any sampled row.
SAMPLE_ROWS = 1000
SAMPLE_FLAGGED_ROWS = 200
_UNIQUE = "expect_compound_columns_to_be_unique"
_SPARK_KINDS = frozenset(
    {
        "expect_column_values_to_not_be_null",
        "expect_column_values_to_be_between",
        "expect_column_values_to_be_in_set",
        "expect_column_pair_values_a_to_be_greater_than_b",
        _UNIQUE,
    }
)


def _missing(df: DataFrame, column: str) -> Column:
    """Missing as pandas sees it: null, or NaN in a floating column."""
    col = F.col(column)
    if isinstance(df.schema[column].dataType, T.FloatType | T.DoubleType):
        return col.isNull() | F.isnan(col)
    return col.isNull()


def _fails(df: DataFrame, kind: str, kwargs: dict) -> Column:
    """True where a row fails one row-wise expectation; missing values are not checked by `between`, `in
    set` and the ordered pair (GX's default)."""
    if kind == "expect_column_values_to_not_be_null":
        return _missing(df, kwargs["column"])
    if kind == "expect_column_values_to_be_between":
        col, lo, hi = F.col(kwargs["column"]), kwargs.get("min_value"), kwargs.get("max_value")
        outside = F.lit(False)
        if lo is not None:
            outside = outside | (col < F.lit(lo))
        if hi is not None:
            outside = outside | (col > F.lit(hi))
        return ~_missing(df, kwargs["column"]) & outside
    if kind == "expect_column_values_to_be_in_set":
        return ~_missing(df, kwargs["column"]) & ~F.col(kwargs["column"]).isin(*kwargs["value_set"])
    if kind == "expect_column_pair_values_a_to_be_greater_than_b":
        a, b = F.col(kwargs["column_A"]), F.col(kwargs["column_B"])
        ordered = (a >= b) if kwargs.get("or_equal") else (a > b)
        present = ~_missing(df, kwargs["column_A"]) & ~_missing(df, kwargs["column_B"])
        return present & ~ordered
    raise ValueError(f"no Spark form for {kind}")


def _duplicate_rows(df: DataFrame, columns: list[str]) -> int:
    """Rows whose combination of `columns` occurs more than once (rows with all of them null ignored)."""
    present = F.lit(False)
    for c in columns:
        present = present | F.col(c).isNotNull()
    dups = df.where(present).groupBy(*columns).count().where(F.col("count") > 1)
    return int(dups.agg(F.coalesce(F.sum("count"), F.lit(0))).first()[0])


def validate_in_spark(df: DataFrame, table: str, source: str) -> Validation:
    """`validate` with every row's verdict computed in Spark: the same valid rows, quarantine records and
    reasons, counts and DataErrors, with Great Expectations run on a sample (see SAMPLE_ROWS). `df` should
    be persisted (it is read a few times). A suite with an expectation of another kind goes to `validate`."""
    from pipelines.silver.expectations import MAX_REJECT_SHARE, ROW, TABLE, describe, suite_for

    suite = suite_for(table)
    configs = [
        (e.configuration.type, dict(e.configuration.kwargs), (e.meta or {}).get("level", TABLE))
        for e in suite.expectations
    ]
    if any(kind not in _SPARK_KINDS for kind, _, _ in configs):
        return validate(df, table, source)
    checks = [
        (describe(kind, kwargs), level, _fails(df, kind, kwargs))
        for kind, kwargs, level in configs
        if kind != _UNIQUE
    ]
    row_level = [(name, fails) for name, level, fails in checks if level == ROW]
    reason = F.concat_ws(
        "; ", *[F.when(fails, F.lit(f"failed expectation: {name}")) for name, fails in row_level]
    )
    flagged = F.lit(False)
    for _, fails in row_level:
        flagged = flagged | fails
    counted = df.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(flagged.cast("int")).alias("flagged"),
        *[F.sum(fails.cast("int")).alias(f"c{i}") for i, (_, _, fails) in enumerate(checks)],
    ).first()
    rows, rejected = int(counted["rows"]), int(counted["flagged"] or 0)
    counts = {name: int(counted[f"c{i}"] or 0) for i, (name, _, _) in enumerate(checks)}

    table_failures = []
    for kind, kwargs, level in configs:  # in the suite's order, as `validate` reports them
        name = describe(kind, kwargs)
        if kind == _UNIQUE:
            failing = _duplicate_rows(df, list(kwargs["column_list"])) if rows else 0
        else:
            failing = counts[name]
        if failing and level != ROW:
            table_failures.append(f"{name} ({failing} rows)")
    if rows and rejected / rows > MAX_REJECT_SHARE:
        table_failures.append(f"{rejected} of {rows} rows failed row-level expectations")
    if table_failures:
        raise DataError(f"{table}: " + "; ".join(table_failures))
    if rows:
        _check_sample(df, table, [(name, fails) for name, _, fails in checks], flagged)
    failures = {name: counts[name] for name, _ in row_level if counts[name]}
    if not rejected:
        return Validation(df, _empty_rejects(df, source), rows, 0, failures)
    judged = df.withColumn("_reason", reason)
    valid = judged.where(~flagged).drop("_reason")
    rejects = judged.where(flagged).select(
        "cluster",
        F.lit(source).alias("source"),
        "source_file",
        "line_no",
        "raw",
        F.col("_reason").alias("reason"),
    )
    return Validation(valid, rejects, rows, rejected, failures)


def _check_sample(df: DataFrame, table: str, checks: list[tuple[str, Column]], flagged: Column) -> None:
    """Run the GX suite on the batch's flagged rows (up to SAMPLE_FLAGGED_ROWS) and first rows (up to
    SAMPLE_ROWS); raise when GX flags a different set of sampled rows than a compiled predicate does."""
    from pipelines.silver.expectations import expectation_columns, suite_for

    columns = list(dict.fromkeys([*expectation_columns(suite_for(table)), *ID_COLUMNS]))
    verdicts = [fails.alias(f"_f{i}") for i, (_, fails) in enumerate(checks)]
    sample = (
        df.where(flagged)
        .limit(SAMPLE_FLAGGED_ROWS)
        .unionByName(df.where(~flagged).limit(SAMPLE_ROWS))
        .select(*columns, *verdicts)
        .toPandas()
    )
    by_gx = {name: set(positions) for _, name, positions, _ in run_suite(table, sample[columns])}
    for i, (name, _) in enumerate(checks):
        by_spark = set(sample.index[sample[f"_f{i}"].fillna(False).astype(bool)])
        if by_spark != by_gx.get(name, set()):
            raise RuntimeError(
                f"{table}: the Spark form of '{name}' disagrees with Great Expectations on "
                f"{len(by_spark ^ by_gx.get(name, set()))} of {len(sample)} sampled rows"
            )
