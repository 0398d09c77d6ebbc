"""The GX validation layer: row-level rejects to quarantine, table-level failures as DataError."""

from __future__ import annotations

from datetime import datetime

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from jobs.context import DataError
from jobs.io.validate import validate
from pipelines.schemas import SILVER_JOB_STEPS, SILVER_JOBS
from pipelines.silver.expectations import expectation_columns, suite_for, suite_tables

T0 = datetime(2026, 1, 5, 9, 0, 0)
T1 = datetime(2026, 1, 5, 10, 0, 0)


def jobs_frame(spark: SparkSession, rows: list[dict]):
    schema = T.StructType([*SILVER_JOBS.schema.fields, T.StructField("raw", T.StringType())])
    base = {f.name: None for f in schema.fields}
    full = []
    for i, row in enumerate(rows, start=1):
        r = {
            **base,
            "cluster": "c",
            "source": "slurm",
            "state": "COMPLETED",
            "is_final": True,
            "ingested_at": T1,
            "source_file": "f",
            "line_no": i,
            "raw": f"line {i}",
            **row,
        }
        full.append(tuple(r[f.name] for f in schema.fields))
    return spark.createDataFrame(full, schema)


def test_suites_declare_keys_and_levels() -> None:
    assert suite_tables() == ["silver.gpu_samples", "silver.job_steps", "silver.jobs", "silver.pod_samples"]
    suite = suite_for("silver.job_steps")
    levels = {e.configuration.type: e.configuration.meta["level"] for e in suite.expectations}
    assert levels["expect_compound_columns_to_be_unique"] == "table"
    assert levels["expect_column_values_to_be_in_set"] == "row"
    assert set(SILVER_JOB_STEPS.key) <= set(expectation_columns(suite))
    with pytest.raises(KeyError, match="no expectation suite"):
        suite_for("gold.job_usage")


def test_row_failures_are_quarantined_with_the_expectation(spark: SparkSession) -> None:
    rows = [
        {"job_id": "1", "start_ts": T0, "end_ts": T1, "elapsed_s": 3600, "gpu_util_peak_pct": 55.0},
        {"job_id": "2", "start_ts": T1, "end_ts": T0},  # ends before it starts
        {"job_id": "3", "gpu_util_peak_pct": 250.0},  # a percentage over 100
        {"job_id": "4", "state": "EXPLODED", "req_mem_bytes": -1},  # two failures on one row
        {"job_id": "5", "max_rss_bytes": 0, "elapsed_s": 0},
        {"job_id": "6", "submit_ts": T1, "start_ts": T0},  # starts before it was submitted
        {"job_id": "7"},
        {"job_id": "8"},
        {"job_id": "9"},
    ]
    checked = validate(jobs_frame(spark, rows), "silver.jobs", "sacct")
    assert (checked.rows, checked.rejected) == (9, 4)
    assertDataFrameEqual(
        checked.valid.select("job_id"), spark.createDataFrame([(j,) for j in "15789"], "job_id string")
    )
    reasons = {r["line_no"]: r for r in checked.rejects.collect()}
    assert reasons[2]["reason"] == "failed expectation: end_ts >= start_ts"
    assert reasons[3]["reason"] == "failed expectation: gpu_util_peak_pct between 0 and 100"
    assert set(reasons[4]["reason"].split("; ")) == {
        "failed expectation: state in the allowed set",
        "failed expectation: req_mem_bytes >= 0",
    }
    assert reasons[6]["reason"] == "failed expectation: start_ts >= submit_ts"
    assert (reasons[2]["source"], reasons[2]["raw"], reasons[2]["cluster"]) == ("sacct", "line 2", "c")
    assert checked.failures["end_ts >= start_ts"] == 1


def test_duplicate_key_is_a_table_level_failure(spark: SparkSession) -> None:
    frame = jobs_frame(spark, [{"job_id": "1"}, {"job_id": "1"}, {"job_id": "2"}])
    with pytest.raises(DataError, match=r"silver.jobs: \(cluster, job_id\) unique \(2 rows\)"):
        validate(frame, "silver.jobs", "sacct")


def test_mostly_bad_batch_fails_as_a_whole(spark: SparkSession) -> None:
    frame = jobs_frame(spark, [{"job_id": str(i), "alloc_cpus": -1} for i in range(3)] + [{"job_id": "9"}])
    with pytest.raises(DataError, match="3 of 4 rows failed row-level expectations"):
        validate(frame, "silver.jobs", "sacct")


def test_empty_batch_is_valid(spark: SparkSession) -> None:
    checked = validate(jobs_frame(spark, []), "silver.jobs", "sacct")
    assert (checked.rows, checked.rejected, checked.rejects.count()) == (0, 0, 0)
