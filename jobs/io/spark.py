"""Build a Delta-enabled SparkSession from settings (local[*] by default, any master by configuration)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from conf import Settings
from jobs.io.tables import warehouse_root

_DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
# Small-machine defaults; each can be overridden through settings.spark.conf.
_QUIET_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.adaptive.enabled": "true",
    "spark.databricks.delta.schema.autoMerge.enabled": "false",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.driver.extraJavaOptions": "-Dderby.system.home=/tmp",
    # Driver-side pandas frames (bronze lines, validation batches) cross to and from the JVM through Arrow.
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # A TRES string naming one item twice keeps the last value instead of failing the whole run.
    "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
}


# `make setup` fetches the Delta jars into the checkout: a relative `spark.jars_dir` is read from there, so
# `jobfit` works from any working directory (the warehouse and MLflow store stay relative to it).
CHECKOUT = Path(__file__).resolve().parents[2]  # jobs/io/spark.py -> the checkout


def delta_jars(jars_dir: str) -> list[str]:
    """The Delta jar files fetched by `make setup`, or [] when the folder is missing or empty. A relative
    folder is relative to the jobfit checkout, not to the working directory."""
    folder = Path(jars_dir)
    if not folder.is_absolute():
        folder = CHECKOUT / folder
    return sorted(str(p.resolve()) for p in folder.glob("*.jar")) if folder.is_dir() else []


def build_session(settings: Settings) -> SparkSession:
    """A SparkSession with Delta Lake, the configured master and modest defaults for a 2-core machine."""
    spark_settings = settings.spark
    builder = SparkSession.builder.master(spark_settings.master).appName(spark_settings.app_name)
    jars = delta_jars(spark_settings.jars_dir)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    else:
        builder = builder.config("spark.jars.packages", spark_settings.delta_package)
    conf = {
        **_DELTA_CONF,
        **_QUIET_CONF,
        "spark.driver.memory": spark_settings.driver_memory,
        "spark.sql.shuffle.partitions": str(spark_settings.shuffle_partitions),
        # Only the catalog's own bookkeeping goes here; tables live at their warehouse paths.
        "spark.sql.warehouse.dir": f"{warehouse_root(settings)}/_catalog",
        **spark_settings.conf,
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    # Executors must run the same interpreter (the project's virtualenv) as the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(spark_settings.log_level)
    _quiet_query_errors(spark_settings.log_level)
    return session


def _quiet_query_errors(log_level: str) -> None:
    """PySpark logs every failed query's Java stack as one JSON line on stderr before raising; jobfit
    says what failed in one line instead (a user's bad SQL is not a crash). Kept at DEBUG and INFO."""
    from pyspark.logger import PySparkLogger

    if log_level.upper() not in ("DEBUG", "INFO", "ALL", "TRACE"):
        PySparkLogger.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL + 1)
