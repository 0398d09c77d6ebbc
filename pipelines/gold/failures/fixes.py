"""The fix-message table: one text per cause (and detail or condition) quoting the job's own numbers."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F

from pipelines.gold.failures.taxonomy import AT_LIMIT_FRAC
from pipelines.gold.failures.xid import XID_CATALOGUE
from pipelines.units import GIB

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
        "the launcher (torchrun) reported a failed worker without its error: read the failed rank's "
        "own log for the first error (NCCL / network or code) before resubmitting",
        detail="distributed_worker_failed",
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
        "state {state}, exit code {exit_code_or_unknown}{sigkill_note}: no log, telemetry or "
        "accounting detail explains it — ingest its stderr with `jobfit ingest logs` for a "
        "diagnosis",
    ),
)


def gib_text(col: Column) -> Column:
    """Bytes as GiB with one decimal, as text."""
    return F.format_string("%.1f", col / GIB)


def hms_text(seconds: Column) -> Column:
    """Seconds as H:MM:SS (0:00:00 when null)."""
    s = F.coalesce(seconds, F.lit(0)).cast("long")
    return F.format_string("%d:%02d:%02d", F.floor(s / 3600), F.floor((s % 3600) / 60), s % 60)


def _peak_at_limit() -> Column:
    # Sampled peaks (sacct MaxRSS, cgroup polls) miss the spike that killed the job: below the limit, the
    # recommendation is sized on the limit instead.
    return F.col("max_rss_bytes") >= F.col("req_mem_bytes") * AT_LIMIT_FRAC


def _conditions() -> dict[str, Column]:
    """The conditions a Fix row's `when` names."""
    return {
        "peak_at_limit": _peak_at_limit(),
        "has_request": F.col("req_mem_bytes").isNotNull(),
        "has_vram_and_card": F.col("vram_peak_bytes").isNotNull() & F.col("vram_total_bytes").isNotNull(),
        "has_log_gpu_size": F.col("log_gpu_total_gib").isNotNull(),
        "has_time_limit": F.col("timelimit_s").isNotNull(),
        "has_xid": F.coalesce(F.col("tel_xid"), F.col("log_xid")).isNotNull(),
    }


# F.format_string prints a null argument as "null" and never returns null, so the coalesce fallbacks of the
# `*_note` quotes below never apply: a missing batch size reads " from null". Kept: the split into tables
# changed no text.


def _memory_quotes() -> dict[str, Column]:
    """Host memory: peak and request in GiB, the recommended request per node."""
    rss, req = F.col("max_rss_bytes"), F.col("req_mem_bytes")
    nodes = F.greatest(F.coalesce(F.col("nodes"), F.lit(1)), F.lit(1))
    sized_on = F.when(_peak_at_limit(), rss).otherwise(req)
    sampled_peak = F.format_string(" (the sampled peak, %s GiB, missed the spike)", gib_text(rss))
    return {
        "rss_gib": gib_text(rss),
        "req_gib": gib_text(req),
        "mem_rec_gib": F.ceil(sized_on * HEADROOM / nodes / GIB).cast("long"),
        "per_node": F.when(nodes > 1, F.lit(" per node")).otherwise(F.lit("")),
        "sampled_peak_note": F.coalesce(sampled_peak, F.lit(" (no peak recorded)")),
        "peak_or_limit": F.when(rss.isNotNull(), F.lit("peak")).otherwise(F.lit("limit")),
    }


