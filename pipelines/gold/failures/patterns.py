"""The log-text pattern table and its pure-Python engine, free of Spark so `jobfit explain` starts fast."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipelines.gold.failures.taxonomy import UNKNOWN
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
# An uncorrectable ECC error, but not a health check's count of none: "0 uncorrectable ECC errors",
# "no uncorrectable ECC errors", "Uncorrectable ECC errors: 0" (lookarounds both regex engines accept).
ECC_FAULT = (
    r"(?<!\b0 )(?<!\bno )(?<!\bzero )uncorrectable ECC errors?(?!\s*(?:\([^)\n]*\))?\s*[:=]\s*0\b)"
    r"|cudaErrorECCUncorrectable|(?<!\b0 )(?<!\bno )double[- ]bit ECC(?! errors?\s*[:=]\s*0\b)"
)
# A process killed by SIGKILL from outside, as shells, srun, mpirun and torchrun report it: the kernel's OOM
# killer, the scheduler or a person sent it; the line alone does not say which.
SIGKILL_LINE = (
    r"(?<![^\n])[ \t]*Killed[ \t]*(?![^\n])|: \d+ Killed\b|task \d+: Killed\b|exited on signal 9\b"
    r"|Signal 9 \(SIGKILL\) received|exitcode\s*:\s*-9\b"
)

# Ordered by priority. A hardware fault or an OOM kill explains the tracebacks and NCCL errors that follow
# it; a specific Python error explains the NCCL errors of the ranks it left behind; a bare traceback is weak
# evidence and a stray shell line weaker; a SIGKILL or torchrun's "worker failed" line names no cause.
LOG_PATTERNS: tuple[LogPattern, ...] = (
    LogPattern("xid_system", "gpu_hardware", "xid", XID_LINE + codes_regex(SYSTEM_FAULT_XIDS) + r"\b", 0.95),
    LogPattern("gpu_fallen_off_bus", "gpu_hardware", "xid", r"fallen off the bus", 0.95),
    LogPattern("ecc_uncorrectable", "gpu_hardware", "ecc", ECC_FAULT, 0.9),
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
    # Python's own MemoryError (numpy's _ArrayMemoryError too): the process could not get host memory
    # (a limit on its address space, or a node without overcommit); not torch's or Java's OutOfMemoryError.
    LogPattern("python_memory_error", "host_oom", "memory_error", r"\b(?:_Array)?MemoryError\b", 0.85),
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
    # SIGBUS: in jobs mostly a /dev/shm too small for DataLoader workers, or a memory-mapped file truncated
    # while read (PyTorch prints "Unexpected bus error encountered in worker ... insufficient shared memory").
    LogPattern("bus_error", "software_error", "bus_error", r"Bus error|SIGBUS|signal 7\b", 0.75),
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
    # Rendezvous: the port torchrun's store binds is taken (another job on the node): the user's choice.
    LogPattern(
        "port_in_use",
        "software_error",
        "port_in_use",
        r"EADDRINUSE|errno: 98 - Address already in use|DistNetworkError.*address already in use",
        0.8,
    ),
    # The watchdog aborts a communicator after a collective timed out or NCCL failed; when the original
    # reason is kept in the log, the patterns above decide.
    LogPattern(
        "nccl_comm_aborted", "nccl_error", "communicator_aborted", r"NCCL communicator was aborted", 0.6
    ),
    # torchrun's store connection failed: the network, or the node holding the store went down first.
    LogPattern("dist_network", "nccl_error", "dist_network", r"\bDistNetworkError\b", 0.6),
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
    LogPattern("python_permission", "software_error", "permission_denied", r"\bPermissionError\b", 0.7),
    LogPattern("mpi_abort", "software_error", "mpi_abort", r"MPI_ABORT was invoked|MPI_Abort\(", 0.6),
    # A traceback's own exception outranks a stray shell line below ("Permission denied", "No such file").
    LogPattern(
        "python_traceback", "software_error", "python_exception", r"Traceback \(most recent call last\)", 0.7
    ),
    LogPattern("permission_denied", "software_error", "permission_denied", r"Permission denied", 0.5),
    LogPattern("no_such_file", "software_error", "file_not_found", r"No such file or directory", 0.5),
    LogPattern("core_dumped", "software_error", "segfault", r"core dumped", 0.6),
    LogPattern("sigkill", UNKNOWN, "sigkill", SIGKILL_LINE, 0.3),
    # torchrun's summary that a worker failed, with nothing else: not a cause (its rank's error is elsewhere).
    LogPattern(
        "torchrun_worker_failed",
        UNKNOWN,
        "distributed_worker_failed",
        r"elastic\S*\s.*failed \(exitcode: -?\d+\)|ChildFailedError",
        0.3,
    ),
)
# The bare-traceback pattern does not count when the traceback that ended the run is the launcher's own
# (torchrun's ChildFailedError): the worker's error is not in the log, so the patterns after it decide.
BARE_TRACEBACK = "python_traceback"
BARE_TRACEBACK_DETAIL = "python_exception"  # its detail: the fix then quotes the run-ending exception
LAUNCHER_EXCEPTION = r"ChildFailedError$"

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


def exception_line(exception: dict[str, str] | None) -> str | None:
    """`type: message` of the reader's run-ending exception (`type` alone without a message), shortened."""
    if not exception:
        return None
    message = exception.get("message") or ""
    return (exception["type"] + (": " + message if message else ""))[:EVIDENCE_CHARS]


def is_launcher_exception(exc_type: str | None) -> bool:
    """Whether the run-ending exception is the launcher's own (torchrun's ChildFailedError)."""
    return bool(exc_type) and re.search(LAUNCHER_EXCEPTION, exc_type) is not None


def classify_text(text: str | None, exc_type: str | None = None) -> TextDiagnosis | None:
    """The first LOG_PATTERNS entry matching the text (case-insensitive), or None when nothing matches.
    `exc_type`: the run-ending exception the traceback reader found; when it is the launcher's, a bare
    traceback is not evidence (BARE_TRACEBACK is skipped)."""
    if not text:
        return None
    skip = BARE_TRACEBACK if is_launcher_exception(exc_type) else None
    for p, compiled in zip(LOG_PATTERNS, _COMPILED, strict=True):
        match = compiled.search(text) if p.pattern_id != skip else None
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
