"""The VRAM estimate measured against LitGPT's published measurements (pure; docs/vram.md).

Each measurement row becomes the job script a user would submit (`litgpt finetune_lora ... --config
lora.yaml` with the row's YAML as the file it names, or the table's flags), goes through the same capture
and estimate as `jobfit estimate`, and is compared with the measured `torch.cuda.max_memory_allocated`.
The rows are split by architecture into a development half (where the fitted constants come from) and a
held-out half (where they are scored); `fit` is the only place constants are chosen."""

from __future__ import annotations

import csv
import hashlib
import io
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from features.vram import CUDA_CONTEXT_BYTES, FITTED, Fitted, Workload, estimate, find_architecture, fits
from features.workload import capture

GB = 1e9  # the tables print max_memory_allocated() / 1e9
# What nvidia-smi reports as each card's total memory (MiB): A10G 23028 MiB (NVIDIA/DCGM issue #232's
# nvidia-smi output; modal-labs/modal-client PR #2797's list), A100 40GB 40960 MiB (same list). The tables'
# "24 GB" and "40 GB" are marketing sizes; the verdict compares against what the card has.
CARD_MIB = {"A10G": 23028, "A100-SXM4-40GB": 40960, "A100": 40960}

# The resource tables name models loosely ("Llama 2", size 7): the checkpoint each row fine-tuned.
_TABLE_MODELS = {
    ("phi-1.5", "1.3"): "microsoft/phi-1_5",
    ("StableLM Alpha", "3"): "stabilityai/stablelm-base-alpha-3b",
    ("Llama 2", "7"): "meta-llama/Llama-2-7b-hf",
    ("Llama 2", "13"): "meta-llama/Llama-2-13b-hf",
    ("Llama 2", "70"): "meta-llama/Llama-2-70b-hf",
    ("Falcon", "40"): "tiiuae/falcon-40b",
    ("CodeLlama", "34"): "codellama/CodeLlama-34b-hf",
}
_COMMANDS = {
    "lora": "finetune_lora",
    "qlora": "finetune_lora",
    "adapter": "finetune_adapter",
    "adapter_v2": "finetune_adapter_v2",
    "full": "finetune_full",
    "inference": "generate",
}


def read_rows(text: str) -> list[dict[str, str]]:
    """rows.tsv as dicts (header names)."""
    return list(csv.DictReader(io.StringIO(text), delimiter="\t"))


def job_script(row: Mapping[str, str], config_text: str | None) -> tuple[str, dict[str, str]]:
    """The Slurm job script (and the files it names) that reproduces one measurement row."""
    gpus = row["gpus"] or "1"
    lines = ["#!/bin/bash", f"#SBATCH --job-name=litgpt-{row['id']}", f"#SBATCH --gres=gpu:{gpus}", ""]
    command = ["litgpt", _COMMANDS[row["method"]]]
    sources: dict[str, str] = {}
    if row["config_path"] and config_text is not None:
        name = os.path.basename(row["config_path"])
        command += ["--config", name]
        sources[name] = config_text
        values = capture(f"litgpt {_COMMANDS[row['method']]} --config {name}\n", sources).workload
        if row["micro_batch"] and values.micro_batch != int(row["micro_batch"]):
            command += ["--train.micro_batch_size", row["micro_batch"]]  # the table's value wins (README)
    else:
        command.append(f"checkpoints/{_TABLE_MODELS[(row['model'], row['size_b'])]}")
        command += ["--precision", row["precision"]]
        if row["quantization"] != "none":
            command += ["--quantize", row["quantization"]]
        if row["method"] != "inference":
            command += ["--devices", gpus, "--train.micro_batch_size", row["micro_batch"]]
            # The peak is set by the longest example (LitGPT pads a batch to its longest); a user states
            # that bound as max_seq_length.
            command += ["--train.max_seq_length", row["longest_example_tokens"]]
    lines.append(" ".join(command))
    return "\n".join(lines) + "\n", sources


@dataclass(frozen=True)
class Scored:
    """One row: measured and estimated peak (bytes; measured None for OOM rows), the card, the verdict."""

    row_id: str
    model: str
    method: str
    gpu: str
    measured: float | None
    oom: bool
    estimated: float | None
    estimated_vram: float | None
    weights_only: float | None
    gpu_mem_bytes: float | None
    fits: bool | None

    @property
    def error(self) -> float | None:
        if self.measured is None or self.estimated is None:
            return None
        return (self.estimated - self.measured) / self.measured


def usable(rows: Sequence[Mapping[str, str]]) -> list[Mapping[str, str]]:
    """Rows with an outcome: a measured peak, or an OOM (N/A cells say nothing)."""
    return [r for r in rows if r["peak_mem_gb"] or r["oom"] == "1"]


