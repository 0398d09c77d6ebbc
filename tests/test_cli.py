"""The CLI contract: --help works, bad arguments exit 2 with one line, sql reads the tables."""

from __future__ import annotations

import json
import subprocess
import sys

from pyspark.sql import Row

from jobs.io.tables import merge_into


def test_help_lists_commands() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "sql" in out.stdout


def test_unknown_command_is_one_line_exit_2() -> None:
    proc = subprocess.run([sys.executable, "-m", "jobs.cli", "frobnicate"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "invalid choice" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_sql_over_a_registered_table(jobfit, make_ctx) -> None:
    ctx = make_ctx()
    rows = [
        Row(
            cluster="c1",
            source="sacct",
            source_file="f.txt",
            line_no=3,
            raw="x|y",
            reason="bad field count",
            ingested_at=ctx.now(),
        )
    ]
    merge_into(ctx.spark, ctx.settings, "quarantine", ctx.spark.createDataFrame(rows), insert_only=True)
    res = jobfit("sql", "SELECT reason, line_no FROM quarantine", "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["rows"] == [{"reason": "bad field count", "line_no": 3}]


def test_sql_error_is_one_line(jobfit) -> None:
    res = jobfit("sql", "SELEC nonsense")
    assert res.code == 2
    assert res.err.startswith("jobfit: error: query failed")
    assert res.err.count("\n") == 1


def test_merge_counts_when_nothing_changes(make_ctx) -> None:
    """An insert-only MERGE whose keys are all present writes no Delta commit; its counts must not be
    read from the previous commit."""
    ctx = make_ctx()
    rows = [
        Row(
            cluster="c1",
            source="sacct",
            source_file="f.txt",
            line_no=n,
            raw="x",
            reason="r",
            ingested_at=ctx.now(),
        )
        for n in (1, 2)
    ]
    frame = ctx.spark.createDataFrame(rows)
    first = merge_into(ctx.spark, ctx.settings, "quarantine", frame, insert_only=True)
    again = merge_into(ctx.spark, ctx.settings, "quarantine", frame, insert_only=True)
    assert (first.inserted, first.unchanged) == (2, 0)
    assert (again.inserted, again.updated, again.unchanged) == (0, 0, 2)


def test_relative_warehouse_is_made_absolute(tmp_path, monkeypatch) -> None:
    """The default warehouse is ./warehouse; Delta's path API needs it absolute, URIs stay as given."""
    from conf import load_settings
    from jobs.io.tables import table_path

    monkeypatch.chdir(tmp_path)
    assert table_path(load_settings({}), "silver.jobs") == f"{tmp_path.resolve()}/warehouse/silver/jobs"
    s3 = load_settings({"JOBFIT_WAREHOUSE": "s3a://bucket/jf/"})
    assert table_path(s3, "bronze.sacct") == "s3a://bucket/jf/bronze/sacct"


def test_train_bad_numbers_are_one_line_exit_2(jobfit) -> None:
    expected = "jobfit: error: --rounds and --threads must be >= 1 and --quantile between 0 and 1\n"
    for flag, value in (("--threads", "0"), ("--rounds", "0"), ("--quantile", "1.5")):
        res = jobfit("train", "--cluster", "demo", flag, value)
        assert res.code == 2, (flag, res.err)
        assert res.err == expected
