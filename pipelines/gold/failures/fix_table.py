"""The fix-message table (one text per cause, detail or condition, quoting the job's own numbers), the job
script knobs a fix turns, and the pure-Python engine `jobfit explain` renders them with; fixes.py compiles the
same table to one Spark Column. No Spark here."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

HEADROOM = 1.25  # recommended request = peak + 25 %


@dataclass(frozen=True)
class Fix:
    """A fix message: for `cause` (and `detail`, and the condition named by `when`, when given; the first
    matching row wins), `text` with `{quote}` for one of the job's numbers (see `quotes`)."""

    cause: str
    text: str
    detail: str | None = None
    when: str | None = None


_SHRINK_BATCH = (
    "reduce the per-GPU batch size{batch_note} or enable activation checkpointing / mixed precision, or "
    "request a GPU with more memory"
)
_XID_EXCLUDE = "hardware fault, resubmit (--exclude={xid_node}); reported to admins"

FIXES: tuple[Fix, ...] = (
    Fix(
        "host_oom",
        "peak RSS {rss_gib} GiB hit the {req_gib} GiB limit: request --mem={mem_rec_gib}G{per_node} "
        "(peak + 25 %)",
        when="peak_at_limit",
    ),
    Fix(
        "host_oom",
        "{error_line}: the process could not get more host memory — request more with --mem (check the "
        "peak with seff, and any `ulimit -v` in the script) or load less data at once",
        detail="memory_error",
    ),
    Fix(
        "host_oom",
        "the job ran out of memory at its {req_gib} GiB limit{sampled_peak_note}: request "
        "--mem={mem_rec_gib}G{per_node} (limit + 25 %) and check the peak with seff",
        when="has_request",
    ),
    Fix(
        "host_oom",
        "the job ran out of host memory (no request or peak recorded): request more with --mem and "
        "check the peak with seff",
    ),
    Fix(
        "k8s_oomkilled",
        "the container hit its {req_gib} GiB memory limit and was OOMKilled: raise "
        "resources.limits.memory to {mem_rec_gib}Gi ({peak_or_limit} + 25 %)",
        when="has_request",
    ),
    Fix(
        "k8s_oomkilled",
        "the container was OOMKilled at its memory limit: raise resources.limits.memory above its "
        "peak + 25 %",
    ),
    Fix(
        "gpu_oom",
        "VRAM peaked at {vram_gib}/{card_gib} GiB on {gpu_model}: " + _SHRINK_BATCH,
        when="has_vram_and_card",
    ),
    Fix(
        "gpu_oom",
        "CUDA ran out of memory on a {log_gpu_total_gib} GiB GPU{tried_note}: " + _SHRINK_BATCH,
        when="has_log_gpu_size",
    ),
    Fix(
        "gpu_oom",
        "CUDA ran out of GPU memory on {gpu_model}: " + _SHRINK_BATCH,
    ),
    Fix(
        "time_limit",
        "ran {elapsed} of a {time_limit} limit: add checkpointing so a rerun resumes, or request "
        "--time={new_time_limit} (limit + 25 %)",
        when="has_time_limit",
    ),
    Fix(
        "time_limit",
        "killed at its time limit after {elapsed}: add checkpointing or request a longer --time",
    ),
    Fix(
        "nccl_timeout",
        "a {nccl_op} collective waited {nccl_waited} past its {nccl_timeout} NCCL timeout: one rank "
        "stalled or died first — look for an earlier error on another rank or work done on one rank "
        "only (e.g. preprocessing on rank 0); raise the timeout only if that wait is expected, and "
        "report it if it recurs on the same nodes ({node_list_or_nodes_unknown})",
    ),
    Fix(
        "nccl_error",
        "the NCCL communicator was aborted after an earlier failure (a collective that timed out or an "
        "NCCL error; the log does not keep which): look for the first error on any rank; resubmit, "
        "excluding the nodes if it recurs on {node_list_or_same_nodes}",
        detail="communicator_aborted",
    ),
    Fix(
        "nccl_error",
        "{error_line}: a worker could not reach torchrun's rendezvous store (MASTER_ADDR:MASTER_PORT) — "
        "the node holding it went down first or the network failed; check that node's log, resubmit",
        detail="dist_network",
    ),
    Fix(
        "nccl_error",
        "NCCL communication failed (a network fault or a rank that exited first): check the other "
        "ranks' logs for the first error; resubmit, excluding the nodes if it recurs on "
        "{node_list_or_same_nodes}; reported to admins",
    ),
    Fix(
        "gpu_hardware",
        "Xid {xid} ({xid_name}) on node {xid_node}{xid_gpu_note}{xid_time_note}: " + _XID_EXCLUDE,
        when="has_xid",
    ),
    Fix(
        "gpu_hardware",
        "uncorrectable GPU memory (ECC) error on node {xid_node}: " + _XID_EXCLUDE,
    ),
    Fix(
        "node_failure",
        "node {node_list_or_unknown} failed after {elapsed}: not caused by the job; resubmit (add "
        "--requeue to let Slurm do it)",
    ),
    Fix(
        "preemption",
        "preempted after {elapsed} by higher-priority work: add checkpointing and --requeue, or use "
        "a non-preemptible partition or QOS",
    ),
    Fix(
        "software_error",
        "{error_line}: the job's environment lacks this module — load or activate the environment "
        "in the batch script (module load, conda/venv activate) and test with a short debug job",
        detail="import_error",
    ),
    Fix(
        "software_error",
        "{error_line}: the path does not exist on the compute node — use an absolute path on a "
        "shared filesystem and check it before submitting",
        detail="file_not_found",
    ),
    Fix(
        "software_error",
        "CUDA illegal memory access: an out-of-bounds index or a kernel bug — rerun a short debug "
        "job with CUDA_LAUNCH_BLOCKING=1 to find the kernel; report it if it only happens on one "
        "node",
        detail="illegal_memory_access",
    ),
    Fix(
        "software_error",
        "CUDA unspecified launch failure: a kernel crashed (often a bad pointer or an out-of-bounds "
        "access) — rerun a short debug job with CUDA_LAUNCH_BLOCKING=1; if the node logged an Xid "
        "such as 79 or 48 at that time, it was the GPU: resubmit and report it",
        detail="cuda_launch_failure",
    ),
    Fix(
        "software_error",
        "a CUDA kernel assertion failed (device-side assert): almost always an index out of range — a class "
        "label outside [0, number of classes) or a token id beyond the embedding size; the line shown is "
        "only "
        "where the asynchronous error surfaced — rerun a short debug job with CUDA_LAUNCH_BLOCKING=1 (or the "
        "same batch on CPU) to stop at the real one",
        detail="device_assert",
    ),
    Fix(
        "software_error",
        "segmentation fault (signal 11): run a short debug job with core dumps on (or under gdb) "
        "and check the libraries the code was built against",
        detail="segfault",
    ),
    Fix(
        "software_error",
        "aborted (signal 6): a failed assertion or an uncaught C++ exception — look at the end of stderr",
        detail="abort",
    ),
    Fix(
        "software_error",
        "bus error (SIGBUS): most often shared memory (/dev/shm) too small for DataLoader workers, or a "
        "memory-mapped file changed or truncated while read — lower num_workers or raise the container's "
        "shm size, and keep mapped files unchanged while the job runs",
        detail="bus_error",
    ),
    Fix(
        "software_error",
        "{error_line}: the port torchrun's rendezvous binds is taken (another job on the node) — set "
        "MASTER_PORT (or --master_port / --rdzv-endpoint) to a free port, e.g. derived from the job id",
        detail="port_in_use",
    ),
    Fix(
        "software_error",
        "{error_line}: an assertion in the code failed — check the inputs or configuration it asserts on",
        detail="assertion",
    ),
    Fix(
        "software_error",
        "Java heap exhausted: raise -Xmx (and --mem with it) or reduce the data held in memory",
        detail="jvm_heap",
    ),
    Fix(
        "software_error",
        "{error_line}: the job cannot read or write a path — check its permissions and that it is "
        "on a filesystem the compute nodes mount",
        detail="permission_denied",
    ),
    Fix(
        "software_error",
        "{log_evidence}: NVIDIA lists the application as a likely cause — debug with "
        "CUDA_LAUNCH_BLOCKING=1; report it if it recurs only on this GPU",
        detail="gpu_app_fault",
    ),
    Fix(
        "software_error",
        "a rank called MPI_Abort: its own error is printed just before; fix that and rerun",
        detail="mpi_abort",
    ),
    Fix(
        "software_error",
        "exited with code {exit_code} after {elapsed}; no log explains it, so this is the likeliest "
        "cause, not a certainty: ingest its stderr (jobfit ingest logs) for a diagnosis",
        detail="nonzero_exit",
    ),
    Fix(
        "software_error",
        "{error_line}: fix the error in the job's code or inputs and test on a short debug run "
        "before resubmitting",
    ),
    Fix(
        "cancelled",
        "cancelled by an administrator (uid 0) after {elapsed}: ask the admins why before resubmitting",
        detail="by_admin",
    ),
    Fix(
        "cancelled",
        "cancelled{uid_note} after {elapsed} of its {time_limit_or_unlimited} limit: nothing to fix "
        "if intended; if it had stalled, check its log first",
    ),
    Fix(
        "k8s_exit137",
        "killed by SIGKILL (exit 137) without an OOM: usually a failed liveness probe, a node drain "
        "or a manual kill — check `kubectl describe pod` events",
    ),
    Fix(
        "k8s_evicted",
        "evicted under node pressure: set requests close to real use so the pod is not evicted "
        "first, then resubmit",
    ),
    Fix(
        "k8s_image_pull",
        "the image could not be pulled: check the image name, tag and pull secret",
    ),
    Fix(
        "unknown",
        "the launcher (torchrun) reported a failed worker without its error: read the failed rank's "
        "own log for the first error (code, memory or NCCL) before resubmitting",
        detail="distributed_worker_failed",
    ),
    Fix(
        "unknown",
        "{log_evidence}: a process was killed by SIGKILL from outside — most often the kernel's OOM killer "
        "(compare the peak with the request in seff, look for oom-kill in the node's log), else the time "
        "limit or a manual kill",
        detail="sigkill",
        when="has_log",
    ),
    Fix(
        "unknown",
        "nothing in the log matches a known failure signature{exception_note}: read the end of the log "
        "and the job's accounting (sacct state and exit code) for the cause",
        when="has_log",
    ),
    Fix(
        "unknown",
        "state {state}, exit code {exit_code_or_unknown}{sigkill_note}: no log, telemetry or "
        "accounting detail explains it — ingest its stderr with `jobfit ingest logs` for a "
        "diagnosis",
    ),
)


