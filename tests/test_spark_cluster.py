"""jobfit on a real Spark standalone cluster: a master and one worker started on loopback from the installed
pyspark distribution; `jobfit ingest sacct`, `jobfit ingest dcgm` and `jobfit build` run against it as
`jobfit` processes and leave the same tables as a local[*] run of the same input.

The executors' Python is the project's interpreter with `-S` (no site-packages .pth files, so jobfit's
editable install is invisible to it) and only the third-party packages on its path: they can import
`pipelines`, `conf`, ... only from the archive jobfit ships with `spark.ship_code`. The Delta jars reach
them from the driver through `spark.jars`. Nothing runs from the driver's working directory: the `jobfit`
processes start in an empty folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pyspark.sql import SparkSession

from conf import load_cluster
from jobs.simulator import simulate
from tests.child_env import child_env
from tests.rows import delta_tables
from tests.servers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.apart]  # a master, a worker, an executor and three driver JVMs

REPO = Path(__file__).resolve().parents[1]
SPARK_HOME = Path(__import__("pyspark").__file__).parent
MONTH = "2026-03"
# Columns that say when a row was written, not what it holds: a re-run writes them anew.
# What a user sets for a small standalone cluster (a YAML mapping in one variable: keys keep their case).
EXECUTOR_CONF = {"spark.executor.memory": "768m", "spark.cores.max": "1"}


def _spark_class(cls: str, *args: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A Spark daemon (`spark-class CLS ARGS`) in its own process group, output to `log`."""
    with log.open("w") as out:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), cls, *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group (spark-class execs java, which may fork), SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=20)


@pytest.fixture(scope="module")
def standalone_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(`spark://127.0.0.1:<port>`, the worker's work dir) of a running master with one registered worker
    (1 core, 1 GiB)."""
    root = tmp_path_factory.mktemp("standalone")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBFIT_", "SPARK_", "PYSPARK_"))}
    env |= {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(root)}
    port, ui = free_port(), free_port()
    master_url = f"spark://127.0.0.1:{port}"
    processes = [
        _spark_class(
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)),
            env=env,
            log=root / "master.log",
        )
    ]
    try:
        processes.append(
            _spark_class(
                "org.apache.spark.deploy.worker.Worker",
                master_url,
                *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g"),
                *("--webui-port", str(free_port()), "--work-dir", str(root / "work")),
                env=env,
                log=root / "worker.log",
            )
        )
        deadline = time.monotonic() + 90
        while True:  # the worker retries until the master listens; wait for it to be ALIVE there
            for process, name in zip(processes, ("master", "worker"), strict=True):
                if process.poll() is not None:
                    pytest.fail(f"spark {name} exited: {(root / f'{name}.log').read_text()[-2000:]}")
            try:
                state = httpx.get(f"http://127.0.0.1:{ui}/json/", timeout=2).json()
                if state.get("aliveworkers", 0) >= 1:
                    break
            except (httpx.TransportError, ValueError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"no worker registered within 90 s: {(root / 'worker.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield master_url, root / "work"
    finally:
        for process in reversed(processes):
            _stop(process)


def _executor_python(folder: Path) -> Path:
    """A Python for the executors that has the third-party packages but not jobfit: the project's
    interpreter with `-S` and site-packages put back on the path without its .pth files."""
    script = folder / "executor-python"
    site = sysconfig.get_paths()["purelib"]
    script.write_text(
        f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}" exec {sys.executable} -S "$@"\n'
    )
    script.chmod(0o755)
    return script


def _jobfit(driver_dir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`jobfit ARGS` as its own process from an empty working directory."""
    cmd = [str(Path(sys.executable).parent / "jobfit"), *args]
    return subprocess.run(cmd, cwd=driver_dir, env=env, capture_output=True, text=True, timeout=1800)


def test_standalone_cluster_builds_the_tables_a_local_run_builds(
    standalone_master: tuple[str, Path], jobfit, spark: SparkSession, tmp_path: Path
) -> None:
    master_url, work = standalone_master
    sim = tmp_path / "sim"
    simulate(load_cluster("demo"), MONTH, 12, seed=9, out=sim)
    commands = [
        ("ingest", "sacct", str(sim / "sacct"), "--cluster", "demo"),
        ("ingest", "dcgm", str(sim / "dcgm"), "--cluster", "demo"),
        ("build", "--cluster", "demo", "--month", MONTH),
    ]
    driver_dir = tmp_path / "driver"
    driver_dir.mkdir()
    on_cluster = tmp_path / "on-cluster"
    env = child_env(drop=("JOBFIT_", "SPARK_", "PYSPARK_"), spark_conf=EXECUTOR_CONF) | {
        "JOBFIT_WAREHOUSE": str(on_cluster),
        "JOBFIT_SPARK__MASTER": master_url,
        "JOBFIT_SPARK__DRIVER_MEMORY": "1g",
        "JOBFIT_SPARK__SHUFFLE_PARTITIONS": "2",
        "JOBFIT_SPARK__JARS_DIR": str(REPO / ".jars"),
        "JOBFIT_MLFLOW__TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": str(_executor_python(tmp_path)),
    }
    # The executors' Python cannot import jobfit by itself: the modules they run come from the archive.
    bare_cmd = [env["PYSPARK_PYTHON"], "-c", "import pipelines"]
    bare = subprocess.run(bare_cmd, cwd=driver_dir, env=env, capture_output=True, text=True)
    assert "No module named 'pipelines'" in bare.stderr, bare.stderr

    reference = tmp_path / "reference"
    for args in commands:
        run = _jobfit(driver_dir, env, *args)
        assert run.returncode in (0, 1), f"{args}: {run.stderr[-3000:]}"
        assert "Traceback" not in run.stderr, run.stderr[-3000:]
        local = jobfit(*args, warehouse=str(reference))
        assert local.code == run.returncode, local.err[-2000:]

    # What the executors were sent, by configuration alone: the Delta jars and jobfit's code archive.
    for app in sorted(work.glob("app-*")):
        sent = {f.name for f in app.glob("*/*")}
        assert any(n.startswith("delta-spark_") for n in sent), sent
        assert any(n.startswith("jobfit-code-") for n in sent), sent
    assert len(list(work.glob("app-*"))) == len(commands)

    clustered, expected = delta_tables(spark, on_cluster), delta_tables(spark, reference)
    assert {"silver/jobs", "silver/gpu_samples", "gold/job_usage"} <= set(expected)
    assert sorted(clustered) == sorted(expected)
    for name, rows in expected.items():
        assert clustered[name] == rows, name
    assert expected["silver/jobs"] and expected["silver/gpu_samples"] and expected["gold/job_usage"]
