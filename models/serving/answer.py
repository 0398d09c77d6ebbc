"""The recommendation payload from loaded champions and a user's history (pure): what `jobfit recommend
--json` prints and `POST /v1/recommend` answers (shape: docs/cli.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import pandas as pd

from conf import ClusterConfig
from features.query import HistoryIndex, query_features
from features.table import TARGETS
from features.vram import CODE_ONLY_MARGIN
from models.recommend import MIN_USER_HISTORY, assemble, choose_gpu, query_values
from models.train import OneRow
from pipelines.silver.scripts import ScriptInfo


class Champion(Protocol):
    """What a loaded champion model offers: a prediction in its target's unit per row of a table."""

    def predict(self, table: OneRow) -> object: ...


def recommendation(
    info: ScriptInfo,
    cluster: str,
    user: str,
    submit_ts: pd.Timestamp,
    config: ClusterConfig | None,
    champions: Mapping[str, tuple[Champion, str] | None],
    history: HistoryIndex,
    source: dict[str, object],
    gpu_mem_bytes: dict[str, float] | None = None,
    code: dict[str, object] | None = None,
) -> dict[str, object]:
    """Flags, per-target status and expected saving for one script of one user on one cluster, from the
    cluster's finished jobs (`history`, indexed by user and script) and the champion (predictor, version)
    per target (None where a target has none). Answers `not_enough_history` (and why) under
    MIN_USER_HISTORY jobs of the user; then a readable workload (`code`: `models.serving.code.code_estimate`)
    still gives the VRAM target from its code, with a margin and a note saying so."""
    n_history = history.jobs(user)
    payload: dict[str, object] = {
        "cluster": cluster,
        "user": user,
        "script_hash": info.script_hash,
        "history_jobs": n_history,
        "history_source": source,
        "script_runs": history.runs(user, info.script_hash),
    }
    if n_history < MIN_USER_HISTORY:
        why = (
            f"user {user} has {n_history} finished job(s) on cluster {cluster}; recommendations need at "
            f"least {MIN_USER_HISTORY} (the models and their calibration rely on the user's own history)"
        )
        targets = {t: {"status": "not_enough_history", "why": why} for t in TARGETS}
        flags: list[str] = []
        if code and code.get("status") == "ok" and (info.req_gpus or 0) > 0:
            targets["vram"] = _code_target(code, info, config)
            flags = [str(targets["vram"]["flag"])] if "flag" in targets["vram"] else []
        return payload | {
            "status": "not_enough_history",
            "why": why,
            "flags": flags,
            "targets": targets,
            "expected_saving": None,
            "code_estimate": code,
        }
    query = query_values(info, user, submit_ts, gpu_mem_bytes)
    # The fields the models were trained on: a script that names no account or QOS runs under the user's
    # latest (Slurm's default association), not under none.
    for column in ("account", "qos"):
        if query[column] is None:
            query[column] = history.latest(user, column)
    values = query_features(query, info.as_row(), history, code)
    row = OneRow(values)
    predictions: dict[str, float] = {}
    status: dict[str, dict[str, object]] = {}
    for target in TARGETS:
        champion = champions.get(target)
        if champion is None:
            status[target] = {"status": "no_model", "why": f"no champion model for {target} on {cluster}"}
        elif target == "vram" and not (info.req_gpus or 0) > 0:
            status[target] = {"status": "not_applicable", "why": "the script requests no GPU"}
        else:
            predictor, version = champion
            predictions[target] = float(predictor.predict(row)[0])  # type: ignore[index]
            status[target] = {"status": "ok", "model_version": version}
    answer = assemble(values, predictions, config)
    for target, values in answer["targets"].items():  # type: ignore[union-attr]
        status[target].update(values)
    if code and code.get("status") == "ok" and "vram" in status:
        status["vram"]["code_estimate_bytes"] = code["recommended_vram_bytes"]
    flags = [status[t]["flag"] for t in TARGETS if "flag" in status[t]]
    return payload | {
        "status": "ok",
        "why": None,
        "flags": flags,
        "targets": status,
        "expected_saving": answer["expected_saving"],
        "code_estimate": code,
    }


def _code_target(
    code: dict[str, object], info: ScriptInfo, config: ClusterConfig | None
) -> dict[str, object]:
    """The VRAM target from the code estimate alone (no history): per GPU, with CODE_ONLY_MARGIN."""
    per_gpu = float(code["recommended_vram_bytes"])  # type: ignore[arg-type]
    gpus = int(info.req_gpus or 1)
    choice = choose_gpu(per_gpu, config)
    name = (choice or {}).get("mig_profile") or (choice or {}).get("gpu_model")
    why = (
        f"no history: estimated from the workload's code and config (docs/vram.md), plus "
        f"{round(CODE_ONLY_MARGIN * 100)} % margin"
    )
    target: dict[str, object] = {
        "status": "code_estimate",
        "why": why if name else f"{why}; no GPU of this cluster holds it, so no --gres to suggest",
        "recommended_bytes": per_gpu * gpus,
        "gpus": gpus,
        "gpu": choice,
        "fits_requested": code.get("fits"),
    }
    if name:  # a flag only where it names a card: `--gres=gpu:N` alone would repeat the request
        target["flag"] = f"--gres=gpu:{name}:{gpus}"
    return target
