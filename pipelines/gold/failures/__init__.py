"""Why each failed job failed: one primary cause from a declared taxonomy, the evidence used, a confidence,
and a fix with the job's own numbers. Rules only (docs/failures.md): log-text patterns first compiled to
Spark `rlike`/`when` chains, then accounting (state, exit code, peaks against limits) and GPU telemetry."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from conf import ClusterConfig
from pipelines.gold.failures.xid import APPLICATION_XIDS, SYSTEM_FAULT_XIDS, XID_CATALOGUE, codes_regex
from pipelines.states import FAILED_STATES

GIB = 1024**3
# A peak within 5 % of its limit counts as "at the limit": sacct and DCGM sample, so the true peak is higher.
AT_LIMIT_FRAC = 0.95
HEADROOM = 1.25  # recommended request = peak + 25 %
# Telemetry Xids count when seen from the job's start to this long after its end (the driver logs late).
XID_GRACE_S = 300
EVIDENCE_CHARS = 300


@dataclass(frozen=True)
class Cause:
    """One primary cause: whether the job's owner can fix it (else it is excluded from user waste blame)."""

    name: str
    title: str
    user_fixable: bool


CAUSES: dict[str, Cause] = {
    c.name: c
    for c in (
        Cause("host_oom", "host out of memory", True),
        Cause("gpu_oom", "GPU out of memory", True),
        Cause("time_limit", "time limit reached", True),
        Cause("nccl_timeout", "NCCL / collective timeout", True),
        Cause("nccl_error", "NCCL / network communication error", False),
        Cause("gpu_hardware", "GPU hardware fault (Xid, ECC)", False),
        Cause("node_failure", "node failure", False),
        Cause("preemption", "preempted", False),
        Cause("software_error", "error in the job's code or environment", True),
        Cause("cancelled", "cancelled", True),
        Cause("k8s_oomkilled", "Kubernetes OOMKilled", True),
        Cause("k8s_exit137", "Kubernetes exit 137 without OOM", False),
        Cause("k8s_evicted", "Kubernetes eviction", False),
        Cause("k8s_image_pull", "Kubernetes image pull error", True),
        Cause("unknown", "unknown", False),
    )
}

# Final states whose jobs get a diagnosis: the failed ones plus cancelled and preempted.
DIAGNOSED_STATES = tuple(sorted(FAILED_STATES | {"CANCELLED"}))


_IMAGE_PULL = "(?i)ErrImagePull|ImagePullBackOff|InvalidImageName"


@dataclass(frozen=True)
class LogPattern:
    """A log-text signature: first match in table order wins, so root causes precede their consequences."""

    pattern_id: str
    cause: str
    detail: str
    regex: str
    confidence: float


_XID_LINE = r"NVRM: Xid \([^)]*\): "

