"""jobfit's schedule: each day ingest that day's drop folder, rebuild its month and analyse its profiler
traces for bottlenecks; each month retrain,
render the month's PDF reports and send the users' digests.

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
from airflow.sdk import DAG

JOBFIT = "{{ var.value.get('jobfit_bin', 'jobfit') }}"
CLUSTER = "{{ var.value.get('jobfit_cluster', 'demo') }}"
DAY_DIR = "{{ var.value.get('jobfit_drop', '/var/lib/jobfit/drop') }}/" + CLUSTER + "/{{ ds }}"
MONTH = "{{ logical_date.strftime('%Y-%m') }}"
REPORTS = "{{ var.value.get('jobfit_reports', '/var/lib/jobfit/reports') }}"
EMAILS = "{{ var.value.get('jobfit_emails', '--outbox /var/lib/jobfit/outbox') }}"
PREVIOUS_MONTH = "{{ (logical_date.replace(day=1) - macros.timedelta(days=1)).strftime('%Y-%m') }}"
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
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["jobfit"],
) as daily:
    build = BashOperator(
        task_id="build",
        bash_command=f"{JOBFIT} build --cluster {CLUSTER} --month {MONTH} --json",
    )
    # After the build (every source of the day is in): the month's traces, analysed and priced.
    bottlenecks = BashOperator(
        task_id="bottlenecks",
        bash_command=f"{JOBFIT} bottlenecks --cluster {CLUSTER} --month {MONTH} --json",
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
    schedule="@monthly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["jobfit"],
) as monthly:
    build_last = BashOperator(
        task_id="build",
        bash_command=f"{JOBFIT} build --cluster {CLUSTER} --month {PREVIOUS_MONTH} --json",
    )
    train = BashOperator(task_id="train", bash_command=f"{JOBFIT} train --cluster {CLUSTER} --json")
    evaluate = BashOperator(task_id="evaluate", bash_command=f"{JOBFIT} evaluate --cluster {CLUSTER} --json")
    report = BashOperator(
        task_id="report",
        bash_command=f"{JOBFIT} report --cluster {CLUSTER} --month {PREVIOUS_MONTH} --out {REPORTS} --json",
    )
    emails = BashOperator(
        task_id="emails",
        bash_command=f"{JOBFIT} emails --cluster {CLUSTER} --month {PREVIOUS_MONTH} {EMAILS} --json",
    )
    build_last >> train >> evaluate >> report >> emails
