"""Princeton jobstats summaries (sacct AdminComment `JS1:`): decoding every real blob, quarantining bad ones,
gold's efficiencies against reportseff 2.10.3's jobstats-based figures, and Partition_Limit resolution.

Real records (tests/data/real, provenance in its README):
- sacct/reportseff_tests_sacct_lines.txt: reportseff's fixture lines; two of them carry real `JS1:` blobs
  (bad_gpu 45352405, bad_gpu_used 46044267).
- samples/jobstats_testfixture_sacct_admincomment.txt: jobstats' own test fixtures, four real blobs each
  followed by its decoded JSON.
- telemetry/reportseff_tests_jobstats_admincomment_decoded.json: the nine summaries of reportseff's tests
  (its fixtures build most blobs in-test with `to_comment`, gzip + base64 of these dicts; we do the same).
- telemetry/princeton_jobstats_doc_examples.txt: the two summaries published in jobstats' docs.

reportseff's expected figures are its tests' (tests/test_job.py, tests/test_reportseff.py). Where they
differ from jobfit by design the test says so: reportseff prints 0 % for a GPU without a utilisation and
averages per-node figures, jobfit keeps unmeasured values unknown and weights nodes by their CPUs.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf import load_cluster
from jobs.io.tables import read_table
from jobs.stages.ingest.sacct import parse_files
from pipelines.gold.waste import job_usage
from pipelines.schemas import BRONZE_SCHEMA, SILVER_GPU_SAMPLES, SILVER_JOB_STEPS, SILVER_JOBS
from pipelines.silver import jobstats as js
from pipelines.silver import sacct
from tests.rows import job_row, jobs_frame, sample_rows, samples_frame
from tests.test_sacct import fixture_format, real_groups

T0 = datetime(2026, 1, 1)
SACCT_LINES = "sacct/reportseff_tests_sacct_lines.txt"
JOBSTATS_FIXTURES = "samples/jobstats_testfixture_sacct_admincomment.txt"
DECODED = "telemetry/reportseff_tests_jobstats_admincomment_decoded.json"
DOC_EXAMPLES = "telemetry/princeton_jobstats_doc_examples.txt"
BLOB_RE = re.compile(r"JS1:[A-Za-z0-9+/=]+")
NOT_JSON = "JS1:H4sIAAAAAAACA8vLL1HIKs7PAwBmy4zGCAAAAA=="  # base64 of gzip'd b"not json"


def decoded_records(real_data: Path) -> dict[str, dict]:
    """reportseff's nine summaries by fixture name."""
    data = json.loads((real_data / DECODED).read_text())
    return {r["fixture"]: r["jobstats"] for r in data["records"]}


def as_record(summary: js.Summary) -> dict:
    """A Summary back in jobstats' JSON shape (what the decoded files hold), for whole-record equality."""
    nodes = {}
    for n in summary.nodes:
        node = {
            k: v
            for k, v in (
                ("cpus", n.cpus),
                ("total_time", n.cpu_time_s),
                ("used_memory", n.mem_used_bytes),
                ("total_memory", n.mem_total_bytes),
            )
            if v is not None
        }
        for key, attr in (
            ("gpu_utilization", "util_pct"),
            ("gpu_used_memory", "mem_used_bytes"),
            ("gpu_total_memory", "mem_total_bytes"),
        ):
            per_gpu = {g.index: getattr(g, attr) for g in n.gpus if getattr(g, attr) is not None}
            if per_gpu:
                node[key] = per_gpu
        nodes[n.host] = node
    return {"nodes": nodes, "total_time": summary.run_time_s, "gpus": summary.gpus_declared}


def normalised(record: dict) -> dict:
    """A decoded JSON summary in `as_record`'s shape: numbers as floats, bool gpus as 0/1, no zero limits."""
    nodes = {}
    for host, node in record["nodes"].items():
        out = {}
        for key, value in node.items():
            if isinstance(value, dict):
                out[key] = {i: float(v) for i, v in value.items()}
            elif key == "total_memory" and value == 0:
                continue  # jobstats' 0 = limit not read: unknown
            else:
                out[key] = float(value)
        nodes[host] = out
    gpus = record.get("gpus")
    return {
        "nodes": nodes,
        "total_time": float(record["total_time"]),
        "gpus": None if gpus is None else int(gpus),
    }


