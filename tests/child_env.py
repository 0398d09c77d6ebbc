"""The environment of a `jobfit` process a test starts (a CLI run, `jobfit serve`, Airflow's tasks): this
process's environment less the variables that would point the child at the test session's warehouse or
Spark, plus the settings the test gives."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

# A child runs for a minute on a small input with a cold JVM, where HotSpot's optimising compiler (C2) spends
# CPU on code the run leaves before it pays off; on the suite's two cores that CPU is taken from the other
# tests. Stopping at C1 changes no result and, measured on a cold `jobfit ingest sacct` of a 120-job month,
# cuts the machine's CPU seconds by a third (build: a fifth) at the same wall time. The session's own
# long-lived JVM keeps both compilers: there C1 only is half as fast.
CHILD_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


def child_env(
    *, drop: tuple[str, ...] = ("JOBFIT_",), spark_conf: Mapping[str, str] | None = None, **settings: str
) -> dict[str, str]:
    """os.environ without the variables starting with one of `drop`, plus `settings` (JOBFIT_* and others)
    and JOBFIT_SPARK__CONF holding the child JVM options merged with `spark_conf`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    conf = {
        "spark.driver.defaultJavaOptions": CHILD_JVM_OPTIONS,
        "spark.executor.defaultJavaOptions": CHILD_JVM_OPTIONS,
        **(spark_conf or {}),
    }
    return env | {"JOBFIT_SPARK__CONF": json.dumps(conf)} | settings