_QUOTE = re.compile(r"\{(\w+)\}")
# What a quote reads when the engine has no value for it (at the prompt: no accounting, no telemetry).
MISSING = "(unknown)"


def choose_fix(cause: str, detail: str | None, holds: Callable[[str], bool]) -> Fix:
    """The first FIXES row for the cause (and detail, and a `when` condition that `holds`); every cause has a
    catch-all row, so one always matches."""
    for fix in FIXES:
        if fix.cause != cause or (fix.detail is not None and fix.detail != detail):
            continue
        if fix.when is None or holds(fix.when):
            return fix
    raise ValueError(f"no fix row for cause {cause!r}")


def render_fix(fix: Fix, values: Mapping[str, str | None]) -> str:
    """A Fix's text with each `{quote}` filled from `values` (MISSING where the value is None or absent)."""

    def value(m: re.Match[str]) -> str:
        v = values.get(m.group(1))
        return MISSING if v is None else str(v)

    return _QUOTE.sub(value, fix.text)


def fixed(value: float, places: int) -> str:
    """`value` with `places` decimals as Spark's format_string prints it (Java rounds the shortest decimal
    form half up: 23.65 -> 23.7, where Python's own format gives 23.6)."""
    return str(Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))


# The code location a fix starts with when a traceback names the user's frame: `train.py:118 `text``, or
# `train.py:118: ` when the traceback prints no source line (a frame in a file not on the node, a .pyc).
CODE_NOTE = "{code_name}:{code_line} `{code_text}`: "
CODE_NOTE_NO_TEXT = "{code_name}:{code_line}: "
CODE_TEXT_CHARS = 120  # longest source line quoted in a fix, in characters


