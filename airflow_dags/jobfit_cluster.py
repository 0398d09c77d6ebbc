"""jobfit's schedule: each day ingest that day's drop folder, rebuild its month and analyse its profiler
traces for bottlenecks; each month retrain,
render the month's PDF reports and send the users' digests.

Both DAGs run once their period has ended and name it by their logical date (data-interval timetables, set
here so a site's `create_cron_data_intervals` cannot shift them): the run of `ds` 2026-03-10 starts after
that day and ingests its folder; the run of 2026-03-01 of `jobfit_monthly` starts on 1 April and reports
March. By hand: `airflow dags test jobfit_daily 2026-03-10`.

A source whose folder is absent that day is skipped (its ingest exits 99). `build` runs when no ingest
failed and at least one succeeded (`none_failed_min_one_success`), so a day without pods or traces still
builds; a day with no source folder at all skips `build` (nothing new) and with it `bottlenecks`. A failed
ingest (after its retries) fails `build` as upstream_failed: the month is not rebuilt on partial input.
`bottlenecks` follows every successful `build`, profiler traces that day or not, since the build's new
accounting re-prices the month's findings.

DAG files only wire: every task runs one `jobfit` command for `{{ ds }}`; nothing of jobfit is imported
at parse time. Per deployment, set the Airflow Variables `jobfit_bin` (default `jobfit`),
`jobfit_cluster` (default `demo`) and `jobfit_drop` (default `/var/lib/jobfit/drop`), where each day's
files land as `<drop>/<cluster>/<YYYY-MM-DD>/{sacct,dcgm,scripts,k8s,k8s_metrics,logs,profiler}/`;
`jobfit_reports`
(default `/var/lib/jobfit/reports`), where the monthly PDFs go; `jobfit_emails` (default `--outbox
/var/lib/jobfit/outbox`; `--send` to use the SMTP relay in conf), how the digests leave.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, CronDataIntervalTimetable, TriggerRule

JOBFIT = "{{ var.value.get('jobfit_bin', 'jobfit') }}"
CLUSTER = "{{ var.value.get('jobfit_cluster', 'demo') }}"
DAY_DIR = "{{ var.value.get('jobfit_drop', '/var/lib/jobfit/drop') }}/" + CLUSTER + "/{{ ds }}"
MONTH = "{{ logical_date.strftime('%Y-%m') }}"
REPORTS = "{{ var.value.get('jobfit_reports', '/var/lib/jobfit/reports') }}"
EMAILS = "{{ var.value.get('jobfit_emails', '--outbox /var/lib/jobfit/outbox') }}"
DEFAULT_ARGS = {"retries": 2, "retry_delay": timedelta(minutes=10)}

# (task id, source folder, ingest source); a source whose folder is absent that day is skipped (exit 99).
SOURCES = (
    ("ingest_sacct", "sacct", "sacct"),
    ("ingest_scripts", "scripts", "scripts"),
    ("ingest_dcgm", "dcgm", "dcgm"),
    ("ingest_k8s", "k8s", "k8s"),
    ("ingest_k8s_metrics", "k8s_metrics", "k8s-metrics"),
    ("ingest_logs", "logs", "logs"),
    ("ingest_profiler", "profiler", "profiler"),
)


def _ingest_command(folder: str, source: str) -> str:
    path = f"{DAY_DIR}/{folder}"
    return f'test -d "{path}" || exit 99; {JOBFIT} ingest {source} "{path}" --cluster {CLUSTER} --json'


with DAG(
    dag_id="jobfit_daily",
    description="Ingest a day's accounting, scripts, telemetry, logs and traces; rebuild that month's gold "
    "tables and its bottleneck findings",
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["jobfit"],
) as daily:
    build = BashOperator(
        task_id="build",
        bash_command=f"{JOBFIT} build --cluster {CLUSTER} --month {MONTH} --json",
        # Skipped ingests (absent folders) must not skip the build; a failed one must stop it.
        trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS,
    )
    # After the build (every source of the day is in): the month's traces, analysed and priced.
    bottlenecks = BashOperator(
        task_id="bottlenecks",
        bash_command=f"{JOBFIT} bottlenecks --cluster {CLUSTER} --month {MONTH} --json",
        trigger_rule=TriggerRule.ALL_SUCCESS,
    )
    for task_id, folder, source in SOURCES:
        ingest = BashOperator(
            task_id=task_id, bash_command=_ingest_command(folder, source), skip_on_exit_code=99
        )
        ingest >> build
    build >> bottlenecks

with DAG(
    dag_id="jobfit_monthly",
    description="Retrain the per-cluster models on the month just closed and report model vs baselines",
    schedule=CronDataIntervalTimetable("@monthly", timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["jobfit"],
) as monthly:
    build_last = BashOperator(
        task_id="build",
        bash_command=f"{JOBFIT} build --cluster {CLUSTER} --month {MONTH} --json",
    )
    train = BashOperator(task_id="train", bash_command=f"{JOBFIT} train --cluster {CLUSTER} --json")
    evaluate = BashOperator(task_id="evaluate", bash_command=f"{JOBFIT} evaluate --cluster {CLUSTER} --json")
    report = BashOperator(
        task_id="report",
        bash_command=f"{JOBFIT} report --cluster {CLUSTER} --month {MONTH} --out {REPORTS} --json",
    )
    emails = BashOperator(
        task_id="emails",
        bash_command=f"{JOBFIT} emails --cluster {CLUSTER} --month {MONTH} {EMAILS} --json",
    )
    build_last >> train >> evaluate >> report >> emails