def group(row: Mapping[str, str]) -> str:
    """The architecture a row ran (the split unit: no architecture is in both halves)."""
    name = _TABLE_MODELS.get((row["model"], row["size_b"])) or row["model"]
    arch = find_architecture(name) or find_architecture(
        row["config_path"].split("/")[-2] if row["config_path"] else ""
    )
    return arch.name if arch else name.lower()


def split(rows: Sequence[Mapping[str, str]]) -> tuple[list[Mapping[str, str]], list[Mapping[str, str]]]:
    """(development, held-out): architectures ordered by the sha256 of their name, alternately assigned —
    fixed before any constant is chosen, independent of the measurements."""
    groups = sorted({group(r) for r in rows}, key=lambda g: hashlib.sha256(g.encode()).hexdigest())
    dev_groups = set(groups[0::2])
    return [r for r in rows if group(r) in dev_groups], [r for r in rows if group(r) not in dev_groups]


def prepare(
    rows: Sequence[Mapping[str, str]], configs: Mapping[str, str]
) -> list[tuple[Mapping[str, str], Workload]]:
    """Each usable row's workload, captured from its job script (`configs`: config_path -> YAML text)."""
    out: list[tuple[Mapping[str, str], Workload]] = []
    for row in usable(rows):
        script, sources = job_script(row, configs.get(row["config_path"]) if row["config_path"] else None)
        out.append((row, capture(script, sources, gpus=int(row["gpus"] or 1)).workload))
    return out


def score(
    rows: Sequence[Mapping[str, str]], configs: Mapping[str, str], fitted: Fitted = FITTED
) -> list[Scored]:
    """Every usable row through capture and estimate."""
    return score_prepared(prepare(rows, configs), fitted)


def score_prepared(
    prepared: Sequence[tuple[Mapping[str, str], Workload]], fitted: Fitted = FITTED
) -> list[Scored]:
    """Rows already captured (`prepare`) through the estimate with these constants."""
    out: list[Scored] = []
    for row, workload in prepared:
        est = estimate(workload, fitted)
        weights_only = None
        if est is not None:
            arch = find_architecture(workload.model)
            weights_only = (arch.params if arch else workload.params or 0.0) * 2.0  # params x 16-bit
        mem = (
            CARD_MIB[row["gpu_model"]] * 2**20 if row["gpu_mem_gb"] and row["gpu_model"] in CARD_MIB else None
        )
        out.append(
            Scored(
                row_id=row["id"],
                model=group(row),
                method=row["method"],
                gpu=f"{row['gpus'] or '1'}x{row['gpu_model']}",
                measured=float(row["peak_mem_gb"]) * GB if row["peak_mem_gb"] else None,
                oom=row["oom"] == "1",
                estimated=est.peak_allocated_bytes if est else None,
                estimated_vram=est.peak_vram_bytes if est else None,
                weights_only=weights_only,
                gpu_mem_bytes=mem,
                fits=fits(est, mem) if est and mem else None,
            )
        )
    return out


def median_abs_error(scored: Sequence[Scored]) -> float:
    errors = [abs(s.error) for s in scored if s.error is not None]
    return statistics.median(errors) if errors else math.nan


def _grid(lo: float, hi: float, step: float) -> list[float]:
    return [round(lo + k * step, 4) for k in range(round((hi - lo) / step) + 1)]


def fit(rows: Sequence[Mapping[str, str]], configs: Mapping[str, str]) -> Fitted:
    """The constants that minimise the median absolute error on `rows` (call it with the development
    half only): a grid over act_scale, quant_act_scale and dequant_blocks; ties go to the earlier
    (smaller) values."""
    prepared = prepare(rows, configs)
    best: tuple[float, Fitted] | None = None
    for act in _grid(0.5, 1.6, 0.05):
        for quant in _grid(1.0, 2.0, 0.05):
            for blocks in _grid(0.0, 3.0, 0.5):
                candidate = Fitted(act, quant, blocks)
                err = median_abs_error(score_prepared(prepared, candidate))
                if best is None or err < best[0] - 1e-12:
                    best = (err, candidate)
    assert best is not None
    return best[1]


def with_fitted(fitted: Fitted, **changes: float) -> Fitted:
    return replace(fitted, **changes)


# --- a cluster of LitGPT jobs: the code-aware features measured inside the per-cluster models ----------

# What DCGM sees beyond max_memory_allocated differs per run (the allocator's reserve: free blocks kept
# cached): drawn per run between 0 and this share of the allocated peak, unknown to the estimate (which
# assumes ALLOCATOR_RESERVE_FRAC, 5 %). A run repeats its measured peak within RUN_JITTER (sd, relative).
RESERVE_MAX_FRAC = 0.10
RUN_JITTER = 0.01


