"""One newer-wins rule for silver.jobs, declared in its TableSpec and used by every source's MERGE: a later
but older final dump never overwrites a newer row (SWF and Kubernetes once replaced any final row)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.schemas import SILVER_JOB_STEPS, SILVER_JOBS, NewerWins

T1, T2, T3 = datetime(2026, 1, 1, 10), datetime(2026, 1, 1, 11), datetime(2026, 1, 1, 12)


def test_jobs_and_steps_declare_the_rule() -> None:
    assert SILVER_JOBS.newer == NewerWins() and SILVER_JOB_STEPS.newer == NewerWins()


def test_rule_as_sql_and_as_order_agree(spark: SparkSession) -> None:
    rule = NewerWins()
    # (incoming state, end, start), (stored state, end, start), incoming is newer?
    cases = [
        (("COMPLETED", T1, T1), ("RUNNING", T2, T1), True),  # final beats active, whatever the times
        (("RUNNING", T3, T1), ("COMPLETED", T2, T1), False),
        (("COMPLETED", T1, T1), ("COMPLETED", T2, T1), False),  # both final: the later end wins
        (("COMPLETED", T3, T1), ("COMPLETED", T2, T1), True),
        (("RUNNING", None, T2), ("RUNNING", None, T1), True),  # no end yet: the later start
        (("RUNNING", None, T1), ("RUNNING", T1, T1), False),  # a null end counts as earliest
        (("COMPLETED", T2, T1), ("COMPLETED", T2, T1), True),  # equal: the later ingest wins
    ]
    rows = [(i, *s, *t) for i, (s, t, _) in enumerate(cases)]
    frame = spark.createDataFrame(
        rows,
        "i int, s_state string, s_end timestamp, s_start timestamp, "
        "t_state string, t_end timestamp, t_start timestamp",
    )
    pairs = frame.select(
        "i",
        F.struct(
            F.col("s_state").alias("state"),
            F.col("s_end").alias("end_ts"),
            F.col("s_start").alias("start_ts"),
        ).alias("s"),
        F.struct(
            F.col("t_state").alias("state"),
            F.col("t_end").alias("end_ts"),
            F.col("t_start").alias("start_ts"),
        ).alias("t"),
    )
    got = {r["i"]: r["newer"] for r in pairs.select("i", F.expr(rule.sql("s", "t")).alias("newer")).collect()}
    assert got == {i: expected for i, (_, _, expected) in enumerate(cases)}
    # The batch order puts the newer record first wherever the SQL says strictly newer.
    for i, (s, t, expected) in enumerate(cases):
        if s == t:
            continue
        both = spark.createDataFrame(
            [("s", *s), ("t", *t)], "who string, state string, end_ts timestamp, start_ts timestamp"
        )
        first = both.orderBy(*rule.newest_first()).first()["who"]
        assert first == ("s" if expected else "t"), (i, s, t)


SWF_HEADER = "; UnixStartTime: 1000000000\n"
# job 1: submitted at +10, waited 5, ran RUN seconds, completed (status 1)
SWF_JOB = "    1   10   5   {run}   4   90.5   2048   4   600   4096   1   7   3   2   1   -1   -1   -1\n"


@pytest.mark.slow
def test_an_older_final_dump_does_not_overwrite_a_newer_row(jobfit, tmp_path: Path) -> None:
    def ingest(name: str, run_s: int) -> dict:
        path = tmp_path / name
        path.write_text(SWF_HEADER + SWF_JOB.format(run=run_s))
        res = jobfit("ingest", "swf", str(path), "--cluster", "c", "--json")
        assert res.code == 0, res.err
        return json.loads(res.out)

    def end_ts() -> str:
        res = jobfit("sql", "SELECT end_ts FROM silver.jobs WHERE job_id = '1'", "--json")
        return json.loads(res.out)["rows"][0]["end_ts"]

    assert ingest("a.swf", 100)["inserted"] == 1
    assert end_ts() == "2001-09-09 01:48:35"  # 1e9 + 10 + 5 + 100
    later_file_older_record = ingest("b.swf", 50)
    assert later_file_older_record["updated"] == 0
    assert end_ts() == "2001-09-09 01:48:35"
    assert ingest("c.swf", 200)["updated"] == 1
    assert end_ts() == "2001-09-09 01:50:15"  # 1e9 + 10 + 5 + 200
