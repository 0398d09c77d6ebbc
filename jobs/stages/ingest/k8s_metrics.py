"""`jobfit ingest k8s-metrics PATH... --cluster C`: kubelet `/metrics/resource` and cAdvisor
`/metrics/cadvisor` scrapes, dumps (`promtool tsdb dump`, federation) or archives (CSV or Parquet long
format, as for DCGM) of container CPU seconds and working-set memory into silver.pod_samples, then each
touched pod's usage into silver.pod_usage (joined to silver.jobs by `namespace/pod` in `jobfit build`).
Lines are read by Spark; a file whose content is already in bronze.k8s_metrics is skipped, so a re-run adds
nothing."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.context import Context
from jobs.io.tables import merge_into, read_table, sql_string
from jobs.io.validate import validate
from jobs.stages.ingest.common import (
    IngestReport,
    InputRef,
    append_bronze,
    known_files,
    lines_frame,
    scan_inputs,
    union_all,
    write_quarantine,
)
from jobs.stages.ingest.dcgm import PARQUET_MAGIC, parquet_lines, scrape_time
from pipelines.schemas import SILVER_JOBS, SILVER_POD_SAMPLES, SILVER_POD_USAGE
from pipelines.silver.dcgm import CSV_HEADER
from pipelines.silver.k8s_metrics import (
    SAMPLE_KEY,
    SOURCE,
    check_k8s_metric_lines,
    line_tally,
    pod_samples,
    pod_usage,
    rejects_of,
)

BRONZE = "k8s_metrics"
# A stored sample is rewritten only when a value changed (the same sample from another file is unchanged).
SAMPLES_UPDATE_WHEN = (
    "NOT (t.cpu_usage_s <=> s.cpu_usage_s AND t.mem_working_set_bytes <=> s.mem_working_set_bytes "
    "AND t.host <=> s.host)"
)
USAGE_UPDATE_WHEN = (
    "NOT ("
    + " AND ".join(f"t.{c} <=> s.{c}" for c in SILVER_POD_USAGE.columns if c not in SILVER_POD_USAGE.key)
    + ")"
)


def _new_inputs(ctx: Context, refs: list[InputRef], cluster: str, report: IngestReport) -> list[InputRef]:
    """The inputs whose content is neither in bronze nor an earlier input of this run."""
    known = known_files(ctx, BRONZE, cluster)
    new: dict[str, InputRef] = {}
    for ref in refs:
        if ref.sha256 not in known:
            new.setdefault(ref.sha256, ref)
    skipped = [r for r in refs if r.sha256 in known or new.get(r.sha256) is not r]
    if skipped:
        report.tables["files already ingested"] = {"files": len(skipped)}
        ctx.progress(f"k8s-metrics: {len(skipped)} file(s) already ingested (same content), skipped")
    return list(new.values())


def _lines(
    ctx: Context, fresh: list[InputRef], cluster: str
) -> tuple[DataFrame, dict[str, object], list[str]]:
    """The inputs' lines (text and Parquet), the scrape time of text files, the CSV-form sources."""
    archives = [r for r in fresh if r.data is None and r.magic == PARQUET_MAGIC]
    texts = [r for r in fresh if r not in archives]
    csv_files = [r.name for r in texts if r.first_line.lower() == CSV_HEADER] + [r.name for r in archives]
    now = ctx.now()
    scrape_ts: dict[str, object] = {
        r.name: scrape_time(r.name, now) for r in texts if r.name not in csv_files
    }
    parts = ([lines_frame(ctx, texts, cluster)] if texts else []) + (
        [parquet_lines(ctx, archives, cluster, "a k8s metrics archive")] if archives else []
    )
    return union_all(parts), scrape_ts, csv_files


def _with_stored_values(ctx: Context, rows: DataFrame, cluster: str) -> DataFrame:
    """Batch samples with a metric the batch lacks taken from the stored sample of the same key (CPU and
    memory of one sample may come in different files, e.g. one archive per metric)."""
    stored = (
        read_table(ctx.spark, ctx.settings, SILVER_POD_SAMPLES.name)
        .where(F.col("cluster") == cluster)
        .select(
            *SAMPLE_KEY,
            F.col("cpu_usage_s").alias("_cpu"),
            F.col("mem_working_set_bytes").alias("_mem"),
            F.col("host").alias("_host"),
        )
    )
    joined = rows.join(stored, on=list(SAMPLE_KEY), how="left")
    fill = {"cpu_usage_s": "_cpu", "mem_working_set_bytes": "_mem", "host": "_host"}
    return joined.select(*[F.coalesce(c, fill[c]).alias(c) if c in fill else F.col(c) for c in rows.columns])