def _gpu_quotes() -> dict[str, Column]:
    """GPU memory and faults: VRAM peak and card size, CUDA's own numbers, the Xid and where it happened."""
    xid = F.coalesce(F.col("tel_xid"), F.col("log_xid"))
    xid_names = F.create_map(*[x for c, v in XID_CATALOGUE.items() for x in (F.lit(c), F.lit(v.name))])
    tried = F.format_string(" (tried to allocate %.2f GiB more)", F.col("log_gpu_tried_gib"))
    xid_ts = F.format_string(" at %s", F.date_format("tel_xid_ts", "yyyy-MM-dd HH:mm"))
    return {
        "vram_gib": gib_text(F.col("vram_peak_bytes")),
        "card_gib": F.format_string("%.0f", F.col("vram_total_bytes") / GIB),
        "gpu_model": F.coalesce(F.col("gpu_model"), F.lit("its GPU")),
        "batch_note": F.coalesce(F.format_string(" from %d", F.col("batch_size")), F.lit("")),
        "log_gpu_total_gib": F.format_string("%.1f", F.col("log_gpu_total_gib")),
        "tried_note": F.coalesce(tried, F.lit("")),
        "xid": xid,
        "xid_name": F.coalesce(xid_names[xid], F.lit("see NVIDIA's Xid list")),
        "xid_node": F.coalesce(F.col("tel_xid_host"), F.col("node_list"), F.lit("unknown node")),
        "xid_gpu_note": F.coalesce(F.format_string(" GPU %d", F.col("tel_xid_gpu")), F.lit("")),
        "xid_time_note": F.coalesce(xid_ts, F.lit("")),
    }


def _job_quotes() -> dict[str, Column]:
    """The job's state, exit, times, nodes and log lines."""
    limit, nodes = F.col("timelimit_s"), F.col("node_list")
    ran_s = (F.col("log_nccl_ran_ms") / 1000).cast("long")
    timeout_s = (F.col("log_nccl_timeout_ms") / 1000).cast("long")
    return {
        "state": F.col("state"),
        "exit_code": F.col("exit_code"),
        "exit_code_or_unknown": F.coalesce(F.col("exit_code").cast("string"), F.lit("unknown")),
        "sigkill_note": F.when(F.col("detail") == "sigkill", F.lit(" (killed by SIGKILL)")).otherwise(
            F.lit("")
        ),
        "uid_note": F.coalesce(F.format_string(" by uid %s", F.col("cancelled_by")), F.lit("")),
        "elapsed": hms_text(F.col("elapsed_s")),
        "time_limit": hms_text(limit),
        "new_time_limit": hms_text(F.ceil(limit * HEADROOM / 900) * 900),
        "time_limit_or_unlimited": F.when(limit.isNotNull(), hms_text(limit)).otherwise(F.lit("unlimited")),
        "node_list_or_unknown": F.coalesce(nodes, F.lit("(unknown)")),
        "node_list_or_nodes_unknown": F.coalesce(nodes, F.lit("nodes unknown")),
        "node_list_or_same_nodes": F.coalesce(nodes, F.lit("the same nodes")),
        "nccl_op": F.coalesce(F.col("log_nccl_op"), F.lit("NCCL")),
        "nccl_waited": F.coalesce(F.format_string("%d s", ran_s), F.lit("")),
        "nccl_timeout": F.coalesce(F.format_string("%d s", timeout_s), F.lit("configured")),
        "error_line": F.coalesce(F.col("log_exception"), F.col("log_evidence"), F.lit("the error")),
        "log_evidence": F.col("log_evidence"),
    }


def quotes() -> dict[str, Column]:
    """Every `{quote}` a Fix text may use: the job's numbers and phrases, as Spark Columns."""
    return {**_memory_quotes(), **_gpu_quotes(), **_job_quotes()}


_QUOTE = re.compile(r"\{(\w+)\}")


def _text(fix: Fix, values: dict[str, Column]) -> Column:
    """A Fix's text as a Column: literal, or a format_string with each `{quote}` filled in."""
    names = _QUOTE.findall(fix.text)
    if not names:
        return F.lit(fix.text)
    return F.format_string(_QUOTE.sub("%s", fix.text.replace("%", "%%")), *(values[n] for n in names))


def _matches(fix: Fix, conditions: dict[str, Column]) -> Column:
    """Whether a job is the Fix row's cause (and detail, and condition)."""
    test = F.col("cause") == fix.cause
    if fix.detail is not None:
        test = test & (F.col("detail") == fix.detail)
    return test & conditions[fix.when] if fix.when is not None else test


def fix_message() -> Column:
    """The suggested_fix Column: the text of the first FIXES row matching the job's cause, detail and
    condition (one flat CASE WHEN)."""
    values, conditions = quotes(), _conditions()
    branches = [(_matches(fix, conditions), _text(fix, values)) for fix in FIXES]
    out = F.when(*branches[0])
    for test, text in branches[1:]:
        out = out.when(test, text)
    return out
