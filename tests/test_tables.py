"""Delta table I/O: a table written by an older jobfit (fewer columns) reads with the newly declared columns
as nulls, and gains them on the next write, keeping its rows."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.testing import assertDataFrameEqual

from jobs.context import Context
from jobs.io.tables import merge_into, month_predicate, read_table, sql_string, table_path
from pipelines.schemas import SILVER_JOBS
from tests.rows import job_row


def test_older_table_gains_new_columns(make_ctx: Callable[..., Context]) -> None:
    ctx = make_ctx()
    spark, settings = ctx.spark, ctx.settings
    new_columns = ["limit_cpu_cores", "limit_mem_bytes"]
    older = [f for f in SILVER_JOBS.schema.fields if f.name not in new_columns]
    old_row = job_row(job_id="1")
    frame = spark.createDataFrame(
        [tuple(old_row[f.name] for f in older)], SILVER_JOBS.schema.__class__(older)
    )
    frame.write.format("delta").save(table_path(settings, SILVER_JOBS.name))
    before = read_table(spark, settings, SILVER_JOBS.name)  # reads see the new columns as nulls at once
    assert before.select(*new_columns).first().asDict() == {"limit_cpu_cores": None, "limit_mem_bytes": None}

    new_row = job_row(job_id="2", source="k8s", limit_cpu_cores=0.5, limit_mem_bytes=4 * 2**30)
    names = [f.name for f in SILVER_JOBS.schema.fields]
    counts = merge_into(
        spark,
        settings,
        SILVER_JOBS.name,
        spark.createDataFrame([tuple(new_row[n] for n in names)], SILVER_JOBS.schema),
    )
    assert counts.inserted == 1
    rows = {r["job_id"]: r for r in read_table(spark, settings, SILVER_JOBS.name).collect()}
    assert (rows["1"]["limit_cpu_cores"], rows["1"]["limit_mem_bytes"]) == (None, None)
    assert (rows["2"]["limit_cpu_cores"], rows["2"]["limit_mem_bytes"]) == (0.5, 4 * 2**30)


def test_predicates_match_names_with_quotes_and_backslashes(make_ctx: Callable[..., Context]) -> None:
    """A cluster name is free text in predicates built as SQL: it must match itself and nothing else."""
    spark = make_ctx().spark
    names = ["it's", "a\\b", "a\\'b", "plain"]
    schema = "cluster string, month string"
    frame = spark.createDataFrame([(n, "2026-03") for n in names], schema)
    for name in names:
        assertDataFrameEqual(
            frame.where(month_predicate(name, "2026-03")), spark.createDataFrame([(name, "2026-03")], schema)
        )
        assert spark.sql(f"SELECT {sql_string(name)} AS v").first().v == name