def code_note(file: str, line: int, text: str) -> str:
    """The CODE_NOTE for a frame: the file's base name, its line and the source text (shortened)."""
    name = re.split(r"[\\/]", file)[-1]
    if not text.strip():
        return CODE_NOTE_NO_TEXT.format(code_name=name, code_line=line)
    text = text if len(text) <= CODE_TEXT_CHARS else text[: CODE_TEXT_CHARS - 1] + "…"
    return CODE_NOTE.format(code_name=name, code_line=line, code_text=text)


@dataclass(frozen=True)
class Knob:
    """A job-script setting that the fix for `causes` turns; `regex` finds the line that sets it."""

    name: str
    causes: tuple[str, ...]
    regex: str


# Script lines a fix names ("halve --per_device_train_batch_size (job script line 14)").
KNOBS: tuple[Knob, ...] = (
    Knob(
        "batch size",
        ("gpu_oom",),
        # the names pipelines/silver/scripts.py reads silver.scripts.batch_size by (the gold build's number)
        r"(?:--|\b)(?:per[_-]device[_-]train[_-]batch[_-]size|train[_-]batch[_-]size|global[_-]batch[_-]size|"
        r"micro[_-]batch[_-]size|batch[_-]size|batchsize|bs)(?:\s*=\s*|\s+)[$\w{}]+",
    ),
    Knob("gradient checkpointing", ("gpu_oom",), r"--gradient[_-]checkpointing\S*"),
    Knob("DataLoader workers", ("host_oom",), r"(?:--|\b)num[_-]workers(?:\s*=\s*|\s+)\S+"),
    Knob("memory request", ("host_oom",), r"^\s*#SBATCH\s+--mem(?:-per-cpu|-per-gpu)?[= ]\S+"),
    Knob("time limit", ("time_limit",), r"^\s*#SBATCH\s+(?:--time[= ]|-t\s+)\S+"),
    Knob("NCCL setting", ("nccl_timeout", "nccl_error"), r"\b(?:NCCL|TORCH_NCCL)_[A-Z_]+=\S*"),
    Knob("distributed timeout", ("nccl_timeout",), r"--(?:ddp[_-])?timeout(?:\s*=\s*|\s+)\S+"),
)
_KNOB_RES = tuple((k, re.compile(k.regex, re.I)) for k in KNOBS)


def script_knobs(script: str, cause: str) -> list[tuple[int, str, str]]:
    """(line number, knob name, the setting as written) for every script line setting a knob the cause's fix
    turns, in script order."""
    out = []
    for no, line in enumerate(script.splitlines(), start=1):
        for knob, rx in _KNOB_RES:
            m = rx.search(line) if cause in knob.causes else None
            if m:
                out.append((no, knob.name, m.group(0).strip()))
    return out


def knob_note(knobs: list[tuple[int, str, str]]) -> str:
    """The fix's closing note naming the script lines: ` (job script line 14: `--batch_size 8`; …)`."""
    if not knobs:
        return ""
    return " (job script " + "; ".join(f"line {no}: `{setting}`" for no, _, setting in knobs) + ")"
