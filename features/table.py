"""The per-cluster training table: one row per finished job, submit-time features, targets and censoring."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from features.code import CODE_NUMERIC, with_code_features
from features.history import with_history
from features.scripts import SCRIPT_CATEGORICAL, SCRIPT_NUMERIC, with_script_features
from pipelines.units import MIB

# Silver.jobs states whose row says nothing about what the job needed (it never ran to a peak).
UNUSABLE_STATES = frozenset(
    {"PENDING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING", "BOOT_FAIL", "UNKNOWN"}
)


@dataclass(frozen=True)
class TargetSpec:
    """A predicted quantity: its column in the table, the request it is compared with, the weight that
    turns (request - recommendation) into resource-time, the smallest meaningful value, and the step a
    recommendation is rounded up to (0: not rounded), in the target's unit."""

    name: str
    actual: str
    request: str
    weight: str
    unit: str
    floor: float
    step: float = 0.0


TARGETS: dict[str, TargetSpec] = {
    # Memory waste is GiB-seconds: (requested - recommended) x elapsed; recommended in steps of 256 MiB.
    "mem": TargetSpec(
        "mem", "mem_peak_bytes", "mem_req_bytes", "elapsed_s", "bytes", float(MIB), 256.0 * MIB
    ),
    # VRAM per GPU: the peak is one card's, the request the card's size; the waste is (card - recommended)
    # x elapsed x GPUs (`gpu_elapsed_s`). A GPU or MIG slice is picked from it later.
    "vram": TargetSpec("vram", "vram_peak_bytes", "vram_req_bytes", "gpu_elapsed_s", "bytes", float(MIB)),
    # CPUs actually used = total CPU time / elapsed; waste in core-seconds. Whole CPUs are recommended.
    "cpus": TargetSpec("cpus", "cpus_used", "cpus_req", "elapsed_s", "cpus", 0.01, 1.0),
    # Runtime waste is reserved core-seconds: (time limit - recommended) x allocated CPUs; whole minutes.
    "runtime": TargetSpec("runtime", "runtime_s", "runtime_req_s", "cpus_alloc", "s", 1.0, 60.0),
}

# A censored job (OOM, TIMEOUT, saturated CPUs) needed at least its limit; to count as "met" a
# recommendation must exceed the limit by this factor (VPA's OOM bump is max(+100 MiB, x1.2)).
CENSOR_BUMP = {"mem": 1.2, "vram": 1.2, "cpus": 1.0, "runtime": 1.2}
# CPUs count as saturated (a lower bound) when the job used this share of what it had.
CPU_SATURATED_FRAC = 0.98
# Runs that stopped before showing what they needed (they failed, were cancelled, preempted or lost their
# node): their elapsed time and their memory and VRAM peaks are lower bounds, censored without a bump
# (they did not reach a limit). CPUs used is a rate over the run, not a running peak: not censored.
TRUNCATED_STATES = frozenset({"FAILED", "CANCELLED", "PREEMPTED", "NODE_FAIL"})
# The state whose run showed its whole need: metrics are also reported over these jobs alone.
COMPLETED = "COMPLETED"

REQUEST_NUMERIC = (
    "req_cpus_f",
    "req_mem_log",
    "req_mem_per_cpu_log",
    "req_gpus_f",
    "timelimit_log",
    "ntasks_f",
    "submit_hour",
    "submit_dow",
)
# Submit-time only: silver.jobs' `gpu_model` and `nodes` are what the job was allocated, so the requested
# GPU type and node count come from the script's directives (`script_gpu_type`, `script_req_nodes`).
JOB_CATEGORICAL = ("user", "account", "partition", "qos")
HISTORY_GROUPS = {"u": ["user"], "us": ["user", "script_key"]}


def _log(series: pd.Series) -> pd.Series:
    values = series.astype("float64")
    return np.log(values.where(values > 0))


