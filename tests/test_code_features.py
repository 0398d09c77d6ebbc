"""The code-aware model inputs (features.code): one value per job whichever engine computes it — the frame of
finished jobs at training, the `code_estimate` payload at submit time — on every LitGPT measurement row
written as the job script a user would submit (tests/data/real/vram/), and the VRAM-only baselines."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.code import CODE_NUMERIC, code_values, payload_values, with_code_features
from features.table import TARGETS
from models.baselines import baselines_for, fit_baselines
from models.serving.code import code_estimate
from models.vram_eval import job_script, read_rows, usable
from pipelines.silver.scripts import parse_script, script_hash
from pipelines.units import GIB

CARDS = {"A10G": 23028 * 2**20, "A100-SXM4-40GB": 40 * GIB}


@pytest.fixture(scope="module")
def written(real_data: Path) -> list[tuple[str, dict[str, str], str]]:
    """(job script, the files it names, row id) for every usable LitGPT row."""
    root = real_data / "vram"
    rows = read_rows((root / "rows.tsv").read_text(encoding="utf-8"))
    out = []
    for row in usable(rows):
        config = (root / row["config_path"]).read_text() if row["config_path"] else None
        script, sources = job_script(row, config)
        out.append((script, sources, row["id"]))
    return out


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    return all((math.isnan(a[k]) and math.isnan(b[k])) or a[k] == b[k] for k in CODE_NUMERIC)


def test_training_and_serving_read_the_same_inputs_from_every_real_row(written: list) -> None:
    known = 0
    for script, sources, row_id in written:
        info = parse_script(script)
        served = payload_values(code_estimate(script, sources, info, CARDS))
        trained = code_values(script, sources, info.req_gpus)
        assert _same(served, trained), row_id
        known += math.isfinite(trained["code_vram_est_log"])
    assert known == len(written)  # every row's model is one the estimate knows
    # Without its config a row may lose the model; both engines then say NaN alike.
    for script, _, row_id in written:
        info = parse_script(script)
        assert _same(
            payload_values(code_estimate(script, {}, info, CARDS)), code_values(script, {}, info.req_gpus)
        ), row_id


def test_code_that_cannot_be_read_gives_no_value_and_no_error() -> None:
    nothing = dict.fromkeys(CODE_NUMERIC, math.nan)
    for script in (
        None,
        "",
        "#!/bin/bash\nsrun ./a.out\n",
        "#!/bin/bash\npython train.py --model gpt9-unknown\n",
    ):
        assert _same(code_values(script, {}, 1), nothing)
        assert _same(payload_values(code_estimate(script, {}, parse_script(script or ""), CARDS)), nothing)
    broken = {"cfg.yaml": "a: [1, 2\n  b: }"}  # not YAML
    assert _same(code_values("litgpt finetune_lora --config cfg.yaml\n", broken, 1), nothing)


def test_the_frame_engine_reads_each_job_with_its_own_files(written: list) -> None:
    (script, sources, _), (other, other_sources, _) = written[0], written[-1]
    scripts = pd.DataFrame(
        {"script_hash": [script_hash(script), script_hash(other)], "text": [script, other]}
    )
    files = [("1", p, t) for p, t in sources.items()] + [("3", p, t) for p, t in other_sources.items()]
    jobs = pd.DataFrame(
        {
            "job_id": ["1", "2", "3", "4"],
            "script_hash": [script_hash(script), script_hash(script), script_hash(other), None],
            "req_gpus": [1.0, 1.0, np.nan, 2.0],
        }
    )
    table = with_code_features(jobs, scripts, pd.DataFrame(files, columns=["job_id", "path", "text"]))
    for i, (text, named, gpus) in enumerate(
        [(script, sources, 1), (script, {}, 1), (other, other_sources, None), (None, {}, 2)]
    ):
        expected = code_values(text, named, gpus)
        assert _same({k: float(table[k].iloc[i]) for k in CODE_NUMERIC}, expected), i
    assert np.isfinite(table["code_vram_est_log"].iloc[0]) and np.isnan(table["code_vram_est_log"].iloc[3])
    # No job kept files and no script text: the columns are there, all NaN.
    bare = with_code_features(jobs, pd.DataFrame(columns=["script_hash"]), None)
    assert bare[list(CODE_NUMERIC)].isna().all().all()


def _vram_slice(n: int, est_gib: float | None, need_gib: float) -> pd.DataFrame:
    spec = TARGETS["vram"]
    submit = pd.date_range("2026-01-01", periods=n, freq="h")
    frame = pd.DataFrame(
        {
            "submit_ts": submit,
            spec.request: 40 * GIB,
            spec.actual: need_gib * GIB,
            f"{spec.name}_required": need_gib * GIB,
            "code_vram_est_log": math.log(est_gib * GIB) if est_gib else math.nan,
        }
    )
    for col in ("u_vram_hist_last2", "u_vram_hist_p90", "u_vram_hist_p95", "us_vram_hist_p95"):
        frame[col] = math.nan
    return frame


def test_vram_alone_is_scored_against_the_code_estimate() -> None:
    rate = 0.05
    train, cal = _vram_slice(50, 10.0, 12.0), _vram_slice(60, 10.0, 12.0)
    fitted = {b.name: b for b in fit_baselines(train, cal, TARGETS["vram"], rate)}
    assert {"code_estimate", "code_estimate_tuned"} <= set(fitted)
    tuned = fitted["code_estimate_tuned"]
    assert tuned.tuned and not fitted["code_estimate"].tuned
    # The estimate is 2 GiB short: the tuned margin lifts it to the need, the fixed +15 % does not.
    assert (tuned.predict(cal, TARGETS["vram"].request) >= 12.0 * GIB).mean() >= 1 - rate
    assert (fitted["code_estimate"].predict(cal, TARGETS["vram"].request) < 12.0 * GIB).all()
    # Without a read estimate a job gets its request, as every baseline gives a job without history.
    unread = _vram_slice(3, None, 12.0)
    assert (tuned.predict(unread, TARGETS["vram"].request) == 40 * GIB).all()
    # Memory, CPUs and runtime are not scored against a GPU-memory estimate.
    for target in ("mem", "cpus", "runtime"):
        assert not {"code_estimate", "code_estimate_tuned"} & set(baselines_for(target))


def test_a_cluster_of_held_out_litgpt_jobs_carries_its_estimate_into_the_feature_table(
    real_data: Path,
) -> None:
    from features.table import build_training_table
    from models.vram_eval import litgpt_cluster, split

    root = real_data / "vram"
    rows = read_rows((root / "rows.tsv").read_text(encoding="utf-8"))
    configs = {r["config_path"]: (root / r["config_path"]).read_text() for r in rows if r["config_path"]}
    _, held = split(usable(rows))
    cluster = litgpt_cluster(held, configs, n_users=6, jobs_per_user=30, seed=3)
    table = build_training_table(cluster.jobs, cluster.scripts, cluster.gpu_mem_bytes, cluster.job_sources)
    assert len(table) == 180 and table["code_vram_est_log"].notna().all()
    # Runs that ran out of memory are lower bounds at their card; the others' needs follow the estimate.
    failed = table["state"].eq("FAILED")
    assert table.loc[failed, "vram_censored"].all() and failed.any()
    ran = table[~failed & ~table["vram_censored"]]
    rho = ran["code_vram_est_log"].corr(np.log(ran["vram_peak_bytes"]), method="spearman")
    assert rho > 0.8, rho
