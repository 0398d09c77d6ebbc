"""The whole DAG folder loads in Airflow, and every task runs a `jobfit` command that exists."""

from __future__ import annotations

import re
from itertools import pairwise
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


def test_build_runs_unless_an_ingest_failed_and_bottlenecks_follows_it(dagbag) -> None:
    daily = dagbag.dags["jobfit_daily"]
    # Skipped ingests (absent folders) leave the build to run; a failed one stops it; all skipped skip it.
    assert daily.get_task("build").trigger_rule == "none_failed_min_one_success"
    assert daily.get_task("bottlenecks").trigger_rule == "all_success"


def test_monthly_reports_and_mails_the_month_it_built_after_training(dagbag) -> None:
    monthly = dagbag.dags["jobfit_monthly"]
    chain = ["build", "train", "evaluate", "report", "emails"]
    assert {t.task_id for t in monthly.tasks} == set(chain)
    for before, after in pairwise(chain):
        assert monthly.get_task(after).upstream_task_ids == {before}
    commands = [monthly.get_task(t).bash_command for t in ("build", "report", "emails")]
    months = {re.search(r"--month (\S+)", command).group(1) for command in commands}
    assert len(months) == 1, months


@pytest.mark.parametrize(
    ("dag_id", "last_start", "logical", "starts"),
    [
        ("jobfit_daily", "2026-03-09", "2026-03-10", "2026-03-11"),
        ("jobfit_monthly", "2026-02-01", "2026-03-01", "2026-04-01"),
    ],
)
def test_a_run_starts_after_the_period_its_logical_date_names(
    dagbag, dag_id: str, last_start: str, logical: str, starts: str
) -> None:
    import pendulum
    from airflow.serialization.encoders import coerce_to_core_timetable
    from airflow.timetables.base import DataInterval, TimeRestriction

    dag = dagbag.dags[dag_id]
    timetable = coerce_to_core_timetable(dag.timetable)
    utc = [pendulum.parse(d, tz="UTC") for d in (last_start, logical, starts)]
    nxt = timetable.next_dagrun_info(
        last_automated_data_interval=DataInterval(utc[0], utc[1]),
        restriction=TimeRestriction(earliest=pendulum.instance(dag.start_date), latest=None, catchup=True),
    )
    assert (nxt.logical_date, nxt.run_after) == (utc[1], utc[2])