def with_targets(jobs: pd.DataFrame, gpu_mem_bytes: dict[str, float]) -> pd.DataFrame:
    """Jobs plus per-target actual, request and censoring columns (`<target>_censored`, `<target>_required`).

    `gpu_mem_bytes` maps GPU model names to memory per GPU: the VRAM request is one card's memory (else,
    where the map lacks the model, the measured `gpu_card_bytes` when the frame has it), compared with the
    per-GPU peak (`gpu_mem_peak_bytes`, the largest card's), and weighed by elapsed x GPUs."""
    df = jobs.copy()
    elapsed = df["elapsed_s"].astype("float64")
    alloc_cpus = df["alloc_cpus"].astype("float64").fillna(df["req_cpus"].astype("float64"))
    df["cpus_alloc"] = alloc_cpus
    df["mem_peak_bytes"] = df["max_rss_bytes"].astype("float64")
    df["mem_req_bytes"] = (
        df["req_mem_bytes"].astype("float64").fillna(df["alloc_mem_bytes"].astype("float64"))
    )
    df["vram_peak_bytes"] = df["gpu_mem_peak_bytes"].astype("float64")
    per_gpu = df["gpu_model"].map(gpu_mem_bytes).astype("float64")
    if "gpu_card_bytes" in df:  # measured where the conf does not name the model (jobs.io.prediction)
        per_gpu = per_gpu.fillna(df["gpu_card_bytes"].astype("float64"))
    gpus = df["req_gpus"].astype("float64").fillna(df["alloc_gpus"].astype("float64"))
    df["vram_req_bytes"] = per_gpu.where(gpus > 0)
    df["gpu_elapsed_s"] = (elapsed * gpus).where(gpus > 0)
    df["cpus_used"] = (df["total_cpu_s"].astype("float64") / elapsed).where(elapsed > 0)
    df["cpus_req"] = df["req_cpus"].astype("float64").fillna(alloc_cpus)
    df["runtime_s"] = elapsed
    df["runtime_req_s"] = df["timelimit_s"].astype("float64")
    state = df["state"].astype(str)
    at_limit = {
        "mem": state.eq("OUT_OF_MEMORY"),
        "vram": df["vram_peak_bytes"] >= 0.98 * df["vram_req_bytes"],
        "cpus": df["cpus_used"] >= CPU_SATURATED_FRAC * alloc_cpus,
        "runtime": state.eq("TIMEOUT") | (elapsed >= df["runtime_req_s"]),
    }
    truncated = state.isin(TRUNCATED_STATES)
    limits = {
        "mem": "mem_req_bytes",
        "vram": "vram_req_bytes",
        "cpus": "cpus_alloc",
        "runtime": "runtime_req_s",
    }
    for name, spec in TARGETS.items():
        actual = df[spec.actual].clip(lower=spec.floor)
        is_censored = at_limit[name].fillna(False) & df[limits[name]].notna()
        # The lower bound a censored job is known to have needed: what it had, or what it reached.
        bound = np.fmax(actual, df[limits[name]])
        df[spec.actual] = actual.where(~is_censored, bound)
        # A run cut short needed at least what it reached: a lower bound, but with no limit to bump.
        cut_short = truncated & ~is_censored & (name != "cpus")
        df[f"{name}_censored"] = (is_censored | cut_short) & df[spec.actual].notna()
        df[f"{name}_required"] = df[spec.actual] * np.where(is_censored, CENSOR_BUMP[name], 1.0)
    df["is_completed"] = state.eq(COMPLETED)
    return df


def with_request_features(jobs: pd.DataFrame) -> pd.DataFrame:
    """Jobs plus numeric request and calendar features (log scale for sizes; hour and weekday, UTC)."""
    df = jobs.copy()
    df["req_cpus_f"] = df["req_cpus"].astype("float64")
    df["req_mem_log"] = _log(df["req_mem_bytes"])
    df["req_mem_per_cpu_log"] = _log(df["req_mem_bytes"].astype("float64") / df["req_cpus"].astype("float64"))
    df["req_gpus_f"] = df["req_gpus"].astype("float64")
    df["timelimit_log"] = _log(df["timelimit_s"])
    df["nodes_f"] = df["nodes"].astype("float64")
    df["ntasks_f"] = df["ntasks"].astype("float64")
    submit = pd.to_datetime(df["submit_ts"])
    df["submit_hour"] = submit.dt.hour.astype("float64")
    df["submit_dow"] = submit.dt.dayofweek.astype("float64")
    return df


def request_values(job: Mapping[str, object]) -> dict[str, float]:
    """One job's request and calendar features, as `with_request_features` computes them for a frame
    (the request path's engine: a submit hook's query is one row)."""
    cpus, mem = _float(job.get("req_cpus")), _float(job.get("req_mem_bytes"))
    submit = pd.Timestamp(job["submit_ts"])  # type: ignore[arg-type]
    with np.errstate(divide="ignore", invalid="ignore"):  # as pandas divides: x/0 is inf, 0/0 NaN
        per_cpu = float(np.float64(mem) / np.float64(cpus))
    return {
        "req_cpus_f": cpus,
        "req_mem_log": _log_one(mem),
        "req_mem_per_cpu_log": _log_one(per_cpu),
        "req_gpus_f": _float(job.get("req_gpus")),
        "timelimit_log": _log_one(_float(job.get("timelimit_s"))),
        "nodes_f": _float(job.get("nodes")),
        "ntasks_f": _float(job.get("ntasks")),
        "submit_hour": float(submit.hour),
        "submit_dow": float(submit.dayofweek),
    }


