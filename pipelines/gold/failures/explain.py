"""One log diagnosed at the prompt (`jobfit explain`): the pattern table, the traceback reader and the fix
table, applied in plain Python with the same tables the gold build compiles to Spark. No Spark, no pandas."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipelines.gold.failures.fix_table import (
    MISSING,
    choose_fix,
    code_note,
    fixed,
    knob_note,
    render_fix,
    script_knobs,
)
from pipelines.gold.failures.patterns import (
    BARE_TRACEBACK_DETAIL,
    classify_text,
    exception_line,
    moment_lines,
)
from pipelines.gold.failures.taxonomy import CAUSES, UNKNOWN
from pipelines.gold.failures.tracebacks import TracebackReading, read_tracebacks
from pipelines.gold.failures.xid import XID_CATALOGUE

# Confidence and detail of a log that matches no pattern (the gold build's no-rule answer for a failed job).
NO_EVIDENCE_CONFIDENCE = 0.1
NO_EVIDENCE_DETAIL = "no_evidence"


@dataclass(frozen=True)
class Explanation:
    """A diagnosis of one log: cause, its title, whether the user can fix it, confidence, evidence, the fix,
    the run-ending exception and the user's frame (see docs/cli.md, `jobfit explain --json`)."""

    cause: str
    title: str
    user_fixable: bool
    confidence: float
    detail: str
    evidence: str
    suggested_fix: str
    exception: dict[str, str] | None
    code: dict[str, str | int] | None

    def as_json(self) -> dict[str, object]:
        """The `--json` shape of `jobfit explain`."""
        return {
            "cause": self.cause,
            "title": self.title,
            "user_fixable": self.user_fixable,
            "confidence": self.confidence,
            "detail": self.detail,
            "evidence": self.evidence,
            "suggested_fix": self.suggested_fix,
            "exception": self.exception,
            "code": self.code,
        }


def _batch_size(knobs: list[tuple[int, str, str]]) -> str | None:
    """The batch size the script sets, when the first batch-size setting is a plain number."""
    for _, name, setting in knobs:
        m = re.search(r"(\d+)$", setting) if name == "batch size" else None
        if m:
            return m.group(1)
    return None


def prompt_quotes(
    facts: dict[str, str],
    evidence: str | None,
    reading: TracebackReading,
    batch_size: str | None,
    detail: str | None = None,
) -> dict[str, str | None]:
    """The fix table's quotes that one log (and its script) can fill; accounting and telemetry ones stay None.
    Formats match fixes.quotes() so that both engines print the same text."""
    xid = facts.get("xid")
    tried = facts.get("gpu_tried_gib")
    ran_ms, timeout_ms = facts.get("nccl_ran_ms"), facts.get("nccl_timeout_ms")
    return {
        "gpu_model": "its GPU",
        "batch_note": f" from {int(batch_size)}" if batch_size else "",
        "log_gpu_total_gib": fixed(float(facts["gpu_total_gib"]), 1) if "gpu_total_gib" in facts else None,
        "tried_note": f" (tried to allocate {fixed(float(tried), 2)} GiB more)" if tried else "",
        "xid": xid,
        "xid_name": XID_CATALOGUE[int(xid)].name
        if xid and int(xid) in XID_CATALOGUE
        else "see NVIDIA's Xid list",
        "xid_node": "unknown node",
        "xid_gpu_note": "",
        "xid_time_note": "",
        "node_list_or_unknown": "(unknown)",
        "node_list_or_nodes_unknown": "nodes unknown",
        "node_list_or_same_nodes": "the same nodes",
        "nccl_op": facts.get("nccl_op", "NCCL"),
        "nccl_waited": f"{int(ran_ms) // 1000} s" if ran_ms else "",
        "nccl_timeout": f"{int(timeout_ms) // 1000} s" if timeout_ms else "configured",
        # a bare traceback decided: quote the exception that ended the run, not the first one printed
        "error_line": reading_line
        if detail == BARE_TRACEBACK_DETAIL and (reading_line := exception_line(reading.exception_json()))
        else facts.get("exception") or evidence or "the error",
        "log_evidence": evidence,
        "exception_note": f" (the run ended with {reading.exc_type})" if reading.exc_type else "",
        "uid_note": "",
        "sigkill_note": "",
        "sampled_peak_note": " (no peak recorded)",
        "exit_code_or_unknown": "unknown",
        "time_limit_or_unlimited": MISSING,
    }


def _evidence(pattern: str | None, line: str | None, reading: TracebackReading, moments: list[str]) -> str:
    """What was seen in the log: the matching line, the traceback's exception and frame, the moment lines."""
    parts = [f"log ({pattern}): {line}" if pattern else "log: no known failure signature"]
    if reading.exc_type:
        where = (
            f" at {reading.code.file}:{reading.code.line} in {reading.code.function}" if reading.code else ""
        )
        parts.append(f"traceback: {reading.exc_type}{where}")
    if reading.launcher is not None and reading.launcher.rank is not None:
        parts.append(
            f"torchrun: rank {reading.launcher.rank} failed first (exit code {reading.launcher.exitcode})"
        )
    if reading.device_assert is not None:
        a = reading.device_assert
        parts.append(f"CUDA kernel assert at {a.file}:{a.line}: {a.condition}")
    parts += [f"at the moment: {m}" for m in moments if m != line]  # not the matching line twice
    return "; ".join(parts)


def explain_log(text: str, script: str | None = None) -> Explanation:
    """Diagnose one log's text (and optionally the job script that ran it) with the shared tables."""
    reading = read_tracebacks(text)
    diagnosis = classify_text(text, reading.exc_type)
    if diagnosis is not None:
        cause, detail, confidence = diagnosis.cause, diagnosis.detail, diagnosis.confidence
        facts, evidence = diagnosis.facts, diagnosis.evidence
    else:
        cause, detail, confidence, facts, evidence = (
            UNKNOWN,
            NO_EVIDENCE_DETAIL,
            NO_EVIDENCE_CONFIDENCE,
            {},
            None,
        )
    knobs = script_knobs(script, cause) if script else []
    conditions = {"has_log": True, "has_log_gpu_size": "gpu_total_gib" in facts, "has_xid": "xid" in facts}
    fix = choose_fix(cause, detail, lambda name: conditions.get(name, False))
    text_fix = render_fix(fix, prompt_quotes(facts, evidence, reading, _batch_size(knobs), detail))
    code = reading.code
    # the user's line leads the fix only when the user can fix the cause (not a hardware fault)
    prefix = code_note(code.file, code.line, code.text) if code and CAUSES[cause].user_fixable else ""
    return Explanation(
        cause=cause,
        title=CAUSES[cause].title,
        user_fixable=CAUSES[cause].user_fixable,
        confidence=confidence,
        detail=detail,
        evidence=_evidence(
            diagnosis.pattern_id if diagnosis else None, evidence, reading, moment_lines(text)
        ),
        suggested_fix=prefix + text_fix + knob_note(knobs),
        exception=reading.exception_json(),
        code=reading.code_json(),
    )
