"""sacct parsing over every real line in tests/data/real/sacct, with values checked by hand against
the raw text (and against the reportseff/seff outputs printed in the shared real-data folder's samples/)."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.stages.ingest.sacct import parse_files
from pipelines.schemas import BRONZE_SCHEMA, SILVER_JOB_STEPS, SILVER_JOBS
from pipelines.silver import sacct

KIB, MIB, GIB = 1024, 1024**2, 1024**3
T0 = datetime(2026, 1, 1)

# Column orders of the fixtures in reportseff_tests_sacct_lines.txt (its header, and reportseff's tests).
TO_DICT = "AdminComment,AllocCPUS,Elapsed,JobID,JobIDRaw,MaxRSS,NNodes,ReqMem,State,Timelimit,TotalCPU"
DEFAULT = "AdminComment,AllocCPUS,Elapsed,JobID,JobIDRaw,MaxRSS,NNodes,NTasks,ReqMem,State,Timelimit,TotalCPU"
NO_TIME = "AdminComment,AllocCPUS,Elapsed,JobID,JobIDRaw,MaxRSS,NNodes,NTasks,ReqMem,State,TotalCPU"
ENERGY = (
    "AdminComment,AllocCPUS,Elapsed,JobID,JobIDRaw,MaxRSS,NNodes,NTasks,ReqMem,State,TRESUsageOutAve,"
    "Timelimit,TotalCPU"
)
MAXRSS = "AdminComment,AllocCPUS,JobID,JobIDRaw,MaxRSS,NNodes,NTasks,ReqMem,State"
DISKNODE = "AdminComment,AllocCPUS,JobID,JobIDRaw,MaxDiskReadNode,MaxRSS,NNodes,NTasks,ReqMem,State"
NO_NEWLINE = "AllocCPUS,Elapsed,JobID,JobIDRaw,MaxRSS,NNodes,ReqMem,State,Timelimit,TotalCPU"
PROCESS = "JobID,JobIDRaw,State,AllocCPUS,TotalCPU,Elapsed,Timelimit,ReqMem,MaxRSS,NNodes,NTasks"


def fixture_format(testfile: str, fixture: str, pyline: str) -> str:
    """The --format of one fixture group of the real file."""
    if testfile == "conftest.py":
        if fixture == "issue_41":
            return TO_DICT + ",NTasks"
        if fixture == "console_jobs":  # reportseff's "_notime" keys omit Timelimit
            return NO_TIME if pyline in ("381", "389", "409", "417") else DEFAULT
        return TO_DICT
    if testfile == "test_db_inquirer.py":
        return NO_NEWLINE
    if testfile == "test_job_collection.py":
        return PROCESS if fixture == "test_process_line" else PROCESS + ",Partition"
    if fixture in ("test_energy_reporting", "test_filter_by_array_size"):
        return ENERGY
    if fixture == "test_issue_73_maxrss":
        return MAXRSS
    if fixture in ("test_issue_73_maxdiskreadnode", "test_issue_73_totals"):
        return DISKNODE
    return DEFAULT


def real_groups(path: Path) -> dict[str, tuple[str, list[str]]]:
    """{group name: (format, lines)} — every data line of the real file, prefix stripped, by fixture."""
    groups: dict[str, tuple[str, list[str]]] = {}
    lines_by: dict[str, list[str]] = defaultdict(list)
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        prefix, raw = line.split("\t", 1)
        testfile, fixture, pyline = prefix.split(":")
        # One file per fixture where its lines share a layout; console_jobs and test_reportseff.py keep
        # one file per test string (their layouts differ).
        same_layout = testfile == "test_job_collection.py" or (
            testfile == "conftest.py" and fixture != "console_jobs"
        )
        name = f"{testfile}:{fixture}" if same_layout else f"{testfile}:{fixture}:{pyline}"
        lines_by[name].append(raw)
        groups[name] = (fixture_format(testfile, fixture, pyline), lines_by[name])
    return groups


def bronze_of(spark: SparkSession, files: dict[str, list[str]], cluster: str | None = None):
    """A bronze frame of in-memory files (name → lines), as jobs.stages.ingest.common.bronze_frame lays it
    out; without a cluster, each file is its own cluster (fixtures reuse job ids such as 1234)."""
    rows = [
        (cluster or name, name, hashlib.sha256(name.encode()).hexdigest(), i, raw, T0)
        for name, lines in files.items()
        for i, raw in enumerate(lines, start=1)
    ]
    return spark.createDataFrame(rows, BRONZE_SCHEMA)


@pytest.fixture(scope="module")
def real(spark: SparkSession, real_data: Path) -> tuple[dict, dict]:
    """Every real line parsed, each fixture group its own file and cluster: ({(group, line): parsed row},
    {(group, job_id): silver.jobs row with reportseff's efficiencies})."""
    groups = real_groups(real_data / "sacct" / "reportseff_tests_sacct_lines.txt")
    layouts = {
        hashlib.sha256(name.encode()).hexdigest(): sacct.Layout(sacct.split_format(fmt), False, order)
        for order, (name, (fmt, _)) in enumerate(groups.items())
    }
    bronze = bronze_of(spark, {name: lines for name, (_, lines) in groups.items()})
    parsed = parse_files(bronze, layouts).persist()
    steps = sacct.filter_latest(sacct.with_steps(parsed), SILVER_JOB_STEPS)
    jobs = sacct.filter_latest(sacct.with_jobs(parsed, steps), SILVER_JOBS)
    lines = {(r["source_file"], r["line_no"]): r.asDict() for r in parsed.collect()}
    job_rows = {(r["cluster"], r["job_id"]): r.asDict() for r in sacct.with_efficiency_pct(jobs).collect()}
    parsed.unpersist()
    return lines, job_rows


@pytest.fixture(scope="module")
def parsed_real(real: tuple[dict, dict]) -> dict:
    return real[0]


def job(real: tuple[dict, dict], group_suffix: str, job_id: str) -> dict:
    hits = [r for (g, j), r in real[1].items() if g.endswith(group_suffix) and j == job_id]
    assert len(hits) == 1, f"{job_id} in {group_suffix}: {len(hits)} rows"
    return hits[0]


def find(parsed: dict, group_suffix: str, job_text: str) -> dict:
    hits = [r for (g, _), r in parsed.items() if g.endswith(group_suffix) and r["job_id_text"] == job_text]
    assert hits, f"{job_text} not parsed in {group_suffix}"
    return hits[0]


@pytest.mark.slow
def test_every_real_line_is_a_job_or_step(parsed_real: dict, real_data: Path) -> None:
    data_lines = [
        line
        for line in (real_data / "sacct" / "reportseff_tests_sacct_lines.txt").read_text().splitlines()
        if "\t" in line and not line.startswith("#")
    ]
    assert len(parsed_real) == len(data_lines) == 155
    rejects = {k: r["reason"] for k, r in parsed_real.items() if r["record"] not in (sacct.JOB, sacct.STEP)}
    assert rejects == {}
    kinds = {r["record"] for r in parsed_real.values()}
    assert kinds == {sacct.JOB, sacct.STEP}


@pytest.mark.slow
def test_array_task_job_and_steps(parsed_real: dict) -> None:
    # conftest single_core: |2|02:14:11|39889258_1426|39895850||1|8G|COMPLETED|02:55:00|03:43:27
    job = find(parsed_real, "single_core", "39889258_1426")
    assert job["record"] == sacct.JOB
    assert (job["job_id"], job["array_job_id"], job["array_task_id"], job["job_id_raw"]) == (
        "39889258_1426",
        "39889258",
        "1426",
        "39895850",
    )
    assert (job["alloc_cpus"], job["elapsed_s"], job["timelimit_s"]) == (2, 2 * 3600 + 14 * 60 + 11, 10500)
    assert (job["req_mem_value_bytes"], job["req_mem_kind"]) == (8 * GIB, "job")
    assert job["total_cpu_s"] == 3 * 3600 + 43 * 60 + 27
    assert job["state"] == "COMPLETED" and job["is_final"]
    # |2|02:14:11|39889258_1426.0|39895850.0|3501608K|1||COMPLETED||03:43:27
    step = find(parsed_real, "single_core", "39889258_1426.0")
    assert (step["record"], step["job_id"], step["step_id"]) == (sacct.STEP, "39889258_1426", "0")
    assert step["max_rss_bytes"] == 3501608 * KIB
    batch = find(parsed_real, "single_core", "39889258_1426.batch")
    assert (batch["step_id"], batch["max_rss_bytes"], batch["total_cpu_s"]) == ("batch", 4224 * KIB, 0.081)
    extern = find(parsed_real, "single_core", "39889258_1426.extern")
    assert (extern["step_id"], extern["max_rss_bytes"]) == ("extern", 0)


@pytest.mark.slow
def test_cancelled_by_and_long_durations(parsed_real: dict) -> None:
    # |28|19:04:47|8189521|8189521||1|112000M|CANCELLED by 129276|23:00:00|2-07:51:43
    job = find(parsed_real, "conftest.py:multi_gpu", "8189521")
    assert (job["state"], job["cancelled_by"], job["state_raw"]) == (
        "CANCELLED",
        "129276",
        "CANCELLED by 129276",
    )
    assert job["total_cpu_s"] == 2 * 86400 + 7 * 3600 + 51 * 60 + 43
    assert job["req_mem_value_bytes"] == 112000 * MIB and job["timelimit_s"] == 23 * 3600
    # |720|12-14:16:39|6196869|6196869||20|191846Mn|COMPLETED|UNLIMITED|451-06:00:24
    big = find(parsed_real, "multinode_job", "6196869")
    assert big["timelimit_s"] is None
    assert big["elapsed_s"] == 12 * 86400 + 14 * 3600 + 16 * 60 + 39
    assert big["total_cpu_s"] == 451 * 86400 + 6 * 3600 + 24
    assert (big["req_mem_value_bytes"], big["req_mem_kind"], big["nodes"]) == (191846 * MIB, "node", 20)
    # |12|23:05:24|46044267|46044267||1|48000M|TIMEOUT|23:00:00|11-02:46:01
    timeout = find(parsed_real, "bad_gpu_used", "46044267")
    assert (timeout["state"], timeout["total_cpu_s"]) == ("TIMEOUT", 11 * 86400 + 2 * 3600 + 46 * 60 + 1)
    # console_jobs 23000233: ...|4000Mc|CANCELLED by 129319|6-00:00:00|00:00:00|
    console = find(parsed_real, "console_jobs:405", "23000233")
    assert (console["cancelled_by"], console["timelimit_s"]) == ("129319", 6 * 86400)
    assert (console["req_mem_value_bytes"], console["req_mem_kind"], console["alloc_cpus"]) == (
        4000 * MIB,
        "cpu",
        16,
    )
    # test_db_inquirer (no AdminComment column): 16|00:00:00|23000233|...|CANCELLED by 129319|6-00:00:00|...
    bare = find(parsed_real, "no_newline:232", "23000233")
    assert (bare["alloc_cpus"], bare["cancelled_by"], bare["timelimit_s"]) == (16, "129319", 518400)


@pytest.mark.slow
def test_pending_state_odd_case_partition_limit_and_units(parsed_real: dict) -> None:
    pending = find(parsed_real, "console_jobs:417", "24220929_431")
    assert (pending["state"], pending["is_final"], pending["array_task_id"]) == ("PENDING", False, "431")
    # test_issue_73_totals writes the state "COMPLEteD"
    odd = find(parsed_real, "test_issue_73_totals:1160", "1234.1")
    assert (odd["state"], odd["state_raw"]) == ("COMPLETED", "COMPLEteD")
    limit = find(parsed_real, "test_process_line_partition_timelimit", "24371655")
    assert (limit["timelimit_s"], limit["partition"]) == (None, "mainqueue")
    process = find(parsed_real, "test_process_line", "24371655")
    assert (process["timelimit_s"], process["total_cpu_s"], process["elapsed_s"]) == (10800, 5387, 5396)
    assert (process["req_mem_value_bytes"], process["req_mem_kind"], process["ntasks"]) == (GIB, "node", None)
    mem_m = find(parsed_real, "test_issue_84_empty_used_memory:1204", "12345678.0")
    assert mem_m["max_rss_bytes"] == 2200 * MIB
    empty = find(parsed_real, "test_issue_84_empty_used_memory:1204", "12345678.extern")
    assert empty["max_rss_bytes"] is None


@pytest.mark.slow
def test_efficiencies_match_reportseff_and_seff_outputs(real: tuple[dict, dict]) -> None:
    # issue #16 (seff_outputs.txt Block 2: "Memory Utilized: 7.70 GB", "Memory Efficiency: 24.06% of
    # 32.00 GB", "CPU Efficiency: 98.62%"; reportseff: TimeEff 4.5%, CPUEff 98.6%, MemEff 24.1%).
    j16 = job(real, "test_issue_16:806", "65638294")
    assert j16["max_rss_bytes"] == 8074500 * KIB  # step .22, the largest MaxRSS, NTasks 1
    assert round(j16["max_rss_bytes"] / GIB, 2) == 7.70
    assert j16["req_mem_bytes"] == 32 * GIB
    assert round(j16["mem_eff_pct"], 2) == 24.06
    assert round(j16["cpu_eff_pct"], 2) == 98.62
    assert round(j16["time_eff_pct"], 1) == 4.5
    # issue #58: TIMEOUT job; reportseff TimeEff 100.8%, CPUEff 50.5%, MemEff 47.3%.
    j58 = job(real, "test_issue_58:1043", "1234")
    assert j58["state"] == "TIMEOUT"
    assert (round(j58["time_eff_pct"], 1), round(j58["cpu_eff_pct"], 1)) == (100.8, 50.5)
    assert round(j58["mem_eff_pct"], 1) == 47.3
    # issue #41: srun -n 8; seff: "Memory Utilized: 14.86 GB (estimated maximum)" = 1947276K × 8 tasks.
    j41 = job(real, "issue_41", "131042")
    assert j41["max_rss_bytes"] == 1947276 * KIB * 8
    assert round(j41["max_rss_bytes"] / GIB, 2) == 14.86
    # README: 24220929_421 COMPLETED 00:09:34 CPUEff 99.0% MemEff 34.6% (ReqMem 16000Mn on 1 node).
    j421 = job(real, "console_jobs:409", "24220929_421")
    assert j421["req_mem_bytes"] == 16000 * MIB
    assert (round(j421["cpu_eff_pct"], 1), round(j421["mem_eff_pct"], 1)) == (99.0, 34.6)


@pytest.mark.slow
def test_per_cpu_and_per_node_requests_multiply_out(real: tuple[dict, dict]) -> None:
    multinode = job(real, "multinode_job", "6196869")
    assert multinode["req_mem_bytes"] == 191846 * MIB * 20  # 191846Mn × NNodes 20
    assert multinode["max_rss_bytes"] == 33824748 * KIB  # the .batch step's MaxRSS
    assert job(real, "console_jobs:405", "23000233")["req_mem_bytes"] == 4000 * MIB * 16  # Mc × 16 CPUs
    assert job(real, "console_jobs:381", "25569410")["req_mem_bytes"] == 4000 * MIB * 1
    # issue #73: "1234 655G 38G 5.8%" — max over steps, not their sum.
    j73 = job(real, "test_issue_73_maxrss:1086", "1234")
    assert j73["max_rss_bytes"] == 39538757 * KIB
    assert round(j73["mem_eff_pct"], 1) == 5.8
    # single_core: steps 4224K, 0, 3501608K (no NTasks column → 1 task each); ReqMem 8G is the job total.
    single = job(real, "single_core", "39889258_1426")
    assert (single["max_rss_bytes"], single["req_mem_bytes"]) == (3501608 * KIB, 8 * GIB)
    assert single["total_cpu_s"] == 3 * 3600 + 43 * 60 + 27  # the job line's TotalCPU, not a step sum


def test_layout_detection() -> None:
    assert sacct.is_header("JobID|JobName|State|")
    assert sacct.is_header("JOBIDRAW|Start|End")
    assert not sacct.is_header("123|foo|COMPLETED")
    assert sacct.detect_layout(["# c", "", "JobID|REQMEM|State|"], None) == sacct.Layout(
        ("JobID", "REQMEM", "State"), True, 0, True
    )
    assert sacct.detect_layout(["JobID|State"], None) == sacct.Layout(("JobID", "State"), True, 0, False)
    assert sacct.detect_layout(["123|COMPLETED"], None) is None
    assert sacct.detect_layout(["123|COMPLETED"], ("JobID", "State"), 2) == sacct.Layout(
        ("JobID", "State"), False, 2
    )
    assert sacct.missing_required(sacct.Layout(("JobIDRaw", "Start"), True)) == []
    assert sacct.missing_required(sacct.Layout(("State", "Elapsed"), True)) == ["JobID"]
    assert sacct.split_format("jobid,state%20, elapsed") == ("jobid", "state", "elapsed")
    with pytest.raises(ValueError, match="empty --format"):
        sacct.split_format(",")
