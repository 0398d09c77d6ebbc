"""`jobfit sql-server`: a real Spark Connect server (a subprocess) over a copy of the built month's warehouse,
queried by a real Connect client (another process: the tests' classic session cannot share one with it),
answers as the classic session does, registers a table written after its start, and stops on SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from conf import load_settings
from jobs.cli import main
from jobs.context import Context
from jobs.io.tables import register_tables, table_path
from pipelines.schemas import OPS_EMAIL_LEDGER
from tests.child_env import child_env
from tests.conftest import CliResult
from tests.report_month import BuiltMonth
from tests.servers import free_port

QUERIES = (
    "SELECT user, jobs, round(wasted_usd, 6) AS wasted_usd, round(gpu_underused_h, 6) AS gpu_underused_h "
    "FROM gold.user_month ORDER BY user",
    "SELECT state, count(*) AS jobs, sum(alloc_cpus) AS cpus FROM silver.jobs GROUP BY state ORDER BY state",
)
LEDGER_QUERY = "SELECT user, status FROM ops.email_ledger"

# The notebook side: wait until the server has registered `ops.email_ledger`, then run the queries.
CLIENT = """
import json, sys, time
from pyspark.sql import SparkSession

url, queries = sys.argv[1], json.loads(sys.argv[2])
spark = SparkSession.builder.remote(url).getOrCreate()
deadline = time.monotonic() + 60
while time.monotonic() < deadline and not spark.catalog.tableExists("ops.email_ledger"):
    time.sleep(0.5)
print(json.dumps([[list(r) for r in spark.sql(q).collect()] for q in queries], default=str))
spark.stop()
"""


def _server_env(warehouse: Path, built_month: BuiltMonth) -> dict[str, str]:
    return child_env(drop=("JOBFIT_", "SPARK_")) | built_month.env(
        warehouse,
        JOBFIT_SPARK__MASTER="local[1]",
        JOBFIT_SPARK__DRIVER_MEMORY="1g",
        JOBFIT_SPARK__SHUFFLE_PARTITIONS="2",
    )


def _read_start(process: subprocess.Popen[str], log: Path) -> dict[str, Any]:
    """The JSON object `--json` prints on start (several lines), or the test fails with the server's log."""
    text = ""
    while True:
        line = process.stdout.readline()  # type: ignore[union-attr]
        if not line:
            process.wait(timeout=30)
            pytest.fail(f"jobfit sql-server exited {process.returncode}: {log.read_text()[-3000:]}")
        text += line
        if line.rstrip() == "}":
            return json.loads(text)


def _same(connect: list[list[Any]], classic: list[list[Any]]) -> None:
    assert len(connect) == len(classic)
    for got, want in zip(connect, classic, strict=True):
        assert got == [pytest.approx(v) if isinstance(v, float) else v for v in want]


@pytest.mark.slow
def test_connect_client_reads_the_tables_by_name(built_month: BuiltMonth, tmp_path: Path) -> None:
    warehouse = built_month.copy_warehouse(tmp_path / "warehouse")
    settings = load_settings(built_month.env(warehouse))
    ledger = table_path(settings, OPS_EMAIL_LEDGER.name)
    shutil.rmtree(ledger, ignore_errors=True)  # written after the start below
    port, log = free_port(), tmp_path / "server.log"
    cmd = [sys.executable, "-m", "jobs.cli", "sql-server", "--port", str(port), "--refresh", "1", "--json"]
    with log.open("w") as err:
        server = subprocess.Popen(
            cmd,
            cwd=tmp_path,
            env=_server_env(warehouse, built_month),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        start = _read_start(server, log)
        assert start["url"] == f"sc://127.0.0.1:{port}"
        assert {"gold.user_month", "gold.job_usage", "silver.jobs", "bronze.sacct"} <= set(start["tables"])
        assert OPS_EMAIL_LEDGER.name not in start["tables"]

        row = {c: None for c in OPS_EMAIL_LEDGER.columns} | {
            "cluster": "demo", "month": "2026-11", "user": "alice", "transport": "outbox", "recipient": "a@x",
            "message_id": "<m@x>", "status": "written", "attempts": 1, "sent_at": datetime(2026, 12, 1),
        }  # fmt: skip
        spark = built_month.spark
        spark.createDataFrame([row], OPS_EMAIL_LEDGER.schema).write.format("delta").save(ledger)

        client = subprocess.run(
            [sys.executable, "-c", CLIENT, start["url"], json.dumps([*QUERIES, LEDGER_QUERY])],
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if not k.startswith("SPARK_")},
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert client.returncode == 0, client.stderr[-3000:] + log.read_text()[-2000:]
        answers = json.loads(client.stdout.strip().splitlines()[-1])

        register_tables(spark, settings)
        classic = [[list(r) for r in spark.sql(q).collect()] for q in QUERIES]
        assert classic[0] and classic[1], "the built month has users and jobs"
        for got, want in zip(answers[:2], classic, strict=True):
            _same(got, want)
        assert answers[2] == [["alice", "written"]]
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=90)
    assert code == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "registered ops.email_ledger" in text
    assert "Spark Connect server stopped" in text
    with socket.socket() as sock:  # the port is free again: the Connect server went with the process
        sock.bind(("127.0.0.1", port))


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> CliResult:
    """`jobfit ARGV` in-process; a refusal comes before any Spark session is wanted."""
    capsys.readouterr()
    code = main(list(argv), ctx=Context(environ={}, quiet=True))
    out = capsys.readouterr()
    return CliResult(code, out.out, out.err)


def test_bad_port_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    result = _run(capsys, "sql-server", "--port", "70000")
    assert result.code == 2
    assert result.err.strip().count("\n") == 0 and "expected a port" in result.err


def test_port_in_use_is_refused_before_spark_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        result = _run(capsys, "sql-server", "--port", str(sock.getsockname()[1]))
    assert result.code == 2
    assert result.err.startswith("jobfit: error: cannot listen on 127.0.0.1:")
    assert result.err.strip().count("\n") == 0
