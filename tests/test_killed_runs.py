"""A run killed with SIGKILL part-way (during the bronze write, during a MERGE into silver, during the gold
build) leaves tables that running the same command again repairs: every table ends with the rows of a run
that was never interrupted. The killed runs are real `jobfit` processes; the re-runs and the reference run
share the test session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from conf import load_cluster
from jobs.simulator import simulate
from tests.child_env import child_env
from tests.rows import delta_tables

pytestmark = [pytest.mark.slow, pytest.mark.apart]  # three more JVMs

REPO = Path(__file__).resolve().parents[1]
MONTH = "2026-03"
# Columns that say when a row was written, not what it holds: a re-run writes them anew.


def _kill_when(warehouse: Path, marker: str, *args: str) -> str:
    """Start `jobfit ARGS` on `warehouse`, SIGKILL it as soon as a file matching `marker` (a glob under the
    warehouse) exists, and return what it had printed. Fails if the run ended before the marker."""
    env = child_env(JOBFIT_WAREHOUSE=str(warehouse))
    log = warehouse.parent / f"killed-{args[0]}.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", *args],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 600
        while not any(warehouse.glob(marker)):
            assert process.poll() is None, f"ended before {marker}: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"no {marker} within 600 s"
            time.sleep(0.02)
        os.killpg(process.pid, signal.SIGKILL)
        assert process.wait(timeout=60) == -signal.SIGKILL
    return log.read_text()


def test_killed_ingests_and_build_are_repaired_by_a_rerun(
    jobfit, spark: SparkSession, tmp_path: Path, warehouse: Path
) -> None:
    sim = tmp_path / "sim"
    simulate(load_cluster("demo"), MONTH, 120, seed=9, out=sim, inject_bad=6)
    sacct = ("ingest", "sacct", str(sim / "sacct"), "--cluster", "demo")
    dcgm = ("ingest", "dcgm", str(sim / "dcgm"), "--cluster", "demo")
    build = ("build", "--cluster", "demo", "--month", MONTH)

    reference = tmp_path / "reference"
    for args in (sacct, dcgm, build):
        assert jobfit(*args, warehouse=str(reference)).code in (0, 1)

    warehouse.mkdir()
    # sacct: killed in the middle of the MERGE into silver.jobs (bronze has committed by then).
    _kill_when(warehouse, "silver/jobs/**/*.parquet", *sacct)
    assert any(warehouse.glob("bronze/sacct/_delta_log/*.json"))
    assert jobfit(*sacct).code in (0, 1)
    # dcgm: killed while the samples are written into silver.gpu_samples (bronze lands last).
    _kill_when(warehouse, "silver/gpu_samples/**/*.parquet", *dcgm)
    assert jobfit(*dcgm).code in (0, 1)
    # build: killed when the first gold table's files appear.
    _kill_when(warehouse, "gold/*/**/*.parquet", *build)
    assert jobfit(*build).code == 0

    repaired, expected = delta_tables(spark, warehouse), delta_tables(spark, reference)
    assert sorted(repaired) == sorted(expected)
    for name, rows in expected.items():
        assert rows, name
        assert repaired[name] == rows, name
