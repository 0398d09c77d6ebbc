"""Delta table I/O: a table written by an older jobfit (fewer columns) reads with the newly declared columns
as nulls, and gains them on the next write, keeping its rows; predicates built as SQL text match what they
name; a MERGE bounded by its batch's key ranges finds every stored row it would find unbounded."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.testing import assertDataFrameEqual

from jobs.context import Context
from jobs.io.tables import key_bounds, merge_into, month_predicate, read_table, sql_string, table_path
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


def test_key_bounds_admit_every_row_of_their_batch(make_ctx: Callable[..., Context]) -> None:
    """Ids that sort differently as text and as numbers, quotes, backslashes, pending array ranges: every
    row of the batch lies within its own bounds (so a bounded MERGE loses no match), a key outside does
    not, a key column holding only nulls stays unbounded, and an empty batch bounds nothing."""
    spark = make_ctx().spark
    schema = "cluster string, job_id string, step_id bigint, note string"
    ids = ["99", "100", "123_[1-5]", "it's", "a\\b", "123+0"]
    batch = spark.createDataFrame([("c1", j, i, None) for i, j in enumerate(ids)], schema)
    bounds = key_bounds(batch, ("cluster", "job_id", "step_id"), alias="")
    assert bounds is not None
    assert batch.where(bounds).count() == len(ids)
    outside = spark.createDataFrame(
        [("c2", "99", 0, None), ("c1", "0", 0, None), ("c1", "99", 7, None)], schema
    )
    assert outside.where(bounds).count() == 0
    assert key_bounds(batch, ("cluster", "note"), alias="") == "`cluster` = 'c1'"
    assert key_bounds(batch.where("false"), ("cluster", "job_id")) is None


def test_a_bounded_merge_updates_the_oldest_stored_job(make_ctx: Callable[..., Context]) -> None:
    """A day's batch re-recording the first job ever stored beside a new one: the bounds reach back to it,
    so it is updated in place (not inserted twice) while stored rows outside the bounds stay as they were."""
    ctx = make_ctx()
    spark, settings = ctx.spark, ctx.settings
    names = [f.name for f in SILVER_JOBS.schema.fields]

    def frame(rows: list[dict]) -> object:
        return spark.createDataFrame([tuple(r[n] for n in names) for r in rows], SILVER_JOBS.schema)

    for first in (1000, 2000, 3000):  # three commits, three sets of data files
        merge_into(
            spark, settings, SILVER_JOBS.name, frame([job_row(job_id=str(first + i)) for i in range(5)])
        )
    day = frame([job_row(job_id="1000", state="FAILED"), job_row(job_id="4000")])
    bounds = key_bounds(day, SILVER_JOBS.key)
    assert bounds is not None and "'1000'" in bounds and "'4000'" in bounds
    counts = merge_into(spark, settings, SILVER_JOBS.name, day, target_filter=bounds)
    assert (counts.inserted, counts.updated) == (1, 1)
    stored = read_table(spark, settings, SILVER_JOBS.name)
    assert stored.count() == 16
    assert stored.where("job_id = '1000'").first()["state"] == "FAILED"
    assert stored.where("state = 'FAILED'").count() == 1
