"""dcgm-exporter telemetry (Prometheus text scrapes, or a CSV long-format archive) into silver.gpu_samples.

Input: bronze lines. A Prometheus line is `METRIC{labels} VALUE [TIMESTAMP_MS]`; `#` lines (HELP/TYPE) and
blank lines are skipped. A line without a timestamp takes its file's scrape time (chosen in jobs/: a time in
the file name, else the file's modification time). A CSV archive has the header `timestamp,metric,labels,
value`; `timestamp` is ISO-8601 or epoch seconds (milliseconds when above 1e12); `labels` is a Prometheus
label set, with or without braces, CSV-quoted.

Output: one row per GPU (or MIG instance) per timestamp per label copy, the metrics in KEPT_METRICS pivoted
into columns (framebuffer MiB -> bytes). Rejected (with a reason): lines that are not samples, values that are
not numbers, series without a host or GPU identity, and samples whose timestamp goes back in time against the
previous sample of the same series in the same file. Metrics outside KEPT_METRICS are counted, not kept."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipelines.units import MIB

# dcgm-exporter metric -> (silver.gpu_samples column, factor into the column's unit)
KEPT_METRICS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("fb_used_bytes", float(MIB)),
    "DCGM_FI_DEV_FB_FREE": ("fb_free_bytes", float(MIB)),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active_frac", 1.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active_frac", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_XID_ERRORS": ("xid", 1.0),
    # The profiling (DCP) fields of dcgm-exporter's dcp-metrics-included.csv: ratios 0..1 of time or
    # cycles, PCIe/NVLink in bytes per second. Older exporters and cards without DCP export none: null.
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine_active_frac", 1.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy_frac", 1.0),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": ("fp64_active_frac", 1.0),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": ("fp32_active_frac", 1.0),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": ("fp16_active_frac", 1.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active_frac", 1.0),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_bytes_per_s", 1.0),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_bytes_per_s", 1.0),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("nvlink_tx_bytes_per_s", 1.0),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("nvlink_rx_bytes_per_s", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
}
# The columns of the profiling fields, in silver.gpu_samples' order (declared after the older columns).
PROF_COLUMNS = tuple(KEPT_METRICS[m][0] for m in list(KEPT_METRICS)[7:])

_PROM_RE = r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{(.*)\})?\s+(\S+)(\s+(-?[0-9]+(?:\.[0-9]*)?))?\s*$"
# `promtool tsdb dump` and remote-read exports carry the name as a label: `{__name__="m",a="1"} 5 1700000`.
_NAME_LABEL_RE = r'__name__\s*=\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)"\s*,?\s*'
# One label pair with its separator (a comma, or the end of the set); values may hold escapes.
_PAIR_RE = r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)'
_SEP, _KV = "\u0001", "\u0002"  # control characters that cannot occur in a text line of a scrape
_CSV_RE = r"^([^,]*),([^,]*),(.*),([^,]*)$"
CSV_HEADER = "timestamp,metric,labels,value"
# What a sample knows of its device beyond the key (the same on every metric line of the sample).
DEVICE_INFO = ("gpu", "uuid", "model_name", "mig_gi_id", "mig_profile")


def _label(labels: Column, *names: str) -> Column:
    """The first non-empty of several label names (the exporter renamed some: Hostname -> hostname)."""
    values = [F.when(F.element_at(labels, n) != "", F.element_at(labels, n)) for n in names]
    return F.coalesce(*values) if len(values) > 1 else values[0]


def _groups(raw: Column, pattern: str, groups: tuple[int, ...]) -> Column:
    """The pattern's groups in a line as an array of strings, from ONE regex pass (the groups are joined by
    a control character and split again); null when the line does not match."""
    joined = F.regexp_replace(raw, pattern, _SEP.join(f"${g}" for g in groups))
    parts = F.split(joined, _SEP)
    return F.when(~raw.contains(_SEP) & (F.size(parts) == len(groups)), parts)


def _split_lines(lines: DataFrame, csv_files: list[str]) -> DataFrame:
    """Per line: metric, label text, value text, timestamp (or null), and a shape error when it has none."""
    is_csv = F.col("source_file").isin(csv_files) if csv_files else F.lit(False)
    # A line starting `{` names its metric in `__name__`: moved in front, so one pattern reads both forms.
    raw = F.when(
        F.col("raw").rlike(r"^\s*\{"),
        F.concat(F.regexp_extract("raw", _NAME_LABEL_RE, 1), F.regexp_replace("raw", _NAME_LABEL_RE, "")),
    ).otherwise(F.col("raw"))
    with_parts = lines.select(
        "*",
        F.when(is_csv, _groups(raw, _CSV_RE, (1, 2, 3, 4)))
        .otherwise(_groups(raw, _PROM_RE, (1, 3, 4, 6)))
        .alias("_parts"),
    )
    part = [F.get(F.col("_parts"), i) for i in range(4)]
    csv_labels = F.regexp_replace(part[2], '^"|"$', "")
    csv_labels = F.regexp_replace(F.regexp_replace(csv_labels, '""', '"'), r"^\{|\}$", "")
    csv_ts_text = F.trim(part[0])
    csv_num = csv_ts_text.try_cast("double")
    csv_ts = F.coalesce(
        F.when(csv_num > 1e12, F.timestamp_millis(csv_num.cast("long"))).when(
            csv_num.isNotNull(), F.timestamp_micros((csv_num * 1e6).cast("long"))
        ),
        F.try_to_timestamp(F.regexp_replace(csv_ts_text, "Z$", "")),
    )
    matched = F.col("_parts").isNotNull()
    return with_parts.select(
        *lines.columns,
        F.when(is_csv, F.trim(part[1])).otherwise(part[0]).alias("metric"),
        F.when(is_csv, csv_labels).otherwise(part[1]).alias("label_text"),
        F.when(is_csv, F.trim(part[3])).otherwise(part[2]).alias("value_text"),
        F.when(is_csv, csv_ts)
        .otherwise(
            # Prometheus text writes milliseconds; OpenMetrics (`promtool tsdb dump-openmetrics`) seconds.
            F.when(
                part[3].contains("."), F.timestamp_micros((part[3].cast("double") * 1e6).cast("long"))
            ).when(part[3] != "", F.timestamp_millis(part[3].cast("long")))
        )
        .alias("line_ts"),
        F.when(is_csv & ~matched, F.lit("not a CSV row of timestamp,metric,labels,value"))
        .when(is_csv & csv_ts.isNull(), F.lit("timestamp is neither ISO-8601 nor epoch seconds"))
        .when(~is_csv & ~matched, F.lit("not a Prometheus sample line"))
        .alias("shape_error"),
    )


def _label_arrays(label_text: Column) -> tuple[Column, Column, Column]:
    """(keys, values, well-formed) of a Prometheus label set, from one regex pass that rewrites each
    `name="value"` pair to name<KV>value<SEP>: text left outside the pairs means malformed labels. Values are
    unescaped as Prometheus writes them (\\n, \\", \\\\), only where they hold a backslash."""
    pairs = F.regexp_replace(label_text, _PAIR_RE, f"$1{_KV}$2{_SEP}")
    well_formed = pairs.rlike(f"^([^{_SEP}{_KV}]*{_KV}[^{_SEP}]*{_SEP})*\\s*$")
    entries = F.filter(F.split(pairs, _SEP), lambda e: e.contains(_KV))
    keys = F.transform(entries, lambda e: F.substring_index(e, _KV, 1))

    def value(e: Column) -> Column:
        v = F.substring_index(e, _KV, -1)
        unescaped = F.regexp_replace(F.regexp_replace(v, r"\\n", "\n"), r"\\(.)", "$1")
        return F.when(v.contains("\\"), unescaped).otherwise(v)

    return keys, F.transform(entries, value), well_formed


def parse_exposition(lines: DataFrame, scrape_ts: dict[str, object], csv_files: list[str]) -> DataFrame:
    """The content lines of Prometheus text scrapes, dumps (`{__name__="m",...}` lines; OpenMetrics seconds)
    or CSV long-format archives, split: `metric`, `label_text`, `labels` (a map; null when `labels_ok` is
    false: malformed or repeated labels), `value_text`, `value` (double; null when not a number), `ts`
    (the line's, else its file's scrape time from `scrape_ts`) and `shape_error` (the line is no sample).
    Blank lines, `#` comments and the CSV header are dropped. The DCGM and k8s-metrics ingests share it."""
    trimmed = F.trim(F.col("raw"))
    lines = lines.filter((trimmed != "") & ~trimmed.startswith("#") & (F.lower(trimmed) != CSV_HEADER))
    file_ts = (
        F.create_map(*[F.lit(x) for k, v in scrape_ts.items() for x in (k, v)])
        if scrape_ts
        else F.create_map().cast("map<string,timestamp>")
    )
    split = _split_lines(lines, csv_files)
    keys, vals, well_formed = _label_arrays(F.col("label_text"))
    labels_ok = well_formed & (F.size(F.array_distinct(keys)) == F.size(keys))
    ts = F.coalesce(F.col("line_ts"), F.element_at(file_ts, F.col("source_file")).cast("timestamp"))
    return split.select(
        "*",
        F.when(labels_ok, F.map_from_arrays(keys, vals)).alias("labels"),
        labels_ok.alias("labels_ok"),
        F.col("value_text").try_cast("double").alias("value"),
        ts.alias("ts"),
    )


def check_dcgm_lines(lines: DataFrame, scrape_ts: dict[str, object], csv_files: list[str]) -> DataFrame:
    """Every content line parsed (metric, labels, value, ts, host, GPU identity) with `reason` set when it
    is rejected. `scrape_ts` maps source_file to the time of lines without a timestamp; `csv_files` lists
    the sources in CSV long format (their header line is skipped). Persist it: rejects, samples and the
    line tally all read it."""
    split = parse_exposition(lines, scrape_ts, csv_files)
    labels_ok = F.col("labels_ok")
    value = F.col("value")
    labels = F.col("labels")
    pod = _label(labels, "pod", "pod_name")
    namespace = _label(labels, "namespace", "pod_namespace")
    gi = F.element_at(labels, "GPU_I_ID").try_cast("int")
    parsed = split.select(
        "*",
        _label(labels, "hostname", "Hostname").alias("host"),
        _label(labels, "UUID", "gpu_uuid").alias("uuid"),
        F.element_at(labels, "gpu").alias("gpu_text"),
        gi.alias("mig_gi_id"),
        _label(labels, "modelName", "model_name").alias("model_name"),
        _label(labels, "GPU_I_PROFILE").alias("mig_profile"),
        F.coalesce(
            _label(labels, "hpc_job"),
            F.when(pod.isNotNull(), F.concat_ws("/", F.coalesce(namespace, F.lit("")), pod)),
            F.lit(""),
        ).alias("label_job"),
    )
    kept = F.col("metric").isin(list(KEPT_METRICS))
    reason = (
        F.when(F.col("shape_error").isNotNull(), F.col("shape_error"))
        .when(~labels_ok, F.lit("malformed or repeated labels"))
        .when(value.isNull(), F.format_string("value %s is not a number", F.col("value_text")))
        # dcgm-exporter and Prometheus write NaN and ±Inf for blank fields and failed reads.
        .when(
            kept & (F.isnan(value) | (F.abs(value) == F.lit(float("inf")))),
            F.format_string("value %s is not a finite number", F.col("value_text")),
        )
        .when(F.col("ts").isNull(), F.lit("no timestamp and no scrape time for the file"))
        .when(kept & F.col("host").isNull(), F.lit("no hostname/Hostname label"))
        .when(kept & F.col("uuid").isNull() & F.col("gpu_text").isNull(), F.lit("no gpu or UUID label"))
        .when(
            kept & F.col("gpu_text").isNotNull() & F.col("gpu_text").try_cast("int").isNull(),
            F.lit("gpu label is not a number"),
        )
    )
    checked = parsed.withColumn("reason", reason).withColumn("kept", kept)
    # Time must not go backwards within a series of one file (Prometheus rejects such samples too).
    series = Window.partitionBy("source_file", "metric", "label_text").orderBy("line_no")
    prev = F.max("ts").over(series.rowsBetween(Window.unboundedPreceding, -1))
    checked = checked.withColumn(
        "reason",
        F.coalesce(
            F.col("reason"),
            F.when(
                F.col("reason").isNull() & (F.col("ts") < prev),
                F.format_string(
                    "timestamp out of order: earlier than an earlier line's %s", prev.cast("string")
                ),
            ),
        ),
    )
    # Only what rejects, the tally and the samples need (the label map and texts are the bulk of a line).
    return checked.select(
        "cluster",
        "source_file",
        "line_no",
        "raw",
        "ingested_at",
        "metric",
        "kept",
        "reason",
        "host",
        F.concat(
            F.coalesce(F.col("uuid"), F.concat(F.lit("gpu"), F.col("gpu_text"))),
            F.when(
                F.col("mig_gi_id").isNotNull(), F.concat(F.lit("/gi"), F.col("mig_gi_id").cast("string"))
            ).otherwise(F.lit("")),
        ).alias("device"),
        F.col("gpu_text").try_cast("int").alias("gpu"),
        "uuid",
        "model_name",
        "mig_gi_id",
        "mig_profile",
        "ts",
        "label_job",
        "value",
    )


def rejects_of(checked: DataFrame) -> DataFrame:
    """The rejected lines of `check_dcgm_lines`, in quarantine shape."""
    return checked.filter(F.col("reason").isNotNull()).select(
        "cluster", F.lit("dcgm").alias("source"), "source_file", "line_no", "raw", "reason", "ingested_at"
    )


def line_tally(checked: DataFrame) -> DataFrame:
    """Lines by outcome: (outcome `rejected` | `kept` | `not kept`, metric — null unless not kept, count)."""
    outcome = (
        F.when(F.col("reason").isNotNull(), "rejected").when(F.col("kept"), "kept").otherwise("not kept")
    )
    return (
        checked.select(
            outcome.alias("outcome"), F.when(outcome == "not kept", F.col("metric")).alias("metric")
        )
        .groupBy("outcome", "metric")
        .count()
    )


def samples_of(checked: DataFrame) -> DataFrame:
    """One row per accepted line of a kept metric: the sample's identity, its metric and value."""
    return checked.filter(F.col("reason").isNull() & F.col("kept")).select(
        "cluster",
        "host",
        "device",
        *DEVICE_INFO,
        "ts",
        "label_job",
        "metric",
        "value",
        "source_file",
        "line_no",
        "raw",
        "ingested_at",
    )


def parse_dcgm_lines(
    bronze: DataFrame, scrape_ts: dict[str, object], csv_files: list[str]
) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(samples: one row per kept metric value, rejects in quarantine shape, unkept metric counts)."""
    checked = check_dcgm_lines(bronze, scrape_ts, csv_files)
    unkept = checked.filter(F.col("reason").isNull() & ~F.col("kept")).groupBy("metric").count()
    return samples_of(checked), rejects_of(checked), unkept


SAMPLE_KEY = ("cluster", "host", "device", "ts", "label_job")


def archive_rows_as_lines(rows: DataFrame) -> DataFrame:
    """A long-format archive table (columns `timestamp`, `metric`, `labels`, `value`; `labels` a Prometheus
    label string or a map) rendered as the CSV archive's lines in `raw`, so both archive forms share one
    parser and quarantine shows a readable line. Other columns pass through."""
    types = dict(rows.dtypes)
    missing = [c for c in ("timestamp", "metric", "labels", "value") if c not in types]
    if missing:
        raise ValueError(f"archive lacks column(s) {', '.join(missing)}")
    ts = F.col("timestamp")
    ts_text = (
        F.date_format(ts, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS")
        if types["timestamp"].startswith("timestamp")
        else ts.cast("string")
    )
    labels = F.col("labels")
    if types["labels"].startswith("map"):
        escaped = F.transform(
            F.map_entries(labels),
            lambda e: F.concat(
                e["key"], F.lit('="'), F.regexp_replace(e["value"], r'(["\\])', r"\\$1"), F.lit('"')
            ),
        )
        labels = F.concat_ws(",", escaped)
    quoted = F.concat(
        F.lit('"'), F.regexp_replace(F.coalesce(labels.cast("string"), F.lit("")), '"', '""'), F.lit('"')
    )
    raw = F.concat_ws(
        ",",
        F.coalesce(ts_text, F.lit("")),
        F.coalesce(F.col("metric").cast("string"), F.lit("")),
        quoted,
        F.coalesce(F.col("value").cast("string"), F.lit("")),
    )
    return rows.withColumn("raw", raw)


def lineage(counted: str) -> list[Column]:
    """Aggregates saying where a pivoted sample came from: its first line (file, number, text), its newest
    ingest time, and how many of its lines were superseded (given again for the same `counted` value)."""
    return [
        F.min_by("source_file", "line_no").alias("source_file"),
        F.min("line_no").alias("line_no"),
        F.min_by("raw", "line_no").alias("raw"),
        F.max("ingested_at").alias("ingested_at"),
        (F.count("*") - F.count_distinct(counted)).alias("superseded_lines"),
    ]


def pivot_samples(samples: DataFrame) -> DataFrame:
    """One row per (cluster, host, device, ts, label_job) with the metrics as columns in their units; a
    metric given twice for the same sample keeps its later line. Attribution columns are left empty; `raw`
    (the sample's first line) rides along for quarantine, `superseded_lines` counts the lines replaced."""
    aggs = []
    for metric, (column, factor) in KEPT_METRICS.items():
        picked = F.max_by(
            F.when(F.col("metric") == metric, F.col("value")),
            F.when(F.col("metric") == metric, F.col("line_no")),
        )
        aggs.append((picked * F.lit(factor)).alias(column))
    wide = samples.groupBy(*SAMPLE_KEY).agg(
        *[F.first(c, ignorenulls=True).alias(c) for c in DEVICE_INFO],
        *aggs,
        *lineage("metric"),
    )
    return wide.select(
        *SAMPLE_KEY[:3],
        *DEVICE_INFO,
        "ts",
        "gpu_util_pct",
        F.round("fb_used_bytes").cast("long").alias("fb_used_bytes"),
        F.round(F.col("fb_used_bytes") + F.col("fb_free_bytes")).cast("long").alias("fb_total_bytes"),
        "sm_active_frac",
        "tensor_active_frac",
        "power_w",
        F.col("xid").cast("int").alias("xid"),
        "label_job",
        F.lit(None).cast("string").alias("job_id"),
        F.lit("unattributed").alias("attribution"),
        "source_file",
        "line_no",
        "ingested_at",
        *PROF_COLUMNS,
        "raw",  # the sample's first line, for quarantine by the validation step; not a silver column
        "superseded_lines",  # lines of a metric given again for the same sample; not a silver column
    )
