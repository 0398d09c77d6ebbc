"""train → evaluate → recommend through the CLI on a Delta warehouse and a tmp MLflow sqlite store."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from mlflow import MlflowClient

from conf import load_cluster
from jobs.context import Context
from jobs.io.tables import table_path
from models.recommend import choose_gpu, format_mem, format_time
from pipelines.schemas import SILVER_JOBS, SILVER_SCRIPTS
from tests.conftest import CliResult
from tests.predict_data import synthetic_cluster

NEW_SCRIPT = """#!/bin/bash
#SBATCH --job-name=brand-new
#SBATCH --cpus-per-task=16
#SBATCH --mem=64G
#SBATCH --gres=gpu:1
#SBATCH --time=12:00:00
module load pytorch
srun python finetune.py --model net-7b --batch-size 16 --data /scratch/u1/other
"""


def _write_silver(ctx: Context, jobs: pd.DataFrame, scripts: pd.DataFrame) -> None:
    """Write the frames as silver.jobs / silver.scripts (a plain Delta write: test setup, not ingest)."""
    for spec, frame in ((SILVER_JOBS, jobs.copy()), (SILVER_SCRIPTS, scripts.copy())):
        frame["ingested_at"] = pd.Timestamp("2026-04-01")
        frame["is_final"] = True
        for field in spec.schema.fields:
            if field.name not in frame:
                frame[field.name] = None
        frame = frame[[f.name for f in spec.schema.fields]].astype(object).where(frame.notna(), None)
        df = ctx.spark.createDataFrame(frame, schema=spec.schema)
        df.write.format("delta").mode("overwrite").save(table_path(ctx.settings, spec.name))


@pytest.mark.slow
def test_train_evaluate_recommend_round_trip(
    make_ctx: Callable[..., Context], jobfit: Callable[..., CliResult], tmp_path: Path
) -> None:
    jobs, scripts = synthetic_cluster(1500, n_users=12, seed=5)
    _write_silver(make_ctx(), jobs, scripts)

    # v1: a one-round model becomes champion (there is none yet).
    first = jobfit("train", "--cluster", "demo", "--rounds", "1", "--targets", "mem,runtime,vram", "--json")
    assert first.code == 0, first.err
    report = json.loads(first.out)
    assert report["targets"]["mem"]["promoted"] and report["targets"]["mem"]["version"] == "1"
    assert set(report["targets"]["mem"]["metrics"]) >= {"model", "request", "last2", "user_p95_tuned"}
    # v2: the very same model does not beat the champion (a tie keeps it).
    second = json.loads(
        jobfit("train", "--cluster", "demo", "--rounds", "1", "--targets", "mem", "--json").out
    )
    assert second["targets"]["mem"]["version"] == "2" and not second["targets"]["mem"]["promoted"]
    # v3: a real model reclaims more at the same rate and takes the alias.
    third = json.loads(
        jobfit("train", "--cluster", "demo", "--rounds", "40", "--targets", "mem", "--json").out
    )
    assert third["targets"]["mem"]["version"] == "3" and third["targets"]["mem"]["promoted"], third

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert str(client.get_model_version_by_alias("jobfit-demo-mem", "champion").version) == "3"
    assert str(client.get_model_version_by_alias("jobfit-demo-runtime", "champion").version) == "1"
    run = client.get_run(client.get_model_version("jobfit-demo-mem", "3").run_id)
    assert run.data.params["num_boost_round"] == "40" and "model.under_rate" in run.data.metrics
    features = json.loads(Path(client.download_artifacts(run.info.run_id, "features.json")).read_text())
    assert "u_mem_hist_p95" in features["features"] and "emb_0" in features["features"]

    evaluated = jobfit("evaluate", "--cluster", "demo", "--json")
    assert evaluated.code == 0, evaluated.err
    ev = json.loads(evaluated.out)
    assert ev["targets"]["mem"]["version"] == "3"
    assert set(ev["targets"]["mem"]["predictors"]) == {
        "model",
        "request",
        "last2",
        "last2_tuned",
        "user_p90_vpa",
        "user_p95_tuned",
        "user_script_p95_tuned",
    }
    assert "cpus" in ev["missing"]
    mem_ev = ev["targets"]["mem"]
    # The gain is stated only for a model within the rate, else null with why; net beside gross.
    assert (mem_ev["gain_pct"] is None) == (not mem_ev["model_within_rate"] or mem_ev["gain_why"] is not None)
    model = mem_ev["predictors"]["model"]
    assert model["net_reclaimed_h"] == pytest.approx(model["reclaimed_h"] - model["miss_cost_h"])
    assert model["completed"]["n"] <= model["n"] and "under_rate_weighted" in model
    text = jobfit("evaluate", "--cluster", "demo").out
    assert "user_script_p95_tuned" in text and "net" in text and "within the rate" in text

    # A script never seen before, by a user with history: an answer from the champions.
    script = tmp_path / "new.sbatch"
    script.write_text(NEW_SCRIPT)
    rec = jobfit("recommend", str(script), "--cluster", "demo", "--user", "u1", "--json")
    assert rec.code == 0, rec.err
    answer = json.loads(rec.out)
    assert answer["status"] == "ok" and answer["script_runs"] == 0 and answer["history_jobs"] >= 3
    assert answer["targets"]["mem"]["status"] == "ok" and answer["targets"]["mem"]["model_version"] == "3"
    assert answer["targets"]["mem"]["requested_bytes"] == 64 * 2**30
    assert any(f.startswith("--mem=") for f in answer["flags"])
    assert any(f.startswith("--time=") for f in answer["flags"])
    assert any(f.startswith("--gres=gpu:") for f in answer["flags"])
    assert answer["targets"]["cpus"]["status"] == "no_model"
    assert answer["expected_saving"]["usd"] is not None
    # Memory comes in 256 MiB steps (or is the request itself).
    mem = answer["targets"]["mem"]["recommended_bytes"]
    assert mem % 2**28 == 0 or mem == 64 * 2**30
    # The history came from the snapshot the last train logged; --fresh-history reads silver.jobs and
    # sees the same jobs (nothing was ingested since).
    assert answer["history_source"]["source"] == "snapshot" and answer["history_source"]["run_id"]
    fresh = json.loads(
        jobfit("recommend", str(script), "--cluster", "demo", "--user", "u1", "--fresh-history", "--json").out
    )
    assert fresh["history_source"]["source"] == "silver.jobs"
    assert (fresh["history_jobs"], fresh["flags"]) == (answer["history_jobs"], answer["flags"])

    # A user with no history: "not enough history", and why.
    nobody = json.loads(
        jobfit("recommend", str(script), "--cluster", "demo", "--user", "nobody", "--json").out
    )
    assert nobody["status"] == "not_enough_history" and "0 finished job" in nobody["why"]
    assert nobody["flags"] == []

    # Bad input: one line, exit 2.
    missing = jobfit("recommend", str(tmp_path / "nope.sh"), "--cluster", "demo", "--user", "u1")
    assert missing.code == 2 and missing.err.strip().count("\n") == 0 and "no such script" in missing.err
    assert jobfit("evaluate", "--cluster", "elsewhere").code == 2


def test_flag_formatting_and_gpu_choice() -> None:
    # Recommendations come in 256 MiB steps: whole GiB print as G, the rest in MiB.
    assert format_mem(13 * 2**30) == "13G" and format_mem(12.25 * 2**30) == "12544M"
    assert format_mem(300 * 2**20) == "300M" and format_mem(300.5 * 2**20) == "301M"
    assert format_time(59) == "00:01:00" and format_time(90061) == "1-01:02:00"
    demo = load_cluster("demo")
    # Cheapest slice that holds it (demo prices; a profile's size is its name's GB, 1g.10gb = 10e9 bytes =
    # 9.31 GiB, as waste.py reads it): 9 GiB -> A100-80GB 1g.10gb (2.95/7 $/h beats the
    # A100-40GB 2g.10gb at 2 x 2.20/7); 35 GiB -> A100-80GB 3g.40gb (1.26 $/h < L40S 1.40); 100 GiB: none.
    assert choose_gpu(9 * 2**30, demo) == {
        "gpu_model": "A100-SXM4-80GB",
        "mig_profile": "1g.10gb",
        "memory_gib": 9.31,
    }
    assert choose_gpu(35 * 2**30, demo) == {
        "gpu_model": "A100-SXM4-80GB",
        "mig_profile": "3g.40gb",
        "memory_gib": 37.25,
    }
    assert choose_gpu(100 * 2**30, demo) is None
    assert choose_gpu(1.0, None) is None
