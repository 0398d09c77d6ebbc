"""The code-aware estimate in the answers: `/v1/recommend` on the real server (the fixtures of
tests/test_serve.py) and `jobfit recommend` say before the job runs that it will not fit, and what would."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.commands.recommend import _text, recommend
from jobs.context import Context
from tests.test_serve import Server, _post, server, store  # noqa: F401  (module-scoped fixtures)

CONFIG = """checkpoint_dir: checkpoints/mistralai/Mistral-7B-v0.1
precision: bf16-true
devices: 1
train:
  micro_batch_size: 8
  max_seq_length: 2048
lora_r: 8
"""
SCRIPT = """#!/bin/bash
#SBATCH --job-name=mistral-lora
#SBATCH --gres=gpu:V100-SXM2-32GB:1
#SBATCH --mem=64G
#SBATCH --time=08:00:00
srun litgpt finetune_lora --config lora.yaml
"""


@pytest.mark.slow  # shares tests/test_serve.py's trained store and started server
def test_recommend_says_it_will_not_fit_before_the_job_runs(server: Server, tmp_path: Path) -> None:  # noqa: F811
    body = {"cluster": "demo", "user": "u1", "script": SCRIPT, "sources": {"lora.yaml": CONFIG}}
    answer = _post(server, body).json()
    assert answer["status"] == "ok"
    code = answer["code_estimate"]
    assert code["status"] == "ok" and code["architecture"] == "mistral-7b"
    assert code["fits"] is False and code["gpu_model"] == "V100-SXM2-32GB"
    assert code["peak_vram_bytes"] > code["gpu_mem_bytes"] == 32 * 2**30
    assert set(code["terms"]) >= {"weights", "gradients", "optimizer", "activations", "context"}
    kinds = {c["change"] for c in code["changes_that_fit"]}
    assert "micro_batch" in kinds and "gradient_checkpointing" in kinds
    # The same verdict from `jobfit recommend` (in process), printed for a person.
    ctx = Context(environ={"JOBFIT_MLFLOW__TRACKING_URI": server.store.tracking_uri}, quiet=True)
    local = recommend(ctx, SCRIPT, "demo", "u1", sources={"lora.yaml": CONFIG})
    assert local["code_estimate"]["fits"] is False  # type: ignore[index]
    assert local["code_estimate"]["peak_vram_bytes"] == code["peak_vram_bytes"]  # type: ignore[index]
    assert "WILL NOT FIT one V100-SXM2-32GB" in _text(local)
    # No history: the VRAM target comes from the code alone, with its margin and a note.
    fresh = _post(server, {**body, "user": "nobody"}).json()
    assert fresh["status"] == "not_enough_history"
    vram = fresh["targets"]["vram"]
    assert vram["status"] == "code_estimate" and "margin" in vram["why"] and vram["fits_requested"] is False
    assert vram["recommended_bytes"] > fresh["code_estimate"]["peak_vram_bytes"]
    # Over 80 GB per GPU: no card of the demo cluster holds it, so no --gres that would only repeat the ask.
    assert vram["gpu"] is None and "flag" not in vram and fresh["flags"] == []
    assert "no GPU of this cluster holds it" in vram["why"]
    # Config not sent: the model is unknown, the history answer stands and says why.
    unread = _post(server, {**body, "sources": None}).json()
    assert unread["status"] == "ok" and unread["code_estimate"]["status"] == "unknown_model"
    assert "lora.yaml named but not read" in unread["code_estimate"]["why"]
    # Oversized or too many sources are refused with one line (bounded sizes).
    too_many = _post(server, {**body, "sources": {f"f{i}.yaml": "k: 1" for i in range(9)}})
    assert too_many.status_code == 422 and "sources" in too_many.json()["error"]