# Ordered by priority. A hardware fault or an OOM kill explains the tracebacks and NCCL errors that follow
# it; a specific Python error explains the NCCL errors of the ranks it left behind; a bare traceback or a
# torchrun "worker failed" line is the weakest evidence.
LOG_PATTERNS: tuple[LogPattern, ...] = (
    LogPattern("xid_system", "gpu_hardware", "xid", _XID_LINE + codes_regex(SYSTEM_FAULT_XIDS) + r"\b", 0.95),
    LogPattern("gpu_fallen_off_bus", "gpu_hardware", "xid", r"fallen off the bus", 0.95),
    LogPattern(
        "ecc_uncorrectable",
        "gpu_hardware",
        "ecc",
        r"uncorrectable ECC error|cudaErrorECCUncorrectable|double[- ]bit ECC",
        0.9,
    ),
    LogPattern("slurm_oom_kill", "host_oom", "oom_kill", r"oom[-_]kill event", 0.95),
    LogPattern("slurm_task_oom", "host_oom", "oom_kill", r"task \d+: Out Of Memory", 0.9),
    LogPattern("slurm_mem_limit", "host_oom", "memory_limit", r"exceeded (?:job )?memory limit", 0.9),
    LogPattern("jvm_heap", "software_error", "jvm_heap", r"java\.lang\.OutOfMemoryError", 0.8),
    LogPattern(
        "cuda_oom",
        "gpu_oom",
        "cuda_oom",
        r"CUDA out of memory|torch(?:\.cuda)?\.OutOfMemoryError|CUDA error: out of memory|"
        r"cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED",
        0.95,
    ),
    LogPattern("k8s_oomkilled", "k8s_oomkilled", "oomkilled", r"reason\"?\s*[:=]\s*\"?OOM ?Killed", 0.95),
    LogPattern("slurm_time_limit", "time_limit", "time_limit", r"DUE TO TIME LIMIT", 0.95),
    LogPattern("slurm_preempted", "preemption", "preempted", r"DUE TO PREEMPTION", 0.95),
    LogPattern("slurm_node_fail", "node_failure", "node_failure", r"DUE TO NODE FAIL", 0.9),
    LogPattern(
        "cuda_illegal_access",
        "software_error",
        "illegal_memory_access",
        r"illegal memory access|cudaErrorIllegalAddress",
        0.8,
    ),
    # cudaErrorLaunchFailure: "an exception occurred on the device while executing a kernel" (CUDA runtime
    # docs), usually the kernel's own bad pointer; a hardware Xid (79, 48, ...) in the node's kernel log
    # would make it the GPU's fault, which only telemetry or that log can show.
    LogPattern(
        "cuda_launch_failure", "software_error", "cuda_launch_failure", r"unspecified launch failure", 0.5
    ),
    LogPattern(
        "import_error", "software_error", "import_error", r"\b(?:ModuleNotFoundError|ImportError)\b", 0.85
    ),
    LogPattern("file_not_found", "software_error", "file_not_found", r"\bFileNotFoundError\b", 0.85),
    LogPattern("segfault", "software_error", "segfault", r"Segmentation fault|SIGSEGV|signal 11\b", 0.75),
    LogPattern(
        "assertion", "software_error", "assertion", r"\bAssertionError\b|Assertion [`'\"].*[`'\"] failed", 0.8
    ),
    LogPattern(
        "nccl_watchdog",
        "nccl_timeout",
        "watchdog",
        r"Watchdog caught collective operation timeout|collective operation timeout",
        0.9,
    ),
    LogPattern(
        "nccl_error",
        "nccl_error",
        "nccl_error",
        r"NCCL error|nccl(?:Remote|Internal|System|UnhandledCuda|InvalidUsage)Error|DistBackendError",
        0.85,
    ),
    LogPattern(
        "k8s_image_pull",
        "k8s_image_pull",
        "image_pull",
        r"ErrImagePull|ImagePullBackOff|InvalidImageName",
        0.9,
    ),
    LogPattern(
        "k8s_evicted",
        "k8s_evicted",
        "evicted",
        r"reason\"?\s*[:=]\s*\"?Evicted|The node was low on resource",
        0.9,
    ),
    LogPattern("k8s_exit137", "k8s_exit137", "sigkill", r"Exit ?Code\"?\s*[:=]\s*137\b", 0.6),
    LogPattern("slurm_cancelled", "cancelled", "scancel", r"CANCELLED AT \S+ \*\*\*", 0.7),
    LogPattern(
        "xid_application",
        "software_error",
        "gpu_app_fault",
        _XID_LINE + codes_regex(APPLICATION_XIDS) + r"\b",
        0.6,
    ),
    LogPattern(
        "jvm_or_python_permission",
        "software_error",
        "permission_denied",
        r"\bPermissionError\b|Permission denied",
        0.6,
    ),
    LogPattern("mpi_abort", "software_error", "mpi_abort", r"MPI_ABORT was invoked|MPI_Abort\(", 0.6),
    LogPattern("no_such_file", "software_error", "file_not_found", r"No such file or directory", 0.5),
    LogPattern(
        "python_traceback", "software_error", "python_exception", r"Traceback \(most recent call last\)", 0.7
    ),
    LogPattern("core_dumped", "software_error", "segfault", r"core dumped", 0.6),
    LogPattern(
        "torchrun_worker_failed",
        "nccl_error",
        "distributed_worker_failed",
        r"elastic\S*\s.*failed \(exitcode: -?\d+\)|ChildFailedError",
        0.4,
    ),
)

# Numbers a fix message quotes, each a regex whose group 1 is the value (Python and Java regex alike).
LOG_FACTS: dict[str, str] = {
    "xid": _XID_LINE + "(" + codes_regex(SYSTEM_FAULT_XIDS) + r")\b",  # the first system-fault Xid
    "gpu_total_gib": r"(?:total capac\w* of|\(GPU \d+; )\s*([0-9.]+) GiB",
    "gpu_tried_gib": r"Tried to allocate ([0-9.]+) GiB",
    "nccl_timeout_ms": r"Timeout\(ms\)=(\d+)",
    "nccl_ran_ms": r"ran for (\d+) milliseconds",
    "nccl_op": r"OpType=(\w+)",
    "exception": r"(?m)^\s*((?:[\w.]+\.)?\w*(?:Error|Exception)\b[^\n]*)",
}


def _ci(regex: str) -> str:
    return regex if regex.startswith("(?") else "(?i)" + regex


@dataclass(frozen=True)
class TextDiagnosis:
    """What a log's text alone says: the winning pattern, its cause, the matching line and quoted numbers."""

    pattern_id: str
    cause: str
    detail: str
    confidence: float
    evidence: str
    facts: dict[str, str]


