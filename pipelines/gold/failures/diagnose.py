"""Diagnosing failed jobs on Spark: the signals each source gives, then rules, evidence and fix per job."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from conf import ClusterConfig
from pipelines.gold.failures.fix_table import knob_note, script_knobs
from pipelines.gold.failures.fixes import fix_message, gib_text, note
from pipelines.gold.failures.patterns import (
    BARE_TRACEBACK,
    EVIDENCE_CHARS,
    IMAGE_PULL,
    LAUNCHER_EXCEPTION,
    LOG_PATTERNS,
    LogPattern,
    ci,
    fact_regex,
    moment_lines,
)
from pipelines.gold.failures.rules import with_rule
from pipelines.gold.failures.taxonomy import CAUSES, DIAGNOSED_STATES
from pipelines.gold.failures.tracebacks import read_tracebacks
from pipelines.gold.failures.xid import SYSTEM_FAULT_XIDS
from pipelines.schemas import CODE_STRUCT, EXCEPTION_STRUCT, GOLD_FAILURES
from pipelines.units import GIB

# Telemetry Xids count when seen from the job's start to this long after its end (the driver logs late).
XID_GRACE_S = 300
# The evidence quotes the job's GPU samples from this long before its end to a minute after (the moment of
# failure: VRAM against the card, utilisation, power, an Xid), the last MOMENT_SAMPLES of them.
MOMENT_S = 300
MOMENT_SAMPLES = 6


_TRACEBACK_STRUCT = T.StructType(
    [
        T.StructField("exception", EXCEPTION_STRUCT, True),
        T.StructField("code", CODE_STRUCT, True),
        T.StructField("moments", T.ArrayType(T.StringType()), True),
    ]
)


def _read_traceback(text: str | None) -> dict[str, object]:
    """The reader's run-ending exception and user frame for one log text, and its lines of the moment of
    failure (`patterns.moment_lines`), as the struct the UDF returns."""
    reading = read_tracebacks(text)
    moments = moment_lines(text) if text else []
    return {"exception": reading.exception_json(), "code": reading.code_json(), "moments": moments}


def with_traceback(df: DataFrame, text_col: str = "text") -> DataFrame:
    """Add `exception` (type, message), `code` (file, line, function, text: the user's innermost frame) and
    `log_moments` (the log's Xid / OOM-killer / watchdog lines) from the text column: `read_tracebacks` and
    `moment_lines`, the functions `jobfit explain` calls, applied per row (a state machine over lines has no
    built-in Spark equivalent)."""
    # no hints: a plain UDF; non-deterministic so that the optimiser calls it once per row, not per field
    read = F.udf(lambda text: _read_traceback(text), _TRACEBACK_STRUCT).asNondeterministic()
    return (
        df.withColumn("_tb", read(F.col(text_col)))
        .withColumn("exception", F.col("_tb.exception"))
        .withColumn("code", F.col("_tb.code"))
        .withColumn("log_moments", F.col("_tb.moments"))
        .drop("_tb")
    )


def with_text_diagnosis(df: DataFrame, text_col: str = "text") -> DataFrame:
    """Add log_pattern, log_cause, log_detail, log_confidence, log_evidence and the quoted numbers
    (log_xid, log_gpu_total_gib, log_gpu_tried_gib, log_nccl_timeout_ms, log_nccl_ran_ms, log_nccl_op,
    log_exception) from the text column, with the same table and order as `classify_text`; and the
    traceback's `exception` and `code` (`with_traceback`)."""
    text = F.col(text_col)
    launcher = F.coalesce(F.col("exception.type").rlike(LAUNCHER_EXCEPTION), F.lit(False))

    def matches(p: LogPattern) -> Column:
        # the bare traceback is no evidence when the run-ending one is the launcher's (as classify_text)
        hit = text.rlike(ci(p.regex))
        return hit & ~launcher if p.pattern_id == BARE_TRACEBACK else hit

    # One flat CASE WHEN (first match wins) rather than nested ones: the optimiser handles it far faster.
    pattern_id = F.when(matches(LOG_PATTERNS[0]), F.lit(LOG_PATTERNS[0].pattern_id))
    for p in LOG_PATTERNS[1:]:
        pattern_id = pattern_id.when(matches(p), F.lit(p.pattern_id))
    evidence = F.when(F.lit(False), F.lit(None).cast("string"))
    for p in LOG_PATTERNS:
        line = F.regexp_extract(text, ci(r"[^\n]*(?:" + p.regex + r")[^\n]*"), 0)
        evidence = evidence.when(
            F.col("log_pattern") == p.pattern_id, F.substring(F.trim(line), 1, EVIDENCE_CHARS)
        )
    meta = {p.pattern_id: p for p in LOG_PATTERNS}

    def lookup(attr: str) -> Column:
        pairs = [x for pid, p in meta.items() for x in (F.lit(pid), F.lit(getattr(p, attr)))]
        return F.create_map(*pairs)[F.col("log_pattern")]

    def fact(name: str) -> Column:
        value = F.regexp_extract(text, fact_regex(name), 1)
        return F.when(value != "", F.trim(value))

    return (
        with_traceback(df, text_col)
        .withColumn("log_pattern", pattern_id)  # after the reader: its exception decides BARE_TRACEBACK
        .withColumn("log_evidence", evidence)
        .withColumn("log_cause", lookup("cause"))
        .withColumn("log_detail", lookup("detail"))
        .withColumn("log_confidence", lookup("confidence").cast("double"))
        .withColumn("log_xid", fact("xid").cast("int"))
        .withColumn("log_gpu_total_gib", fact("gpu_total_gib").cast("double"))
        .withColumn("log_gpu_tried_gib", fact("gpu_tried_gib").cast("double"))
        .withColumn("log_nccl_timeout_ms", fact("nccl_timeout_ms").cast("long"))
        .withColumn("log_nccl_ran_ms", fact("nccl_ran_ms").cast("long"))
        .withColumn("log_nccl_op", fact("nccl_op"))
        .withColumn("log_exception", F.substring(fact("exception"), 1, EVIDENCE_CHARS))
    )


def parse_job_log_text(logs: DataFrame) -> DataFrame:
    """One row per (cluster, job_id) with the tails of its streams joined (stderr first) as `text`."""
    order = F.when(F.col("stream") == "stderr", 0).when(F.col("stream") == "stdout", 1).otherwise(2)
    return (
        logs.withColumn("_part", F.struct(order.alias("o"), F.col("stream"), F.col("tail_text")))
        .groupBy("cluster", "job_id")
        .agg(F.sort_array(F.collect_list("_part")).alias("_parts"))
        .select(
            "cluster",
            "job_id",
            F.array_join(F.transform("_parts", lambda p: F.coalesce(p["tail_text"], F.lit(""))), "\n").alias(
                "text"
            ),
        )
    )


def gpu_signals(samples: DataFrame, jobs: DataFrame) -> DataFrame:
    """Per job: the last system-fault Xid its GPUs reported (host, GPU index, time) from its start to
    XID_GRACE_S after its end, its VRAM peak and card size in bytes, and `tel_moment`, its last samples
    around the end (MOMENT_S before it), from attributed samples."""
    window = samples.alias("s").join(
        jobs.select("cluster", "job_id", "start_ts", "end_ts").alias("j"),
        on=(F.col("s.cluster") == F.col("j.cluster")) & (F.col("s.job_id") == F.col("j.job_id")),
        how="inner",
    )
    in_window = (F.col("s.ts") >= F.coalesce(F.col("j.start_ts"), F.col("s.ts"))) & (
        F.col("s.ts")
        <= F.coalesce(F.col("j.end_ts") + F.expr(f"INTERVAL {XID_GRACE_S} SECONDS"), F.col("s.ts"))
    )
    is_fault = F.col("s.xid").isin(*SYSTEM_FAULT_XIDS)
    fault = F.struct(F.col("s.ts").alias("ts"), F.col("s.xid"), F.col("s.host"), F.col("s.gpu"))
    end = F.col("j.end_ts")
    at_moment = (F.col("s.ts") >= end - F.expr(f"INTERVAL {MOMENT_S} SECONDS")) & (
        F.col("s.ts") <= end + F.expr("INTERVAL 60 SECONDS")
    )
    moment = F.struct(F.col("s.ts").alias("ts"), _sample_text().alias("text"))
    last_samples = f"slice(_moment, greatest(size(_moment) - {MOMENT_SAMPLES - 1}, 1), {MOMENT_SAMPLES})"
    return (
        window.where(in_window)
        .groupBy(F.col("j.cluster").alias("cluster"), F.col("j.job_id").alias("job_id"))
        .agg(
            F.max(F.when(is_fault, fault)).alias("_fault"),
            F.max("s.fb_used_bytes").alias("tel_vram_peak_bytes"),
            F.max("s.fb_total_bytes").alias("tel_vram_total_bytes"),
            F.first("s.model_name", ignorenulls=True).alias("tel_gpu_model"),
            F.sort_array(F.collect_list(F.when(at_moment, moment))).alias("_moment"),
        )
        .select(
            "cluster",
            "job_id",
            F.col("_fault.xid").alias("tel_xid"),
            F.col("_fault.host").alias("tel_xid_host"),
            F.col("_fault.gpu").alias("tel_xid_gpu"),
            F.col("_fault.ts").alias("tel_xid_ts"),
            "tel_vram_peak_bytes",
            "tel_vram_total_bytes",
            "tel_gpu_model",
            F.when(
                F.size("_moment") > 0,
                F.array_join(F.transform(F.expr(last_samples), lambda m: m["text"]), "; "),
            ).alias("tel_moment"),
        )
    )


def _sample_text() -> Column:
    """One GPU sample as the evidence quotes it: `02:13:50 g012 GPU 3: VRAM 79.1/80 GiB, util 98 %, 301 W`."""
    return F.concat(
        F.date_format("s.ts", "HH:mm:ss"),
        F.lit(" "),
        F.col("s.host"),
        note(" GPU %d", F.col("s.gpu")),
        F.lit(": VRAM "),
        note("%.1f", F.col("s.fb_used_bytes") / GIB, default="?"),
        F.lit("/"),
        note("%.0f", F.col("s.fb_total_bytes") / GIB, default="?"),
        F.lit(" GiB"),
        note(", util %.0f %%", F.col("s.gpu_util_pct")),
        note(", %.0f W", F.col("s.power_w")),
        F.when(F.col("s.xid") > 0, F.format_string(", Xid %d", F.col("s.xid"))).otherwise(F.lit("")),
    )


def step_signals(steps: DataFrame) -> DataFrame:
    """Per job: whether a step ran out of memory or lost its node, and the largest step exit signal."""
    return steps.groupBy("cluster", "job_id").agg(
        F.max((F.col("state") == "OUT_OF_MEMORY").cast("int")).cast("boolean").alias("step_oom"),
        F.max((F.col("state") == "NODE_FAIL").cast("int")).cast("boolean").alias("step_node_fail"),
        F.max("exit_signal").alias("step_signal"),
    )


def evidence() -> Column:
    """What was seen, source by source: accounting, telemetry, log; and what was missing."""
    exit_txt = F.format_string(
        "%s:%s",
        F.coalesce(F.col("exit_code").cast("string"), F.lit("?")),
        F.coalesce(F.col("exit_signal").cast("string"), F.lit("?")),
    )
    # the log's lines of the moment of failure, but not the matching line twice (as explain does)
    moments = F.filter(
        F.coalesce(F.col("log_moments"), F.array().cast("array<string>")),
        lambda m: ~m.eqNullSafe(F.col("log_evidence")),
    )
    parts = [
        F.format_string("accounting: state %s, exit %s", F.col("state"), exit_txt),
        F.when(
            F.col("max_rss_bytes").isNotNull() & F.col("req_mem_bytes").isNotNull(),
            F.format_string(
                "peak RSS %s of %s GiB requested",
                gib_text(F.col("max_rss_bytes")),
                gib_text(F.col("req_mem_bytes")),
            ),
        ),
        F.when(
            F.col("vram_peak_bytes").isNotNull(),
            F.format_string(
                "VRAM peak %s%s GiB",
                gib_text(F.col("vram_peak_bytes")),
                F.coalesce(F.format_string("/%.0f", F.col("vram_total_bytes") / GIB), F.lit("")),
            ),
        ),
        F.when(
            F.col("tel_xid").isNotNull(),
            F.format_string(
                "telemetry: Xid %d on %s GPU %s at %s",
                F.col("tel_xid"),
                F.col("tel_xid_host"),
                F.coalesce(F.col("tel_xid_gpu").cast("string"), F.lit("?")),
                F.date_format("tel_xid_ts", "yyyy-MM-dd HH:mm:ss"),
            ),
        ),
        F.when(F.col("tel_moment").isNotNull(), F.concat(F.lit("GPU before the end: "), F.col("tel_moment"))),
        F.when(
            F.col("log_evidence").isNotNull(),
            F.format_string("log (%s): %s", F.col("log_pattern"), F.col("log_evidence")),
        ),
        F.when(
            F.size(moments) > 0,
            F.array_join(F.transform(moments, lambda m: F.concat(F.lit("at the moment: "), m)), "; "),
        ),
        F.when(
            F.col("exception").isNotNull(),
            F.concat(
                F.lit("traceback: "),
                F.col("exception.type"),
                F.when(
                    F.col("code").isNotNull(),
                    F.format_string(
                        " at %s:%d in %s", F.col("code.file"), F.col("code.line"), F.col("code.function")
                    ),
                ).otherwise(F.lit("")),
            ),
        ),
        F.when(~F.col("has_log"), F.lit("no log archived")),
        F.when(
            (F.coalesce(F.col("alloc_gpus"), F.lit(0)) > 0) & ~F.col("has_telemetry"),
            F.lit("no GPU telemetry"),
        ),
    ]
    return F.concat_ws("; ", *parts)


def filter_diagnosable(jobs: DataFrame, month: str | None = None) -> DataFrame:
    """Jobs in a diagnosed state (failed, timed out, OOM, node-failed, preempted, cancelled), optionally those
    that ended in the month YYYY-MM (UTC; a job that never started counts at its submit time)."""
    # A pod stuck pulling its image never ends (PENDING) but has failed all the same.
    image_pull = (F.col("source") == "k8s") & F.coalesce(F.col("state_raw"), F.lit("")).rlike(ci(IMAGE_PULL))
    out = jobs.where(F.col("state").isin(*DIAGNOSED_STATES) | image_pull)
    if month:
        ended = F.coalesce(F.col("end_ts"), F.col("start_ts"), F.col("submit_ts"))
        out = out.where(F.date_format(ended, "yyyy-MM") == month)
    return out


def _with_signals(
    jobs: DataFrame,
    steps: DataFrame,
    log_text: DataFrame,
    gpu: DataFrame,
    scripts: DataFrame,
    cluster: ClusterConfig,
) -> DataFrame:
    """The jobs joined to their step, log, telemetry and script signals, with VRAM and RSS peak fractions."""
    # typed, so that a cluster without GPU models (the default sheet) still gives a map to look up in
    card_gib = F.create_map(
        *[x for m, g in cluster.gpu_models.items() for x in (F.lit(m), F.lit(float(g.memory_gib)))]
    ).cast("map<string,double>")
    logs = with_text_diagnosis(log_text, "text").drop("text").withColumn("has_log", F.lit(True))
    keys = ["cluster", "job_id"]
    return (
        jobs.join(step_signals(steps), on=keys, how="left")
        .join(logs, on=keys, how="left")
        .join(gpu.withColumn("has_telemetry", F.lit(True)), on=keys, how="left")
        .join(_script_columns(scripts).dropDuplicates(keys), on=keys, how="left")
        .withColumn("has_log", F.coalesce(F.col("has_log"), F.lit(False)))
        .withColumn("has_telemetry", F.coalesce(F.col("has_telemetry"), F.lit(False)))
        .withColumn("gpu_model", F.coalesce(F.col("gpu_model"), F.col("tel_gpu_model")))
        .withColumn("vram_peak_bytes", F.greatest(F.col("gpu_mem_peak_bytes"), F.col("tel_vram_peak_bytes")))
        .withColumn(
            "vram_total_bytes",
            F.coalesce(F.col("tel_vram_total_bytes"), (card_gib[F.col("gpu_model")] * GIB).cast("long")),
        )
        .withColumn("vram_frac", F.col("vram_peak_bytes") / F.col("vram_total_bytes"))
        .withColumn("rss_frac", F.col("max_rss_bytes") / F.col("req_mem_bytes"))
    )


def _with_losses(df: DataFrame, cluster: ClusterConfig) -> DataFrame:
    """Add the GPU-hours, core-hours and USD (at the cluster's prices) the failed run's allocation used."""
    prices = cluster.prices
    gpu_price = F.create_map(*[x for m, p in prices.gpu_hour_usd.items() for x in (F.lit(m), F.lit(p))])
    hours = F.coalesce(F.col("elapsed_s"), F.lit(0)) / 3600.0
    gpus = F.coalesce(F.col("alloc_gpus"), F.col("req_gpus"), F.lit(0))
    cores = F.coalesce(F.col("alloc_cpus"), F.col("req_cpus"), F.lit(0))
    mem_gib = F.coalesce(F.col("alloc_mem_bytes"), F.col("req_mem_bytes"), F.lit(0)) / GIB
    return (
        df.withColumn("lost_gpu_hours", gpus * hours)
        .withColumn("lost_core_hours", cores * hours)
        .withColumn(
            "lost_usd",
            cores * hours * prices.core_hour_usd
            + mem_gib * hours * prices.gib_hour_usd
            + gpus * hours * F.coalesce(gpu_price[F.col("gpu_model")], F.lit(prices.gpu_hour_usd["default"])),
        )
    )


def _user_fixable() -> Column:
    """Whether the job's owner could have prevented its cause (never when an administrator cancelled it)."""
    by_cause = F.create_map(*[x for c in CAUSES.values() for x in (F.lit(c.name), F.lit(c.user_fixable))])
    return F.when(F.col("detail") == "by_admin", F.lit(False)).otherwise(
        F.coalesce(by_cause[F.col("cause")], F.lit(False))
    )


def _script_columns(scripts: DataFrame) -> DataFrame:
    """(cluster, job_id, batch_size, script_text) of the job scripts (script_text null when not given)."""
    text = F.col("script_text") if "script_text" in scripts.columns else F.lit(None).cast("string")
    return scripts.select("cluster", "job_id", "batch_size", text.alias("script_text"))


def _knob_note(script: str | None, cause: str | None) -> str:
    """fix_table.knob_note for the script lines that set what the cause's fix turns ('' without a script)."""
    return knob_note(script_knobs(script, cause)) if script and cause else ""


def diagnose_failures(
    jobs: DataFrame,
    steps: DataFrame,
    log_text: DataFrame,
    gpu: DataFrame,
    scripts: DataFrame,
    cluster: ClusterConfig,
    built_at: datetime,
) -> DataFrame:
    """gold.failures rows for the given (already filtered) jobs: one primary cause each with evidence, fix,
    confidence, whether the user can fix it, and the GPU-hours, core-hours and USD the failed run used.
    `log_text` is (cluster, job_id, text); `gpu` is `gpu_signals(...)`; `scripts` is
    (cluster, job_id, batch_size[, script_text]): with the script's text, the fix names its lines that set
    what the fix turns (`fix_table.KNOBS`, the function `jobfit explain --script` calls, per row)."""
    knobs = F.udf(lambda script, cause: _knob_note(script, cause), "string")  # no hints: a plain UDF
    df = (
        with_rule(_with_signals(jobs, steps, log_text, gpu, scripts, cluster))
        .withColumn("user_fixable", _user_fixable())
        .withColumn("evidence", evidence())
        .withColumn("suggested_fix", F.concat(fix_message(), knobs(F.col("script_text"), F.col("cause"))))
        .withColumn(
            "xid", F.coalesce(F.col("tel_xid"), F.when(F.col("cause") == "gpu_hardware", F.col("log_xid")))
        )
        .withColumn(
            "month",
            F.date_format(F.coalesce(F.col("end_ts"), F.col("start_ts"), F.col("submit_ts")), "yyyy-MM"),
        )
        .withColumn("built_at", F.lit(built_at).cast("timestamp"))
    )
    renamed = {"gpus": "alloc_gpus", "cpus": "alloc_cpus"}  # gold.failures column <- working column
    return _with_losses(df, cluster).select(
        *[F.col(renamed.get(c, c)).alias(c) for c in GOLD_FAILURES.columns]
    )
