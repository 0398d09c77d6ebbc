"""Two `jobfit ingest` processes writing one warehouse at once (what an Airflow backfill does): both
succeed — Delta refuses the later of two conflicting commits and jobfit tries it again — and the tables
end with the same rows as one run over all the files, none lost or doubled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf import load_cluster
from jobs.simulator import simulate
from tests.child_env import child_env

pytestmark = [pytest.mark.slow, pytest.mark.apart]  # two more JVMs

REPO = Path(__file__).resolve().parents[1]
JOB_COLUMNS = ["cluster", "job_id", "user", "state", "submit_ts", "end_ts", "elapsed_s", "max_rss_bytes"]


def _ingest(warehouse: Path, *paths: Path, source: str = "sacct") -> subprocess.Popen[str]:
    env = child_env(JOBFIT_WAREHOUSE=str(warehouse))
    cmd = [sys.executable, "-m", "jobs.cli", "-q", "ingest", source, *map(str, paths), "--cluster", "demo"]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_ingests_at_once_lose_and_double_nothing(
    jobfit, spark: SparkSession, tmp_path: Path, warehouse: Path
) -> None:
    out = tmp_path / "sim"
    simulate(load_cluster("demo"), "2026-03", 150, seed=4, out=out)
    dumps = sorted((out / "sacct").glob("*.txt"))
    half = len(dumps) // 2
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, part in ((first, dumps[:half]), (second, dumps[half:])):
        folder.mkdir()
        for dump in part:
            (folder / dump.name).write_bytes(dump.read_bytes())
    together = tmp_path / "together"
    runs = [_ingest(together, first), _ingest(together, second)]
    results = [run.communicate(timeout=600) for run in runs]
    for run, (_, err) in zip(runs, results, strict=True):
        assert run.returncode == 0, err[-3000:]
        assert "Traceback" not in err
    # The reference: one in-process run over all the files.
    assert jobfit("ingest", "sacct", str(first), str(second), "--cluster", "demo").code == 0

    def table(root: Path, name: str) -> list[tuple]:
        df = spark.read.format("delta").load(str(root / name))
        columns = JOB_COLUMNS if name == "silver/jobs" else ["cluster", "source_file", "line_no", "raw"]
        return sorted(tuple(r) for r in df.select(*columns).collect())

    for name in ("silver/jobs", "bronze/sacct"):
        assert table(together, name) == table(warehouse, name), name
    jobs = spark.read.format("delta").load(str(together / "silver/jobs"))
    assert jobs.groupBy("cluster", "job_id").count().where(F.col("count") > 1).count() == 0


def test_the_same_dcgm_file_twice_at_once_lands_once(
    spark: SparkSession, tmp_path: Path, real_data: Path
) -> None:
    """Both runs find the file not yet in bronze (each checks before either writes); its lines must still
    land once: bronze is written by an insert-only MERGE on (cluster, file_sha256, line_no), so the later
    commit conflicts, is retried and finds the lines there."""
    scrape = tmp_path / "r6i3n0-1700000000.prom"
    scrape.write_bytes(
        (real_data / "telemetry" / "dcgm-exporter_scrape_V100__NVIDIA_dcgm-exporter_250.prom").read_bytes()
    )
    together = tmp_path / "together"
    runs = [_ingest(together, scrape, source="dcgm") for _ in range(2)]
    try:
        for run in runs:
            _, err = run.communicate(timeout=600)
            assert run.returncode == 0, err[-3000:]
            assert "Traceback" not in err
    finally:
        for run in runs:
            run.kill()  # no-op once finished; a timed-out run is not left behind

    def table(name: str):
        return spark.read.format("delta").load(str(together / name))

    bronze = table("bronze/gpu_samples")
    assert bronze.count() == len(scrape.read_text().splitlines())
    assert bronze.groupBy("cluster", "file_sha256", "line_no").count().where(F.col("count") > 1).count() == 0
    key = ["cluster", "host", "device", "ts", "label_job"]
    samples = table("silver/gpu_samples")
    assert samples.count() > 0
    assert samples.groupBy(*key).count().where(F.col("count") > 1).count() == 0


def test_the_same_trace_twice_at_once_lands_once(
    spark: SparkSession, tmp_path: Path, real_data: Path
) -> None:
    """Two runs land the same rank trace at once: each replaces all of the trace's events in one commit, the
    later conflicts and is tried again, so the events land once and no staging is left."""
    trace = tmp_path / "hta_trace_filter_sampled_rank-1.json.gz"
    trace.write_bytes((real_data / "profiler" / trace.name).read_bytes())
    together = tmp_path / "together"
    runs = [_ingest(together, trace, source="profiler") for _ in range(2)]
    try:
        for run in runs:
            _, err = run.communicate(timeout=600)
            assert run.returncode == 0, err[-3000:]
            assert "Traceback" not in err
    finally:
        for run in runs:
            run.kill()
    events = spark.read.format("delta").load(str(together / "silver/profiler_events"))
    assert events.count() == 4676
    assert events.groupBy("cluster", "trace_id", "event_no").count().where(F.col("count") > 1).count() == 0
    traces = spark.read.format("delta").load(str(together / "silver/profiler_traces"))
    assert traces.count() == 1
    assert not any((together / "_staging").rglob("*.parquet"))