def run(ctx: Context, paths: Sequence[str], cluster: str) -> IngestReport:
    """Parse new files' lines, MERGE samples into silver.pod_samples, recompute the touched pods' usage
    into silver.pod_usage, quarantine rejects, and land the lines in bronze.k8s_metrics last."""
    refs = scan_inputs(paths)
    report = IngestReport(source=SOURCE, cluster=cluster, files=len(refs))
    fresh = _new_inputs(ctx, refs, cluster, report)
    if not fresh:
        return report
    lines, scrape_ts, csv_files = _lines(ctx, fresh, cluster)
    checked = check_k8s_metric_lines(lines, scrape_ts, csv_files).persist(StorageLevel.MEMORY_AND_DISK)
    tally = line_tally(checked).collect()
    report.quarantined = sum(r["count"] for r in tally if r["outcome"] == "rejected")
    kept_lines = sum(r["count"] for r in tally if r["outcome"] == "kept")
    not_kept = {r["tally"]: r["count"] for r in tally if r["outcome"] == "not kept"}
    report.read = kept_lines + report.quarantined + sum(not_kept.values())
    report.tables["metrics not kept (lines)"] = dict(sorted(not_kept.items()))
    ctx.progress(f"k8s-metrics: {kept_lines} metric line(s) kept, {report.quarantined} quarantined")
    rows = _with_stored_values(ctx, pod_samples(checked), cluster).persist(StorageLevel.MEMORY_AND_DISK)
    summary = rows.agg(F.count("*").alias("samples"), F.sum("superseded_lines").alias("superseded")).first()
    report.superseded = int(summary["superseded"] or 0)
    # A sample's CPU and memory come on two lines: the sample counts once, its other line is folded into it.
    folded = kept_lines - report.superseded - summary["samples"]
    report.tables["lines folded into samples"] = {"lines": folded}
    valid = validate(rows, SILVER_POD_SAMPLES.name, SOURCE)
    rejects = rejects_of(checked)
    if valid.rejected:
        rejects = rejects.unionByName(valid.rejects.withColumn("ingested_at", F.lit(ctx.now())))
        report.quarantined += valid.rejected
    pods = [r["job_id"] for r in valid.valid.select("job_id").distinct().collect()]
    if pods:
        counts = merge_into(
            ctx.spark, ctx.settings, SILVER_POD_SAMPLES.name, valid.valid, update_when=SAMPLES_UPDATE_WHEN
        )
        report.add(SILVER_POD_SAMPLES.name, counts)
        report.inserted, report.updated, report.unchanged = counts.inserted, counts.updated, counts.unchanged
        _write_usage(ctx, cluster, pods, report)
    if report.quarantined:
        report.add("quarantine", write_quarantine(ctx, rejects))
    appended = append_bronze(ctx, BRONZE, lines, hashes=[r.sha256 for r in fresh])
    report.tables[f"bronze.{BRONZE}"] = {"inserted": appended, "updated": 0, "unchanged": 0}
    checked.unpersist()
    rows.unpersist()
    return report


def _write_usage(ctx: Context, cluster: str, pods: list[str], report: IngestReport) -> None:
    """Recompute silver.pod_usage of the pods this run touched, from all their stored samples, and say how
    many of them silver.jobs knows (a pod ingested later is joined by `jobfit build` all the same)."""
    spark, settings = ctx.spark, ctx.settings
    touched = spark.createDataFrame([(cluster, p) for p in pods], "cluster string, job_id string")
    samples = (
        read_table(spark, settings, SILVER_POD_SAMPLES.name)
        .where(F.col("cluster") == cluster)
        .join(F.broadcast(touched), on=["cluster", "job_id"], how="inner")
    )
    usage = pod_usage(samples)
    counts = merge_into(
        spark,
        settings,
        SILVER_POD_USAGE.name,
        usage,
        update_when=USAGE_UPDATE_WHEN,
        target_filter=f"t.cluster = {sql_string(cluster)}",
    )
    report.add(SILVER_POD_USAGE.name, counts)
    jobs = read_table(spark, settings, SILVER_JOBS.name).where(
        (F.col("cluster") == cluster) & (F.col("source") == "k8s")
    )
    known = touched.join(jobs.select("cluster", "job_id"), on=["cluster", "job_id"], how="inner").count()
    report.tables["pods"] = {"in silver.jobs": known, "not in silver.jobs yet": len(pods) - known}
