"""Kubernetes container usage — kubelet `/metrics/resource` and cAdvisor `/metrics/cadvisor` scrapes or
archives — into silver.pod_samples (one row per container series and timestamp) and silver.pod_usage (what
each pod used). docs/k8s-metrics.md states the rules in prose.

Lines are read by the DCGM ingest's exposition parser (`pipelines.silver.dcgm.parse_exposition`): Prometheus
text with or without millisecond timestamps, `promtool tsdb dump` lines (`{__name__="..."}`), OpenMetrics
seconds, and the CSV/Parquet long-format archive. Kept: `container_cpu_usage_seconds_total` (a counter, core-
seconds since the container started), `container_memory_working_set_bytes` (a gauge), and kubelet's
pod-level `pod_cpu_usage_seconds_total` / `pod_memory_working_set_bytes` (read as the pod cgroup, container
""). Series without a `pod` label (node and system cgroups) and cAdvisor's per-CPU series (`cpu` other than
`total`) are counted, not kept.

No double counting. A pod's usage is read from ONE form (kubelet `resource` when the pod has it, else
`cadvisor`; a series with an `id`, `image` or `name` label is cAdvisor's) and ONE level: the named
containers when the pod has any, else the pod cgroup (container ""). The pause container (`POD`) is never
counted; neither is the pod cgroup beside named containers (it is their sum).

CPU: per series, the counter's increase from 0 (the container's start) with resets: a value below the
previous one starts a new run, whose value counts from 0 again (Prometheus' `increase` without
extrapolation, plus the first sample's own value). In cAdvisor form a restarted container is a new series
(a new cgroup `id`), so it is summed, not read as a reset. Memory: at every timestamp of the pod, the sum over
its series of each one's latest sample no more than LOOKBACK_S old and not after the series' last sample (a
stopped container's last value does not linger); the peak is the maximum of those sums."""

from __future__ import annotations

import functools

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipelines.silver.dcgm import lineage, parse_exposition

# metric -> (silver.pod_samples column, whether the series is the pod cgroup whatever its labels say)
KEPT_METRICS: dict[str, tuple[str, bool]] = {
    "container_cpu_usage_seconds_total": ("cpu_usage_s", False),
    "container_memory_working_set_bytes": ("mem_working_set_bytes", False),
    "pod_cpu_usage_seconds_total": ("cpu_usage_s", True),
    "pod_memory_working_set_bytes": ("mem_working_set_bytes", True),
}
CADVISOR_LABELS = ("id", "image", "name")
PAUSE_CONTAINER = "POD"
POD_CGROUP = ""
# Prometheus' default lookback: a gauge sample stands for the series up to this long after it.
LOOKBACK_S = 300.0
SAMPLE_KEY = ("cluster", "job_id", "container", "form", "series", "ts")
SOURCE = "k8s-metrics"


def _label(labels: Column, *names: str) -> Column:
    """The first non-empty value of several label names (old cAdvisor: pod_name, container_name)."""
    values = [F.when(F.element_at(labels, n) != "", F.element_at(labels, n)) for n in names]
    return F.coalesce(*values) if len(values) > 1 else values[0]


def check_k8s_metric_lines(lines: DataFrame, scrape_ts: dict[str, object], csv_files: list[str]) -> DataFrame:
    """Every content line parsed, with `outcome` (kept | not kept | rejected), `tally` (what a line not
    kept is counted as), `reason` (why rejected) and the sample's identity and value. `scrape_ts` and
    `csv_files` as for `parse_exposition`. Persist it: rejects, samples and the tally all read it."""
    parsed = parse_exposition(lines, scrape_ts, csv_files)
    labels, metric, value = F.col("labels"), F.col("metric"), F.col("value")
    pod = _label(labels, "pod", "pod_name")
    namespace = _label(labels, "namespace", "pod_namespace")
    pod_level = metric.isin([m for m, (_, is_pod) in KEPT_METRICS.items() if is_pod])
    container = F.when(pod_level, F.lit(POD_CGROUP)).otherwise(
        F.coalesce(_label(labels, "container", "container_name"), F.lit(POD_CGROUP))
    )
    is_cadvisor = functools.reduce(
        Column.__or__, [F.element_at(labels, n).isNotNull() for n in CADVISOR_LABELS]
    )
    cpu = F.element_at(labels, "cpu")
    known = metric.isin(list(KEPT_METRICS))
    per_cpu = known & cpu.isNotNull() & (cpu != "total")
    no_pod = known & pod.isNull()
    kept = known & ~per_cpu & ~no_pod
    reason = (
        F.when(F.col("shape_error").isNotNull(), F.col("shape_error"))
        .when(~F.col("labels_ok"), F.lit("malformed or repeated labels"))
        .when(value.isNull(), F.format_string("value %s is not a number", F.col("value_text")))
        .when(
            kept & (F.isnan(value) | (F.abs(value) == F.lit(float("inf")))),
            F.format_string("value %s is not a finite number", F.col("value_text")),
        )
        .when(kept & (value < 0), F.format_string("value %s is negative", F.col("value_text")))
        .when(F.col("ts").isNull(), F.lit("no timestamp and no scrape time for the file"))
        .when(kept & namespace.isNull(), F.lit("pod label without a namespace label"))
    )
    outcome = F.when(reason.isNotNull(), "rejected").when(kept, "kept").otherwise("not kept")
    tally = (
        F.when(per_cpu, F.concat(metric, F.lit(" (per-CPU series)")))
        .when(no_pod, F.concat(metric, F.lit(" (no pod label)")))
        .otherwise(metric)
    )
    return parsed.select(
        "cluster",
        "source_file",
        "line_no",
        "raw",
        "ingested_at",
        "metric",
        outcome.alias("outcome"),
        F.when(outcome == "not kept", tally).alias("tally"),
        reason.alias("reason"),
        F.concat_ws("/", namespace, pod).alias("job_id"),
        namespace.alias("namespace"),
        pod.alias("pod"),
        container.alias("container"),
        F.when(is_cadvisor, "cadvisor").otherwise("resource").alias("form"),
        F.when(is_cadvisor, F.coalesce(F.element_at(labels, "id"), F.lit(""))).otherwise("").alias("series"),
        _label(labels, "node", "instance").alias("host"),
        "ts",
        "value",
    )


