"""The recommendation payload from loaded champions and a user's history (pure): what `jobfit recommend
--json` prints and `POST /v1/recommend` answers (shape: docs/cli.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import pandas as pd

from conf import ClusterConfig
from features.query import HistoryIndex, query_features
from features.table import TARGETS
from models.recommend import MIN_USER_HISTORY, assemble, query_values
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
) -> dict[str, object]:
    """Flags, per-target status and expected saving for one script of one user on one cluster, from the
    cluster's finished jobs (`history`, indexed by user and script) and the champion (predictor, version)
    per target (None where a target has none). Answers `not_enough_history` (and why) under
    MIN_USER_HISTORY jobs of the user."""
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
        return payload | {
            "status": "not_enough_history",
            "why": why,
            "flags": [],
            "targets": targets,
            "expected_saving": None,
        }
    values = query_features(query_values(info, user, submit_ts, gpu_mem_bytes), info.as_row(), history)
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
    flags = [status[t]["flag"] for t in TARGETS if "flag" in status[t]]
    return payload | {
        "status": "ok",
        "why": None,
        "flags": flags,
        "targets": status,
        "expected_saving": answer["expected_saving"],
    }
