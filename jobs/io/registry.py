"""MLflow at the edge: log a trained target, register it, move the `champion` alias, load champions."""

from __future__ import annotations

import json
import logging
import os
import pickle
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import mlflow
import mlflow.pyfunc
import pandas as pd
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from conf import Settings
from models.metrics import promotion
from models.train import Predictor, TargetResult

CHAMPION = "champion"
# A loaded champion per (tracking URI, model name, version): the alias is re-resolved on every call.
_CACHE: dict[tuple[str, str, str], Predictor] = {}


class PredictorModel(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper around a pickled models.train.Predictor (predicts in the target's unit)."""

    def load_context(self, context: Any) -> None:
        with open(context.artifacts["predictor"], "rb") as fh:
            self.predictor: Predictor = pickle.load(fh)

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict | None = None) -> Any:
        return self.predictor.predict(model_input)


def configure(settings: Settings) -> MlflowClient:
    """Point MLflow at the configured tracking (and registry) URI; returns a client for it."""
    # MLflow's INFO/WARNING chatter and artifact progress bars would bury jobfit's own progress lines.
    logging.getLogger("mlflow").setLevel(logging.ERROR)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    mlflow.set_tracking_uri(settings.mlflow.tracking_uri)
    if settings.mlflow.registry_uri:
        mlflow.set_registry_uri(settings.mlflow.registry_uri)
    return MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.registry_uri)


def model_name(cluster: str, target: str) -> str:
    """The registered model of one cluster and target."""
    return f"jobfit-{cluster}-{target}"


def _flat_metrics(metrics: dict[str, dict[str, object]]) -> dict[str, float]:
    out = {}
    for who, values in metrics.items():
        for key, value in values.items():
            if isinstance(value, int | float):
                out[f"{who}.{key}"] = float(value)
    return out


def champion_version(client: MlflowClient, name: str) -> str | None:
    """The version the champion alias points at, or None when the model or alias does not exist."""
    try:
        return str(client.get_model_version_by_alias(name, CHAMPION).version)
    except MlflowException:
        return None


def load_predictor(client: MlflowClient, name: str, version: str) -> Predictor:
    """The Predictor of one registered model version (cached in-process)."""
    key = (client.tracking_uri, name, str(version))
    if key not in _CACHE:
        model = mlflow.pyfunc.load_model(f"models:/{name}/{version}")
        _CACHE[key] = model.unwrap_python_model().predictor
    return _CACHE[key]


def load_champion(client: MlflowClient, cluster: str, target: str) -> tuple[Predictor, str] | None:
    """The champion Predictor and its version for a cluster and target, or None when there is none."""
    name = model_name(cluster, target)
    version = champion_version(client, name)
    if version is None:
        return None
    return load_predictor(client, name, version), version


def log_target(
    client: MlflowClient,
    cluster: str,
    result: TargetResult,
    champion_metrics: dict[str, object] | None,
    rate: float,
) -> dict[str, object]:
    """Log one trained target as a run (params, metrics, feature list, model), register it as a new
    version, and move `champion` to it only when it beats the current champion on the same newest
    held-out period (the first version only when it holds the rate there: `models.metrics.promotion`).
    Returns what happened (version, promoted, why)."""
    name = model_name(cluster, result.predictor.target)
    mlflow.set_experiment(f"jobfit-{cluster}")
    predictor = result.predictor
    with mlflow.start_run(run_name=f"{cluster}-{predictor.target}") as run:
        mlflow.log_params(
            {**asdict(predictor.params), "target": predictor.target, "cluster": cluster, "rate": rate}
            | {f"rows_{k}": v for k, v in result.rows.items()}
            | {"test_start": str(result.test_start), "offset_log": round(predictor.offset_log, 6)}
            | {"variant": predictor.variant, "lambda": predictor.lam}
        )
        mlflow.log_metrics(_flat_metrics(result.metrics))
        mlflow.log_dict({"features": predictor.features}, "features.json")
        mlflow.log_dict(result.metrics, "metrics.json")
        mlflow.log_dict(predictor.selection, "selection.json")
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "predictor.pkl"
            path.write_bytes(pickle.dumps(predictor))
            info = mlflow.pyfunc.log_model(
                name="model",
                python_model=PredictorModel(),
                artifacts={"predictor": str(path)},
                pip_requirements=["lightgbm", "scikit-learn", "pandas", "numpy"],
            )
    version = mlflow.register_model(info.model_uri, name).version
    promoted, why = promotion(result.metrics["model"], champion_metrics, rate)
    if promoted:
        client.set_registered_model_alias(name, CHAMPION, version)
    client.set_model_version_tag(name, version, "promotion", json.dumps({"promoted": promoted, "why": why}))
    return {
        "model": name,
        "version": str(version),
        "run_id": run.info.run_id,
        "promoted": promoted,
        "why": why,
    }


HISTORY_ARTIFACT = "history.parquet"
HISTORY_TAG = "jobfit_kind"
# A downloaded history snapshot per (tracking URI, run id): snapshots never change once logged.
_HISTORY_CACHE: dict[tuple[str, str], pd.DataFrame] = {}


def log_history_snapshot(cluster: str, history: pd.DataFrame, taken_at: str) -> str:
    """Log the cluster's finished jobs as `jobfit recommend` reads them (user, script key, end time,
    targets) as a Parquet artifact of a `<cluster>-history` run; returns the run id."""
    mlflow.set_experiment(f"jobfit-{cluster}")
    newest = str(history["end_ts"].max()) if len(history) else None
    with mlflow.start_run(run_name=f"{cluster}-history", tags={HISTORY_TAG: "history"}) as run:
        mlflow.log_params({"rows": len(history), "newest_end_ts": newest, "taken_at": taken_at})
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / HISTORY_ARTIFACT
            history.to_parquet(path, index=False)
            mlflow.log_artifact(str(path))
    return run.info.run_id


def load_history_snapshot(
    client: MlflowClient, cluster: str
) -> tuple[pd.DataFrame, dict[str, object]] | None:
    """The newest history snapshot of a cluster and where it came from (run id, when it was taken, its
    newest job end), or None when `jobfit train` never logged one."""
    experiment = client.get_experiment_by_name(f"jobfit-{cluster}")
    if experiment is None:
        return None
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.{HISTORY_TAG} = 'history'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not runs:
        return None
    run = runs[0]
    key = (client.tracking_uri, run.info.run_id)
    if key not in _HISTORY_CACHE:
        path = mlflow.artifacts.download_artifacts(
            run_id=run.info.run_id, artifact_path=HISTORY_ARTIFACT, tracking_uri=client.tracking_uri
        )
        _HISTORY_CACHE[key] = pd.read_parquet(path)
    info = {
        "source": "snapshot",
        "run_id": run.info.run_id,
        "taken_at": run.data.params.get("taken_at"),
        "newest_end_ts": run.data.params.get("newest_end_ts"),
    }
    return _HISTORY_CACHE[key], info