def rejects_of(checked: DataFrame) -> DataFrame:
    """The rejected lines of `check_k8s_metric_lines`, in quarantine shape."""
    return checked.filter(F.col("outcome") == "rejected").select(
        "cluster", F.lit(SOURCE).alias("source"), "source_file", "line_no", "raw", "reason", "ingested_at"
    )


def line_tally(checked: DataFrame) -> DataFrame:
    """Lines by outcome: (outcome, tally — null unless not kept, count)."""
    return checked.groupBy("outcome", "tally").count()


def pod_samples(checked: DataFrame) -> DataFrame:
    """silver.pod_samples rows from the kept lines: one per series and timestamp, CPU and memory as columns;
    a metric given twice for one sample keeps its later line (`superseded_lines` counts the others). `raw`
    (the sample's first line) rides along for quarantine."""
    kept = checked.filter(F.col("outcome") == "kept")
    column = F.lit(None).cast("string")
    for metric, (name, _) in KEPT_METRICS.items():
        column = F.when(F.col("metric") == metric, F.lit(name)).otherwise(column)
    kept = kept.withColumn("_column", column)

    def pick(name: str) -> Column:
        return F.max_by(
            F.when(F.col("_column") == name, F.col("value")),
            F.when(F.col("_column") == name, F.col("line_no")),
        )

    wide = kept.groupBy(*SAMPLE_KEY).agg(
        F.first("namespace").alias("namespace"),
        F.first("pod").alias("pod"),
        pick("cpu_usage_s").alias("cpu_usage_s"),
        pick("mem_working_set_bytes").alias("mem_working_set_bytes"),
        F.first("host", ignorenulls=True).alias("host"),
        *lineage("_column"),
    )
    return wide.select(
        "cluster",
        "job_id",
        "namespace",
        "pod",
        "container",
        "form",
        "series",
        "ts",
        "cpu_usage_s",
        F.round("mem_working_set_bytes").cast("long").alias("mem_working_set_bytes"),
        "host",
        "source_file",
        "line_no",
        "ingested_at",
        "raw",
        "superseded_lines",
    )


def with_counted_series(samples: DataFrame) -> DataFrame:
    """The samples that count for their pod: one form (resource when the pod has it), one level (named
    containers when it has any, else the pod cgroup), never the pause container."""
    pod = Window.partitionBy("cluster", "job_id")
    is_named = ~F.col("container").isin(POD_CGROUP, PAUSE_CONTAINER)
    has_resource = F.max((F.col("form") == "resource").cast("int")).over(pod) == 1
    chosen = samples.withColumn("_form", F.when(has_resource, "resource").otherwise("cadvisor")).filter(
        F.col("form") == F.col("_form")
    )
    leveled = chosen.withColumn("_named", F.max(is_named.cast("int")).over(pod) == 1)
    return (
        leveled.filter(F.when(F.col("_named"), is_named).otherwise(F.col("container") == POD_CGROUP))
        .withColumn("level", F.when(F.col("_named"), "containers").otherwise("pod"))
        .drop("_form", "_named")
    )


def _cpu_by_pod(counted: DataFrame) -> DataFrame:
    """(cluster, job_id, cpu_used_s, cpu_resets): counters' increase from 0 with resets, over series."""
    series = Window.partitionBy("cluster", "job_id", "container", "series").orderBy("ts")
    cpu = counted.filter(F.col("cpu_usage_s").isNotNull())
    prev = F.lag("cpu_usage_s").over(series)
    reset = prev.isNotNull() & (F.col("cpu_usage_s") < prev)
    steps = cpu.select(
        "cluster",
        "job_id",
        F.when(prev.isNull() | reset, F.col("cpu_usage_s"))
        .otherwise(F.col("cpu_usage_s") - prev)
        .alias("_inc"),
        reset.cast("int").alias("_reset"),
    )
    return steps.groupBy("cluster", "job_id").agg(
        F.sum("_inc").alias("cpu_used_s"), F.sum("_reset").alias("cpu_resets")
    )


