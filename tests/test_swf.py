"""SWF ingest: all three real Parallel Workloads Archive logs parsed (row counts = non-comment lines, spot
rows checked by hand against the raw lines), and the CLI path on a small log with broken lines."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.stages.ingest.common import read_source_file
from pipelines.silver.swf import parse_swf, parse_swf_header

LOGS = ("CTC-SP2-1996-3.1-cln.swf.gz", "LPC-EGEE-2004-1.2-cln.swf.gz", "SDSC-SP2-1998-4.2-cln.swf.gz")
# Non-comment lines of each file, counted with `zcat F | grep -vc '^;'`.
RECORDS = {LOGS[0]: 77222, LOGS[1]: 234889, LOGS[2]: 59715}
SPOT_JOBS = {LOGS[0]: ["1", "3"], LOGS[1]: ["9933", "220822"], LOGS[2]: ["11", "13"]}


def _bronze(spark: SparkSession, path: Path):
    """A bronze-shaped frame of one file read by Spark itself (fast for 235k lines; line_no not needed)."""
    return spark.read.text(str(path)).select(
        F.lit("pwa").alias("cluster"),
        F.lit(str(path)).alias("source_file"),
        F.lit("").alias("file_sha256"),
        F.monotonically_increasing_id().alias("line_no"),
        F.col("value").alias("raw"),
        F.current_timestamp().alias("ingested_at"),
    )


@pytest.fixture(scope="module")
def parsed(spark: SparkSession, real_data: Path) -> dict:
    """Per log: (records parsed, distinct ids, rejects, {job_id: row}) — no table writes."""
    out = {}
    for name in LOGS:
        path = real_data / "swf" / name
        header = parse_swf_header(read_source_file(str(path)).lines[:200])
        rows, rejects = parse_swf(_bronze(spark, path), {str(path): header})
        is_spot = F.col("job_id").isin(SPOT_JOBS[name])
        counted = rows.agg(
            F.count("*").alias("n"),
            F.countDistinct("job_id").alias("ids"),
            F.collect_list(F.when(is_spot, F.struct(*rows.columns))).alias("spot"),
        ).first()
        spot = {r["job_id"]: r.asDict() for r in counted["spot"]}
        out[name] = (counted["n"], counted["ids"], rejects.count(), spot)
    return out


@pytest.mark.slow
def test_row_counts_match_non_comment_lines(parsed: dict) -> None:
    for name in LOGS:
        n, ids, rejected, _ = parsed[name]
        assert (n, ids, rejected) == (RECORDS[name], RECORDS[name], 0), name


@pytest.mark.slow
def test_sdsc_spot_rows(parsed: dict) -> None:
    # "   11   566129      5  28826    1  27758    -1    1  28800    -1  5 153  75 18180  3 -1 -1 -1"
    # UnixStartTime 893466664 -> submit 894032793 = 1998-05-01 14:26:33 UTC; queue 3 is "normal".
    j = parsed[LOGS[2]][3]["11"]
    assert j["submit_ts"] == datetime(1998, 5, 1, 14, 26, 33)
    assert j["start_ts"] == datetime(1998, 5, 1, 14, 26, 38)
    assert j["end_ts"] == datetime(1998, 5, 1, 22, 27, 4)
    assert (j["elapsed_s"], j["timelimit_s"], j["alloc_cpus"], j["req_cpus"]) == (28826, 28800, 1, 1)
    assert (j["total_cpu_s"], j["max_rss_bytes"], j["req_mem_bytes"]) == (27758.0, None, None)
    assert (j["state"], j["state_raw"], j["is_final"]) == ("CANCELLED", "5", True)
    assert (j["user"], j["account"], j["job_name"], j["qos"], j["partition"]) == (
        "153",
        "75",
        "18180",
        "normal",
        None,
    )
    assert j["source"] == "swf"
    # "   13   567314  15757   8071    8   7334    -1    8  64800    -1  1 150   6 13592  4 -1 -1 -1"
    j = parsed[LOGS[2]][3]["13"]
    assert (j["alloc_cpus"], j["total_cpu_s"], j["state"], j["qos"]) == (8, 7334.0 * 8, "COMPLETED", "low")


@pytest.mark.slow
def test_lpc_memory_and_partition_names(parsed: dict) -> None:
    # "220822 22320774   42010   16669 1      8   45120 1  28800 819200 1 48  6 -1 4 2 -1 -1"
    j = parsed[LOGS[1]][3]["220822"]
    assert j["max_rss_bytes"] == 45120 * 1024 * 1
    assert j["req_mem_bytes"] == 819200 * 1024 * 1
    assert (j["qos"], j["partition"], j["job_name"]) == ("day", "clrce01.in2p3.fr", None)
    # "  9933  3585977       4      16 1      2       0 1   7200     -1 1  1  1 -1 2 1 -1 -1"
    j = parsed[LOGS[1]][3]["9933"]
    assert j["submit_ts"] == datetime(2004, 9, 14, 22, 38, 29)  # 1091615532 + 3585977
    assert (j["max_rss_bytes"], j["req_mem_bytes"], j["qos"], j["partition"]) == (
        0,
        None,
        "short",
        "clrglop195.in2p3.fr",
    )


@pytest.mark.slow
def test_ctc_unknown_fields(parsed: dict) -> None:
    # "    3   197154 459987  35268  306  32792    -1   -1  35100    -1  0  97  -1 307  3 -1 -1 -1"
    j = parsed[LOGS[0]][3]["3"]
    assert (j["req_cpus"], j["alloc_cpus"], j["account"], j["state"]) == (306, 306, None, "FAILED")
    assert j["total_cpu_s"] == 32792.0 * 306 and j["timelimit_s"] == 35100
    # "    1        0 588530    937  306 142.00 ..." : submitted at UnixStartTime 835823160 itself
    j = parsed[LOGS[0]][3]["1"]
    assert j["submit_ts"] == datetime(1996, 6, 26, 21, 6, 0) and j["total_cpu_s"] == 142.0 * 306
    assert j["qos"] == "piofs"


SMALL = """; UnixStartTime: 1000000000
; Queue: 1 batch
    1   10   5   100   4   90.5   2048   4   600   4096   1   7   3   2   1   -1   -1   -1
    2   20  -1    -1   2   -1     -1    2   300    -1   5   7   3  -1   1   -1   -1   -1
    3   30   5   100   4   oops   2048   4   600   4096   1   7   3   2   1   -1   -1   -1
    4   40   5