def log_facts(text: str) -> dict[str, str]:
    """The numbers a fix quotes (Xid, GPU size in GiB, NCCL timeout in ms, ...) found in the text."""
    facts: dict[str, str] = {}
    for name, regex in LOG_FACTS.items():
        match = re.search(_ci(regex) if name != "exception" else regex, text)
        if match:
            facts[name] = match.group(1).strip()[:EVIDENCE_CHARS]
    return facts


_COMPILED = tuple(re.compile(_ci(p.regex)) for p in LOG_PATTERNS)


def classify_text(text: str | None) -> TextDiagnosis | None:
    """The first LOG_PATTERNS entry matching the text (case-insensitive), or None when nothing matches."""
    if not text:
        return None
    for p, compiled in zip(LOG_PATTERNS, _COMPILED, strict=True):
        match = compiled.search(text)
        if match:
            # the whole line holding the match, as the Spark chain's `[^\n]*(?:...)[^\n]*` extracts it
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            line = text[start : end if end >= 0 else len(text)]
            evidence = line.strip()[:EVIDENCE_CHARS]
            return TextDiagnosis(p.pattern_id, p.cause, p.detail, p.confidence, evidence, log_facts(text))
    return None


def with_text_diagnosis(df: DataFrame, text_col: str = "text") -> DataFrame:
    """Add log_pattern, log_cause, log_detail, log_confidence, log_evidence and the quoted numbers
    (log_xid, log_gpu_total_gib, log_gpu_tried_gib, log_nccl_timeout_ms, log_nccl_ran_ms, log_nccl_op,
    log_exception) from the text column, with the same table and order as `classify_text`."""
    text = F.col(text_col)
    # One flat CASE WHEN (first match wins) rather than nested ones: the optimiser handles it far faster.
    pattern_id = F.when(text.rlike(_ci(LOG_PATTERNS[0].regex)), F.lit(LOG_PATTERNS[0].pattern_id))
    for p in LOG_PATTERNS[1:]:
        pattern_id = pattern_id.when(text.rlike(_ci(p.regex)), F.lit(p.pattern_id))
    evidence = F.when(F.lit(False), F.lit(None).cast("string"))
    for p in LOG_PATTERNS:
        line = F.regexp_extract(text, _ci(r"[^\n]*(?:" + p.regex + r")[^\n]*"), 0)
        evidence = evidence.when(
            F.col("log_pattern") == p.pattern_id, F.substring(F.trim(line), 1, EVIDENCE_CHARS)
        )
    meta = {p.pattern_id: p for p in LOG_PATTERNS}

    def lookup(attr: str) -> Column:
        pairs = [x for pid, p in meta.items() for x in (F.lit(pid), F.lit(getattr(p, attr)))]
        return F.create_map(*pairs)[F.col("log_pattern")]

    def fact(name: str) -> Column:
        regex = LOG_FACTS[name]
        value = F.regexp_extract(text, regex if name == "exception" else _ci(regex), 1)
        return F.when(value != "", F.trim(value))

    return (
        df.withColumn("log_pattern", pattern_id)
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
    XID_GRACE_S after its end, and its VRAM peak and card size in bytes, from attributed samples."""
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
    return (
        window.where(in_window)
        .groupBy(F.col("j.cluster").alias("cluster"), F.col("j.job_id").alias("job_id"))
        .agg(
            F.max(F.when(is_fault, fault)).alias("_fault"),
            F.max("s.fb_used_bytes").alias("tel_vram_peak_bytes"),
            F.max("s.fb_total_bytes").alias("tel_vram_total_bytes"),
            F.first("s.model_name", ignorenulls=True).alias("tel_gpu_model"),
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
        )
    )


def step_signals(steps: DataFrame) -> DataFrame:
    """Per job: whether a step ran out of memory or lost its node, and the largest step exit signal."""
    return steps.groupBy("cluster", "job_id").agg(
        F.max((F.col("state") == "OUT_OF_MEMORY").cast("int")).cast("boolean").alias("step_oom"),
        F.max((F.col("state") == "NODE_FAIL").cast("int")).cast("boolean").alias("step_node_fail"),
        F.max("exit_signal").alias("step_signal"),
    )


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


def _rules() -> list[Rule]:
    state, source = F.col("state"), F.col("source")
    log_cause = F.col("log_cause")
    signal = F.coalesce(F.col("exit_signal"), F.col("step_signal"))
    failed = state == "FAILED"
    cancelled_by_admin = F.col("cancelled_by") == "0"
    k8s = source == "k8s"  # Kubernetes pods: state_raw carries the container's termination reason
    return [
        Rule("telemetry_xid", F.col("tel_xid").isNotNull(), "gpu_hardware", "xid", 0.95, "telemetry"),
        Rule("log_gpu_hardware", log_cause == "gpu_hardware", None, None, None, "log"),
        Rule(
            "k8s_image_pull",
            k8s & F.col("state_raw").rlike(_IMAGE_PULL),
            "k8s_image_pull",
            "image_pull",
            0.9,
            "accounting",
        ),
        Rule(
            "k8s_evicted",
            k8s & F.col("state_raw").rlike("(?i)evict"),
            "k8s_evicted",
            "evicted",
            0.9,
            "accounting",
        ),
        Rule(
            "node_fail",
            state.isin("NODE_FAIL", "BOOT_FAIL") | F.coalesce(F.col("step_node_fail"), F.lit(False)),
            "node_failure",
            F.lower(state),
            0.95,
            "accounting",
        ),
        Rule("preempted", state == "PREEMPTED", "preemption", "preempted", 0.95, "accounting"),
        Rule(
            "k8s_oom",
            k8s
            & (
                (state == "OUT_OF_MEMORY")
                | (log_cause == "k8s_oomkilled")
                | F.col("state_raw").rlike("(?i)OOM ?Killed")
            ),
            "k8s_oomkilled",
            "oomkilled",
            0.95,
            "accounting",
        ),
        Rule(
            "slurm_oom",
            (state == "OUT_OF_MEMORY") | F.coalesce(F.col("step_oom"), F.lit(False)),
            "host_oom",
            "out_of_memory_state",
            0.95,
            "accounting",
        ),
        Rule("log_host_oom", log_cause == "host_oom", None, None, None, "log"),
        Rule(
            "timeout_state",
            state.isin("TIMEOUT", "DEADLINE"),
            "time_limit",
            F.lower(state),
            0.95,
            "accounting",
        ),
        Rule(
            "log_limits", log_cause.isin("time_limit", "preemption", "node_failure"), None, None, None, "log"
        ),
        Rule(
            "cancelled_state",
            state == "CANCELLED",
            "cancelled",
            F.when(cancelled_by_admin, "by_admin")
            .when(F.col("cancelled_by").isNotNull(), "by_user")
            .otherwise("by_unknown"),
            0.9,
            "accounting",
        ),
        Rule("log_cause", log_cause.isNotNull(), None, None, None, "log"),
        Rule(
            "vram_at_card",
            failed & (F.col("vram_frac") >= AT_LIMIT_FRAC),
            "gpu_oom",
            "vram_at_limit",
            0.55,
            "telemetry",
        ),
        Rule(
            "rss_at_limit",
            failed & (F.col("rss_frac") >= AT_LIMIT_FRAC),
            "host_oom",
            "rss_at_limit",
            0.6,
            "accounting",
        ),
        Rule(
            "k8s_exit137",
            (source == "k8s") & (F.col("exit_code") == 137),
            "k8s_exit137",
            "sigkill",
            0.5,
            "accounting",
        ),
        Rule("segv_signal", signal == 11, "software_error", "segfault", 0.6, "accounting"),
        Rule("abort_signal", signal == 6, "software_error", "abort", 0.5, "accounting"),
        Rule("kill_signal", signal == 9, "unknown", "sigkill", 0.2, "accounting"),
        Rule(
            "nonzero_exit",
            failed & (F.coalesce(F.col("exit_code"), F.lit(0)) != 0),
            "software_error",
            "nonzero_exit",
            0.3,
            "accounting",
        ),
    ]


def _apply_rules(df: DataFrame) -> DataFrame:
    """Pick the first rule that holds (one flat CASE WHEN); then its cause, detail, confidence and source."""
    rules = _rules()
    first = F.when(F.coalesce(rules[0].condition, F.lit(False)), F.lit(0))
    for i, r in enumerate(rules[1:], start=1):
        first = first.when(F.coalesce(r.condition, F.lit(False)), F.lit(i))
    df = df.withColumn("_rule", first)
    by_rule = F.col("_rule")

    def pick(values: list[Column], default: Column) -> Column:
        out = F.when(by_rule == 0, values[0])
        for i, v in enumerate(values[1:], start=1):
            out = out.when(by_rule == i, v)
        return out.otherwise(default)

    causes = [F.lit(r.cause) if r.cause else F.col("log_cause") for r in rules]
    details = [
        F.col("log_detail")
        if r.detail is None
        else F.lit(r.detail)
        if isinstance(r.detail, str)
        else r.detail
        for r in rules
    ]
    confs = [F.lit(r.confidence) if r.confidence is not None else F.col("log_confidence") for r in rules]
    no_rule_detail = F.when(F.col("state") == "FAILED", "no_evidence").otherwise(F.lower(F.col("state")))
    return (
        df.withColumn("cause", pick(causes, F.lit("unknown")))
        .withColumn("detail", pick(details, no_rule_detail))
        .withColumn("confidence", pick(confs, F.lit(0.1)).cast("double"))
        .withColumn("primary_source", pick([F.lit(r.sources) for r in rules], F.lit("accounting")))
        .withColumn("rule", pick([F.lit(r.name) for r in rules], F.lit("no_rule")))
        .drop("_rule")
    )


def _gib(col: Column) -> Column:
    return F.format_string("%.1f", col / GIB)


def _hms(seconds: Column) -> Column:
    s = F.coalesce(seconds, F.lit(0)).cast("long")
    return F.format_string("%d:%02d:%02d", F.floor(s / 3600), F.floor((s % 3600) / 60), s % 60)


def _fix_messages() -> Column:
    """The solution-oriented message for each cause and detail, quoting the job's own numbers."""
    cause, detail = F.col("cause"), F.col("detail")
    rss, req, nodes = (
        F.col("max_rss_bytes"),
        F.col("req_mem_bytes"),
        F.greatest(F.coalesce(F.col("nodes"), F.lit(1)), F.lit(1)),
    )
    per_node = F.when(nodes > 1, F.lit(" per node")).otherwise(F.lit(""))
    # Sampled peaks (sacct MaxRSS, cgroup polls) miss the spike that killed the job: below the limit, size
    # the recommendation on the limit instead.
    at_limit = rss >= req * AT_LIMIT_FRAC
    mem_rec = F.ceil(F.when(at_limit, rss).otherwise(req) * HEADROOM / nodes / GIB).cast("long")
    host_oom = F.coalesce(
        F.when(
            at_limit,
            F.format_string(
                "peak RSS %s GiB hit the %s GiB limit: request --mem=%dG%s (peak + 25 %%)",
                _gib(rss),
                _gib(req),
                mem_rec,
                per_node,
            ),
        ),
        F.when(
            req.isNotNull(),
            F.format_string(
                "the job ran out of memory at its %s GiB limit%s: request --mem=%dG%s (limit + 25 %%) "
                "and check the peak with seff",
                _gib(req),
                F.coalesce(
                    F.format_string(" (the sampled peak, %s GiB, missed the spike)", _gib(rss)),
                    F.lit(" (no peak recorded)"),
                ),
                mem_rec,
                per_node,
            ),
        ),
        F.lit(
            "the job ran out of host memory (no request or peak recorded): request more with --mem "
            "and check the peak with seff"
        ),
    )
    k8s_oom = F.coalesce(
        F.when(
            req.isNotNull(),
            F.format_string(
                "the container hit its %s GiB memory limit and was OOMKilled: raise "
                "resources.limits.memory to %dGi "
                "(%s + 25 %%)",
                _gib(req),
                mem_rec,
                F.when(rss.isNotNull(), F.lit("peak")).otherwise(F.lit("limit")),
            ),
        ),
        F.lit(
            "the container was OOMKilled at its memory limit: raise resources.limits.memory above "
            "its peak + 25 %"
        ),
    )
    vram, card = F.col("vram_peak_bytes"), F.col("vram_total_bytes")
    batch = F.coalesce(F.format_string(" from %d", F.col("batch_size")), F.lit(""))
    model = F.coalesce(F.col("gpu_model"), F.lit("its GPU"))
    shrink = F.format_string(
        "reduce the per-GPU batch size%s or enable activation checkpointing / mixed precision, or "
        "request a GPU with more memory",
        batch,
    )
    gpu_oom = F.coalesce(
        F.when(
            vram.isNotNull() & card.isNotNull(),
            F.format_string(
                "VRAM peaked at %s/%s GiB on %s: %s",
                _gib(vram),
                F.format_string("%.0f", card / GIB),
                model,
                shrink,
            ),
        ),
        F.when(
            F.col("log_gpu_total_gib").isNotNull(),
            F.format_string(
                "CUDA ran out of memory on a %.1f GiB GPU%s: %s",
                F.col("log_gpu_total_gib"),
                F.coalesce(
                    F.format_string(" (tried to allocate %.2f GiB more)", F.col("log_gpu_tried_gib")),
                    F.lit(""),
                ),
                shrink,
            ),
        ),
        F.format_string("CUDA ran out of GPU memory on %s: %s", model, shrink),
    )
    limit = F.col("timelimit_s")
    new_limit = F.ceil(limit * HEADROOM / 900) * 900
    time_limit = F.coalesce(
        F.when(
            limit.isNotNull(),
            F.format_string(
                "ran %s of a %s limit: add checkpointing so a rerun resumes, or request --time=%s "
                "(limit + 25 %%)",
                _hms(F.col("elapsed_s")),
                _hms(limit),
                _hms(new_limit),
            ),
        ),
        F.format_string(
            "killed at its time limit after %s: add checkpointing or request a longer --time",
            _hms(F.col("elapsed_s")),
        ),
    )
    nccl_timeout = F.format_string(
        "a %s collective waited %s past its %s NCCL timeout: one rank stalled or died first — look "
        "for an earlier "
        "error on another rank or work done on one rank only (e.g. preprocessing on rank 0); raise "
        "the timeout "
        "only if that wait is expected, and report it if it recurs on the same nodes (%s)",
        F.coalesce(F.col("log_nccl_op"), F.lit("NCCL")),
        F.coalesce(F.format_string("%d s", (F.col("log_nccl_ran_ms") / 1000).cast("long")), F.lit("")),
        F.coalesce(
            F.format_string("%d s", (F.col("log_nccl_timeout_ms") / 1000).cast("long")), F.lit("configured")
        ),
        F.coalesce(F.col("node_list"), F.lit("nodes unknown")),
    )
    nccl_error = F.when(
        detail == "distributed_worker_failed",
        F.lit(
            "the launcher (torchrun) reported a failed worker without its error: read the failed "
            "rank's own log for "
            "the first error (NCCL / network or code) before resubmitting"
        ),
    ).otherwise(
        F.format_string(
            "NCCL communication failed (a network fault or a rank that exited first): check the "
            "other ranks' logs for "
            "the first error; resubmit, excluding the nodes if it recurs on %s; reported to admins",
            F.coalesce(F.col("node_list"), F.lit("the same nodes")),
        )
    )
    xid_code = F.coalesce(F.col("tel_xid"), F.col("log_xid"))
    xid_names = F.create_map(*[x for c, v in XID_CATALOGUE.items() for x in (F.lit(c), F.lit(v.name))])
    hw_node = F.coalesce(F.col("tel_xid_host"), F.col("node_list"), F.lit("unknown node"))
    gpu_hardware = F.when(
        xid_code.isNotNull(),
        F.format_string(
            "Xid %d (%s) on node %s%s%s: hardware fault, resubmit (--exclude=%s); reported to admins",
            xid_code,
            F.coalesce(xid_names[xid_code], F.lit("see NVIDIA's Xid list")),
            hw_node,
            F.coalesce(F.format_string(" GPU %d", F.col("tel_xid_gpu")), F.lit("")),
            F.coalesce(F.format_string(" at %s", F.date_format("tel_xid_ts", "yyyy-MM-dd HH:mm")), F.lit("")),
            hw_node,
        ),
    ).otherwise(
        F.format_string(
            "uncorrectable GPU memory (ECC) error on node %s: hardware fault, resubmit "
            "(--exclude=%s); reported to admins",
            hw_node,
            hw_node,
        )
    )
    node_failure = F.format_string(
        "node %s failed after %s: not caused by the job; resubmit (add --requeue to let Slurm do it)",
        F.coalesce(F.col("node_list"), F.lit("(unknown)")),
        _hms(F.col("elapsed_s")),
    )
    preemption = F.format_string(
        "preempted after %s by higher-priority work: add checkpointing and --requeue, or use a "
        "non-preemptible "
        "partition or QOS",
        _hms(F.col("elapsed_s")),
    )
    line = F.coalesce(F.col("log_exception"), F.col("log_evidence"), F.lit("the error"))
    software = (
        F.when(
            detail == "import_error",
            F.format_string(
                "%s: the job's environment lacks this module — load or activate the environment in "
                "the batch script (module load, conda/venv activate) and test with a short debug job",
                line,
            ),
        )
        .when(
            detail == "file_not_found",
            F.format_string(
                "%s: the path does not exist on the compute node — use an absolute path on a shared "
                "filesystem and check it before submitting",
                line,
            ),
        )
        .when(
            detail == "illegal_memory_access",
            F.lit(
                "CUDA illegal memory access: an out-of-bounds index or a kernel bug — rerun a short "
                "debug job with CUDA_LAUNCH_BLOCKING=1 to find the kernel; report it if it only "
                "happens on one node"
            ),
        )
        .when(
            detail == "cuda_launch_failure",
            F.lit(
                "CUDA unspecified launch failure: a kernel crashed (often a bad pointer or an "
                "out-of-bounds access) — rerun a short debug job with CUDA_LAUNCH_BLOCKING=1; if the node "
                "logged an Xid such as 79 or 48 at that time, it was the GPU: resubmit and report it"
            ),
        )
        .when(
            detail == "segfault",
            F.lit(
                "segmentation fault (signal 11): run a short debug job with core dumps on (or under "
                "gdb) and check the libraries the code was built against"
            ),
        )
        .when(
            detail == "abort",
            F.lit(
                "aborted (signal 6): a failed assertion or an uncaught C++ exception — look at the "
                "end of stderr"
            ),
        )
        .when(
            detail == "assertion",
            F.format_string(
                "%s: an assertion in the code failed — check the inputs or configuration it asserts on", line
            ),
        )
        .when(
            detail == "jvm_heap",
            F.lit("Java heap exhausted: raise -Xmx (and --mem with it) or reduce the data held in memory"),
        )
        .when(
            detail == "permission_denied",
            F.format_string(
                "%s: the job cannot read or write a path — check its permissions and that it is on "
                "a filesystem the compute nodes mount",
                line,
            ),
        )
        .when(
            detail == "gpu_app_fault",
            F.format_string(
                "%s: NVIDIA lists the application as a likely cause — debug with "
                "CUDA_LAUNCH_BLOCKING=1; report it if it recurs only on this GPU",
                F.col("log_evidence"),
            ),
        )
        .when(
            detail == "mpi_abort",
            F.lit("a rank called MPI_Abort: its own error is printed just before; fix that and rerun"),
        )
        .when(
            detail == "nonzero_exit",
            F.format_string(
                "exited with code %d after %s; no log explains it, so this is the likeliest cause, "
                "not a certainty: "
                "ingest its stderr (jobfit ingest logs) for a diagnosis",
                F.col("exit_code"),
                _hms(F.col("elapsed_s")),
            ),
        )
        .otherwise(
            F.format_string(
                "%s: fix the error in the job's code or inputs and test on a short debug run before "
                "resubmitting",
                line,
            )
        )
    )
    cancelled = F.when(
        detail == "by_admin",
        F.format_string(
            "cancelled by an administrator (uid 0) after %s: ask the admins why before resubmitting",
            _hms(F.col("elapsed_s")),
        ),
    ).otherwise(
        F.format_string(
            "cancelled%s after %s of its %s limit: nothing to fix if intended; if it had stalled, "
            "check its log first",
            F.coalesce(F.format_string(" by uid %s", F.col("cancelled_by")), F.lit("")),
            _hms(F.col("elapsed_s")),
            F.when(limit.isNotNull(), _hms(limit)).otherwise(F.lit("unlimited")),
        )
    )
    unknown = F.format_string(
        "state %s, exit code %s%s: no log, telemetry or accounting detail explains it — ingest its "
        "stderr with "
        "`jobfit ingest logs` for a diagnosis",
        F.col("state"),
        F.coalesce(F.col("exit_code").cast("string"), F.lit("unknown")),
        F.when(detail == "sigkill", F.lit(" (killed by SIGKILL)")).otherwise(F.lit("")),
    )
    return (
        F.when(cause == "host_oom", host_oom)
        .when(cause == "k8s_oomkilled", k8s_oom)
        .when(cause == "gpu_oom", gpu_oom)
        .when(cause == "time_limit", time_limit)
        .when(cause == "nccl_timeout", nccl_timeout)
        .when(cause == "nccl_error", nccl_error)
        .when(cause == "gpu_hardware", gpu_hardware)
        .when(cause == "node_failure", node_failure)
        .when(cause == "preemption", preemption)
        .when(cause == "software_error", software)
        .when(cause == "cancelled", cancelled)
        .when(
            cause == "k8s_exit137",
            F.lit(
                "killed by SIGKILL (exit 137) without an OOM: usually a failed liveness probe, a "
                "node drain or a manual kill — check `kubectl describe pod` events"
            ),
        )
        .when(
            cause == "k8s_evicted",
            F.lit(
                "evicted under node pressure: set requests close to real use so the pod is not "
                "evicted first, then resubmit"
            ),
        )
        .when(
            cause == "k8s_image_pull",
            F.lit("the image could not be pulled: check the image name, tag and pull secret"),
        )
        .otherwise(unknown)
    )


def _evidence() -> Column:
    """What was seen, source by source: accounting, telemetry, log; and what was missing."""
    exit_txt = F.format_string(
        "%s:%s",
        F.coalesce(F.col("exit_code").cast("string"), F.lit("?")),
        F.coalesce(F.col("exit_signal").cast("string"), F.lit("?")),
    )
    parts = [
        F.format_string("accounting: state %s, exit %s", F.col("state"), exit_txt),
        F.when(
            F.col("max_rss_bytes").isNotNull() & F.col("req_mem_bytes").isNotNull(),
            F.format_string(
                "peak RSS %s of %s GiB requested", _gib(F.col("max_rss_bytes")), _gib(F.col("req_mem_bytes"))
            ),
        ),
        F.when(
            F.col("vram_peak_bytes").isNotNull(),
            F.format_string(
                "VRAM peak %s%s GiB",
                _gib(F.col("vram_peak_bytes")),
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
        F.when(
            F.col("log_evidence").isNotNull(),
            F.format_string("log (%s): %s", F.col("log_pattern"), F.col("log_evidence")),
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
    image_pull = (F.col("source") == "k8s") & F.coalesce(F.col("state_raw"), F.lit("")).rlike(_IMAGE_PULL)
    out = jobs.where(F.col("state").isin(*DIAGNOSED_STATES) | image_pull)
    if month:
        ended = F.coalesce(F.col("end_ts"), F.col("start_ts"), F.col("submit_ts"))
        out = out.where(F.date_format(ended, "yyyy-MM") == month)
    return out


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
    (cluster, job_id, batch_size)."""
    prices = cluster.prices
    gpu_price = F.create_map(*[x for m, p in prices.gpu_hour_usd.items() for x in (F.lit(m), F.lit(p))])
    card_gib = F.create_map(
        *[x for m, g in cluster.gpu_models.items() for x in (F.lit(m), F.lit(g.memory_gib))]
    )
    logs = with_text_diagnosis(log_text, "text").drop("text").withColumn("has_log", F.lit(True))
    keys = ["cluster", "job_id"]
    df = (
        jobs.join(step_signals(steps), on=keys, how="left")
        .join(logs, on=keys, how="left")
        .join(gpu.withColumn("has_telemetry", F.lit(True)), on=keys, how="left")
        .join(scripts.select("cluster", "job_id", "batch_size").dropDuplicates(keys), on=keys, how="left")
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
    df = _apply_rules(df)
    user_fixable = F.create_map(*[x for c in CAUSES.values() for x in (F.lit(c.name), F.lit(c.user_fixable))])
    hours = F.coalesce(F.col("elapsed_s"), F.lit(0)) / 3600.0
    gpus = F.coalesce(F.col("alloc_gpus"), F.col("req_gpus"), F.lit(0))
    cores = F.coalesce(F.col("alloc_cpus"), F.col("req_cpus"), F.lit(0))
    mem_gib = F.coalesce(F.col("alloc_mem_bytes"), F.col("req_mem_bytes"), F.lit(0)) / GIB
    df = (
        df.withColumn(
            "user_fixable",
            F.when(F.col("detail") == "by_admin", F.lit(False)).otherwise(
                F.coalesce(user_fixable[F.col("cause")], F.lit(False))
            ),
        )
        .withColumn("evidence", _evidence())
        .withColumn("suggested_fix", _fix_messages())
        .withColumn(
            "xid", F.coalesce(F.col("tel_xid"), F.when(F.col("cause") == "gpu_hardware", F.col("log_xid")))
        )
        .withColumn("lost_gpu_hours", gpus * hours)
        .withColumn("lost_core_hours", cores * hours)
        .withColumn(
            "lost_usd",
            cores * hours * prices.core_hour_usd
            + mem_gib * hours * prices.gib_hour_usd
            + gpus * hours * F.coalesce(gpu_price[F.col("gpu_model")], F.lit(prices.gpu_hour_usd["default"])),
        )
        .withColumn(
            "month",
            F.date_format(F.coalesce(F.col("end_ts"), F.col("start_ts"), F.col("submit_ts")), "yyyy-MM"),
        )
        .withColumn("built_at", F.lit(built_at).cast("timestamp"))
    )
    return df.select(
        "cluster",
        "job_id",
        "month",
        "user",
        "account",
        "partition",
        "state",
        "exit_code",
        "exit_signal",
        "end_ts",
        "elapsed_s",
        "timelimit_s",
        "node_list",
        "gpu_model",
        F.col("alloc_gpus").alias("gpus"),
        F.col("alloc_cpus").alias("cpus"),
        "cause",
        "detail",
        "user_fixable",
        "confidence",
        "primary_source",
        "rule",
        "evidence",
        "suggested_fix",
        "xid",
        "has_log",
        "has_telemetry",
        "lost_gpu_hours",
        "lost_core_hours",
        "lost_usd",
        "built_at",
    )


# `[PREFIX-]JOBID[_TASK].(err|out|log|txt)[.gz]`: slurm-123.out, 123.err, 123_7.err, train-123_7.out.
LOG_NAME_RE = re.compile(r"^(?:.*-)?(\d+(?:_\d+)?)\.(err|out|log|txt|stderr|stdout)(?:\.gz)?$")
_STREAMS = {
    "err": "stderr",
    "stderr": "stderr",
    "out": "stdout",
    "stdout": "stdout",
    "log": "log",
    "txt": "log",
}


def parse_log_file_name(name: str) -> tuple[str, str]:
    """(job_id, stream) from a log file's base name; ValueError naming the file when it names no job id."""
    match = LOG_NAME_RE.match(name.rsplit("/", 1)[-1])
    if not match:
        raise ValueError(
            f"file name {name!r} does not name a job id (expected [PREFIX-]JOBID[_TASK].err|.out|.log)"
        )
    return match.group(1), _STREAMS[match.group(2)]
