"""`jobfit_daily` run by Airflow itself (`dag.test()`, the engine of `airflow dags test`) for one day of a
simulated drop folder: Slurm accounting and DCGM scrapes, no pods, no logs, no traces. The skipped sources
must not skip the build, the tables must hold the day, and a second run of the same day changes nothing.

Airflow runs in a subprocess (`python -m tests.test_dags_run DAG_ID DAY OUT`) with its own AIRFLOW_HOME and
SQLite metadata database, so neither its configuration nor its environment reaches this pytest process and
its Spark session; the DAG's BashOperators start `.venv/bin/jobfit`, each its own JVM, on a tmp warehouse.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.child_env import child_env

pytestmark = [pytest.mark.slow, pytest.mark.apart]  # Airflow's metadata DB, then four jobfit JVMs per run

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "airflow_dags"
BIN = Path(sys.executable).parent
CLUSTER, MONTH, DAY, EMPTY_DAY = "demo", "2026-03", "2026-03-10", "2026-03-11"
PRESENT = ("ingest_sacct", "ingest_dcgm")  # the day's folders: sacct/ and dcgm/
ABSENT = ("ingest_scripts", "ingest_k8s", "ingest_k8s_metrics", "ingest_logs", "ingest_profiler")
RUN_TIMEOUT_S = 1800  # a stuck run fails the test instead of hanging the suite


@dataclass(frozen=True)
class Airflow:
    """A private Airflow: its home (airflow.cfg, airflow.db), environment and jobfit's folders."""

    home: Path
    drop: Path
    warehouse: Path
    env: dict[str, str]


def _environment(home: Path, drop: Path, warehouse: Path) -> dict[str, str]:
    return child_env(
        drop=("JOBFIT_", "AIRFLOW", "PYSPARK_", "SPARK_"),
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS),
        AIRFLOW_VAR_JOBFIT_BIN=str(BIN / "jobfit"),
        AIRFLOW_VAR_JOBFIT_CLUSTER=CLUSTER,
        AIRFLOW_VAR_JOBFIT_DROP=str(drop),
        # What the BashOperators' `jobfit` processes read: the tests' small local Spark and a tmp warehouse.
        JOBFIT_WAREHOUSE=str(warehouse),
        JOBFIT_SPARK__MASTER="local[2]",
        JOBFIT_SPARK__SHUFFLE_PARTITIONS="2",
        JOBFIT_SPARK__DRIVER_MEMORY="2g",
        JOBFIT_SPARK__JARS_DIR=str(REPO / ".jars"),
        JOBFIT_MLFLOW__TRACKING_URI=f"sqlite:///{home / 'mlflow.db'}",
        JOBFIT_OUTBOX=str(home / "outbox"),
    )


