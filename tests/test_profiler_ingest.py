"""`jobfit ingest profiler` and `jobfit bottlenecks` on the shared Spark session: a per-rank folder with
--job, a job id in the path, host + time attribution, re-ingest, quarantine, the --json shape."""

from __future__ import annotations

import gzip
import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from tests.profiler_traces import LOADER_LINE, USER_FILE, input_bound_trace, write_trace

pytestmark = pytest.mark.slow
REAL = Path(__file__).parent / "data" / "real" / "profiler"


def _table(spark, warehouse: Path, name: str):
    from conf import load_settings
    from jobs.io.tables import read_table

    return read_table(spark, load_settings({"JOBFIT_WAREHOUSE": str(warehouse)}), name)


def test_per_rank_folder_with_job_then_reingest_adds_nothing(
    jobfit, spark, warehouse: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for name in ("hta_trace_filter_sampled_rank-0.json.gz", "hta_trace_filter_sampled_rank-1.json.gz"):
        shutil.copy(REAL / name, folder / name)
    r = jobfit("ingest", "profiler", str(folder), "--cluster", "demo", "--job", "777", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert (
        out["files"] == 2 and out["quarantined"] == 0 and out["tables"]["attribution (traces)"] == {"flag": 2}
    )
    traces = _table(spark, warehouse, "silver.profiler_traces").orderBy("rank").collect()
    assert [(t["rank"], t["world_size"], t["job_id"], t["has_steps"]) for t in traces] == [
        (0, 128, "777", True),
        (1, 128, "777", True),
    ]
    events = _table(spark, warehouse, "silver.profiler_events")
    assert events.count() == out["inserted"] == 4811 + 4676
    assert dict(events.schema["ts_us"].jsonValue())["type"] == "double"
    history = spark.sql(f"DESCRIBE HISTORY delta.`{warehouse / 'silver' / 'profiler_events'}`")
    assert history.where("operation = 'WRITE'").count() == 1  # both ranks land in one commit
    again = json.loads(
        jobfit("ingest", "profiler", str(folder), "--cluster", "demo", "--job", "777", "--json").out
    )
    assert again["inserted"] == 0 and again["tables"]["files already ingested"] == {"files": 2}
    assert _table(spark, warehouse, "silver.profiler_events").count() == 4811 + 4676

    b = jobfit("bottlenecks", "--cluster", "demo", "--job", "777", "--json")
    assert b.code == 0, b.err
    d = json.loads(b.out)
    assert d["job_id"] == "777" and [x["rank"] for x in d["ranks"]] == [0, 1]
    for rank in d["ranks"]:
        assert set(rank["breakdown_pct"]) == {
            "kernel",
            "memcpy",
            "memset",
            "runtime",
            "dataloader",
            "cpu_exec",
            "other",
        }
        assert set(rank["gpu_pct"]) == {"idle", "compute", "non_compute"}
    kinds = {f["kind"] for f in d["findings"]}
    # Their exposed NCCL time hides behind a host that never blocks on the device (tests/test_profiler.py).
    assert "low_occupancy" in kinds and "communication_bound" not in kinds
    for f in d["findings"]:
        assert set(f) == {
            "kind",
            "source",
            "rank",
            "share_pct",
            "evidence",
            "fix",
            "file",
            "line",
            "gpu_hours_recoverable",
            "usd_recoverable",
        }
        assert f["file"] is None and f["line"] is None  # these traces have no stacks
    gold = _table(spark, warehouse, "gold.job_bottlenecks").where(F.col("job_id") == "777").count()
    assert gold == len(d["findings"])


def test_job_in_path_names_the_line_and_prices_it(jobfit, spark, warehouse: Path, tmp_path: Path) -> None:
    path = write_trace(tmp_path / "job_4242" / "node1_99.1700000000000.pt.trace.json.gz", input_bound_trace())
    r = jobfit("ingest", "profiler", str(path), "--cluster", "demo", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["tables"]["attribution (traces)"] == {"path": 1}
    d = json.loads(jobfit("bottlenecks", "--cluster", "demo", "--job", "4242", "--json").out)
    [f] = d["findings"]
    assert (f["kind"], f["file"], f["line"]) == ("input_bound", USER_FILE, LOADER_LINE)
    assert f["gpu_hours_recoverable"] is None  # the job is not in silver.jobs: its GPU-hours are unknown


def test_host_and_time_window_attribute_to_the_one_job(
    jobfit, spark, warehouse: Path, tmp_path: Path
) -> None:
    from conf import load_settings
    from jobs.io.tables import merge_into
    from pipelines.schemas import SILVER_JOBS

    settings = load_settings({"JOBFIT_WAREHOUSE": str(warehouse)})
    job = {
        "cluster": "demo",
        "job_id": "5150",
        "source": "slurm",
        "state": "COMPLETED",
        "user": "alice",
        "account": "ml",
        "start_ts": datetime(2023, 11, 14, 22, 0),
        "end_ts": datetime(2023, 11, 14, 23, 0),
        "elapsed_s": 3600,
        "alloc_gpus": 4,
        "gpu_model": "A100-SXM4-80GB",
        "node_list": "node[1-2]",
        "is_final": True,
        "ingested_at": datetime(2023, 11, 15),
    }
    frame = spark.createDataFrame([job]).select(*SILVER_JOBS.columns_from({k: k for k in job}))
    merge_into(spark, settings, SILVER_JOBS.name, frame)
    # 1_700_000_000 s = 2023-11-14 22:13:20 UTC, inside the job
    path = write_trace(
        tmp_path / "traces" / "node2_31337.1700000000000.pt.trace.json.gz", input_bound_trace()
    )
    r = jobfit("ingest", "profiler", str(path), "--cluster", "demo", "--json")
    assert json.loads(r.out)["tables"]["attribution (traces)"] == {"host_time": 1}
    [t] = _table(spark, warehouse, "silver.profiler_traces").collect()
    assert (t["job_id"], t["host"], t["pid"]) == ("5150", "node2", 7)
    d = json.loads(jobfit("bottlenecks", "--cluster", "demo", "--month", "2023-11", "--json").out)
    [f] = d["jobs"][0]["findings"]
    assert f["gpu_hours_recoverable"] == pytest.approx(4 * f["share_pct"] / 100, abs=0.01)
    assert f["usd_recoverable"] == pytest.approx(f["gpu_hours_recoverable"] * 2.95, abs=0.02)
    row = _table(spark, warehouse, "gold.job_bottlenecks").collect()[0]
    assert (row["user"], row["account"], row["month"], row["code"]["line"]) == (
        "alice",
        "ml",
        "2023-11",
        LOADER_LINE,
    )


def test_damaged_files_are_quarantined_and_the_rest_lands(
    jobfit, spark, warehouse: Path, tmp_path: Path
) -> None:
    good = tmp_path / "in" / "kineto_resnet50_autograd_api_num_workers_4.pt.trace.json.gz"
    good.parent.mkdir()
    shutil.copy(REAL / good.name, good)
    whole = gzip.compress((REAL / good.name).read_bytes())
    (tmp_path / "in" / "cut.pt.trace.json.gz").write_bytes(whole[: len(whole) // 2])  # a copy cut short
    (tmp_path / "in" / "notes.json").write_bytes(b'{"hello": 1}')
    bad_event = {
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1},
            {"ph": "X", "cat": "kernel", "name": "k", "ts": 1},
        ]
    }
    (tmp_path / "in" / "one_bad_event.json").write_text(json.dumps(bad_event))
    r = jobfit("ingest", "profiler", str(tmp_path / "in"), "--cluster", "demo", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["quarantined"] == 3 and out["inserted"] == 54377 + 1
    reasons = {
        Path(q["source_file"]).name: q["reason"] for q in _table(spark, warehouse, "quarantine").collect()
    }
    assert reasons["cut.pt.trace.json.gz"].startswith("not a readable gzip file")
    assert reasons["notes.json"] == "not a trace: no traceEvents array"
    assert reasons["one_bad_event.json"] == "complete event without a numeric dur"
    traces = {
        Path(t["source_file"]).name: t for t in _table(spark, warehouse, "silver.profiler_traces").collect()
    }
    assert traces[good.name]["schema_gen"] == "legacy" and traces[good.name]["attribution"] == "unattributed"
    assert "no --job, no job id in the path" in traces[good.name]["attribution_detail"]


def test_bad_arguments_exit_2_with_one_line(jobfit, tmp_path: Path) -> None:
    r = jobfit("bottlenecks", "--cluster", "demo", "--job", "1", "--month", "2024-01")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    r = jobfit("bottlenecks", "--cluster", "demo", "--month", "2024-13")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    r = jobfit("ingest", "profiler", str(tmp_path / "missing.json"), "--cluster", "demo")
    assert r.code == 2 and "no such file" in r.err


def test_a_trace_in_many_batches_lands_in_one_commit_and_leaves_no_staging(
    jobfit, spark, warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs.stages.ingest import profiler

    monkeypatch.setattr(profiler, "EVENT_BATCH", 1000)  # the real rank's 4,811 events in five batches
    trace = tmp_path / "hta_trace_filter_sampled_rank-0.json.gz"
    shutil.copy(REAL / trace.name, trace)
    r = jobfit("ingest", "profiler", str(trace), "--cluster", "demo", "--job", "778", "--json")
    assert r.code == 0, r.err
    events = _table(spark, warehouse, "silver.profiler_events")
    assert events.count() == json.loads(r.out)["inserted"] == 4811
    assert events.select("event_no").distinct().count() == 4811
    history = spark.sql(f"DESCRIBE HISTORY delta.`{warehouse / 'silver' / 'profiler_events'}`")
    assert history.where("operation = 'WRITE'").count() == 1  # one replace of the trace's rows
    assert not any((warehouse / "_staging").rglob("*.parquet"))


def test_a_group_closes_at_its_trace_limit_and_each_trace_lands_whole(
    jobfit, spark, warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs.stages.ingest import profiler

    monkeypatch.setattr(profiler, "GROUP_TRACES", 1)  # a commit per trace
    monkeypatch.setattr(profiler, "EVENT_BATCH", 3000)  # rank 0 staged in two batches
    folder = tmp_path / "ranks"
    folder.mkdir()
    for name in ("hta_trace_filter_sampled_rank-0.json.gz", "hta_trace_filter_sampled_rank-1.json.gz"):
        shutil.copy(REAL / name, folder / name)
    r = jobfit("ingest", "profiler", str(folder), "--cluster", "demo", "--job", "779")
    assert r.code == 0, r.err
    assert r.err.count("landed 1 trace(s)") == 2
    events = _table(spark, warehouse, "silver.profiler_events").join(
        _table(spark, warehouse, "silver.profiler_traces").select("trace_id", "rank"), "trace_id"
    )
    assert sorted(tuple(x) for x in events.groupBy("rank").count().collect()) == [(0, 4811), (1, 4676)]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{warehouse / 'silver' / 'profiler_events'}`")
    assert history.where("operation = 'WRITE'").count() == 2
    assert not any((warehouse / "_staging").rglob("*.parquet"))


def test_a_killed_runs_staging_is_removed_by_a_later_run_and_a_live_one_is_kept(
    jobfit, warehouse: Path, tmp_path: Path
) -> None:
    import os
    import time

    from jobs.stages.ingest.profiler import STAGING_MAX_AGE_S

    staging = warehouse / "_staging" / "profiler"
    killed, live = staging / "0123456789abcdef-killed", staging / "fedcba9876543210-live"
    for folder in (killed, live):
        folder.mkdir(parents=True)
        (folder / "part-00000.parquet").write_bytes(b"PAR1")
    old = time.time() - STAGING_MAX_AGE_S - 600
    os.utime(killed / "part-00000.parquet", (old, old))
    os.utime(killed, (old, old))
    trace = tmp_path / "trace.json"
    write_trace(trace, input_bound_trace())
    r = jobfit("ingest", "profiler", str(trace), "--cluster", "demo", "--job", "779")
    assert r.code == 0, r.err
    assert not killed.exists() and "killed over a day ago" in r.err
    assert (live / "part-00000.parquet").exists()  # a run still writing there keeps its folder
