"""Silver rows for tests: every declared column, None unless given, so each test states only what matters."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from jobs.io.tables import conform, table_path
from pipelines.schemas import SILVER_GPU_SAMPLES, SILVER_JOBS, TABLES

GIB = 1024**3
T0 = datetime(2026, 11, 10, 0, 0, 0)
INGESTED = datetime(2026, 12, 1, 6, 0, 0)


def use(
    cpus: int, cpu_h: float, mem_gib: float | None = None, peak_gib: float | None = None
) -> dict[str, Any]:
    """CPU and memory columns: `cpus` allocated, `cpu_h` core-hours of CPU time, GiB requested and peak."""
    return {
        "alloc_cpus": cpus,
        "total_cpu_s": cpu_h * 3600.0,
        "req_mem_bytes": None if mem_gib is None else int(mem_gib * GIB),
        "max_rss_bytes": None if peak_gib is None else int(peak_gib * GIB),
    }


def job_row(cluster: str = "demo", **fields: Any) -> dict[str, Any]:
    """A silver.jobs row: every declared column, None unless given (a finished one-hour job by default)."""
    row: dict[str, Any] = {f.name: None for f in SILVER_JOBS.schema.fields}
    row.update(
        cluster=cluster,
        source="slurm",
        state="COMPLETED",
        is_final=True,
        start_ts=T0,
        end_ts=T0 + timedelta(hours=1),
        elapsed_s=3600,
        ingested_at=INGESTED,
    )
    row.update(fields)
    return row


def sample_rows(
    job_id: str | None,
    host: str,
    device: str,
    util: float | None,
    fb_used_gib: float = 0.0,
    fb_total_gib: float = 80.0,
    start: datetime = T0,
    seconds: int = 3600,
    every_s: int = 30,
    label_job: str | None = None,
    attribution: str = "label",
    cluster: str = "demo",
    **extra: Any,
) -> list[dict[str, Any]]:
    """silver.gpu_samples rows of one series: a sample every `every_s` seconds for `seconds`."""
    rows = []
    for offset in range(0, seconds, every_s):
        row: dict[str, Any] = {f.name: None for f in SILVER_GPU_SAMPLES.schema.fields}
        row.update(
            cluster=cluster,
            host=host,
            device=device,
            gpu=0,
            uuid=device.split("/")[0],
            model_name="NVIDIA A100-SXM4-80GB",
            ts=start + timedelta(seconds=offset),
            gpu_util_pct=util,
            fb_used_bytes=int(fb_used_gib * GIB),
            fb_total_bytes=int(fb_total_gib * GIB),
            label_job=job_id if label_job is None else label_job,
            job_id=job_id,
            attribution=attribution if job_id else "unattributed",
            ingested_at=INGESTED,
        )
        row.update(extra)
        rows.append(row)
    return rows


def append_silver(ctx: Any, name: str, rows: list[dict[str, Any]]) -> None:
    """Append rows to a silver table as they are (a plain Delta append: faster than a MERGE in tests)."""
    spec = TABLES[name]
    conform(ctx.spark.createDataFrame(rows, spec.schema), spec).write.format("delta").mode("append").save(
        table_path(ctx.settings, name)
    )


def jobs_frame(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    return spark.createDataFrame(rows, SILVER_JOBS.schema)


def samples_frame(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    return spark.createDataFrame(rows, SILVER_GPU_SAMPLES.schema)


# Columns that record when a run happened rather than what it wrote.
RUN_TIME = {"ingested_at", "built_at", "source_watermark_ts"}


def delta_tables(spark: SparkSession, root: Path) -> dict[str, list[tuple]]:
    """Every Delta table under `root`, as sorted rows without the run-time columns (RUN_TIME): two
    warehouses that received the same input compare equal."""
    found = {}
    for log in sorted(root.glob("**/_delta_log")):
        df = spark.read.format("delta").load(str(log.parent))
        columns = [c for c in df.columns if c not in RUN_TIME]
        found[str(log.parent.relative_to(root))] = sorted(map(tuple, df.select(*columns).collect()), key=repr)
    return found
