"""Build a Delta-enabled SparkSession from settings (local[*] by default, any master by configuration)."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import sys
import tempfile
import zipfile
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
    # With the UI off nothing reads Spark's status store, yet it keeps the last 1,000 SQL executions (plan
    # text, metrics), jobs and stages and 100,000 tasks: in a long-lived process (`serve`, `sql-server`, the
    # test session) ~35 MB of heap per ingest + build of a small month, until G1 spends its time marking a
    # full heap. Set these back (spark.conf) with spark.ui.enabled.
    "spark.sql.ui.retainedExecutions": "20",
    "spark.ui.retainedJobs": "20",
    "spark.ui.retainedStages": "20",
    "spark.ui.retainedTasks": "1000",
    "spark.sql.session.timeZone": "UTC",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.adaptive.enabled": "true",
    "spark.databricks.delta.schema.autoMerge.enabled": "false",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    # Twice the JVM's 240 MB code cache: a CI build died with "Out of space in CodeCache for method handle
    # intrinsic" (JDK 17 cannot fall back to another code heap for those, JDK-8295724); only reserved, so
    # an idle driver commits no more memory than before.
    "spark.driver.extraJavaOptions": "-Dderby.system.home=/tmp -XX:ReservedCodeCacheSize=512m",
    # Driver-side pandas frames (bronze lines, validation batches) cross to and from the JVM through Arrow.
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # A TRES string naming one item twice keeps the last value instead of failing the whole run.
    "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
    # HotSpot leaves generated methods over 8,000 bytes of bytecode to the interpreter (its
    # DontCompileHugeMethods); sacct's parse generates such methods, which at Spark's default limit (65,535)
    # ran interpreted. At 8,000 Spark leaves those plans out of whole-stage code generation instead:
    # `bench/ingest_sacct.py` at 1M lines, parse 49.0 s → 30.8 s (README).
    "spark.sql.codegen.hugeMethodLimit": "8000",
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


def s3a_jars(jars_dir: str) -> list[str]:
    """hadoop-aws and the AWS SDK bundle it needs, fetched by `make setup` into <jars_dir>/s3a (kept apart:
    690 MB that every executor would fetch for nothing unless the warehouse is on S3); [] when missing."""
    return delta_jars(str(Path(jars_dir) / "s3a"))


def hadoop_version() -> str:
    """The Hadoop version pyspark bundles (hadoop-aws must match it), from its hadoop-client-api jar name."""
    jars = Path(__import__("pyspark").__file__).parent / "jars"
    found = sorted(jars.glob("hadoop-client-api-*.jar"))
    return found[-1].stem.removeprefix("hadoop-client-api-") if found else "3.5.0"


# jobfit's own top-level packages: what an executor imports when it runs a UDF or a pandas function of ours.
CODE_PACKAGES = ("conf", "pipelines", "features", "models", "reports", "jobs")


def code_archive(folder: Path | None = None) -> Path:
    """jobfit's packages (sources and package data, no bytecode) as one zip for `addPyFile`, written under
    `folder` (default: the temp dir) and named by its content's hash, so equal code gives the same file and
    two sessions starting at once never read a half-written one."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in CODE_PACKAGES:
            package = CHECKOUT / name  # beside jobs/, in a checkout and in site-packages alike
            for file in sorted([package, *package.rglob("*")]):
                # conf/local.yaml is this machine's settings (maybe secrets); executors read no settings.
                if "__pycache__" in file.parts or file.suffix == ".pyc" or file.name == "local.yaml":
                    continue
                arcname = f"{name}/{file.relative_to(package).as_posix()}".removesuffix("/.")
                # Folder entries too: zipimport finds a namespace package (models/ has no __init__) by them.
                entry = zipfile.ZipInfo(arcname + "/" if file.is_dir() else arcname, (1980, 1, 1, 0, 0, 0))
                archive.writestr(entry, b"" if file.is_dir() else file.read_bytes())
    data = buffer.getvalue()
    folder = folder or Path(tempfile.gettempdir()) / "jobfit-code"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"jobfit-code-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    if not target.exists():
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".part")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    return target


def is_local_master(master: str) -> bool:
    """Whether the master runs everything in this process (`local`, `local[4]`, `local[*, 2]`)."""
    return master == "local" or master.startswith("local[")


def build_session(settings: Settings) -> SparkSession:
    """A SparkSession with Delta Lake, the configured master and modest defaults for a 2-core machine."""
    spark_settings = settings.spark
    builder = SparkSession.builder.master(spark_settings.master).appName(spark_settings.app_name)
    jars = delta_jars(spark_settings.jars_dir)
    on_s3 = warehouse_root(settings).startswith("s3a://")
    if jars:
        jars += s3a_jars(spark_settings.jars_dir) if on_s3 else []
        builder = builder.config("spark.jars", ",".join(jars))
    else:  # resolved from Maven by Spark itself (hadoop-aws brings the AWS SDK bundle it declares)
        packages = [spark_settings.delta_package]
        packages += [f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"] if on_s3 else []
        builder = builder.config("spark.jars.packages", ",".join(packages))
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
    if spark_settings.ship_code and not is_local_master(spark_settings.master):
        # Executors import pipelines.*, conf, ... to run our UDFs; they get the driver's exact code.
        session.sparkContext.addPyFile(str(code_archive()))
    session.sparkContext.setLogLevel(spark_settings.log_level)
    _quiet_query_errors(spark_settings.log_level)
    return session


def _quiet_query_errors(log_level: str) -> None:
    """PySpark logs every failed query's Java stack as one JSON line on stderr before raising; jobfit
    says what failed in one line instead (a user's bad SQL is not a crash). Kept at DEBUG and INFO."""
    from pyspark.logger import PySparkLogger

    if log_level.upper() not in ("DEBUG", "INFO", "ALL", "TRACE"):
        PySparkLogger.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL + 1)
