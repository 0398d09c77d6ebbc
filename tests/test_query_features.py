"""The request path's engine (features/query.py, a OneRow) equals the frame engine (features/table.py,
pandas) that trained the models: same features, same booster input, same recommendation, for queries of
real jobs (the SDSC-SP2 log of the Parallel Workloads Archive) and of simulated scripts with GPUs, whether
the query comes after the whole history (a submit hook's case) or in the middle of it (the exact path)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf import load_cluster
from features.query import history_index, query_features
from features.table import (
    TARGETS,
    build_training_table,
    history_feature_columns,
    history_snapshot_columns,
)
from jobs.io.prediction import gpu_memory_bytes
from jobs.stages.ingest.common import read_source_file
from models.recommend import query_row, query_values, with_query_features
from models.train import OneRow, Predictor, TrainParams, _fit_predictor, calibrate, time_split
from pipelines.silver.scripts import ScriptInfo, parse_script
from pipelines.silver.swf import parse_swf, parse_swf_header
from tests.predict_data import synthetic_cluster

SWF = "SDSC-SP2-1998-4.2-cln.swf.gz"
PARAMS = TrainParams(num_boost_round=15)
SCRIPT_COLUMNS = [f.name for f in ScriptInfo.__dataclass_fields__.values()]


def _predictors(table: pd.DataFrame) -> list[Predictor]:
    """Per target that has enough rows: a quantile predictor scaled by history, and (where jobs state a
    request) a levels predictor with its companion, each calibrated: every prediction path."""
    out = []
    for spec in TARGETS.values():
        rows = table[table[spec.actual].notna() & table[f"{spec.name}_required"].gt(0)]
        if len(rows) < 300:
            continue
        split = time_split(rows, PARAMS.train_frac, PARAMS.cal_frac)
        quantile = _fit_predictor(split.train, spec, replace(PARAMS, quantile=0.9), 0.02)
        quantile = replace(quantile, spread="history", params=replace(quantile.params, spread="history"))
        calibrate(quantile, split.cal, spec, 0.02, PARAMS.confidence)
        out.append(quantile)
        if split.train[spec.request].notna().mean() >= 0.5:
            levels = _fit_predictor(split.train, spec, PARAMS, 0.02, levels=True)
            levels.companion = quantile
            calibrate(levels, split.cal, spec, 0.02, PARAMS.confidence)
            out.append(levels)
    return out


def _compare(
    table: pd.DataFrame,
    queries: list[tuple[object, str, pd.Timestamp]],
    scripts: pd.DataFrame,
    gpu_mem: dict[str, float],
) -> int:
    """Assert both engines agree on every query; returns how many predictions were compared."""
    history = table[history_snapshot_columns()]
    index = history_index(history)
    by_hash = {row["script_hash"]: row for row in scripts.to_dict("records")}
    predictors = _predictors(table)
    assert {p.kind for p in predictors} == {"quantile", "levels"}
    compared = 0
    for info, user, submit in queries:
        table_row = with_query_features(query_row(info, user, submit, gpu_mem), scripts, history)
        frame = table_row.iloc[0]
        values = query_features(
            query_values(info, user, submit, gpu_mem),
            by_hash.get(info.script_hash),  # type: ignore[attr-defined]
            index,
        )
        for col in history_feature_columns():
            assert values[col] == pytest.approx(frame[col], rel=1e-12, nan_ok=True), col
        assert values["script_text"] == frame["script_text"]
        for predictor in predictors:
            one = OneRow(values)
            np.testing.assert_allclose(
                predictor.matrix(one), predictor.matrix(table_row), rtol=1e-12, atol=0, equal_nan=True
            )
            expected = predictor.predict(table_row)
            assert predictor.predict(one) == pytest.approx(expected, rel=1e-12), predictor.variant
            compared += 1
    return compared


@pytest.fixture(scope="module")
def sdsc(spark: SparkSession, real_data: Path) -> pd.DataFrame:
    """The first 3,000 jobs of the real SDSC-SP2 log as a training table (no scripts: the job name,
    i.e. the executable number, is the script key)."""
    path = real_data / "swf" / SWF
    header = parse_swf_header(read_source_file(str(path)).lines[:200])
    bronze = spark.read.text(str(path)).select(
        F.lit("sdsc").alias("cluster"),
        F.lit(str(path)).alias("source_file"),
        F.lit("").alias("file_sha256"),
        F.monotonically_increasing_id().alias("line_no"),
        F.col("value").alias("raw"),
        F.current_timestamp().alias("ingested_at"),
    )
    rows, _ = parse_swf(bronze, {str(path): header})
    jobs = rows.orderBy("submit_ts", "job_id").limit(3000).toPandas()
    jobs["script_hash"] = None
    return build_training_table(jobs, pd.DataFrame(columns=SCRIPT_COLUMNS), {})


def test_engines_agree_on_real_jobs(sdsc: pd.DataFrame) -> None:
    rng = np.random.default_rng(3)
    picks = sdsc.iloc[rng.choice(len(sdsc), 40, replace=False)]
    after = sdsc["end_ts"].max() + pd.Timedelta(hours=1)
    queries = []
    for job in picks.itertuples():
        info = SimpleNamespace(
            script_hash=job.script_key,
            req_cpus_per_task=job.req_cpus,
            req_ntasks=None,
            req_nodes=None,
            req_mem_bytes=None if pd.isna(job.req_mem_bytes) else job.req_mem_bytes,
            req_gpus=None,
            gpu_type=None,
            timelimit_s=None if pd.isna(job.timelimit_s) else job.timelimit_s,
            partition=job.partition,
            directives_json=None,
        )
        queries += [(info, job.user, after), (info, job.user, job.submit_ts)]
    queries.append((queries[0][0], "nobody-here", after))
    assert _compare(sdsc, queries, pd.DataFrame(columns=SCRIPT_COLUMNS), {}) > 100


def test_engines_agree_on_scripts_with_gpus() -> None:
    jobs, scripts = synthetic_cluster(1500, n_users=12, seed=5)
    gpu_mem = gpu_memory_bytes(load_cluster("demo"))
    table = build_training_table(jobs, scripts, gpu_mem)
    after = table["end_ts"].max() + pd.Timedelta(minutes=5)
    texts = dict(zip(scripts["script_hash"], scripts["text"], strict=True))
    rng = np.random.default_rng(4)
    queries = []
    for job in table.iloc[rng.choice(len(table), 25, replace=False)].itertuples():
        info = parse_script(texts[job.script_hash])
        queries += [(info, job.user, after), (info, job.user, job.submit_ts)]
        # A submit hook's override (other CPUs, memory, GPU type) and a script never seen before.
        queries.append(
            (replace(info, req_cpus_per_task=3, req_mem_bytes=5 * 2**30, gpu_type="a100"), job.user, after)
        )
    new = parse_script("#!/bin/bash\n#SBATCH --mem=4G\n#SBATCH --gres=gpu:2\npython new.py --batch-size 8\n")
    queries.append((new, "u1", after))
    assert _compare(table, queries, pd.concat([scripts, pd.DataFrame([new.as_row()])]), gpu_mem) > 100