def _memory_by_pod(counted: DataFrame) -> DataFrame:
    """(cluster, job_id, mem_peak_bytes): the max over the pod's timestamps of the sum of its series'
    working sets, each series standing at its latest sample (at most LOOKBACK_S old, within its span)."""
    series_key = ["cluster", "job_id", "container", "series"]
    mem = counted.filter(F.col("mem_working_set_bytes").isNotNull()).select(
        *series_key, "ts", "mem_working_set_bytes"
    )
    spans = mem.groupBy(*series_key).agg(F.min("ts").alias("_first"), F.max("ts").alias("_last"))
    times = mem.select("cluster", "job_id", "ts").distinct()
    grid = (
        times.join(spans, on=["cluster", "job_id"], how="inner")
        .where(F.col("ts").between(F.col("_first"), F.col("_last")))
        .select(*series_key, "ts")
    )
    filled = grid.join(mem, on=[*series_key, "ts"], how="left")
    upto = Window.partitionBy(*series_key).orderBy("ts").rowsBetween(Window.unboundedPreceding, 0)
    last_v = F.last("mem_working_set_bytes", ignorenulls=True).over(upto)
    last_ts = F.last(F.when(F.col("mem_working_set_bytes").isNotNull(), F.col("ts")), ignorenulls=True).over(
        upto
    )
    age_s = F.unix_micros(F.col("ts")) / 1e6 - F.unix_micros(last_ts) / 1e6
    standing = filled.select("cluster", "job_id", "ts", F.when(age_s <= LOOKBACK_S, last_v).alias("_v"))
    sums = standing.groupBy("cluster", "job_id", "ts").agg(F.sum("_v").alias("_sum"))
    return sums.groupBy("cluster", "job_id").agg(F.max("_sum").cast("long").alias("mem_peak_bytes"))


def pod_usage(samples: DataFrame) -> DataFrame:
    """silver.pod_usage from silver.pod_samples rows (all the samples of the pods to compute)."""
    counted = with_counted_series(samples).cache()
    series = Window.partitionBy("cluster", "job_id", "container", "series").orderBy("ts")
    gap_s = F.unix_micros(F.col("ts")) / 1e6 - F.unix_micros(F.lag("ts").over(series)) / 1e6
    facts = (
        counted.withColumn("_gap_s", gap_s)
        .groupBy("cluster", "job_id")
        .agg(
            F.first("namespace").alias("namespace"),
            F.first("pod").alias("pod"),
            F.first("level").alias("level"),
            F.first("form").alias("form"),
            F.count_distinct("container", "series").cast("int").alias("containers"),
            F.count_distinct("ts").alias("samples"),
            F.min("ts").alias("first_ts"),
            F.max("ts").alias("last_ts"),
            F.max("_gap_s").alias("max_gap_s"),
            F.max("ingested_at").alias("ingested_at"),
        )
    )
    usage = facts.join(_cpu_by_pod(counted), on=["cluster", "job_id"], how="left").join(
        _memory_by_pod(counted), on=["cluster", "job_id"], how="left"
    )
    return usage.select(
        "cluster",
        "job_id",
        "namespace",
        "pod",
        F.round("cpu_used_s", 6).alias("cpu_used_s"),
        "mem_peak_bytes",
        "level",
        "form",
        "containers",
        "samples",
        "first_ts",
        "last_ts",
        F.coalesce(F.col("cpu_resets"), F.lit(0)).cast("int").alias("cpu_resets"),
        "max_gap_s",
        "ingested_at",
    )


def with_pod_usage(jobs: DataFrame, usage: DataFrame) -> DataFrame:
    """silver.jobs rows with a Kubernetes pod's `total_cpu_s` and `max_rss_bytes` taken from silver.pod_usage
    (joined on cluster and job_id = namespace/pod) where the pod record has none. Same rows and columns."""
    measured = usage.select(
        "cluster",
        "job_id",
        F.col("cpu_used_s").alias("_pod_cpu_s"),
        F.col("mem_peak_bytes").alias("_pod_mem_bytes"),
    )
    joined = jobs.join(measured, on=["cluster", "job_id"], how="left")
    is_pod = F.col("source") == "k8s"
    filled = {
        "total_cpu_s": F.when(is_pod, F.coalesce("total_cpu_s", "_pod_cpu_s")).otherwise(
            F.col("total_cpu_s")
        ),
        "max_rss_bytes": F.when(is_pod, F.coalesce("max_rss_bytes", "_pod_mem_bytes")).otherwise(
            F.col("max_rss_bytes")
        ),
    }
    return joined.select(*[filled[c].alias(c) if c in filled else F.col(c) for c in jobs.columns])
