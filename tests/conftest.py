"""One Spark session for the whole test run; each test gets its own warehouse under tmp_path."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from conf import load_settings
from jobs.cli import main
from jobs.context import Context
from jobs.io.spark import build_session
from tests.report_month import built_month  # noqa: F401  (the month every report and e-mail test shares)

REPO = Path(__file__).resolve().parents[1]
# py4j logs "Closing down clientserver connection" from __del__ after pytest has closed its streams.
logging.getLogger("py4j").setLevel(logging.WARNING)

# Real records copied into the repository (provenance: tests/data/real/README.md); REAL_DATA_DIR overrides.
REAL = Path(os.environ.get("REAL_DATA_DIR", REPO / "tests" / "data" / "real"))


@pytest.fixture(scope="session")
def real_data() -> Path:
    """tests/data/real (read-only records written by other people), or $REAL_DATA_DIR."""
    if not REAL.is_dir():
        pytest.fail(f"real data folder missing: {REAL} (set REAL_DATA_DIR)")
    return REAL


# The shared session evaluates expressions interpreted instead of compiling them: the tests' inputs are a few
# hundred rows, where Janino's compile of each new plan costs more than the rows do (a warm in-process ingest
# of the 497-line simulated sacct month: 21.9 → 15.2 s). Results are Spark's to keep equal in both modes; the
# compiled path, as users run it, is what every `jobfit` process a test starts uses (the apart tests, `serve`,
# the e-mail runs) and `make demo`.
SESSION_CONF = {"spark.sql.codegen.factoryMode": "NO_CODEGEN", "spark.sql.codegen.wholeStage": "false"}


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    warehouse = tmp_path_factory.mktemp("session-warehouse")
    settings = load_settings(
        {
            "JOBFIT_WAREHOUSE": str(warehouse),
            "JOBFIT_SPARK__MASTER": "local[2]",
            "JOBFIT_SPARK__SHUFFLE_PARTITIONS": "2",
            "JOBFIT_SPARK__DRIVER_MEMORY": "2g",
            "JOBFIT_SPARK__JARS_DIR": str(REPO / ".jars"),
            "JOBFIT_SPARK__CONF": json.dumps(SESSION_CONF),
        }
    )
    session = build_session(settings)
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _forget_delta_logs(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test that used the shared session, drop Delta's cached logs: every test writes its own
    warehouse, and the cache would keep each table's log and snapshot plans for the rest of the run."""
    yield
    if "spark" in request.fixturenames:
        spark = request.getfixturevalue("spark")
        spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "warehouse"


@pytest.fixture
def make_ctx(spark: SparkSession, warehouse: Path, tmp_path: Path) -> Callable[..., Context]:
    """A Context on the shared session, with this test's warehouse, MLflow store and outbox."""

    def _make(**env: str) -> Context:
        environ = {
            "JOBFIT_WAREHOUSE": str(warehouse),
            "JOBFIT_OUTBOX": str(tmp_path / "outbox"),
            "JOBFIT_MLFLOW__TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
            **{f"JOBFIT_{k.upper()}": v for k, v in env.items()},
        }
        ctx = Context(environ=environ, quiet=False)
        ctx.use_spark(spark)
        return ctx

    return _make


@pytest.fixture
def jobfit(make_ctx: Callable[..., Context], capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """Run `jobfit ARGS...` in-process on the shared session; returns exit code, stdout, stderr."""

    def _run(*args: str, **env: str) -> CliResult:
        capsys.readouterr()
        code = main(list(args), ctx=make_ctx(**env))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return _run
