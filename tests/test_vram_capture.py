"""Reading a job script's workload without running it: entry points of every launcher, the files they name,
config values overridden by the script's own arguments, Python read by `ast`, and `jobfit estimate`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from features.workload import bounded_sources, capture, entry_points, python_facts, referenced_files
from jobs.cli import main

HEAD = "#!/bin/bash\n#SBATCH --gres=gpu:a100:4\n#SBATCH --time=10:00:00\nmodule load cuda\n"


@pytest.mark.parametrize(
    ("line", "launcher", "target", "files"),
    [
        ("python train.py --config cfg.yaml", "python", "train.py", ["train.py", "cfg.yaml"]),
        ("srun python3 -u train.py --lr 1e-4", "python", "train.py", ["train.py"]),
        (
            "torchrun --nproc_per_node=4 --nnodes 1 train.py --deepspeed ds.json",
            "torchrun",
            "train.py",
            ["train.py", "ds.json"],
        ),
        ("python -m torch.distributed.run --nproc_per_node 4 fit.py", "torchrun", "fit.py", ["fit.py"]),
        (
            "accelerate launch --config_file acc.yaml --num_processes 4 sft.py --cfg run.json",
            "accelerate",
            "sft.py",
            ["sft.py", "acc.yaml", "run.json"],
        ),
        (
            "deepspeed --num_gpus 4 train.py --deepspeed_config ds.json",
            "deepspeed",
            "train.py",
            ["train.py", "ds.json"],
        ),
        ("python -m axolotl.cli.train qlora.yml", "python", "-m axolotl.cli.train", ["qlora.yml"]),
        ("litgpt finetune_lora checkpoints/x --config lora.yaml", "litgpt", "finetune_lora", ["lora.yaml"]),
        ("litgpt finetune lora --config lora.yaml", "litgpt", "finetune_lora", ["lora.yaml"]),
        ("CUDA_VISIBLE_DEVICES=0 time python run.py", "python", "run.py", ["run.py"]),
    ],
)
def test_entry_points_of_every_launcher(line: str, launcher: str, target: str, files: list[str]) -> None:
    entries = entry_points(HEAD + line + "\n")
    assert [(e.launcher, e.target) for e in entries] == [(launcher, target)]
    assert referenced_files(entries) == files


def test_variables_and_continuations_are_followed() -> None:
    script = (
        HEAD
        + "CFG=configs/big.yaml\ntorchrun --standalone \\\n  --nproc_per_node 4 train.py \\\n"
        + "  --config $CFG\n"
    )
    entries = entry_points(script)
    assert entries[0].target == "train.py" and referenced_files(entries) == ["train.py", "configs/big.yaml"]


def test_script_arguments_override_the_config_and_the_python_defaults() -> None:
    source = """
import argparse
from transformers import AutoModelForCausalLM, TrainingArguments, BitsAndBytesConfig
from peft import LoraConfig
p = argparse.ArgumentParser()
p.add_argument("--max_seq_length", type=int, default=4096)
p.add_argument("--per_device_train_batch_size", type=int, default=16)
model = AutoModelForCausalLM.from_pretrained("mistralai/Mistral-7B-v0.1",
    quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_use_double_quant=True))