"""


@pytest.mark.slow
def test_cli_ingest_quarantines_and_is_idempotent(jobfit, tmp_path: Path) -> None:
    log = tmp_path / "small.swf"
    log.write_text(SMALL)
    first = jobfit("ingest", "swf", str(log), "--cluster", "demo", "--json")
    assert first.code == 0, first.err
    assert '"read": 4' in first.out and '"inserted": 2' in first.out and '"quarantined": 2' in first.out
    again = jobfit("ingest", "swf", str(log), "--cluster", "demo", "--json")
    assert again.code == 0 and '"inserted": 0' in again.out and '"updated": 0' in again.out
    res = jobfit(
        "sql",
        "SELECT job_id, submit_ts, end_ts, max_rss_bytes, req_mem_bytes, qos, state FROM silver.jobs "
        "ORDER BY job_id",
        "--json",
    )
    assert '"submit_ts": "2001-09-09 01:46:50"' in res.out  # UnixStartTime 1000000000 + 10
    assert '"end_ts": "2001-09-09 01:48:35"' in res.out  # + wait 5 + run 100
    assert (
        f'"max_rss_bytes": {2048 * 1024 * 4}' in res.out and f'"req_mem_bytes": {4096 * 1024 * 4}' in res.out
    )
    reasons = jobfit("sql", "SELECT line_no, reason FROM quarantine ORDER BY line_no", "--json")
    assert "a field is not a number" in reasons.out and "expected 18 fields, got 3" in reasons.out
    missing = jobfit("ingest", "swf", str(tmp_path / "nope.swf"), "--cluster", "demo")
    assert missing.code == 2 and "no such file" in missing.err
