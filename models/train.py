"""Per-cluster, per-target LightGBM quantile models with split-conformal calibration (pure: frames in)."""

from __future__ import annotations

from dataclasses import dataclass, field

import lightgbm as lgb
import numpy as np
import pandas as pd

from features.scripts import TextEmbedder, fit_text_embedder
from features.table import TARGETS, TargetSpec, base_feature_columns
from models.baselines import Baseline, fit_baselines
from models.calibrate import cap_at_request, capped_offset
from models.metrics import evaluate_predictions

# A target is trained only with at least this many jobs that measured it (train + calibration + test).
MIN_TARGET_ROWS = 200


@dataclass(frozen=True)
class TrainParams:
    """Model and split settings (logged to MLflow as parameters)."""

    quantile: float = 0.9
    num_boost_round: int = 300
    learning_rate: float = 0.05
    num_leaves: int = 31
    min_data_in_leaf: int = 20
    embedding_dims: int = 16
    train_frac: float = 0.6
    cal_frac: float = 0.2
    # One thread by default: on a shared 2-core machine LightGBM's OpenMP threads spin-wait and run
    # 10x slower than one thread (measured in bench/train_recommend.py).
    num_threads: int = 1
    max_bin: int = 63
    seed: int = 0


@dataclass(frozen=True)
class Split:
    """Time-ordered split: train jobs ended before `cal_start`; calibration submitted in
    [cal_start, test_start); test (the newest held-out period) submitted at or after `test_start`."""

    train: pd.DataFrame
    cal: pd.DataFrame
    test: pd.DataFrame
    cal_start: pd.Timestamp
    test_start: pd.Timestamp


def time_split(table: pd.DataFrame, train_frac: float, cal_frac: float) -> Split:
    """Split by submit time at the given job-count fractions; training keeps only jobs whose outcome
    was known before calibration starts (no job in training ends in the calibration period)."""
    submit = table["submit_ts"].sort_values(kind="mergesort").reset_index(drop=True)
    if len(submit) < 3:
        raise ValueError(f"need at least 3 finished jobs to split by time, got {len(submit)}")
    cal_start = submit.iloc[int(len(submit) * train_frac)]
    test_start = submit.iloc[min(int(len(submit) * (train_frac + cal_frac)), len(submit) - 1)]
    train = table[(table["submit_ts"] < cal_start) & (table["end_ts"] < cal_start)]
    cal = table[(table["submit_ts"] >= cal_start) & (table["submit_ts"] < test_start)]
    test = table[table["submit_ts"] >= test_start]
    return Split(train, cal, test, cal_start, test_start)


@dataclass
class Predictor:
    """One cluster's model for one target: embedding, booster, conformal log-offset; predicts in the
    target's unit (bytes, CPUs, seconds)."""

    target: str
    booster: lgb.Booster
    embedder: TextEmbedder
    numeric: list[str]
    categorical: list[str]
    categories: dict[str, list[str]]
    offset_log: float
    rate: float
    floor: float
    params: TrainParams = field(default_factory=TrainParams)

    @property
    def features(self) -> list[str]:
        return [*self.numeric, *self.categorical, *self.embedder.columns]

    def design(self, table: pd.DataFrame) -> pd.DataFrame:
        """The model's input frame for rows of a table built by features.table (unknown categories → NaN)."""
        frame = table.reindex(columns=self.numeric).astype("float64")
        for col in self.categorical:
            values = table[col].astype("string") if col in table else pd.Series(pd.NA, index=table.index)
            frame[col] = pd.Categorical(values, categories=self.categories[col])
        emb = self.embedder.transform(table["script_text"])
        return pd.concat([frame, emb], axis=1)

    def predict_raw(self, table: pd.DataFrame) -> np.ndarray:
        """The quantile model's estimate before calibration."""
        if len(table) == 0:
            return np.zeros(0)
        return np.exp(self.booster.predict(self.design(table), num_threads=self.params.num_threads))

    def predict(self, table: pd.DataFrame) -> np.ndarray:
        """The calibrated recommendation: raw x exp(offset), at least the target's floor, at most the
        job's own request where it states one (the calibration assumed that cap)."""
        shifted = np.maximum(self.predict_raw(table) * np.exp(self.offset_log), self.floor)
        request = TARGETS[self.target].request
        if request not in table:
            return shifted
        return cap_at_request(shifted, table[request].to_numpy(dtype="float64"))


@dataclass
class TargetResult:
    """A trained target: the predictor, fitted baselines, and held-out metrics for model and baselines."""

    predictor: Predictor
    baselines: list[Baseline]
    metrics: dict[str, dict[str, object]]
    rows: dict[str, int]
    test_start: pd.Timestamp