def _float(value: object) -> float:
    """A value as float64 (NaN for None, NA and NaN)."""
    return math.nan if value is None or value is pd.NA else float(value)  # type: ignore[arg-type]


def _log_one(value: float) -> float:
    return float(np.log(np.float64(value))) if value > 0 else math.nan


def filter_usable(jobs: pd.DataFrame) -> pd.DataFrame:
    """Jobs that ran and finished, with submit and end times: what history and training can use."""
    keep = (
        jobs["submit_ts"].notna()
        & jobs["end_ts"].notna()
        & jobs["elapsed_s"].fillna(0).gt(0)
        & ~jobs["state"].isin(UNUSABLE_STATES)
    )
    return jobs[keep].reset_index(drop=True)


def with_script_key(jobs: pd.DataFrame) -> pd.DataFrame:
    """Jobs plus `script_key`: the script hash, else the job name (SWF logs: the executable number)."""
    df = jobs.copy()
    df["script_key"] = df["script_hash"].fillna(df["job_name"]).fillna("")
    return df


def history_value_columns() -> list[str]:
    """The values summarised in history features: each target's actual and its ratio to the request."""
    return [f"{t}_hist" for t in TARGETS] + [f"{t}_ratio" for t in TARGETS]


def with_history_values(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for name, spec in TARGETS.items():
        # A job without this measurement (or request) is left out of the value's statistics
        # (features.history); its count still matters.
        out[f"{name}_hist"] = out[spec.actual].clip(lower=spec.floor)
        ratio = out[spec.actual] / out[spec.request]
        out[f"{name}_ratio"] = ratio.where(ratio > 0)
    return out


def history_features(history: pd.DataFrame, queries: pd.DataFrame) -> pd.DataFrame:
    """Queries plus user (`u_*`) and (user, script) (`us_*`) history as of each query's submit time.

    `history` is a frame from `with_targets` + `with_script_key` (finished jobs); queries need
    `submit_ts`, `user` and `script_key`. Only jobs that ended before a query's submit time count."""
    values = with_history_values(history)
    out = queries
    for prefix, keys in HISTORY_GROUPS.items():
        out = with_history(values, out, keys, history_value_columns(), prefix)
    return out


def history_feature_columns() -> list[str]:
    """Names of the history feature columns produced by `history_features`."""
    cols = []
    for prefix in HISTORY_GROUPS:
        cols += [f"{prefix}_n", f"{prefix}_since_s"]
        for value in history_value_columns():
            cols += [f"{prefix}_{value}_{s}" for s in ("last", "last2", "p50", "p90", "p95", "max", "trend")]
    return cols


def base_feature_columns() -> tuple[list[str], list[str]]:
    """(numeric, categorical) submit-time feature names before the text embedding."""
    numeric = [*REQUEST_NUMERIC, *SCRIPT_NUMERIC, *CODE_NUMERIC, *history_feature_columns()]
    categorical = [*JOB_CATEGORICAL, *SCRIPT_CATEGORICAL]
    return numeric, categorical


def build_training_table(
    jobs: pd.DataFrame,
    scripts: pd.DataFrame,
    gpu_mem_bytes: dict[str, float],
    job_sources: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per finished job of a cluster, sorted by submit time: submit-time features, history as of
    submit, and per-target actual/request/censored/required columns. Pure: frames in, frame out.

    `jobs` has silver.jobs columns (plus `script_hash` filled from silver.job_scripts where linked);
    `scripts` has silver.scripts columns; `job_sources` (job_id, path, text: silver.job_sources with each
    file's text) the files the jobs' entry points read, for the code-aware features (features.code)."""
    # One order whatever order the rows were read in (Spark's is not fixed): jobs of a user ending in the
    # same second are folded into the running history in this order, which the features then depend on.
    df = filter_usable(jobs).sort_values(["submit_ts", "job_id"], kind="mergesort").reset_index(drop=True)
    df = with_script_key(with_targets(df, gpu_mem_bytes))
    df = with_request_features(with_script_features(df, scripts))
    df = with_code_features(df, scripts, job_sources)
    df = history_features(df, df)
    return df.sort_values(["submit_ts", "job_id"], kind="mergesort").reset_index(drop=True)


def history_snapshot_columns() -> list[str]:
    """The columns of a training table that `history_features` needs as `history` (user, script key, end
    time, each target's actual and request) and the user's latest account and QOS (a query that states
    none gets them, as its training rows had them): what a recommendation reads instead of silver.jobs."""
    cols = ["user", "script_key", "end_ts", "account", "qos"]
    for spec in TARGETS.values():
        cols += [spec.actual, spec.request]
    return cols