def close_records(a: dict, b: dict) -> None:
    """Two summaries equal, numbers compared as floats."""
    assert normalised(json.loads(json.dumps(a))) == normalised(json.loads(json.dumps(b)))


# ---- decoding ----------------------------------------------------------------------------------------


def test_every_real_blob_decodes_to_its_published_json(real_data: Path) -> None:
    # The two real blobs in reportseff's sacct lines, against the decoded file.
    decoded = decoded_records(real_data)
    lines = (real_data / SACCT_LINES).read_text().splitlines()
    by_fixture = {line.split(":")[1]: BLOB_RE.search(line).group(0) for line in lines if BLOB_RE.search(line)}
    assert sorted(by_fixture) == ["bad_gpu", "bad_gpu_used"]
    for fixture, blob in by_fixture.items():
        close_records(as_record(js.decode_admin_comment(blob)), decoded[fixture])
    # jobstats' own fixtures: each literal blob is followed by its decoded JSON.
    text = (real_data / JOBSTATS_FIXTURES).read_text()
    pairs = re.findall(r"\|(JS1:[A-Za-z0-9+/=]+)\|.*\ndecoded AdminComment: (\{.*\})", text)
    assert len(pairs) == 4
    for blob, payload in pairs:
        close_records(as_record(js.decode_admin_comment(blob)), json.loads(payload))
    # Every summary of reportseff's tests, encoded as its fixtures do (to_comment), decodes back.
    for record in decoded.values():
        close_records(as_record(js.decode_admin_comment(js.encode_summary(record))), record)
    # The published doc examples parse as summaries.
    docs = (real_data / DOC_EXAMPLES).read_text()
    blocks = re.findall(r"^(\{\n.*?\n\})$", docs, flags=re.S | re.M)
    assert len(blocks) == 2
    for block in blocks:
        summary = js.parse_summary(json.loads(block))
        assert summary.nodes and summary.gpus_declared == 1