@dataclass(frozen=True)
class LitgptCluster:
    """silver.jobs-like rows, silver.scripts rows, silver.job_sources rows (job_id, path, text) and the
    GPU model -> bytes map of a simulated cluster whose jobs are real LitGPT measurement rows."""

    jobs: pd.DataFrame
    scripts: pd.DataFrame
    job_sources: pd.DataFrame
    gpu_mem_bytes: dict[str, float]


def litgpt_cluster(
    rows: Sequence[Mapping[str, str]],
    configs: Mapping[str, str],
    n_users: int = 60,
    jobs_per_user: int = 100,
    switch: float = 0.25,
    days: int = 120,
    seed: int = 0,
) -> LitgptCluster:
    """Users submitting LitGPT fine-tuning and inference jobs, each job one of `rows` (call it with the
    held-out half: the estimate's constants never saw them) as the job script and config a user would
    submit (`job_script`), its VRAM peak the row's measured `max_memory_allocated` plus the CUDA context
    and a per-run allocator reserve (a row that ran out of memory peaks at its card, state FAILED). Each
    user reruns their current configuration and moves to another row with probability `switch` per job:
    what the user's history says nothing about. The job stream is simulated; the needs are measured."""
    from pipelines.silver.scripts import parse_script
    from pipelines.units import GIB

    rng = np.random.default_rng(seed)
    cards = {name: mib * 2**20 for name, mib in CARD_MIB.items()}
    usable_rows = [r for r in usable(rows) if r["gpu_model"] in cards]
    written = [
        job_script(r, configs.get(r["config_path"]) if r["config_path"] else None) for r in usable_rows
    ]
    start = pd.Timestamp("2026-01-01", tz="UTC")
    jobs, sources, scripts = [], [], {}
    for user in range(n_users):
        current = int(rng.integers(len(usable_rows)))
        submits = np.sort(rng.uniform(0, days * 86400, size=jobs_per_user))
        for k, offset in enumerate(submits):
            if k and rng.random() < switch:
                current = int(rng.integers(len(usable_rows)))
            row, (script, named) = usable_rows[current], written[current]
            job_id = f"{user:03d}{k:04d}"
            card = float(cards[row["gpu_model"]])
            gpus = int(row["gpus"] or 1)
            if row["oom"] == "1":
                peak, state = card, "FAILED"
            else:
                allocated = float(row["peak_mem_gb"]) * GB * (1 + rng.normal(0, RUN_JITTER))
                peak = allocated * (1 + rng.uniform(0, RESERVE_MAX_FRAC)) + CUDA_CONTEXT_BYTES
                peak, state = min(peak, card), "COMPLETED"
            elapsed = float(np.clip(rng.lognormal(np.log(7200), 0.8), 600, 86400))
            if state == "FAILED":
                elapsed = float(rng.uniform(60, 600))  # killed while loading or in the first steps
            submit = start + pd.Timedelta(seconds=float(offset))
            begin = submit + pd.Timedelta(seconds=float(rng.uniform(0, 1800)))
            info = parse_script(script)
            scripts[info.script_hash] = info.as_row() | {"cluster": "litgpt"}
            jobs.append(
                {
                    "cluster": "litgpt",
                    "job_id": job_id,
                    "source": "sacct",
                    "job_name": f"litgpt-{row['id']}",
                    "user": f"u{user:02d}",
                    "account": f"a{user % 5}",
                    "partition": "gpu",
                    "qos": "normal",
                    "state": state,
                    "submit_ts": submit,
                    "start_ts": begin,
                    "end_ts": begin + pd.Timedelta(seconds=elapsed),
                    "elapsed_s": elapsed,
                    "timelimit_s": 86400,
                    "req_cpus": 8 * gpus,
                    "alloc_cpus": 8 * gpus,
                    "req_mem_bytes": 64 * GIB * gpus,
                    "alloc_mem_bytes": 64 * GIB * gpus,
                    "req_gpus": gpus,
                    "alloc_gpus": gpus,
                    "gpu_model": row["gpu_model"],
                    "nodes": 1,
                    "ntasks": 1,
                    "total_cpu_s": elapsed * 4 * gpus,
                    "max_rss_bytes": 24 * GIB,
                    "gpu_mem_peak_bytes": peak,
                    "script_hash": info.script_hash,
                }
            )
            sources += [(job_id, path, text) for path, text in named.items()]
    return LitgptCluster(
        jobs=pd.DataFrame(jobs),
        scripts=pd.DataFrame(list(scripts.values())),
        job_sources=pd.DataFrame(sources, columns=["job_id", "path", "text"]),
        gpu_mem_bytes={name: float(b) for name, b in cards.items()},
    )
