"""The code-aware estimate inside a recommendation (pure): the job script's entry point and the files the
submit hook sent, read statically, turned into the VRAM estimate and the "will it fit" verdict for the card
the job asks for (docs/vram.md). Any failure gives a status and why, never an error (hooks fail open)."""

from __future__ import annotations

from collections.abc import Mapping

from features.vram import CODE_ONLY_MARGIN, card_bytes, distinct_cards, estimate_payload
from features.workload import (
    MAX_SOURCE_BYTES,
    MAX_SOURCES,
    MAX_TOTAL_SOURCE_BYTES,
    bounded_sources,
    capture,
    entry_points,
    referenced_files,
)
from pipelines.silver.scripts import ScriptInfo


def code_estimate(
    script: str | None,
    sources: Mapping[str, str] | None,
    info: ScriptInfo,
    gpu_mem_bytes: Mapping[str, float] | None,
) -> dict[str, object]:
    """{"status": ok | no_script | no_entry_point | unknown_model | unreadable, "why", ...the `jobfit
    estimate --json` fields}: the estimate per GPU and whether it fits one card of the requested model."""
    if not script:
        return {"status": "no_script", "why": "no job script was sent, so its code could not be read"}
    try:
        cap = capture(script, bounded_sources(sources or {}), gpus=info.req_gpus)
        lookup = dict(gpu_mem_bytes or {})  # names, lower-case names and families (`a100`)
        cards = distinct_cards(lookup)
        gpu_model = info.gpu_type or (next(iter(cards)) if len(cards) == 1 else None)
        payload = estimate_payload(
            cap.workload,
            gpu_model,
            card_bytes(gpu_model, lookup),
            sorted(cards.items(), key=lambda c: c[1]),
            cap.unknown,
        )
    except Exception as exc:  # a submit path never fails on odd code; the history answer stands
        return {"status": "unreadable", "why": f"could not read the workload ({type(exc).__name__})"}
    payload["capture"] = cap.as_dict()
    if not cap.entries:
        return payload | {"status": "no_entry_point", "why": "; ".join(cap.notes)}
    if payload["peak_allocated_bytes"] is None:
        named = ", ".join(cap.read) or "no file sent"
        why = f"the model is not one jobfit knows (read: {named}; notes: {'; '.join(cap.notes) or 'none'})"
        return payload | {"status": "unknown_model", "why": why}
    why = None
    if payload["fits"] is None:
        why = "the request names no GPU model this cluster lists, so no fit verdict"
    payload["recommended_vram_bytes"] = round(float(payload["peak_vram_bytes"]) * (1 + CODE_ONLY_MARGIN))  # type: ignore[arg-type]
    return {"status": "ok", "why": why, **payload}


def wanted_files(script: str) -> dict[str, object]:
    """The files a submit hook should read and send as `sources` for this script: those its entry points
    name, as named (at most MAX_SOURCES), with the bounds. No file named (or a script that does not
    read) gives an empty list, never an error."""
    try:
        files = referenced_files(entry_points(script))
    except Exception:  # the hook then sends the script alone; the answer says what was not read
        files = []
    return {
        "files": files,
        "max_files": MAX_SOURCES,
        "max_file_bytes": MAX_SOURCE_BYTES,
        "max_total_bytes": MAX_TOTAL_SOURCE_BYTES,
    }