def test_bad_blobs_say_why() -> None:
    good = js.encode_summary({"nodes": {"n1": {"cpus": 1, "total_time": 1.0}}, "total_time": 2, "gpus": 0})
    cases = {
        "JS1:Short": "no summary: JS1:Short",
        "JS1:None": "no summary: JS1:None",
        "JS1:asd&asdf": "not base64",  # reportseff's own bad examples (tests/test_job.py)
        "JS1:asdfasdf": "not a gzip stream",
        "JS0:asdfasdf": "unknown jobstats format 'JS0'",
        good[: len(good) // 2 // 4 * 4]: "truncated gzip stream",
        js.encode_summary([]): "not a JSON object",  # type: ignore[arg-type]
        NOT_JSON: "not JSON",
        js.encode_summary({"nodes": {}}): "no nodes",
        js.encode_summary({"nodes": {"n1": {"cpus": -1}}}): "node n1 cpus is not a non-negative number",
        js.encode_summary({"nodes": {"n1": {"gpu_utilization": {"0": 140}}}}): "above 100",
    }
    for blob, reason in cases.items():
        with pytest.raises(ValueError, match=re.escape(reason)):
            js.decode_admin_comment(blob)
    assert not js.is_jobstats("some admin note") and js.is_jobstats(" JS1:Short")


# ---- the reportseff fixtures through silver and gold -------------------------------------------------

# reportseff 2.10.3's jobstats-based figures (tests/test_job.py; tests/test_reportseff.py for the last two):
# fixture -> (job id, CPUEff, MemEff, GPUEff, GPUMem) in percent; None where reportseff shows none.
REPORTSEFF = {
    "single_core": ("39889258_1426", 99.7, 3.6, None, None),
    "multi_node": ("8205048", 4.6, 1.1, None, None),
    "single_gpu": ("8197399", 95.4, 9.5, 29.4, 99.8),
    "multi_gpu": ("8189521", 10.5, 26.3, 3.5, 30.1),
    "multi_node_multi_gpu": ("8189521", 10.5, 26.0, 5.5, 30.1),
    "bad_gpu": ("45352405", 99.5, 39.1, 0.0, 1.0),
    "bad_gpu_used": ("46044267", 96.2, 86.4, 4.8, 11.1),
    "test_nonempty_used_memory": ("4336165", 95.6, 46.1, None, None),
    # reportseff: CPU 2.6 % (it truncates TotalCPU 00:02.833 to 2 s), memory 55.0 % (sacct MaxRSS 2200M)
    "test_issue_84_empty_used_memory": ("12345678", 2.6, 55.0, None, None),
}


def fixture_files(real_data: Path) -> dict[str, tuple[str, list[str]]]:
    """Each reportseff fixture's real sacct lines, with the job line's AdminComment (the first field of
    these layouts) set as reportseff's fixture sets it: its real blob where the line has one, else the
    summary of the decoded file encoded with `encode_summary` (reportseff's `to_comment`)."""
    decoded = decoded_records(real_data)
    groups = real_groups(real_data / SACCT_LINES)
    files = {}
    for name, (fmt, lines) in groups.items():
        fixture = name.split(":")[1]
        if fixture not in REPORTSEFF:
            continue
        job_id = REPORTSEFF[fixture][0]
        out = []
        for line in lines:
            fields = line.split("|")
            if fields[3] == job_id and not fields[0]:
                fields[0] = js.encode_summary(decoded[fixture])
            out.append("|".join(fields))
        files[fixture] = (fmt, out)
    return files


def bronze_of(spark: SparkSession, files: dict[str, list[str]]):
    rows = [
        (name, name, hashlib.sha256(name.encode()).hexdigest(), i, raw, T0)
        for name, lines in files.items()
        for i, raw in enumerate(lines, start=1)
    ]
    return spark.createDataFrame(rows, BRONZE_SCHEMA)


@pytest.fixture(scope="module")
def fixtures_gold(spark: SparkSession, real_data: Path) -> tuple[dict, dict]:
    """The fixtures parsed (each its own cluster), decoded into silver.jobstats rows, and built into gold
    job usage (reportseff's lines carry no Start/End: the test starts each job at T0 for Elapsed)."""
    files = fixture_files(real_data)
    assert set(files) == set(REPORTSEFF)
    layouts = {
        hashlib.sha256(name.encode()).hexdigest(): sacct.Layout(sacct.split_format(fmt), False, order)
        for order, (name, (fmt, _)) in enumerate(files.items())
    }
    parsed = parse_files(bronze_of(spark, {n: lines for n, (_, lines) in files.items()}), layouts)
    steps = sacct.filter_latest(sacct.with_steps(parsed), SILVER_JOB_STEPS)
    jobs = sacct.filter_latest(sacct.with_jobs(parsed, steps), SILVER_JOBS)
    jobs = jobs.withColumns(
        {"start_ts": F.lit(T0), "end_ts": F.lit(T0) + F.make_interval(secs=F.col("elapsed_s"))}
    ).cache()
    summaries = js.with_jobstats(jobs).cache()
    assert summaries.where(F.col("error").isNotNull()).count() == 0
    empty = spark.createDataFrame([], SILVER_GPU_SAMPLES.schema)
    usage = job_usage(jobs, empty, load_cluster("demo"), jobstats=summaries.where(F.col("error").isNull()))
    gold = {r["cluster"]: r.asDict() for r in usage.collect()}
    silver = {r["cluster"]: r.asDict(recursive=True) for r in summaries.collect()}
    return silver, gold


@pytest.mark.slow
def test_gold_efficiencies_equal_reportseffs_jobstats_figures(fixtures_gold: tuple[dict, dict]) -> None:
    silver, gold = fixtures_gold
    for fixture, (job_id, cpu, mem, gpu, gpu_mem) in REPORTSEFF.items():
        row = gold[fixture]
        assert row["job_id"] == job_id
        if fixture == "test_issue_84_empty_used_memory":
            # The summary has no CPU or memory figures: sacct's stay. jobfit reads TotalCPU 00:02.833 to the
            # millisecond (3.7 %, reportseff truncates to 2 s: 2.6 %); memory 2200M of 4000M as reportseff.
            assert row["usage_source"] == "sacct"
            assert row["cpu_eff_pct"] == pytest.approx(2.833 / 77 * 100, abs=1e-3)
            assert row["mem_eff_pct"] == pytest.approx(mem, abs=0.1)
            assert (row["gpu_telemetry_source"], row["gpu_util_mean_pct"]) == ("jobstats", 0.0)
            continue
        assert row["usage_source"] == "jobstats", fixture
        assert row["cpu_eff_pct"] == pytest.approx(cpu, abs=0.1), fixture
        assert row["mem_eff_pct"] == pytest.approx(mem, abs=0.1), fixture
        if gpu is None:
            assert row["gpu_telemetry_source"] is None and row["gpu_coverage_pct"] is None, fixture
            continue
        assert (row["gpu_telemetry_source"], row["has_gpu_telemetry"]) == ("jobstats", True), fixture
        assert row["gpu_coverage_pct"] == pytest.approx(100.0), fixture
        # GPU memory: reportseff averages each GPU's used/total; silver keeps every GPU.
        per_gpu = [
            g["mem_used_bytes"] / g["mem_total_bytes"] * 100
            for n in silver[fixture]["nodes"]
            for g in n["gpus"]
        ]
        assert sum(per_gpu) / len(per_gpu) == pytest.approx(gpu_mem, abs=0.1), fixture
        assert row["vram_peak_pct"] == pytest.approx(max(per_gpu), abs=1e-6), fixture
        if fixture == "bad_gpu":  # no utilisation in the summary: unknown in jobfit, 0 % in reportseff
            assert row["gpu_util_mean_pct"] is None and row["gpu_underused_h"] is None
        elif fixture == "bad_gpu_used":  # GPU 2 unmeasured: jobfit's mean is GPU 3's 9.5 %, reportseff 4.8
            assert row["gpu_util_mean_pct"] == pytest.approx(9.5)
            assert sum([0.0, 9.5]) / 2 == pytest.approx(gpu, abs=0.1)
        else:
            assert row["gpu_util_mean_pct"] == pytest.approx(gpu, abs=0.1), fixture
    # The multi-node job's worst node shows in the evidence (three of its four nodes did nothing).
    assert "worst tiger-h26c2n13 0.0 %" in gold["multi_node"]["usage_evidence"]
    assert gold["multi_node"]["usage_evidence"].startswith("jobstats CPU 4.6 % over 4 node(s)")
    # jobstats' cgroup limits are the memory allocation: 15 GiB for single_core (sacct says 8G).
    assert gold["single_core"]["req_mem_bytes"] == 16106127360


@pytest.mark.slow
def test_dcgm_wins_and_a_disagreement_is_flagged(spark: SparkSession) -> None:
    summary = {
        "gpus": 2,
        "total_time": 3600,
        "nodes": {
            "g1": {
                "cpus": 8,
                "total_time": 14400.0,
                "used_memory": 8 * 1024**3,
                "total_memory": 32 * 1024**3,
                "gpu_utilization": {"0": 30.0, "1": 50.0},
                "gpu_used_memory": {"0": 10 * 1024**3, "1": 20 * 1024**3},
                "gpu_total_memory": {"0": 80 * 1024**3, "1": 80 * 1024**3},
            }
        },
    }
    jobs = [
        job_row(job_id=j, partition="gpu", alloc_cpus=8, alloc_gpus=2, req_mem_bytes=32 * 1024**3)
        for j in ("agree", "conflict", "only_js")
    ]
    frame = jobs_frame(spark, jobs).withColumn("admin_comment", F.lit(js.encode_summary(summary)))
    summaries = js.with_jobstats(frame.withColumn("raw", F.lit(""))).where(F.col("error").isNull())
    samples = [
        *sample_rows("agree", "g1", "gpu0", 42.0),  # DCGM mean 42 vs jobstats 40: agree
        *sample_rows("agree", "g1", "gpu1", 42.0),
        *sample_rows("conflict", "g1", "gpu0", 80.0),  # DCGM mean 80 vs 40: more than 10 points
        *sample_rows("conflict", "g1", "gpu1", 80.0),
    ]
    usage = job_usage(frame, samples_frame(spark, samples), load_cluster("demo"), jobstats=summaries)
    rows = {r["job_id"]: r for r in usage.collect()}
    assert rows["agree"]["gpu_telemetry_source"] == "dcgm" and rows["agree"]["gpu_util_mean_pct"] == 42.0
    assert rows["agree"]["has_gpu_source_conflict"] is False
    assert rows["agree"]["jobstats_gpu_util_pct"] == 40.0
    conflict = rows["conflict"]
    assert (conflict["gpu_telemetry_source"], conflict["gpu_util_mean_pct"]) == ("dcgm", 80.0)
    assert conflict["has_gpu_source_conflict"] is True
    assert "DCGM 80.0 % vs jobstats 40.0 % (differ by 40.0 points; DCGM used)" in conflict["usage_evidence"]
    only = rows["only_js"]
    assert (only["gpu_telemetry_source"], only["gpu_util_mean_pct"], only["gpu_coverage_pct"]) == (
        "jobstats",
        40.0,
        100.0,
    )
    assert only["has_gpu_source_conflict"] is None
    assert only["gpu_underused_h"] == pytest.approx(2 * 0.6)  # 2 GPU-hours at 40 %
    assert only["vram_peak_bytes"] == 20 * 1024**3 and only["vram_card_bytes"] == 80 * 1024**3
    # CPU and memory come from jobstats for all three: 14400 core-s of 8 x 3600, 8 of 32 GiB.
    assert {r["usage_source"] for r in rows.values()} == {"jobstats"}
    assert only["cpu_eff_pct"] == pytest.approx(50.0) and only["mem_eff_pct"] == pytest.approx(25.0)


# ---- through the command -----------------------------------------------------------------------------


@pytest.mark.slow
def test_ingest_lands_summaries_and_quarantines_bad_ones(jobfit, make_ctx, tmp_path: Path, real_data: Path):
    """Real job lines of reportseff's fixtures, each job's AdminComment as given (the two real blobs) or
    replaced by a bad value: the bad summaries go to quarantine with their reason, every job lands."""
    groups = real_groups(real_data / SACCT_LINES)
    bad = {
        "single_core": "JS1:Short",
        "short_job": "JS1:None",
        "multi_node": None,  # a real blob cut in half (below)
        "single_gpu": "JS1:asd&asdf",
        "multi_gpu": NOT_JSON,
    }
    blob = BLOB_RE.search((real_data / SACCT_LINES).read_text()).group(0)
    bad["multi_node"] = blob[: len(blob) // 2 // 4 * 4]
    lines = []
    for name, (fmt, group) in groups.items():
        fixture = name.split(":")[1]
        if fixture not in (*bad, "bad_gpu", "bad_gpu_used"):
            continue
        assert fmt == fixture_format("conftest.py", fixture, "0")
        for line in group:
            fields = line.split("|")
            if fixture in bad and "." not in fields[3]:
                fields[0] = bad[fixture]
            lines.append("|".join(fields))
    dump = tmp_path / "tiger.txt"
    header = "|".join(sacct.split_format(fixture_format("conftest.py", "bad_gpu", "0")))
    dump.write_text(header + "\n" + "\n".join(lines) + "\n")
    res = jobfit("ingest", "sacct", str(dump), "--cluster", "tiger", "--json")
    assert res.code == 0, res.err
    report = json.loads(res.out)
    assert report["jobstats"] == {"decoded": 2, "quarantined": 5}
    assert report["quarantined"] == 0  # lines: every job and step landed
    assert report["tables"]["silver.jobstats"]["inserted"] == 2
    ctx = make_ctx()
    jobs = {r["job_id"] for r in read_table(ctx.spark, ctx.settings, "silver.jobs").collect()}
    assert {"45352405", "46044267", "39889258_1426", "8205464", "8205048", "8197399", "8189521"} <= jobs
    q = {r["raw"].split("|")[3]: r for r in read_table(ctx.spark, ctx.settings, "quarantine").collect()}
    reasons = {job: r["reason"] for job, r in q.items()}
    assert reasons == {
        "39889258_1426": "bad jobstats AdminComment: no summary: JS1:Short (the job was too short for "
        "jobstats to sample)",
        "8205464": "bad jobstats AdminComment: no summary: JS1:None (jobstats found no data for the job)",
        "8205048": "bad jobstats AdminComment: truncated gzip stream",
        "8197399": "bad jobstats AdminComment: not base64",
        "8189521": reasons["8189521"],
    }
    assert reasons["8189521"].startswith("bad jobstats AdminComment: not JSON")
    assert {r["source"] for r in q.values()} == {"jobstats"}
    stats = {r["job_id"]: r for r in read_table(ctx.spark, ctx.settings, "silver.jobstats").collect()}
    assert set(stats) == {"45352405", "46044267"}
    used = stats["46044267"]
    assert (used["nodes_n"], used["cpus"], used["gpus_n"], used["gpus_util_n"]) == (1, 12, 2, 1)
    assert (used["cpu_time_s"], used["mem_used_bytes"], used["gpu_util_mean_pct"]) == (
        960068.6,
        43497668608,
        9.5,
    )
    assert used["gpu_mem_peak_bytes"] == 18230214656 and used["state"] == "TIMEOUT"
    # The same dump again changes nothing.
    again = json.loads(jobfit("ingest", "sacct", str(dump), "--cluster", "tiger", "--json").out)
    assert again["tables"]["silver.jobstats"] == {
        "inserted": 0,
        "updated": 0,
        "unchanged": 2,
        "superseded": 0,
    }


# ---- a simulated month ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_simulated_month_jobstats_coverage_and_truth(jobfit, make_ctx, tmp_path: Path) -> None:
    """A month where 40 % of the GPU jobs carry jobstats summaries and no site runs dcgm-exporter (only
    sacct is ingested): GPU coverage rises from 0 by exactly those jobs' share of the GPU-hours, and their
    figures equal the simulator's truth."""
    sim = tmp_path / "sim"
    args = ("--cluster", "demo", "--month", "2026-11", "--jobs", "160", "--seed", "7")
    res = jobfit("simulate", *args, "--jobstats-share", "0.4", "--out", str(sim))
    assert res.code == 0, res.err
    res = jobfit("ingest", "sacct", str(sim / "sacct"), "--cluster", "demo", "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["jobstats"]["quarantined"] == 0
    res = jobfit("build", "--cluster", "demo", "--month", "2026-11", "--json")
    assert res.code == 0, res.err

    ctx = make_ctx()
    gold = read_table(ctx.spark, ctx.settings, "gold.job_usage").toPandas()
    month = read_table(ctx.spark, ctx.settings, "gold.cluster_month").toPandas().iloc[0]
    truth = pd.read_parquet(sim / "truth.parquet")
    m = truth[truth["source"] == "slurm"].merge(gold, on="job_id", how="inner", suffixes=("_t", "_g"))
    gpu = m[m["alloc_gpus_t"] > 0]
    chosen = gpu[gpu["has_jobstats"]]
    assert 5 <= len(chosen) < len(gpu)
    assert (chosen["gpu_telemetry_source"] == "jobstats").all() and (chosen["gpu_coverage_pct"] == 100).all()
    assert gpu[~gpu["has_jobstats"]]["has_gpu_telemetry"].eq(False).all()  # no DCGM: unknown, not 0 %
    # Coverage: from 0 (no DCGM anywhere) to exactly the summarised jobs' share of the GPU-hours.
    share = 100 * chosen["gpu_alloc_h"].sum() / gpu["gpu_alloc_h"].sum()
    assert month["gpu_coverage_pct"] == pytest.approx(share, abs=1e-4)
    gpu_month = gold[gold["alloc_gpus"] > 0]
    from_jobstats = (gpu_month["gpu_telemetry_source"] == "jobstats").sum()
    assert month["gpu_jobs_jobstats"] == len(chosen) == from_jobstats
    assert month["gpu_jobs_no_telemetry"] == len(gpu_month) - len(chosen)
    # The figures equal the truth (jobstats prints utilisation and CPU time to 0.1: the truth holds the same
    # rounded means; CPU seconds differ by at most 0.05 s per node; gold rounds to 6 decimals).
    hours = chosen["runtime_s"] / 3600
    assert chosen["gpu_alloc_h"].to_numpy() == pytest.approx(
        (chosen["alloc_gpus_t"] * hours).to_numpy(), abs=1e-6
    )
    assert chosen["gpu_util_mean_pct_g"].to_numpy() == pytest.approx(
        chosen["gpu_util_mean_pct_t"].to_numpy(), abs=1e-6
    )
    assert chosen["gpu_underused_h"].to_numpy() == pytest.approx(
        chosen["wasted_gpu_underuse_h"].to_numpy(), abs=1e-6
    )
    assert chosen["gpu_idle_h"].to_numpy() == pytest.approx(chosen["wasted_gpu_idle_h"].to_numpy(), abs=1e-6)
    assert chosen["cpu_wasted_core_h"].to_numpy() == pytest.approx(
        chosen["wasted_core_h"].to_numpy(), abs=0.05 * 8 / 3600
    )
    assert chosen["mem_wasted_gib_h"].to_numpy() == pytest.approx(
        chosen["wasted_mem_gib_h"].to_numpy(), abs=1e-6
    )
    assert (chosen["usage_source"] == "jobstats").all()
    # The models see jobstats' GPU memory peaks as they see DCGM's: with sacct's gres/gpumem gone (a site
    # whose Slurm records none), the training read still has each summarised job's peak, from gold.
    from jobs.io.prediction import read_jobs
    from jobs.io.tables import table_path

    jobs_path = table_path(ctx.settings, SILVER_JOBS.name)
    ctx.spark.sql(f"UPDATE delta.`{jobs_path}` SET gpu_mem_peak_bytes = NULL")
    seen = read_jobs(ctx, "demo").set_index("job_id")["gpu_mem_peak_bytes"]
    peaks = chosen.set_index("job_id")["vram_peak_bytes"]
    assert peaks.notna().all() and (seen.reindex(peaks.index) == peaks).all()
    assert seen.drop(peaks.index).isna().all()  # nothing invented for jobs without telemetry


# ---- Partition_Limit -----------------------------------------------------------------------------------

# `scontrol show partition -o` lines in the form Slurm prints (constructed for the test: no real dump is
# in the shared data; the block form is the one in Slurm's scontrol man page example).
SCONTROL = [
    "PartitionName=mainqueue AllowGroups=ALL Default=YES DefaultTime=01:00:00 MaxTime=2-00:00:00 "
    "MinNodes=0 Nodes=node[01-64] State=UP TotalCPUs=8192 TRES=cpu=8192,mem=32T,node=64",
    "PartitionName=debug",
    "   AllocNodes=ALL AllowGroups=ALL Default=NO",
    "   DefaultTime=NONE DisableRootJobs=NO Hidden=NO",
    "   MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=1",
    "   State=UP TotalCPUs=694 TotalNodes=49",
    "PartitionName=broken MaxTime=forever State=UP",
]


@pytest.mark.slow
def test_partition_limit_resolves_from_yaml_then_scontrol(
    spark: SparkSession, jobfit, make_ctx, tmp_path: Path, real_data: Path
) -> None:
    # reportseff's test_process_line_partition_timelimit: a real line with Timelimit=Partition_Limit.
    groups = real_groups(real_data / SACCT_LINES)
    name = next(n for n in groups if n.endswith(":test_process_line_partition_timelimit"))
    fmt, lines = groups[name]
    dump = tmp_path / "queue.txt"
    dump.write_text("|".join(sacct.split_format(fmt)) + "\n" + "\n".join(lines) + "\n")
    assert jobfit("ingest", "sacct", str(dump), "--cluster", "demo").code == 0
    ctx = make_ctx()
    jobs = read_table(ctx.spark, ctx.settings, "silver.jobs")
    (job,) = jobs.collect()
    assert (job["timelimit_s"], job["is_partition_timelimit"], job["partition"]) == (None, True, "mainqueue")
    jobs = jobs.withColumns({"start_ts": F.lit(T0), "end_ts": F.lit(T0) + F.expr("INTERVAL 5396 SECONDS")})
    empty = spark.createDataFrame([], SILVER_GPU_SAMPLES.schema)
    demo = load_cluster("demo")

    # Neither the yaml nor a dump knows the partition: no time efficiency, and why.
    (row,) = job_usage(jobs, empty, demo).collect()
    assert row["time_eff_pct"] is None and row["timelimit_s"] is None
    assert row["time_eff_note"].startswith("Partition_Limit: partition 'mainqueue' has no max_time")

    # An ingested scontrol dump resolves it; the bad record goes to quarantine with its reason.
    parts = tmp_path / "partitions.txt"
    parts.write_text("\n".join(SCONTROL) + "\n")
    res = jobfit("ingest", "partitions", str(parts), "--cluster", "demo", "--json")
    assert res.code == 0, res.err
    report = json.loads(res.out)
    assert (report["read"], report["inserted"], report["quarantined"], report["skipped"]) == (3, 2, 1, 4)
    stored = {r["partition"]: r for r in read_table(ctx.spark, ctx.settings, "silver.partitions").collect()}
    assert stored["mainqueue"]["max_time_s"] == 2 * 86400 and stored["mainqueue"]["default_time_s"] == 3600
    assert (stored["debug"]["max_time_s"], stored["debug"]["is_unlimited"]) == (None, True)
    (bad,) = read_table(ctx.spark, ctx.settings, "quarantine").where("source = 'partitions'").collect()
    assert bad["reason"] == "bad MaxTime: 'forever'" and bad["line_no"] == 7
    from jobs.stages.build import partition_limits

    limits = partition_limits(ctx, "demo")
    assert limits == {"mainqueue": 172800, "debug": None}
    (row,) = job_usage(jobs, empty, demo, partition_limits=limits).collect()
    assert (row["timelimit_s"], row["timelimit_source"]) == (172800, "scontrol")
    assert row["time_eff_pct"] == pytest.approx(5396 / 172800 * 100, abs=1e-6)
    # The same dump again changes nothing.
    again = json.loads(jobfit("ingest", "partitions", str(parts), "--cluster", "demo", "--json").out)
    assert again["tables"]["silver.partitions"] == {"inserted": 0, "updated": 0, "unchanged": 2}

    # The cluster yaml's partitions.<p>.max_time wins over the dump; UNLIMITED says so.
    yaml = demo.model_copy(
        update={
            "partitions": {
                **demo.partitions,
                "mainqueue": demo.partitions["cpu"].model_copy(update={"max_time": "03:00:00"}),
            }
        }
    )
    (row,) = job_usage(jobs, empty, yaml, partition_limits=limits).collect()
    assert (row["timelimit_s"], row["timelimit_source"]) == (10800, "conf")
    assert row["time_eff_pct"] == pytest.approx(5396 / 10800 * 100, abs=1e-6)
    unlimited = jobs.withColumn("partition", F.lit("debug"))
    (row,) = job_usage(unlimited, empty, demo, partition_limits=limits).collect()
    assert row["time_eff_pct"] is None
    assert row["time_eff_note"] == "Partition_Limit: partition 'debug' has MaxTime=UNLIMITED (scontrol)"


def test_bad_partitions_argument_exits_2(jobfit, tmp_path: Path) -> None:
    res = jobfit("ingest", "partitions", str(tmp_path / "missing.txt"), "--cluster", "demo")
    assert res.code == 2 and res.err.count("\n") == 1 and "no such file" in res.err
