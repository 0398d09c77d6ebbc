"""One simulated month, built once per test session for every report and e-mail test: simulated (with
profiler traces and DCGM profiling counters), ingested, built to gold, analysed for bottlenecks and trained
(so recommendations exist), through the real commands on the shared Spark."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.cli import main
from jobs.context import Context

CLUSTER, MONTH = "demo", "2026-11"
REPO = Path(__file__).resolve().parents[1]
SOURCES = ("sacct", "scripts", "dcgm", "logs", "profiler")


@dataclass
class BuiltMonth:
    """Where the built month lives: its warehouse, MLflow store and simulated files."""

    root: Path
    warehouse: Path
    mlflow_uri: str
    sim: Path
    spark: SparkSession

    def env(self, warehouse: Path | None = None, **more: str) -> dict[str, str]:
        """JOBFIT_* variables pointing at this month (or a copy of its warehouse)."""
        return {
            "JOBFIT_WAREHOUSE": str(warehouse or self.warehouse),
            "JOBFIT_MLFLOW__TRACKING_URI": self.mlflow_uri,
            "JOBFIT_SPARK__JARS_DIR": str(REPO / ".jars"),
            **more,
        }

    def ctx(self, warehouse: Path | None = None, **more: str) -> Context:
        """A Context on the shared session for this month."""
        ctx = Context(environ=self.env(warehouse, **more), quiet=True)
        ctx.use_spark(self.spark)
        return ctx

    def copy_warehouse(self, to: Path) -> Path:
        """A private copy of the built warehouse (a test that writes the ledger leaves the others alone)."""
        shutil.copytree(self.warehouse, to)
        return to


def run_jobfit(ctx: Context, *argv: str) -> int:
    return main(list(argv), ctx=ctx)


def build_month(spark: SparkSession, root: Path, jobs: int = 300) -> BuiltMonth:
    """Simulate, ingest every source, build gold and train small models for one month."""
    month = BuiltMonth(
        root=root,
        warehouse=root / "warehouse",
        mlflow_uri=f"sqlite:///{root / 'mlflow.db'}",
        sim=root / "sim",
        spark=spark,
    )
    ctx = month.ctx()
    steps: list[tuple[str, ...]] = [
        ("simulate", "--cluster", CLUSTER, "--month", MONTH, "--jobs", str(jobs), "--seed", "5",
         "--dcgm-interval", "300", "--profiled-share", "0.1", "--dcgm-prof-share", "0.5",
         "--out", str(month.sim)),
        *(("ingest", s, str(month.sim / s), "--cluster", CLUSTER) for s in SOURCES),
        ("build", "--cluster", CLUSTER, "--month", MONTH),
        ("bottlenecks", "--cluster", CLUSTER, "--month", MONTH),
        ("train", "--cluster", CLUSTER, "--rounds", "2", "--targets", "mem,runtime"),
    ]  # fmt: skip
    for argv in steps:
        code = run_jobfit(ctx, *argv)
        if code != 0:
            pytest.fail(f"building the report month: jobfit {' '.join(argv)} exited {code}")
    return month


@pytest.fixture(scope="session")
def built_month(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> BuiltMonth:
    """The shared simulated month (built on first use)."""
    return build_month(spark, tmp_path_factory.mktemp("report-month"))
