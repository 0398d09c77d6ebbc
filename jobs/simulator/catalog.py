"""The simulator's fixed knowledge: models and their memory footprints, workload kinds, failure shares."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.gold.failures.taxonomy import CAUSES, UNKNOWN


@dataclass(frozen=True)
class ModelSpec:
    """A deep-learning model as a training script names it: size and per-sample activation cost."""

    name: str
    params_b: float  # billions of parameters
    act_gib_per_sample: float  # activation memory per sample of batch at bf16/fp16, GiB
    step_s_per_sample: float  # seconds of one A100 per sample per step (throughput proxy)
    hf_name: str  # the string a script passes as --model


MODELS: tuple[ModelSpec, ...] = (
    ModelSpec("resnet50", 0.025, 0.09, 0.004, "resnet50"),
    ModelSpec("vit-large", 0.30, 0.30, 0.012, "google/vit-large-patch16-224"),
    ModelSpec("bert-large", 0.34, 0.45, 0.015, "bert-large-uncased"),
    ModelSpec("gpt2-medium", 0.35, 0.55, 0.02, "gpt2-medium"),
    ModelSpec("t5-3b", 3.0, 1.4, 0.09, "t5-3b"),
    ModelSpec("llama-7b", 6.7, 2.2, 0.2, "meta-llama/Llama-2-7b-hf"),
    ModelSpec("mistral-7b", 7.2, 2.3, 0.21, "mistralai/Mistral-7B-v0.1"),
    ModelSpec("llama-13b", 13.0, 3.4, 0.38, "meta-llama/Llama-2-13b-hf"),
)
MODEL_BY_NAME = {m.name: m for m in MODELS}

# Bytes of GPU state per parameter: weights + grads + Adam moments in mixed precision (the usual 16 B/param),
# inference keeps only weights.
TRAIN_BYTES_PER_PARAM = {"bf16": 16.0, "fp16": 16.0, "fp32": 16.0}
INFER_BYTES_PER_PARAM = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "int8": 1.0}
# Activations scale with precision: fp32 doubles them.
ACT_FACTOR = {"bf16": 1.0, "fp16": 1.0, "fp32": 2.0, "int8": 0.6}
# Time per step: fp32 without tensor cores is slower.
SPEED_FACTOR = {"bf16": 1.0, "fp16": 1.0, "fp32": 2.6, "int8": 0.7}
CUDA_CONTEXT_GIB = 1.2

# Workload kinds and the share of each in a user's repertoire draw (weights, not probabilities).
WORKLOADS: dict[str, float] = {
    "dl_train": 0.24,  # torchrun / deepspeed / accelerate training
    "dl_infer": 0.10,  # python evaluation / inference
    "notebook": 0.05,  # jupyter on a GPU node
    "gmx_gpu": 0.05,  # GROMACS mdrun with a GPU
    "mpi_md": 0.16,  # mpirun LAMMPS / GROMACS on CPU nodes
    "preprocess": 0.20,  # python data preparation on CPU nodes
    "array_sweep": 0.20,  # array of small CPU tasks
}
GPU_WORKLOADS = frozenset({"dl_train", "dl_infer", "notebook", "gmx_gpu"})

# Failure causes the simulator injects and whether the job's owner could have fixed them, read from the
# taxonomy (pipelines/gold/failures/taxonomy.py); "none" is a job that did not fail, and nothing is
# injected as "unknown".
USER_FIXABLE: dict[str, bool] = {
    "none": False,
    **{c.name: c.user_fixable for c in CAUSES.values() if c.name != UNKNOWN},
}
FAILURE_CAUSES: tuple[str, ...] = tuple(USER_FIXABLE)
# Per-job probability of each cause before the job's own circumstances scale it (see model.py). "nccl" is
# split into nccl_timeout (2/3) and nccl_error (1/3) afterwards.
BASE_CAUSE_P: dict[str, float] = {
    "time_limit": 0.022,
    "host_oom": 0.014,
    "gpu_oom": 0.035,  # of GPU training/inference jobs only
    "software_error": 0.021,
    "nccl": 0.05,  # of multi-GPU jobs only
    "gpu_hardware": 0.006,  # of GPU jobs, scaled by sqrt(GPUs)
    "node_failure": 0.0015,  # per node
    "preemption": 0.002,
    "cancelled": 0.022,
}
USER_CODE_DETAILS = ("import_error", "file_not_found", "assertion", "segfault", "illegal_memory_access")
HW_DETAILS = ((79, "xid_79"), (48, "xid_48"), (94, "xid_94"), (95, "xid_95"), (63, "xid_63"), (0, "ecc"))

# Names as dcgm-exporter's modelName label shows them.
DCGM_MODEL_NAMES = {
    "A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB",
    "A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB",
    "H100-SXM5-80GB": "NVIDIA H100 80GB HBM3",
    "V100-SXM2-32GB": "Tesla V100-SXM2-32GB",
    "L40S": "NVIDIA L40S",
}
# Slurm gres type names (as AllocTRES shows them, `gres/gpu:<type>=N`).
GRES_TYPES = {
    "A100-SXM4-80GB": "a100",
    "A100-SXM4-40GB": "a100_40g",
    "H100-SXM5-80GB": "h100",
    "V100-SXM2-32GB": "v100",
    "L40S": "l40s",
}
# Peak board power per model, W (idle ~ 60 W).
TDP_W = {"A100-SXM4-80GB": 400.0, "A100-SXM4-40GB": 400.0, "H100-SXM5-80GB": 700.0, "V100-SXM2-32GB": 300.0}

FIRST_NAMES = tuple(
    [
        "alice",
        "bob",
        "carol",
        "dmitri",
        "erin",
        "fatima",
        "gao",
        "hiro",
        "ines",
        "jamal",
        "kasia",
        "lena",
        "mateo",
        "nia",
        "oskar",
        "priya",
        "quinn",
        "rosa",
        "sven",
        "tariq",
        "uma",
        "vikram",
        "wen",
        "xavier",
        "yuki",
        "zara",
        "amir",
        "beatriz",
        "chen",
        "dara",
        "elif",
        "felix",
        "greta",
        "hana",
        "ivan",
        "juno",
        "kofi",
        "luis",
        "mira",
        "nils",
        "olga",
        "pablo",
        "rhea",
        "sami",
        "tess",
        "ulla",
        "vera",
        "will",
        "xu",
        "yara",
        "zoe",
    ]
)
LABS = ("physics", "chem", "bio", "cs-ml", "astro", "climate", "neuro", "materials", "nlp", "vision")
