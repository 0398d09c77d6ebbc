"""`jobfit ingest sacct` end to end: re-ingest, later and older dumps, garbage, real sample files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from jobs.io.tables import read_table

HEADER = (
    "JobID|JobIDRaw|JobName|User|Account|Partition|State|ExitCode|Submit|Start|End|Elapsed|Timelimit|"
    "AllocCPUS|ReqMem|MaxRSS|NTasks|NNodes|AllocTRES|TotalCPU|TRESUsageInMax"
)
TRES = "cpu=4,mem=16G,node=1,billing=4,gres/gpu=1,gres/gpu:a100=1"
JOB_500_RUNNING = (
    f"500|500|train|alice|lab|gpu|RUNNING|0:0|2026-01-05T09:00:00|2026-01-05T09:05:00|Unknown|00:55:00|"
    f"1-00:00:00|4|16G|||1|{TRES}|00:00:00|"
)
STEP_500_RUNNING = (
    "500.batch|500.batch|batch|||gpu|RUNNING|0:0|2026-01-05T09:05:00|2026-01-05T09:05:00|Unknown|00:55:00|"
    "|4||||1|||"
)
JOB_501 = (
    "501|501|prep|bob|lab|cpu|COMPLETED|0:0|2026-01-05T08:00:00|2026-01-05T08:00:10|2026-01-05T08:30:10|"
    "00:30:00|01:00:00|2|4000Mc||1|1|cpu=2,mem=8000M,node=1|50:00.500|"
)
STEP_501_BATCH = (
    "501.batch|501.batch|batch|||cpu|COMPLETED|0:0|2026-01-05T08:00:10|2026-01-05T08:00:10|"
    "2026-01-05T08:30:10|00:30:00||2||1024K|1|1||00:00.100|"
)
STEP_501_0 = (
    "501.0|501.0|python|||cpu|OUT_OF_MEMORY|0:125|2026-01-05T08:00:11|2026-01-05T08:00:11|"
    "2026-01-05T08:30:09|00:29:58||2||3000M|2|1||49:59.900|"
)
DUMP_A = [HEADER, JOB_500_RUNNING, STEP_500_RUNNING, JOB_501, STEP_501_BATCH, STEP_501_0]

JOB_500_DONE = (
    f"500|500|train|alice|lab|gpu|COMPLETED|0:0|2026-01-05T09:00:00|2026-01-05T09:05:00|"
    f"2026-01-05T11:05:00|02:00:00|1-00:00:00|4|16G|||1|{TRES}|07:00:00|"
)
STEP_500_DONE = (
    "500.batch|500.batch|batch|||gpu|COMPLETED|0:0|2026-01-05T09:05:00|2026-01-05T09:05:00|"
    "2026-01-05T11:05:00|02:00:00||4||2G|1|1||07:00:00|cpu=07:00:00,gres/gpumem=38888M,gres/gpuutil=87,mem=2G"
)
# A job name holding the delimiter: one surplus field, absorbed by JobName.
JOB_503 = (
    "503_7|503|a|b|carol|lab|cpu|FAILED|1:0|2026-01-05T10:00:00|2026-01-05T10:00:00|2026-01-05T10:01:00|"
    "00:01:00|00:10:00|1|1Gn||1|1|cpu=1,mem=1G,node=1|00:30.000|"
)
STEP_503 = (
    "503_7.batch|503.batch|batch|||cpu|FAILED|1:0|2026-01-05T10:00:00|2026-01-05T10:00:00|"
    "2026-01-05T10:01:00|00:01:00||1||900M|1|1||00:30.000|"
)
# The later dump overlaps the earlier window: 500's RUNNING line appears again before its final one.
DUMP_B = [
    HEADER,
    JOB_500_RUNNING,
    JOB_500_DONE,
    STEP_500_DONE,
    JOB_501,
    STEP_501_BATCH,
    STEP_501_0,
    JOB_503,
    STEP_503,
]


def write(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def ingest(jobfit, *args: str) -> dict:
    result = jobfit("ingest", "sacct", *args, "--cluster", "della", "--json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    accounted = sum(
        report[k] for k in ("skipped", "quarantined", "inserted", "updated", "unchanged", "superseded")
    )
    assert accounted == report["read"], report  # nothing lost
    return report


@pytest.mark.slow
def test_reingest_later_and_older_dumps(jobfit, make_ctx, tmp_path: Path) -> None:
    a = write(tmp_path / "a.txt", DUMP_A)
    first = ingest(jobfit, a)
    assert (first["read"], first["skipped"], first["inserted"], first["quarantined"]) == (6, 1, 5, 0)
    assert first["tables"]["silver.jobs"]["inserted"] == 2
    assert first["tables"]["silver.job_steps"]["inserted"] == 3

    # gzip is read by its magic bytes, whatever the name
    b = tmp_path / "b.dump"
    b.write_bytes(gzip.compress(("\n".join(DUMP_B) + "\n").encode()))
    later = ingest(jobfit, str(b))
    assert later["read"] == 9
    assert later["tables"]["silver.jobs"] == {"inserted": 1, "updated": 1, "unchanged": 1, "superseded": 0}
    assert later["tables"]["silver.job_steps"] == {
        "inserted": 1,
        "updated": 1,
        "unchanged": 2,
        "superseded": 0,
    }
    assert later["superseded"] == 1  # 500's RUNNING line, beaten by its COMPLETED line in the same dump

    # The first dump again: the same file adds nothing to bronze, and its older records of job 500 are
    # superseded by the stored COMPLETED rows instead of overwriting them.
    older = ingest(jobfit, a)
    assert (older["inserted"], older["updated"], older["unchanged"], older["superseded"]) == (0, 0, 3, 2)
    assert older["tables"]["silver.jobs"] == {"inserted": 0, "updated": 0, "unchanged": 1, "superseded": 1}
    ctx = make_ctx()
    assert read_table(ctx.spark, ctx.settings, "bronze.sacct").count() == 6 + 9

    jobs = {r["job_id"]: r for r in read_table(ctx.spark, ctx.settings, "silver.jobs").collect()}
    steps = {
        (r["job_id"], r["step_id"]): r
        for r in read_table(ctx.spark, ctx.settings, "silver.job_steps").collect()
    }
    assert sorted(jobs) == ["500", "501", "503_7"]
    j500 = jobs["500"]
    assert (j500["state"], j500["is_final"], j500["elapsed_s"], j500["total_cpu_s"]) == (
        "COMPLETED",
        True,
        7200,
        25200,
    )
    assert (j500["alloc_gpus"], j500["gpu_model"], j500["alloc_mem_bytes"]) == (1, "a100", 16 * 1024**3)
    assert j500["max_rss_bytes"] == 2 * 1024**3
    assert (j500["gpu_mem_peak_bytes"], j500["gpu_util_peak_pct"]) == (38888 * 1024**2, 87.0)
    j501 = jobs["501"]
    assert j501["req_mem_bytes"] == 4000 * 1024**2 * 2  # 4000Mc × 2 CPUs
    assert j501["max_rss_bytes"] == 3000 * 1024**2 * 2  # step .0: 3000M × 2 tasks
    assert j501["total_cpu_s"] == 50 * 60 + 0.5
    assert steps[("501", "0")]["state"] == "OUT_OF_MEMORY"
    assert (steps[("501", "0")]["exit_code"], steps[("501", "0")]["exit_signal"]) == (0, 125)
    j503 = jobs["503_7"]
    assert (j503["job_name"], j503["user"], j503["array_job_id"], j503["array_task_id"]) == (
        "a|b",
        "carol",
        "503",
        "7",
    )
    assert (j503["exit_code"], j503["req_mem_bytes"], j503["timelimit_s"]) == (1, 1024**3, 600)
    assert steps[("500", "batch")]["state"] == "COMPLETED"


@pytest.mark.slow
def test_garbage_and_real_samples(jobfit, make_ctx, real_data: Path, tmp_path: Path) -> None:
    """Garbage is quarantined with reasons and nothing else is lost; real sample files in the same run."""
    good_600 = (
        "600|600|ok|dan|lab|cpu|COMPLETED|0:0|2026-01-06T08:00:00|2026-01-06T08:00:00|2026-01-06T09:00:00|"
        "01:00:00|02:00:00|1|1G||1|1||00:10:00|"
    )
    lines = [
        "# sacct -P dump",
        HEADER,
        good_600,
        "600.batch|600.batch|batch|||cpu|COMPLETED|0:0||2026-01-06T08:00:00|2026-01-06T09:00:00|01:00:00||1||10M|1|1|||",
        good_600.replace("600|600|ok", "604|604|ok"),
        "601|601|trunc|bob",  # truncated line
        good_600.replace("600|600|ok", "602|602|ok").replace("COMPLETED", "EXPLODED"),
        good_600.replace("600|600|ok", "606|606|ok").replace(
            "01:00:00|02:00:00|1|1G|", "01:00:00|02:00:00|1|1G|12Q"
        ),
        good_600.replace("600|600|ok", "607|607|ok").replace("01:00:00|02:00:00", "1:2:3:4|02:00:00"),
        "x7|x7|badid|||cpu|COMPLETED|0:0||||||1|||1|1|||",
        # a count too large for 64 bits
        good_600.replace("600|600|ok", "608|608|ok").replace("|1G||1|1|", "|1G||1|99999999999999999999999|"),
        # ends before it starts: a row-level expectation failure
        good_600.replace("600|600|ok", "603|603|ok").replace("2026-01-06T09:00:00", "2026-01-06T07:00:00"),
        # a GPU utilisation peak over 100 %: a row-level expectation failure on the step
        "600.0|600.0|x|||cpu|COMPLETED|0:0||2026-01-06T08:00:00|2026-01-06T09:00:00|01:00:00||1||10M|1|1|||gres/gpuutil=250",
        "",
    ]
    garbage = tmp_path / "garbage.txt"
    garbage.write_bytes(("\n".join(lines) + "\n").encode() + b"\x00\xff\xfe\x89PNG\r\n\x1a\x00|\xff\n")
    # a layout without JobName: a surplus field cannot be absorbed
    short = write(
        tmp_path / "short.txt", ["JobID|State|Elapsed", "700|COMPLETED|00:01:00", "701|COMPLETED|00:01:00|x"]
    )
    (tmp_path / "empty.txt").write_text("")
    empty = str(tmp_path / "empty.txt")
    # jobstats' fixture file as is: repeated headers, '#' comments, free text lines between fixtures.
    jobstats = real_data / "samples" / "jobstats_testfixture_sacct_admincomment.txt"
    # CURC's TRESUsageInMax lines (sacct -pno JobID,TRESUsageInMax): the first block of the sample.
    curc = (real_data / "samples" / "sacct_tresusage_gpumem_gpuutil.txt").read_text().splitlines()
    first_block = curc[curc.index(next(x for x in curc if x.startswith("## Peak"))) + 1 :]
    first_block = first_block[: first_block.index("")]
    tres = write(tmp_path / "curc.txt", first_block)
    report = ingest(
        jobfit, str(garbage), short, empty, str(jobstats), tres, "--format", "JobID,TRESUsageInMax"
    )
    jobstats_lines = jobstats.read_text().splitlines()
    assert report["read"] == len(lines) + 2 + 3 + len(jobstats_lines) + len(first_block)  # 2 lines of junk
    # 11 garbage lines; 8 jobstats lines of decoded JSON between its fixtures
    assert report["quarantined"] == 11 + 8
    # garbage: 600, 604, 700; jobstats: 10920562, 49589697, 60155093, 845136, 46915114; CURC: 18194943
    assert report["tables"]["silver.jobs"]["inserted"] == 3 + 5 + 1
    assert report["tables"]["silver.job_steps"]["inserted"] == 1 + 2
    # 49589697 appears in four jobstats fixtures: one row, the others superseded.
    assert report["superseded"] == 3

    ctx = make_ctx()
    reasons = {
        (Path(r["source_file"]).name, r["line_no"]): r["reason"]
        for r in read_table(ctx.spark, ctx.settings, "quarantine").collect()
    }
    assert reasons[("garbage.txt", 6)] == "expected 21 fields, got 4"
    assert reasons[("garbage.txt", 7)] == "unknown State: 'EXPLODED'"
    assert reasons[("garbage.txt", 8)] == "bad MaxRSS: '12Q'"
    assert reasons[("garbage.txt", 9)] == "bad Elapsed: '1:2:3:4'"
    assert reasons[("garbage.txt", 10)] == "bad JobID: 'x7'"
    assert reasons[("garbage.txt", 11)] == "bad NNodes: '99999999999999999999999'"
    assert reasons[("garbage.txt", 12)] == "failed expectation: end_ts >= start_ts"
    assert reasons[("garbage.txt", 13)] == "failed expectation: gpu_util_peak_pct between 0 and 100"
    assert reasons[("garbage.txt", 15)].startswith("expected 21 fields")  # the binary junk
    assert reasons[("short.txt", 3)] == "expected 3 fields, got 4"
    assert reasons[("garbage.txt", 16)].startswith("expected 21 fields")
    assert sum(1 for (name, _) in reasons if name != "jobstats_testfixture_sacct_admincomment.txt") == 11

    jobs = {r["job_id"]: r for r in read_table(ctx.spark, ctx.settings, "silver.jobs").collect()}
    # job 600's rejected step .0 (gpuutil=250) does not feed the job's peak
    assert jobs["600"]["gpu_util_peak_pct"] is None and jobs["600"]["max_rss_bytes"] == 10 * 1024**2
    # 10920562|1730212549|Unknown|tiger2|billing=40,cpu=40,mem=10G,node=1|...|RUNNING|1|40|10G|...|1440
    running = jobs["10920562"]
    assert (running["state"], running["is_final"], running["end_ts"]) == ("RUNNING", False, None)
    assert str(running["start_ts"]) == "2024-10-29 14:35:49"  # epoch 1730212549 (SLURM_TIME_FORMAT=%s)
    assert (running["alloc_cpus"], running["alloc_mem_bytes"], running["timelimit_s"]) == (
        40,
        10 * 1024**3,
        86400,
    )
    # 46915114|...|billing=20480,cpu=1,gres/gpu=1,mem=250G,node=1|...|CANCELLED by 223988|1|1|250G|...
    #   ...|840|run_main_1.cmd
    cancelled = jobs["46915114"]
    assert (cancelled["state"], cancelled["cancelled_by"], cancelled["alloc_gpus"]) == (
        "CANCELLED",
        "223988",
        1,
    )
    assert (cancelled["req_mem_bytes"], cancelled["timelimit_s"]) == (250 * 1024**3, 840 * 60)
    assert cancelled["job_name"] == "run_main_1.cmd"
    # 18194943.batch|cpu=00:56:24,...,gres/gpumem=38888M,gres/gpuutil=100,mem=10372780K,...
    gpu = jobs["18194943"]
    assert gpu["state"] == "UNKNOWN"  # no State field requested
    assert gpu["gpu_mem_peak_bytes"] == 40777023488  # 38888 MiB, the value sacct --noconvert prints
    assert gpu["gpu_util_peak_pct"] == 100.0
    steps = {
        r["step_id"]: r
        for r in read_table(ctx.spark, ctx.settings, "silver.job_steps").collect()
        if r["job_id"] == "18194943"
    }
    assert steps["extern"]["gpu_mem_peak_bytes"] == 0 and steps["batch"]["max_rss_bytes"] is None


def test_bad_invocations_exit_2_with_one_line(jobfit, tmp_path: Path) -> None:
    missing = jobfit("ingest", "sacct", str(tmp_path / "nope.txt"), "--cluster", "della")
    assert missing.code == 2 and missing.err.strip().count("\n") == 0
    assert "no such file" in missing.err and "Traceback" not in missing.err
    headerless = write(tmp_path / "h.txt", ["123|COMPLETED"])
    no_format = jobfit("ingest", "sacct", headerless, "--cluster", "della")
    assert no_format.code == 2 and "--format" in no_format.err and "Traceback" not in no_format.err
    no_jobid = jobfit("ingest", "sacct", headerless, "--cluster", "della", "--format", "State,Elapsed")
    assert no_jobid.code == 2 and "JobID" in no_jobid.err
    no_cluster = jobfit("ingest", "sacct", headerless)
    assert no_cluster.code == 2 and "--cluster" in no_cluster.err


def test_table_level_failure_exits_1_with_summary(jobfit, tmp_path: Path) -> None:
    backwards = [
        "JobID|State|Start|End",
        "800|COMPLETED|2026-01-06T08:00:00|2026-01-06T07:00:00",
        "801|COMPLETED|2026-01-06T08:00:00|2026-01-06T07:59:59",
    ]
    result = jobfit("ingest", "sacct", write(tmp_path / "back.txt", backwards), "--cluster", "della")
    assert result.code == 1
    assert "silver.jobs: 2 of 2 rows failed row-level expectations" in result.err
    assert "Traceback" not in result.err
