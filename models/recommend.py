"""Turn calibrated predictions into scheduler flags, a GPU/MIG choice and an expected saving (pure)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import pandas as pd

from conf import ClusterConfig
from features.scripts import with_script_features
from features.table import history_features, with_request_features
from pipelines.units import GIB, MIB, mig_fraction, parse_mig_profile

# A user needs this many finished jobs on the cluster before a recommendation is given.
MIN_USER_HISTORY = 3


def format_mem(bytes_: float) -> str:
    """Slurm --mem value rounded up to whole MiB: `NG` when that is whole GiB, else `NM` (`1280M`)."""
    mib = max(math.ceil(bytes_ / MIB - 1e-9), 1)
    return f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"


def format_time(seconds: float) -> str:
    """Slurm --time value rounded up to whole minutes: `D-HH:MM:SS` (or `HH:MM:SS` under a day)."""
    minutes = max(math.ceil(seconds / 60), 1)
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    clock = f"{hours:02d}:{mins:02d}:00"
    return f"{days}-{clock}" if days else clock


def gpu_options(cluster: ClusterConfig | None) -> list[tuple[float, str, str | None]]:
    """(memory bytes, GPU model, MIG profile or None) of every whole GPU and MIG slice, smallest first.

    A MIG profile's memory is `parse_mig_profile`'s (the number in its name read as GB), as gold.job_usage's
    VRAM fit reads it; a profile that is not a MIG profile name is left out."""
    if cluster is None:
        return []
    options: list[tuple[float, str, str | None]] = []
    for model, spec in cluster.gpu_models.items():
        options.append((spec.memory_gib * GIB, model, None))
        for profile in spec.mig_profiles:
            try:
                options.append((float(parse_mig_profile(profile)[1]), model, profile))
            except ValueError:
                continue
    return sorted(options, key=lambda o: (o[0], o[2] is not None, o[1]))


def choose_gpu(vram_per_gpu_bytes: float, cluster: ClusterConfig | None) -> dict[str, object] | None:
    """The cheapest GPU or MIG slice (GPU-hour price x slice share) whose memory holds the recommended
    VRAM per GPU; on equal price a whole GPU before a MIG slice (7g.80gb is the whole A100), then the
    smaller memory. `memory_gib` is the choice's memory in GiB (2 decimals). None when nothing fits."""
    fitting = [o for o in gpu_options(cluster) if o[0] >= vram_per_gpu_bytes]
    if not fitting or cluster is None:
        return None
    price = lambda o: cluster.prices.gpu_hour_for(o[1]) * mig_fraction(o[2])  # noqa: E731
    memory_bytes, model, profile = min(fitting, key=lambda o: (price(o), o[2] is not None, o[0]))
    return {"gpu_model": model, "mig_profile": profile, "memory_gib": round(memory_bytes / GIB, 2)}


def query_values(
    info: object, user: str, submit_ts: pd.Timestamp, gpu_mem_bytes: dict[str, float] | None = None
) -> dict[str, object]:
    """A silver.jobs-like row (as a dict) for a script about to be submitted (from a ScriptInfo), with the
    per-target request columns the recommendation is capped at (`mem_req_bytes`, `cpus_req`, ...)."""
    directives = getattr(info, "directives_json", None) or "{}"
    try:
        parsed = json.loads(directives)
        job_name = parsed.get("--job-name") or parsed.get("pbs:N")
    except (ValueError, AttributeError):
        parsed, job_name = {}, None
    cpus_per_task = getattr(info, "req_cpus_per_task", None)
    ntasks = getattr(info, "req_ntasks", None)
    req_cpus = (cpus_per_task or 1) * (ntasks or 1) if (cpus_per_task or ntasks) else None
    gpus = getattr(info, "req_gpus", None)
    per_gpu = (gpu_mem_bytes or {}).get(getattr(info, "gpu_type", None) or "")
    return {
        "mem_req_bytes": getattr(info, "req_mem_bytes", None),
        "cpus_req": req_cpus,
        "runtime_req_s": getattr(info, "timelimit_s", None),
        # Per GPU, as trained (features.table.with_targets): one card's memory.
        "vram_req_bytes": per_gpu if gpus and per_gpu else None,
        "cluster": None,
        "job_id": "query",
        "user": user,
        # The script's own; without one the caller fills in the user's latest (HistoryIndex.latest).
        "account": parsed.get("--account") if isinstance(parsed, dict) else None,
        "partition": getattr(info, "partition", None),
        "qos": parsed.get("--qos") if isinstance(parsed, dict) else None,
        "job_name": job_name,
        "submit_ts": submit_ts,
        "req_cpus": req_cpus,
        "req_mem_bytes": getattr(info, "req_mem_bytes", None),
        "req_gpus": getattr(info, "req_gpus", None),
        "timelimit_s": getattr(info, "timelimit_s", None),
        "gpu_model": getattr(info, "gpu_type", None),
        "nodes": getattr(info, "req_nodes", None),
        "ntasks": ntasks,
        "script_hash": info.script_hash,  # type: ignore[attr-defined]
        "script_key": info.script_hash,  # type: ignore[attr-defined]
    }


