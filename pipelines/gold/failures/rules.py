"""The diagnosis rule table (state, telemetry, log, peaks, signals; in priority order) and its engine."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipelines.gold.failures.patterns import IMAGE_PULL, ci
from pipelines.gold.failures.taxonomy import AT_LIMIT_FRAC, UNKNOWN


@dataclass(frozen=True)
class Rule:
    """An accounting/telemetry/log rule: when `condition` holds (first rule in order wins), the job gets
    `cause` (a cause name, or None to take the log's), `detail` and `confidence` (None: the log's)."""

    name: str
    condition: Column
    cause: str | None
    detail: Column | str | None
    confidence: float | None
    sources: str


def rules() -> list[Rule]:
    """The rules in priority order (a function: Spark Columns need a running session)."""
    state, log_cause = F.col("state"), F.col("log_cause")
    signal = F.coalesce(F.col("exit_signal"), F.col("step_signal"))
    failed = state == "FAILED"
    k8s = F.col("source") == "k8s"  # Kubernetes pods: state_raw carries the container's termination reason
    image_pull = k8s & F.col("state_raw").rlike(ci(IMAGE_PULL))
    evicted = k8s & F.col("state_raw").rlike("(?i)evict")
    node_failed = state.isin("NODE_FAIL", "BOOT_FAIL") | F.coalesce(F.col("step_node_fail"), F.lit(False))
    k8s_oom = k8s & (
        (state == "OUT_OF_MEMORY")
        | (log_cause == "k8s_oomkilled")
        | F.col("state_raw").rlike("(?i)OOM ?Killed")
    )
    slurm_oom = (state == "OUT_OF_MEMORY") | F.coalesce(F.col("step_oom"), F.lit(False))
    timed_out = state.isin("TIMEOUT", "DEADLINE")
    log_limits = log_cause.isin("time_limit", "preemption", "node_failure")
    cancelled_by = (
        F.when(F.col("cancelled_by") == "0", "by_admin")
        .when(F.col("cancelled_by").isNotNull(), "by_user")
        .otherwise("by_unknown")
    )
    vram_at_card = failed & (F.col("vram_frac") >= AT_LIMIT_FRAC)
    rss_at_limit = failed & (F.col("rss_frac") >= AT_LIMIT_FRAC)
    k8s_exit137 = k8s & (F.col("exit_code") == 137)
    nonzero_exit = failed & (F.coalesce(F.col("exit_code"), F.lit(0)) != 0)
    return [
        Rule("telemetry_xid", F.col("tel_xid").isNotNull(), "gpu_hardware", "xid", 0.95, "telemetry"),
        Rule("log_gpu_hardware", log_cause == "gpu_hardware", None, None, None, "log"),
        Rule("k8s_image_pull", image_pull, "k8s_image_pull", "image_pull", 0.9, "accounting"),
        Rule("k8s_evicted", evicted, "k8s_evicted", "evicted", 0.9, "accounting"),
        Rule("node_fail", node_failed, "node_failure", F.lower(state), 0.95, "accounting"),
        Rule("preempted", state == "PREEMPTED", "preemption", "preempted", 0.95, "accounting"),
        Rule("k8s_oom", k8s_oom, "k8s_oomkilled", "oomkilled", 0.95, "accounting"),
        Rule("slurm_oom", slurm_oom, "host_oom", "out_of_memory_state", 0.95, "accounting"),
        Rule("log_host_oom", log_cause == "host_oom", None, None, None, "log"),
        Rule("timeout_state", timed_out, "time_limit", F.lower(state), 0.95, "accounting"),
        Rule("log_limits", log_limits, None, None, None, "log"),
        Rule("cancelled_state", state == "CANCELLED", "cancelled", cancelled_by, 0.9, "accounting"),
        Rule("log_cause", log_cause.isNotNull() & (log_cause != UNKNOWN), None, None, None, "log"),
        Rule("vram_at_card", vram_at_card, "gpu_oom", "vram_at_limit", 0.55, "telemetry"),
        Rule("rss_at_limit", rss_at_limit, "host_oom", "rss_at_limit", 0.6, "accounting"),
        Rule("k8s_exit137", k8s_exit137, "k8s_exit137", "sigkill", 0.5, "accounting"),
        Rule("segv_signal", signal == 11, "software_error", "segfault", 0.6, "accounting"),
        Rule("abort_signal", signal == 6, "software_error", "abort", 0.5, "accounting"),
        Rule("kill_signal", signal == 9, UNKNOWN, "sigkill", 0.2, "accounting"),
        # a log line that names no cause (a SIGKILL, torchrun's "worker failed"): after the peaks and
        # signals, which may name one, and before "non-zero exit", which would guess the user's code
        Rule("log_unknown", log_cause == UNKNOWN, None, None, None, "log"),
        Rule("nonzero_exit", nonzero_exit, "software_error", "nonzero_exit", 0.3, "accounting"),
    ]


def _detail(rule: Rule) -> Column:
    """The rule's detail as a Column: the log's when None, a literal when text."""
    if rule.detail is None:
        return F.col("log_detail")
    return F.lit(rule.detail) if isinstance(rule.detail, str) else rule.detail


def with_rule(df: DataFrame) -> DataFrame:
    """Add cause, detail, confidence, primary_source and rule from the first rule that holds (one flat
    CASE WHEN); a job no rule explains is `unknown` at confidence 0.1."""
    table = rules()
    first = F.when(F.coalesce(table[0].condition, F.lit(False)), F.lit(0))
    for i, r in enumerate(table[1:], start=1):
        first = first.when(F.coalesce(r.condition, F.lit(False)), F.lit(i))
    df = df.withColumn("_rule", first)

    def pick(values: list[Column], default: Column) -> Column:
        out = F.when(F.col("_rule") == 0, values[0])
        for i, v in enumerate(values[1:], start=1):
            out = out.when(F.col("_rule") == i, v)
        return out.otherwise(default)

    causes = [F.lit(r.cause) if r.cause else F.col("log_cause") for r in table]
    confs = [F.lit(r.confidence) if r.confidence is not None else F.col("log_confidence") for r in table]
    no_rule_detail = F.when(F.col("state") == "FAILED", "no_evidence").otherwise(F.lower(F.col("state")))
    return (
        df.withColumn("cause", pick(causes, F.lit(UNKNOWN)))
        .withColumn("detail", pick([_detail(r) for r in table], no_rule_detail))
        .withColumn("confidence", pick(confs, F.lit(0.1)).cast("double"))
        .withColumn("primary_source", pick([F.lit(r.sources) for r in table], F.lit("accounting")))
        .withColumn("rule", pick([F.lit(r.name) for r in table], F.lit("no_rule")))
        .drop("_rule")
    )