def _drop_one_day(sim: Path, day_dir: Path) -> None:
    """The simulated month's files of one day, as a site's collectors would drop them: that day's sacct
    dump and each GPU host's DCGM scrapes of that day."""
    (day_dir / "sacct").mkdir(parents=True)
    (day_dir / "dcgm").mkdir()
    shutil.copy(sim / "sacct" / f"sacct_{DAY}.txt", day_dir / "sacct")
    for prom in sorted((sim / "dcgm").glob(f"*-{DAY.replace('-', '')}.prom")):
        shutil.copy(prom, day_dir / "dcgm")


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> Airflow:
    from conf import load_cluster
    from jobs.simulator import simulate

    root = tmp_path_factory.mktemp("dag-run")
    home, drop, warehouse = root / "airflow", root / "drop", root / "warehouse"
    home.mkdir()
    simulate(load_cluster(CLUSTER), MONTH, 2000, seed=3, out=root / "sim")
    _drop_one_day(root / "sim", drop / CLUSTER / DAY)
    env = _environment(home, drop, warehouse)
    done = subprocess.run(
        [str(BIN / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return Airflow(home, drop, warehouse, env)


def run_dag(airflow_env: Airflow, dag_id: str, day: str) -> dict[str, str]:
    """Run one DAG for one day with `dag.test()` in a subprocess; the run's and each task's final state."""
    out = airflow_env.home / f"{dag_id}-{day}.json"
    log = airflow_env.home / f"{dag_id}-{day}.log"
    with log.open("w") as sink:
        done = subprocess.run(
            [sys.executable, "-m", "tests.test_dags_run", dag_id, day, str(out)],
            cwd=REPO,
            env=airflow_env.env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=RUN_TIMEOUT_S,
        )
    text = log.read_text()
    assert done.returncode == 0 and out.exists(), text[-5000:]
    states = json.loads(out.read_text())
    assert states["run"] == "success", f"{states}\n{text[-5000:]}"
    if states.pop("retried"):  # passed on a second try: said in the run's warnings, the first try's log kept
        warnings.warn(f"{dag_id} {day}: tasks passed on a retry {states}; log {log}", stacklevel=2)
    return states


def _table_rows(spark, root: Path) -> dict[str, list[str]]:
    """Every Delta table under the warehouse, as sorted row texts without `built_at` (the run's clock)."""
    tables = {}
    for log_dir in sorted(root.rglob("_delta_log")):
        df = spark.read.format("delta").load(str(log_dir.parent))
        columns = [c for c in df.columns if c != "built_at"]
        tables[str(log_dir.parent.relative_to(root))] = sorted(
            repr(tuple(r)) for r in df.select(*columns).collect()
        )
    return tables


def _jobs_in_dump(dump: Path) -> set[str]:
    """The job allocations a `sacct --parsable2` dump names: JobID before any `.step`, header excluded."""
    lines = dump.read_text().splitlines()[1:]
    return {line.split("|", 1)[0].split(".", 1)[0] for line in lines if line.strip()}


def test_a_day_with_no_source_folder_builds_nothing(airflow_env: Airflow) -> None:
    states = run_dag(airflow_env, "jobfit_daily", EMPTY_DAY)
    assert set(states["tasks"].values()) == {"skipped"}, states
    assert not airflow_env.warehouse.exists()


@pytest.fixture(scope="module")
def first_run(airflow_env: Airflow, spark) -> tuple[dict[str, str], dict[str, list[str]]]:
    states = run_dag(airflow_env, "jobfit_daily", DAY)
    return states, _table_rows(spark, airflow_env.warehouse)


def test_a_day_without_pods_or_traces_still_builds(airflow_env: Airflow, first_run, spark) -> None:
    from pyspark.sql import functions as F

    states, _ = first_run
    tasks = states["tasks"]
    assert {t: tasks[t] for t in PRESENT} == dict.fromkeys(PRESENT, "success"), tasks
    assert {t: tasks[t] for t in ABSENT} == dict.fromkeys(ABSENT, "skipped"), tasks
    assert tasks["build"] == "success" and tasks["bottlenecks"] == "success", tasks

    def table(name: str):
        return spark.read.format("delta").load(str(airflow_env.warehouse / name.replace(".", "/")))

    dump = airflow_env.drop / CLUSTER / DAY / "sacct" / f"sacct_{DAY}.txt"
    jobs = table("silver.jobs")
    assert sorted(r.job_id for r in jobs.select("job_id").collect()) == sorted(_jobs_in_dump(dump))
    assert jobs.where(F.col("cluster") != CLUSTER).count() == 0
    # gold.job_usage's grain: one finished job allocation (final state, started and ended), in its end month.
    ended = F.col("is_final") & F.col("start_ts").isNotNull() & (F.date_format("end_ts", "yyyy-MM") == MONTH)
    finished = jobs.where(ended).count()
    usage = table("gold.job_usage").where(F.col("month") == MONTH)
    assert usage.count() == finished > 0
    # The day's DCGM scrapes reached the build (attributed there, whichever ingest ran first).
    assert table("silver.gpu_samples").count() > 0
    assert usage.where(F.col("gpu_coverage_pct") > 0).count() > 0
    for name in ("gold.user_month", "gold.account_month", "gold.cluster_month"):
        months = {(r.cluster, r.month) for r in table(name).select("cluster", "month").distinct().collect()}
        assert months == {(CLUSTER, MONTH)}, name


def test_running_the_same_day_again_changes_nothing(airflow_env: Airflow, first_run, spark) -> None:
    _, before = first_run
    states = run_dag(airflow_env, "jobfit_daily", DAY)
    assert states["tasks"]["build"] == "success", states
    after = _table_rows(spark, airflow_env.warehouse)
    assert after.keys() == before.keys()
    for name in before:
        assert after[name] == before[name], f"{name} changed on the second run of {DAY}"


def _run_in_airflow(dag_id: str, day: str, out: Path) -> None:
    """The subprocess: load the DAG folder, run `dag_id` for `day` with dag.test(), write the states."""
    from datetime import UTC, datetime, timedelta

    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS)).get_dag(dag_id)
    for task in dag.tasks:
        # One retry, as the deployed DAG retries (a JVM that dies of its machine's load runs again), but at
        # once instead of after its delay; a command that fails for what it is fails twice, and the test too.
        task.retries, task.retry_delay = 1, timedelta(0)
    run = dag.test(logical_date=datetime.fromisoformat(day).replace(tzinfo=UTC))
    instances = run.get_task_instances()
    tasks = {ti.task_id: ti.state for ti in instances}  # str enums: JSON writes their values
    retried = {ti.task_id: ti.try_number for ti in instances if (ti.try_number or 0) > 1}
    out.write_text(json.dumps({"run": run.state, "tasks": tasks, "retried": retried}))


if __name__ == "__main__":
    _run_in_airflow(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
