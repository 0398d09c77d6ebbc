"""The fix-message table (fix_table.py) compiled to one Spark Column, with the job's numbers as Columns."""

from __future__ import annotations

import re

from pyspark.sql import Column
from pyspark.sql import functions as F

from pipelines.gold.failures.fix_table import (
    CODE_NOTE,
    CODE_NOTE_NO_TEXT,
    CODE_TEXT_CHARS,
    FIXES,
    HEADROOM,
    Fix,
)
from pipelines.gold.failures.patterns import BARE_TRACEBACK_DETAIL, EVIDENCE_CHARS
from pipelines.gold.failures.taxonomy import AT_LIMIT_FRAC
from pipelines.gold.failures.xid import XID_CATALOGUE
from pipelines.units import GIB

__all__ = ["FIXES", "HEADROOM", "Fix", "fix_message", "gib_text", "quotes"]


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
        "has_log": F.coalesce(F.col("has_log"), F.lit(False)),
    }


def note(fmt: str, *cols: Column, default: str = "") -> Column:
    """`fmt` filled with the columns, or `default` when one is null (F.format_string alone prints "null")."""
    present = cols[0].isNotNull()
    for c in cols[1:]:
        present = present & c.isNotNull()
    return F.when(present, F.format_string(fmt, *cols)).otherwise(F.lit(default))


def _memory_quotes() -> dict[str, Column]:
    """Host memory: peak and request in GiB, the recommended request per node."""
    rss, req = F.col("max_rss_bytes"), F.col("req_mem_bytes")
    nodes = F.greatest(F.coalesce(F.col("nodes"), F.lit(1)), F.lit(1))
    sized_on = F.when(_peak_at_limit(), rss).otherwise(req)
    return {
        "rss_gib": gib_text(rss),
        "req_gib": gib_text(req),
        "mem_rec_gib": F.ceil(sized_on * HEADROOM / nodes / GIB).cast("long"),
        "per_node": F.when(nodes > 1, F.lit(" per node")).otherwise(F.lit("")),
        "sampled_peak_note": note(
            " (the sampled peak, %s GiB, missed the spike)", gib_text(rss), default=" (no peak recorded)"
        ),
        "peak_or_limit": F.when(rss.isNotNull(), F.lit("peak")).otherwise(F.lit("limit")),
    }


def _gpu_quotes() -> dict[str, Column]:
    """GPU memory and faults: VRAM peak and card size, CUDA's own numbers, the Xid and where it happened."""
    xid = F.coalesce(F.col("tel_xid"), F.col("log_xid"))
    xid_names = F.create_map(*[x for c, v in XID_CATALOGUE.items() for x in (F.lit(c), F.lit(v.name))])
    return {
        "vram_gib": gib_text(F.col("vram_peak_bytes")),
        "card_gib": F.format_string("%.0f", F.col("vram_total_bytes") / GIB),
        "gpu_model": F.coalesce(F.col("gpu_model"), F.lit("its GPU")),
        "batch_note": note(" from %d", F.col("batch_size")),
        "log_gpu_total_gib": F.format_string("%.1f", F.col("log_gpu_total_gib")),
        "tried_note": note(" (tried to allocate %.2f GiB more)", F.col("log_gpu_tried_gib")),
        "xid": xid,
        "xid_name": F.coalesce(xid_names[xid], F.lit("see NVIDIA's Xid list")),
        "xid_node": F.coalesce(F.col("tel_xid_host"), F.col("node_list"), F.lit("unknown node")),
        "xid_gpu_note": note(" GPU %d", F.col("tel_xid_gpu")),
        "xid_time_note": note(" at %s", F.date_format("tel_xid_ts", "yyyy-MM-dd HH:mm")),
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
        "uid_note": note(" by uid %s", F.col("cancelled_by")),
        "elapsed": hms_text(F.col("elapsed_s")),
        "time_limit": hms_text(limit),
        "new_time_limit": hms_text(F.ceil(limit * HEADROOM / 900) * 900),
        "time_limit_or_unlimited": F.when(limit.isNotNull(), hms_text(limit)).otherwise(F.lit("unlimited")),
        "node_list_or_unknown": F.coalesce(nodes, F.lit("(unknown)")),
        "node_list_or_nodes_unknown": F.coalesce(nodes, F.lit("nodes unknown")),
        "node_list_or_same_nodes": F.coalesce(nodes, F.lit("the same nodes")),
        "nccl_op": F.coalesce(F.col("log_nccl_op"), F.lit("NCCL")),
        "nccl_waited": note("%d s", ran_s),
        "nccl_timeout": note("%d s", timeout_s, default="configured"),
        "error_line": F.coalesce(
            F.when(F.col("detail") == BARE_TRACEBACK_DETAIL, _exception_line()),
            F.col("log_exception"),
            F.col("log_evidence"),
            F.lit("the error"),
        ),
        "log_evidence": F.col("log_evidence"),
        "exception_note": note(" (the run ended with %s)", F.col("exception.type")),
    }


def _exception_line() -> Column:
    """`type: message` of the reader's run-ending exception, as patterns.exception_line writes it."""
    exc = F.col("exception")
    line = F.concat(
        exc["type"],
        F.when(F.coalesce(exc["message"], F.lit("")) != "", F.concat(F.lit(": "), exc["message"])).otherwise(
            F.lit("")
        ),
    )
    return F.substring(line, 1, EVIDENCE_CHARS)


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
    return F.concat(code_prefix(), out)


def code_prefix() -> Column:
    """CODE_NOTE for the job's `code` struct (the user's frame), or '' when the log names none or the cause
    is not the user's to fix."""
    code = F.when(F.col("user_fixable"), F.col("code"))
    name = F.element_at(F.split(code["file"], r"[\\/]"), -1)
    text = F.when(
        F.length(code["text"]) > CODE_TEXT_CHARS,
        F.concat(F.substring(code["text"], 1, CODE_TEXT_CHARS - 1), F.lit("…")),
    ).otherwise(code["text"])
    fmt = CODE_NOTE.replace("{code_name}", "%s").replace("{code_line}", "%d").replace("{code_text}", "%s")
    bare = CODE_NOTE_NO_TEXT.replace("{code_name}", "%s").replace("{code_line}", "%d")
    return F.when(
        F.length(F.trim(F.coalesce(code["text"], F.lit("")))) == 0, note(bare, name, code["line"])
    ).otherwise(note(fmt, name, code["line"], text))