def target_rows(table: pd.DataFrame, spec: TargetSpec) -> pd.DataFrame:
    """Rows where the target was measured (a job without GPU telemetry says nothing about VRAM)."""
    return table[table[spec.actual].notna() & table[f"{spec.name}_required"].gt(0)]


def _fit_booster(
    train: pd.DataFrame, spec: TargetSpec, params: TrainParams
) -> tuple[lgb.Booster, TextEmbedder, list[str], list[str], dict[str, list[str]]]:
    embedder = fit_text_embedder(train["script_text"], params.embedding_dims, params.seed)
    numeric, categorical = base_feature_columns()
    categories = {
        c: sorted(train[c].dropna().astype(str).unique().tolist()) for c in categorical if c in train
    }
    categorical = [c for c in categorical if categories.get(c)]
    shell = Predictor(
        spec.name, None, embedder, numeric, categorical, categories, 0.0, 0.0, spec.floor, params
    )  # type: ignore[arg-type]
    design = shell.design(train)
    label = np.log(train[spec.actual].to_numpy(dtype="float64"))
    booster = lgb.train(
        {
            "objective": "quantile",
            "alpha": params.quantile,
            "learning_rate": params.learning_rate,
            "num_leaves": params.num_leaves,
            "min_data_in_leaf": params.min_data_in_leaf,
            "num_threads": params.num_threads,
            "max_bin": params.max_bin,
            "seed": params.seed,
            "deterministic": True,
            "verbosity": -1,
        },
        lgb.Dataset(design, label=label, categorical_feature=categorical, free_raw_data=True),
        num_boost_round=params.num_boost_round,
    )
    return booster, embedder, numeric, categorical, categories


def train_target(table: pd.DataFrame, spec: TargetSpec, params: TrainParams, rate: float) -> TargetResult:
    """Fit on the training slice, calibrate on the calibration slice, measure on the newest slice.

    Raises ValueError when the target has too few measured jobs or a slice ends up empty."""
    rows = target_rows(table, spec)
    if len(rows) < MIN_TARGET_ROWS:
        raise ValueError(f"{spec.name}: only {len(rows)} jobs measured it (need {MIN_TARGET_ROWS})")
    split = time_split(rows, params.train_frac, params.cal_frac)
    for name, part in (("training", split.train), ("calibration", split.cal), ("test", split.test)):
        if len(part) == 0:
            raise ValueError(f"{spec.name}: the {name} slice is empty")
    booster, embedder, numeric, categorical, categories = _fit_booster(split.train, spec, params)
    predictor = Predictor(
        spec.name, booster, embedder, numeric, categorical, categories, 0.0, rate, spec.floor, params
    )
    predictor.offset_log = capped_offset(
        split.cal[f"{spec.name}_required"].to_numpy(),
        np.maximum(predictor.predict_raw(split.cal), spec.floor),
        split.cal[spec.request].to_numpy(dtype="float64"),
        rate,
    )
    baselines = fit_baselines(split.train, split.cal, spec, rate)
    metrics = {"model": evaluate_predictions(split.test, spec, predictor.predict(split.test))}
    for base in baselines:
        metrics[base.name] = evaluate_predictions(split.test, spec, base.predict(split.test, spec.request))
        metrics[base.name]["margin_pct"] = base.margin_pct
    metrics["model"]["margin_pct"] = float((np.exp(predictor.offset_log) - 1) * 100)
    counts = {"train": len(split.train), "cal": len(split.cal), "test": len(split.test)}
    return TargetResult(predictor, baselines, metrics, counts, split.test_start)


def evaluate_target(
    table: pd.DataFrame, predictor: Predictor, params: TrainParams, rate: float
) -> TargetResult:
    """Metrics of an existing predictor and freshly fitted baselines on this table's newest slice."""
    spec = TARGETS[predictor.target]
    rows = target_rows(table, spec)
    split = time_split(rows, params.train_frac, params.cal_frac)
    baselines = fit_baselines(split.train, split.cal, spec, rate)
    metrics = {"model": evaluate_predictions(split.test, spec, predictor.predict(split.test))}
    metrics["model"]["margin_pct"] = float((np.exp(predictor.offset_log) - 1) * 100)
    for base in baselines:
        metrics[base.name] = evaluate_predictions(split.test, spec, base.predict(split.test, spec.request))
        metrics[base.name]["margin_pct"] = base.margin_pct
    counts = {"train": len(split.train), "cal": len(split.cal), "test": len(split.test)}
    return TargetResult(predictor, baselines, metrics, counts, split.test_start)
