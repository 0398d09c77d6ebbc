"""The whole DAG folder loads in Airflow, and every task runs a `jobfit` command that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobs.cli import COMMANDS
from jobs.commands.ingest import SOURCES

DAGS = Path(__file__).resolve().parents[1] / "airflow_dags"


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("airflow-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_HOME", str(home))
        mp.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
        mp.setenv("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
        from airflow.dag_processing.dagbag import DagBag

        yield DagBag(dag_folder=str(DAGS))


def test_dag_folder_loads_without_errors(dagbag) -> None:
    assert dagbag.import_errors == {}
    assert {"jobfit_daily", "jobfit_monthly"} <= set(dagbag.dag_ids)


def test_every_task_runs_a_real_jobfit_command(dagbag) -> None:
    seen = set()
    for dag_id in ("jobfit_daily", "jobfit_monthly"):
        for task in dagbag.dags[dag_id].tasks:
            match = re.search(r"\}\} (\w+)(?: ([\w-]+))?", task.bash_command)
            assert match, task.bash_command
            command, source = match.groups()
            assert command in COMMANDS, f"{task.task_id}: jobfit {command} does not exist"
            if command == "ingest":
                assert source in SOURCES, f"{task.task_id}: jobfit ingest {source} does not exist"
            seen.add(command)
    assert {"ingest", "build", "bottlenecks", "train", "evaluate", "report", "emails"} <= seen


def test_daily_ingests_feed_the_build(dagbag) -> None:
    daily = dagbag.dags["jobfit_daily"]
    assert daily.get_task("build").upstream_task_ids == {t.task_id for t in daily.tasks} - {
        "build",
        "bottlenecks",
    }
    assert daily.get_task("bottlenecks").upstream_task_ids == {"build"}
