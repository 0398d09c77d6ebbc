"""The warehouse on S3: `jobfit ingest sacct`, `jobfit build` and `jobfit sql` against `s3a://bucket/prefix`
on a real S3-compatible server (moto's server mode, a separate process on loopback), with hadoop-aws and the
AWS SDK from `make setup` and credentials only from the environment. The answers equal a local run's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest

from conf import load_cluster
from jobs.simulator import simulate
from tests.child_env import child_env
from tests.servers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.apart]  # an S3 server and three more JVMs

REPO = Path(__file__).resolve().parents[1]
MONTH = "2026-03"
BUCKET = "jobfit-test"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "jobfit-test", "AWS_SECRET_ACCESS_KEY": "jobfit-secret"}
QUERY = (
    "SELECT (SELECT count(*) FROM silver.jobs) AS jobs, "
    "(SELECT sum(elapsed_s) FROM silver.jobs) AS elapsed_s, "
    "(SELECT count(*) FROM gold.job_usage) AS usage_rows, "
    "(SELECT count(*) FROM gold.user_month) AS user_months"
)


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """http://127.0.0.1:<port> of a running moto server with an empty bucket BUCKET."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, f"moto_server exited: {log.read_text()[-2000:]}"
            try:
                httpx.get(url, timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, f"moto_server did not answer: {log.read_text()[-2000:]}"
                time.sleep(0.3)
        s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1", **_lower(CREDENTIALS))
        s3.create_bucket(Bucket=BUCKET)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)


def _lower(credentials: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in credentials.items()}


def test_ingest_build_and_query_a_warehouse_on_s3(s3_endpoint: str, jobfit, tmp_path: Path) -> None:
    sim = tmp_path / "sim"
    simulate(load_cluster("demo"), MONTH, 12, seed=5, out=sim)
    commands = [
        ("ingest", "sacct", str(sim / "sacct"), "--cluster", "demo"),
        ("build", "--cluster", "demo", "--month", MONTH),
    ]
    driver_dir = tmp_path / "driver"
    driver_dir.mkdir()
    # The endpoint is a setting; the keys come from AWS_* below (s3a's environment credentials).
    s3a = {
        "spark.hadoop.fs.s3a.endpoint": s3_endpoint,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
    }
    env = (
        child_env(drop=("JOBFIT_", "AWS_"), spark_conf=s3a)
        | CREDENTIALS
        | {
            "AWS_REGION": "us-east-1",
            "JOBFIT_WAREHOUSE": f"s3a://{BUCKET}/warehouse",
            "JOBFIT_SPARK__MASTER": "local[2]",
            "JOBFIT_SPARK__DRIVER_MEMORY": "1g",
            "JOBFIT_SPARK__SHUFFLE_PARTITIONS": "2",
            "JOBFIT_SPARK__JARS_DIR": str(REPO / ".jars"),
            "JOBFIT_MLFLOW__TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        }
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(Path(sys.executable).parent / "jobfit"), *args]
        done = subprocess.run(cmd, cwd=driver_dir, env=env, capture_output=True, text=True, timeout=1800)
        assert done.returncode in (0, 1), f"{args}: {done.stderr[-3000:]}"
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
        return done

    for args in commands:
        run(*args)
        assert jobfit(*args).code in (0, 1)  # the same on the test's local warehouse
    on_s3 = json.loads(run("sql", QUERY, "--json").stdout)["rows"]
    local = json.loads(jobfit("sql", QUERY, "--json").out)["rows"]
    assert on_s3 == local
    assert on_s3[0]["jobs"] > 0 and on_s3[0]["usage_rows"] > 0

    # The tables are in the bucket, nothing landed beside the driver.
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", **_lower(CREDENTIALS))
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
    keys = [o["Key"] for page in pages for o in page["Contents"]]
    for table in ("bronze/sacct", "silver/jobs", "gold/job_usage"):
        assert f"warehouse/{table}/_delta_log/00000000000000000000.json" in keys, table
    assert not list(driver_dir.glob("**/_delta_log"))
