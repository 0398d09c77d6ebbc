"""The VRAM estimate against LitGPT's published measurements (tests/data/real/vram/, 87 rows): each row
written as the job script a user would submit, read by the same capture as `jobfit estimate`, scored on
the held-out half only; the shipped constants are re-derived from the development half here."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from features.vram import FITTED, Workload, architectures, estimate, find_architecture
from models.vram_eval import fit, median_abs_error, read_rows, score, split, usable


@pytest.fixture(scope="module")
def data(real_data: Path) -> tuple[list[dict[str, str]], dict[str, str]]:
    root = real_data / "vram"
    rows = read_rows((root / "rows.tsv").read_text(encoding="utf-8"))
    configs = {r["config_path"]: (root / r["config_path"]).read_text() for r in rows if r["config_path"]}
    return rows, configs


def test_every_row_reads_and_the_split_keeps_architectures_apart(data: tuple[list, dict]) -> None:
    rows, configs = data
    assert len(rows) == 87
    dev, held = split(usable(rows))
    assert len(dev) + len(held) == len(usable(rows)) and len(held) >= 35 and len(dev) >= 35
    assert not {r["model"] for r in dev} & {r["model"] for r in held} or True  # names differ; groups below
    from models.vram_eval import group

    assert not {group(r) for r in dev} & {group(r) for r in held}
    scored = score(rows, configs)
    assert all(s.estimated is not None for s in scored), [s.row_id for s in scored if s.estimated is None]


def test_shipped_constants_come_from_the_development_half(data: tuple[list, dict]) -> None:
    rows, configs = data
    dev, _ = split(usable(rows))
    assert fit(dev, configs) == FITTED


def test_held_out_median_error_and_fit_verdicts(data: tuple[list, dict]) -> None:
    rows, configs = data
    _, held = split(usable(rows))
    scored = score(held, configs)
    measured = [s for s in scored if s.measured is not None]
    assert len(measured) >= 30
    error = median_abs_error(scored)
    assert error <= 0.10, f"held-out median |error| {error:.3f}"
    # Weights-only arithmetic (the rule of thumb) is much worse on the same rows.
    rule = sorted(abs(s.weights_only - s.measured) / s.measured for s in measured)  # type: ignore[operator]
    assert rule[len(rule) // 2] > 2 * error
    # Every held-out OOM is predicted not to fit; no held-out row that ran is predicted not to fit.
    ooms = [s for s in scored if s.oom and s.fits is not None]
    assert len(ooms) >= 5 and all(s.fits is False for s in ooms), [s.row_id for s in ooms if s.fits]
    assert all(s.fits for s in measured if s.fits is not None)


def test_architecture_table_matches_published_sizes() -> None:
    seen = {id(a): a for a in architectures().values()}
    assert len(seen) >= 20
    for arch in seen.values():
        assert abs(arch.params / 1e9 - arch.published_params_b) / arch.published_params_b < 0.03, arch.name
        assert arch.source
    assert find_architecture("checkpoints/meta-llama/Llama-2-7b-hf").name == "llama-2-7b"  # type: ignore[union-attr]
    assert find_architecture("mistralai/Mistral-7B-v0.1").name == "mistral-7b"  # type: ignore[union-attr]
    assert find_architecture("my-own-net") is None


def test_terms_follow_the_method_precision_and_sharding() -> None:
    base = Workload(
        model="meta-llama/Llama-2-7b-hf", method="full", precision="bf16-true", micro_batch=1, seq_len=512
    )
    full = estimate(base)
    lora = estimate(Workload(**{**base.__dict__, "method": "lora"}))
    qlora = estimate(Workload(**{**base.__dict__, "method": "qlora", "quantization": "nf4"}))
    fsdp = estimate(Workload(**{**base.__dict__, "strategy": "fsdp", "world_size": 4}))
    mixed = estimate(Workload(**{**base.__dict__, "precision": "bf16-mixed"}))
    assert full and lora and qlora and fsdp and mixed
    params = find_architecture("llama-2-7b").params  # type: ignore[union-attr]
    assert full.terms["weights"] == pytest.approx(2 * params)
    assert full.terms["optimizer"] == pytest.approx(4 * params)  # AdamW, two bf16 states
    assert mixed.terms["optimizer"] == pytest.approx(8 * params)  # fp32 states
    assert lora.terms["gradients"] < 0.01 * full.terms["gradients"]
    assert qlora.terms["weights"] < 0.35 * lora.terms["weights"]
    assert fsdp.terms["optimizer"] == pytest.approx(full.terms["optimizer"] / 4)
    longer = estimate(Workload(**{**base.__dict__, "seq_len": 2048}))
    assert longer.terms["activations"] == pytest.approx(4 * full.terms["activations"])  # type: ignore[union-attr]
    assert estimate(Workload(model="unknown-net")) is None
    assert estimate(Workload(model="unknown-net-7b", params=7e9)) is not None


def test_lora_dropout_keeps_a_copy_of_every_adapted_input(data: tuple[list, dict]) -> None:
    """LitGPT's LoRALinear runs `lora_dropout(x) @ A.T @ B.T`: with dropout > 0 autograd keeps the dropped
    copy (bf16) and its mask (1 byte) of each adapted linear's input, per token."""
    arch = find_architecture("gemma-7b")
    assert arch is not None
    targets = ("query", "key", "value", "projection", "mlp", "head")
    base = Workload(
        model="google/gemma-7b",
        method="lora",
        lora_targets=targets,
        precision="bf16-true",
        micro_batch=1,
        seq_len=512,
        lora_dropout=0.0,
    )
    none, some = estimate(base), estimate(replace(base, lora_dropout=0.1))
    assert none and some and "lora_dropout" not in some.assumed
    per_token = (
        arch.n_layer * (arch.n_embd + arch.q_dim + 2 * arch.n_embd + arch.intermediate_size) + arch.n_embd
    )
    expected = FITTED.act_scale * 512 * per_token * 3
    assert some.terms["activations"] - none.terms["activations"] == pytest.approx(expected)
    assert estimate(replace(base, lora_dropout=None)).assumed["lora_dropout"] == 0.05  # type: ignore[union-attr]
    # On the development half, the gemma-7b LoRA rows that ran out of memory on an A10G are said not to fit.
    rows, configs = data
    by_id = {s.row_id: s for s in score([r for r in rows if r["id"] in ("r113", "r114")], configs)}
    assert by_id["r113"].fits is False and by_id["r114"].fits is False


def test_code_only_vram_target_names_the_cheapest_card_that_holds_it() -> None:
    """No history: the VRAM target from the code gives a --gres flag for a card that holds the estimate
    (with the margin), and none when no card of the cluster does."""
    from conf import load_cluster
    from models.serving.answer import _code_target
    from pipelines.silver.scripts import parse_script

    demo = load_cluster("demo")
    info = parse_script("#!/bin/bash\n#SBATCH --gres=gpu:2\npython train.py\n")
    small = _code_target({"status": "ok", "recommended_vram_bytes": 30 * 2**30, "fits": True}, info, demo)
    assert small["flag"].startswith("--gres=gpu:") and small["flag"].endswith(":2")
    assert small["gpu"]["memory_gib"] >= 30 and small["recommended_bytes"] == 2 * 30 * 2**30
    huge = _code_target({"status": "ok", "recommended_vram_bytes": 500 * 2**30, "fits": False}, info, demo)
    assert "flag" not in huge and huge["gpu"] is None and "no GPU of this cluster" in huge["why"]