peft = LoraConfig(r=16, lora_dropout=0.1, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
args = TrainingArguments(output_dir="o", bf16=True, gradient_checkpointing=True, optim="paged_adamw_8bit")
"""
    config = "per_device_train_batch_size: 8\nmax_seq_length: 2048\n"
    script = HEAD + "torchrun --nproc_per_node 4 sft.py --config run.yaml --per_device_train_batch_size 2\n"
    cap = capture(script, {"sft.py": source, "run.yaml": config}, gpus=4)
    w = cap.workload
    assert w.model == "mistralai/Mistral-7B-v0.1" and w.method == "qlora" and w.quantization == "nf4-dq"
    assert w.micro_batch == 2  # the script's argument beats the config's 8 and the source's 16
    assert w.seq_len == 2048  # the config beats the argparse default
    assert w.lora_rank == 16 and set(w.lora_targets) == {"query", "key", "value", "projection"}
    assert w.lora_dropout == 0.1
    assert (
        w.gradient_checkpointing is True and w.optimizer == "paged_adamw_8bit" and w.precision == "bf16-mixed"
    )
    assert w.world_size == 4 and cap.read == ["sft.py", "run.yaml"]
    assert w.provenance["micro_batch"].endswith("(script arguments)")


def test_deepspeed_config_and_litgpt_config() -> None:
    ds = json.dumps(
        {
            "train_micro_batch_size_per_gpu": 4,
            "bf16": {"enabled": True},
            "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
        }
    )
    cap = capture(
        HEAD
        + "deepspeed --num_gpus 4 train.py --model_name_or_path meta-llama/Llama-2-13b-hf "
        + "--deepspeed ds.json\n",
        {"ds.json": ds},
    )
    w = cap.workload
    assert (w.strategy, w.zero_stage, w.world_size, w.micro_batch, w.cpu_offload) == (
        "deepspeed",
        3,
        4,
        4,
        True,
    )
    assert w.precision == "bf16-mixed" and w.model == "meta-llama/Llama-2-13b-hf"
    assert "train.py named but not read" in cap.notes
    lit = (
        "checkpoint_dir: checkpoints/meta-llama/Meta-Llama-3-8B\nprecision: bf16-true\ndevices: 2\n"
        "train:\n  micro_batch_size: 2\n  max_seq_length: 512\nquantize: bnb.nf4\n"
    )
    w = capture(
        HEAD + "litgpt finetune_lora --config q.yaml --train.micro_batch_size 1\n", {"q.yaml": lit}
    ).workload
    assert (w.method, w.quantization, w.micro_batch, w.seq_len, w.world_size) == ("qlora", "nf4", 1, 512, 2)
    assert (w.strategy, w.gradient_checkpointing) == ("fsdp", True)  # LitGPT's multi-device default


def test_unreadable_inputs_never_raise_and_sizes_are_bounded() -> None:
    assert python_facts("def broken(:\n") == {}
    cap = capture(HEAD + "python t.py --config c.yaml\n", {"t.py": "x = (", "c.yaml": ": : [unclosed"})
    assert cap.workload.model is None and "model" in cap.unknown
    assert capture("#!/bin/bash\necho hi\n").entries == []
    big = {"a.py": "x" * (300 * 1024), "b.yaml": "k: 1\n"}
    assert list(bounded_sources(big)) == ["b.yaml"]
    assert len(bounded_sources({f"f{i}.yaml": "k: 1" for i in range(20)})) == 8


def test_jobfit_estimate_says_it_will_not_fit_and_what_would(
    tmp_path: Path, real_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A real LitGPT config (gemma-7b LoRA, measured OOM on an A10G) submitted with micro batch 1.
    config = (real_data / "vram/configs/43c4432/gemma-7b/lora.yaml").read_text()
    (tmp_path / "lora.yaml").write_text(config)
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --gres=gpu:a10g:1\n"
        "litgpt finetune_lora --config lora.yaml --train.micro_batch_size 4\n"
    )
    assert main(["-q", "estimate", str(script), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is False and out["gpu_model"] == "a10g" and out["architecture"] == "gemma-7b"
    assert set(out["terms"]) >= {"weights", "gradients", "optimizer", "activations", "context"}
    assert out["peak_vram_bytes"] > out["gpu_mem_bytes"] > 0
    assert out["features"]["micro_batch"] == 4 and out["capture"]["files_read"] == ["lora.yaml"]
    assert out["features"]["lora_dropout"] == 0.1 and "lora_dropout" not in out["assumed"]
    changes = {c["change"]: c for c in out["changes_that_fit"]}
    # Micro batch 1 is the table's own configuration, which ran out of memory on this card (row r113):
    # a smaller micro batch is not offered, checkpointing is.
    assert "gradient_checkpointing" in changes and "micro_batch" not in changes
    assert all(c["peak_vram_bytes"] <= out["gpu_mem_bytes"] for c in changes.values())
    # A card the job fits: the verdict flips; an unknown card is a usage error (exit 2).
    assert main(["-q", "estimate", str(script), "--gpu-model", "a100-80gb", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True
    assert main(["-q", "estimate", str(script), "--gpu-model", "nosuchcard"]) == 2
