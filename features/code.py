"""Code-aware model inputs (pure): the analytic VRAM estimate of a job's workload (features.vram), read from
its script and the files its entry points name, as numbers the per-cluster models can split on.

Two engines, one rule: `with_code_features` for a frame of finished jobs (training: silver.scripts' text
and silver.job_sources' files) and `payload_values` for one query (serving: the `code_estimate` payload of
the script and the `sources` a submit hook sent). Both round the estimate as the payload does, so a job
gets the same values at training and at submit time (tests/test_code_features.py holds them equal)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from features.vram import estimate
from features.workload import bounded_sources, capture

# Log bytes per GPU: the estimated peak as DCGM sees it (context and allocator reserve included), and the
# weights term alone (the part of the estimate least exposed to unknown batch and sequence sizes).
CODE_NUMERIC = ("code_vram_est_log", "code_weights_log")


def _log(value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return math.log(number) if number > 0 else math.nan


def request_gpus(value: object) -> int | None:
    """The requested GPUs as the capture reads them (the world size of a launcher with no explicit count):
    a positive whole number, else None."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) and number > 0 else None


def _values(peak_vram_bytes: object, weights_bytes: object) -> dict[str, float]:
    return {"code_vram_est_log": _log(peak_vram_bytes), "code_weights_log": _log(weights_bytes)}


def payload_values(code: Mapping[str, object] | None) -> dict[str, float]:
    """The model inputs of one query from its `models.serving.code.code_estimate` payload (NaN where the
    code was not sent or not read, or the model is unknown)."""
    if not code or code.get("peak_vram_bytes") is None:
        return dict.fromkeys(CODE_NUMERIC, math.nan)
    terms = code.get("terms") or {}
    return _values(code["peak_vram_bytes"], terms.get("weights"))  # type: ignore[union-attr]


def code_values(script: str | None, sources: Mapping[str, str] | None, gpus: object) -> dict[str, float]:
    """The model inputs of one job from its script text and files (path as named -> text), as
    `payload_values` reads them from the payload the same script and files give at submit time."""
    if not isinstance(script, str) or not script:
        return dict.fromkeys(CODE_NUMERIC, math.nan)
    try:
        est = estimate(capture(script, bounded_sources(sources or {}), gpus=request_gpus(gpus)).workload)
    except Exception:  # as code_estimate: odd code is "unreadable", never an error
        est = None
    if est is None:
        return dict.fromkeys(CODE_NUMERIC, math.nan)
    return _values(round(est.peak_vram_bytes), round(est.terms["weights"]))


def sources_by_job(job_sources: pd.DataFrame) -> dict[str, dict[str, str]]:
    """job id -> {path as named: text} from rows of (job_id, path, text) (silver.job_sources joined with
    silver.sources); rows in path order, so a job's files come in one order however they were read."""
    out: dict[str, dict[str, str]] = {}
    ordered = job_sources.sort_values(["job_id", "path"])[["job_id", "path", "text"]]
    for job_id, path, text in ordered.itertuples(index=False):
        if isinstance(text, str):
            out.setdefault(str(job_id), {})[str(path)] = text
    return out


def with_code_features(
    jobs: pd.DataFrame, scripts: pd.DataFrame, job_sources: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Jobs plus CODE_NUMERIC: each job's script text (silver.scripts `text` by `script_hash`) and its files
    (`job_sources`: job_id, path, text; None: none kept) read statically. Jobs sharing a script, files and
    GPU count are read once."""
    script_text = pd.Series(None, index=jobs.index, dtype="object")
    if {"script_hash", "text"} <= set(scripts.columns) and len(scripts):
        texts = scripts.drop_duplicates("script_hash", keep="last").set_index("script_hash")["text"]
        script_text = jobs["script_hash"].map(texts)
    files = sources_by_job(job_sources) if job_sources is not None and len(job_sources) else {}
    seen: dict[tuple[object, ...], dict[str, float]] = {}
    rows = []
    for job_id, text, gpus in zip(jobs["job_id"], script_text, jobs["req_gpus"], strict=True):
        named = files.get(str(job_id), {})
        key = (text if isinstance(text, str) else None, tuple(sorted(named.items())), request_gpus(gpus))
        if key not in seen:
            seen[key] = code_values(key[0], named, gpus)
        rows.append(seen[key])
    values = pd.DataFrame(rows, index=jobs.index, columns=list(CODE_NUMERIC), dtype="float64")
    return pd.concat([jobs.drop(columns=list(CODE_NUMERIC), errors="ignore"), values], axis=1)
