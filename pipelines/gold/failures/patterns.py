"""The log-text pattern table and its pure-Python engine, free of Spark so `jobfit explain` starts fast."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipelines.gold.failures.xid import APPLICATION_XIDS, SYSTEM_FAULT_XIDS, codes_regex

EVIDENCE_CHARS = 300  # longest evidence line or quoted exception kept, in characters


@dataclass(frozen=True)
class LogPattern:
    """A log-text signature: first match in table order wins, so root causes precede their consequences."""

    pattern_id: str
    cause: str
    detail: str
    regex: str
    confidence: float


XID_LINE = r"NVRM: Xid \([^)]*\): "
# A Kubernetes pod that cannot pull its image, in its termination reason or its log.
IMAGE_PULL = r"ErrImagePull|ImagePullBackOff|InvalidImageName"

# Ordered by priority. A hardware fault or an OOM kill explains the tracebacks and NCCL errors that follow
# it; a specific Python error explains the NCCL errors of the ranks it left behind; a bare traceback or a
# torchrun "worker failed" line is the weakest evidence.
LOG_PATTERNS: tuple[LogPattern, ...] = (
    LogPattern("xid_system", "gpu_hardware", "xid", XID_LINE + codes_regex(SYSTEM_FAULT_XIDS) + r"\b", 0.95),
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
    # A CUDA kernel's assert (`Loss.cu:250: ... Assertion `t >= 0 && t < n_classes` failed.`) surfaces
    # later as "device-side assert triggered" at whatever line synchronised next.
    LogPattern(
        "cuda_device_assert",
        "software_error",
        "device_assert",
        r"device-side assert(?:ion)? triggered|cudaErrorAssert|"
        r"block: \[[\d,]+\], thread: \[[\d,]+\] Assertion",
        0.85,
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
    LogPattern("k8s_image_pull", "k8s_image_pull", "image_pull", IMAGE_PULL, 0.9),
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
        XID_LINE + codes_regex(APPLICATION_XIDS) + r"\b",
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
    "xid": XID_LINE + "(" + codes_regex(SYSTEM_FAULT_XIDS) + r")\b",  # the first system-fault Xid
    "gpu_total_gib": r"(?:total capac\w* of|\(GPU \d+; )\s*([0-9.]+) GiB",
    "gpu_tried_gib": r"Tried to allocate ([0-9.]+) GiB",
    "nccl_timeout_ms": r"Timeout\(ms\)=(\d+)",
    "nccl_ran_ms": r"ran for (\d+) milliseconds",
    "nccl_op": r"OpType=(\w+)",
    "exception": r"(?m)^\s*((?:[\w.]+\.)?\w*(?:Error|Exception)\b[^\n]*)",
}
# The one fact matched case-sensitively: an exception's class name is capitalised.
CASE_SENSITIVE_FACTS = frozenset({"exception"})


def ci(regex: str) -> str:
    """The regex made case-insensitive, unless it already starts with its own inline flags."""
    return regex if regex.startswith("(?") else "(?i)" + regex


def fact_regex(name: str) -> str:
    """The LOG_FACTS regex for `name` with the case rule both engines apply."""
    regex = LOG_FACTS[name]
    return regex if name in CASE_SENSITIVE_FACTS else ci(regex)


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
    for name in LOG_FACTS:
        match = re.search(fact_regex(name), text)
        if match:
            facts[name] = match.group(1).strip()[:EVIDENCE_CHARS]
    return facts


_COMPILED = tuple(re.compile(ci(p.regex)) for p in LOG_PATTERNS)


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


# Log lines that say what the machine was doing at the moment of failure, quoted with their times.
MOMENT_PATTERNS: tuple[tuple[str, str], ...] = (
    ("gpu_xid", r"NVRM: Xid \([^)]*\): \d+"),
    ("host_oom_killer", r"Out of memory: Kill(?:ed)? process|oom-kill:|invoked oom-killer"),
    ("slurm_oom_kill", r"oom[-_]kill event"),
    ("nccl_watchdog", r"Watchdog caught collective operation timeout"),
    ("cuda_assert", r"Assertion `[^`]{1,500}` failed"),
)
MOMENT_LINES = 6  # most moment lines quoted in the evidence
_MOMENT_RES = tuple((name, re.compile(p, re.I)) for name, p in MOMENT_PATTERNS)


def moment_lines(text: str) -> list[str]:
    """The log's lines that show the machine at the moment of failure (Xid, OOM killer, NCCL watchdog, CUDA
    assert), as written (with their timestamps), the last MOMENT_LINES of them."""
    out = []
    for line in text.splitlines():
        if any(rx.search(line) for _, rx in _MOMENT_RES):
            out.append(line.strip()[:EVIDENCE_CHARS])
    return out[-MOMENT_LINES:]