def query_row(
    info: object, user: str, submit_ts: pd.Timestamp, gpu_mem_bytes: dict[str, float] | None = None
) -> pd.DataFrame:
    """`query_values` as a one-row frame (the batch engine: `jobfit hooks export`)."""
    return pd.DataFrame([query_values(info, user, submit_ts, gpu_mem_bytes)])


def with_query_features(queries: pd.DataFrame, scripts: pd.DataFrame, history: pd.DataFrame) -> pd.DataFrame:
    """Query rows (from `query_row`) plus the script, request and history features the champions read;
    `scripts` has silver.scripts columns, `history` is a history snapshot (finished jobs, targets)."""
    return history_features(history, with_request_features(with_script_features(queries, scripts)))


def assemble(
    row: Mapping[str, object] | pd.Series,
    predictions: dict[str, float],
    cluster: ClusterConfig | None,
) -> dict[str, object]:
    """Flags and the expected saving per run from calibrated predictions (target -> value in its unit)
    and the script's own request in `row` (a query's values). Targets absent from `predictions` get no
    flag."""
    req_cpus = _num(row["req_cpus"])
    req_mem = _num(row["req_mem_bytes"])
    req_gpus = _num(row["req_gpus"])
    req_time = _num(row["timelimit_s"])
    ntasks = _num(row["ntasks"]) or 1.0
    out: dict[str, dict[str, object]] = {}
    if "mem" in predictions:
        out["mem"] = {"recommended_bytes": predictions["mem"], "requested_bytes": req_mem}
        out["mem"]["flag"] = f"--mem={format_mem(predictions['mem'])}"
    if "cpus" in predictions:
        per_task = max(math.ceil(predictions["cpus"] / ntasks), 1)
        out["cpus"] = {"recommended_cpus": predictions["cpus"], "requested_cpus": req_cpus}
        out["cpus"]["flag"] = f"--cpus-per-task={per_task}"
    gpu_choice = None
    if "vram" in predictions:
        gpus = int(req_gpus) if req_gpus else 1
        gpu_choice = choose_gpu(predictions["vram"], cluster)  # the VRAM target is per GPU
        out["vram"] = {"recommended_bytes": predictions["vram"], "gpus": gpus, "gpu": gpu_choice}
        name = (gpu_choice or {}).get("mig_profile") or (gpu_choice or {}).get("gpu_model")
        out["vram"]["flag"] = f"--gres=gpu:{name}:{gpus}" if name else f"--gres=gpu:{gpus}"
    if "runtime" in predictions:
        out["runtime"] = {"recommended_s": predictions["runtime"], "requested_s": req_time}
        out["runtime"]["flag"] = f"--time={format_time(predictions['runtime'])}"
    return {"targets": out, "expected_saving": expected_saving(row, predictions, gpu_choice, cluster)}


def _num(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def expected_saving(
    row: Mapping[str, object] | pd.Series,
    predictions: dict[str, float],
    gpu: dict[str, object] | None,
    cluster: ClusterConfig | None,
) -> dict[str, object]:
    """Per run, what following the recommendation frees against the script's request: core-hours and
    GiB-hours over the expected runtime, reserved hours, and USD at the cluster's prices (null parts
    where the script states no request or no model answered)."""
    runtime_h = predictions.get("runtime", _num(row["timelimit_s"]) or float("nan")) / 3600
    req_cpus, req_mem = _num(row["req_cpus"]), _num(row["req_mem_bytes"])
    req_time = _num(row["timelimit_s"])
    core_h = (req_cpus - predictions["cpus"]) * runtime_h if req_cpus and "cpus" in predictions else None
    gib_h = (req_mem - predictions["mem"]) / GIB * runtime_h if req_mem and "mem" in predictions else None
    reserved_h = (req_time - predictions["runtime"]) / 3600 if req_time and "runtime" in predictions else None
    gpu_h = None
    usd = None
    if cluster is not None:
        usd = 0.0
        usd += (core_h or 0.0) * cluster.prices.core_hour_usd + (gib_h or 0.0) * cluster.prices.gib_hour_usd
        if gpu is not None and not math.isnan(runtime_h):
            gpus = _num(row["req_gpus"]) or 1.0
            asked = cluster.prices.gpu_hour_for(
                row["gpu_model"] if isinstance(row["gpu_model"], str) else None
            )
            chosen = cluster.prices.gpu_hour_for(str(gpu["gpu_model"])) * mig_fraction(gpu["mig_profile"])  # type: ignore[arg-type]
            gpu_h = gpus * runtime_h * (1 - mig_fraction(gpu["mig_profile"]))  # type: ignore[arg-type]
            usd += gpus * runtime_h * (asked - chosen)
    clean = {
        "core_h": core_h,
        "gib_h": gib_h,
        "gpu_h": gpu_h,
        "reserved_h": reserved_h,
        "usd": usd,
    }
    return {
        k: (None if v is None or (isinstance(v, float) and math.isnan(v)) else round(v, 4))
        for k, v in clean.items()
    }
