"""An analytic peak-GPU-memory estimate from a workload's static features (pure; docs/vram.md).

peak allocated = weights + gradients + optimizer states + activations + transient buffers, per GPU, in
bytes, as `torch.cuda.max_memory_allocated` counts them; `peak_vram_bytes` adds the CUDA context and the
caching allocator's reserve (what DCGM or nvidia-smi see). Every term's formula and source is in
docs/vram.md; the three fitted constants (`FITTED`) come from the development half of
tests/data/real/vram/ only (bench/vram.py --fit, tests/test_vram.py re-derives them)."""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from pathlib import Path

from pipelines.units import GIB, MIB

ARCH_FILE = Path(__file__).with_name("data") / "architectures.tsv"

# bitsandbytes storage per quantised weight, in bytes (Dettmers et al. 2023, QLoRA, §2 "Double
# Quantization": NF4 with one fp32 absmax per 64 weights is 4 + 32/64 = 4.5 bits; double quantisation
# stores the absmax in 8 bits with one fp32 constant per 256 blocks: 4 + 8/64 + 32/(64*256) = 4.127 bits;
# LLM.int8 (Dettmers et al. 2022) keeps 8 bits per weight plus a per-row fp32 scale, counted as 8 bits).
QUANT_BYTES = {"nf4": 4.5 / 8, "fp4": 4.5 / 8, "nf4-dq": 4.127 / 8, "fp4-dq": 4.127 / 8, "int8": 1.0}
# Optimizer states per trainable parameter, in units of the parameter's own bytes (AdamW: two moments,
# Loshchilov & Hutter 2019; SGD with momentum: one; 8-bit Adam keeps two 1-byte states, Dettmers et al.
# 2022 "8-bit Optimizers via Block-wise Quantization").
OPTIMIZER_STATES = {"adamw": 2.0, "adam": 2.0, "sgd": 1.0, "lion": 1.0, "adafactor": 1.0}
OPTIMIZER_8BIT = {"adamw8bit", "adam8bit", "paged_adamw8bit", "paged_adamw_8bit", "adamw_bnb_8bit"}
# The CUDA context PyTorch's first CUDA call creates (≈723 MiB on the GPU in the report at
# discuss.pytorch.org/t/what-is-the-reason-for-pytorchs-gpu-memory-floor/73021); not in max_memory_allocated.
CUDA_CONTEXT_BYTES = 723 * MIB
# The caching allocator keeps freed blocks reserved; reserved exceeds allocated at the peak by a share this
# data cannot measure (it lists allocated bytes only). 5 % is an assumption, stated in docs/vram.md.
ALLOCATOR_RESERVE_FRAC = 0.05
# Prompt length assumed for inference when the workload does not state one (an assumption, not fitted).
INFERENCE_PROMPT_TOKENS = 128
# LitGPT's finetune_lora default when a config does not set `lora_dropout` (litgpt/finetune/lora.py).
LITGPT_LORA_DROPOUT = 0.05
# The margin `recommend` adds to a code-only estimate (no history to calibrate against).
CODE_ONLY_MARGIN = 0.15


# Total memory nvidia-smi reports per card (MiB), for `--gpu-model` without a cluster yaml: the list in
# github.com/modal-labs/modal-client/pull/2797 (H100 81559, A100 80GB 81920, A100 40GB 40960, A10 23028,
# L40S 46068, L4 23034, T4 15360); the A10G shows the same 23028 MiB (NVIDIA/DCGM issue #232).
KNOWN_CARDS_MIB = {
    "t4": 15360,
    "l4": 23034,
    "a10": 23028,
    "a10g": 23028,
    "a100": 40960,
    "a100-40gb": 40960,
    "a100-sxm4-40gb": 40960,
    "a100-80gb": 81920,
    "a100-sxm4-80gb": 81920,
    "l40s": 46068,
    "h100": 81559,
    "h100-80gb": 81559,
}


def card_bytes(gpu_model: str | None, cluster_cards: dict[str, float] | None = None) -> float | None:
    """Memory of one card of this model: the cluster's own figure, else KNOWN_CARDS_MIB, else None."""
    if not gpu_model:
        return None
    for name, mem in (cluster_cards or {}).items():
        if name.lower() == gpu_model.lower():
            return mem
    mib = KNOWN_CARDS_MIB.get(gpu_model.lower().removeprefix("nvidia-").replace("_", "-"))
    return mib * MIB if mib else None


def distinct_cards(cards: dict[str, float]) -> dict[str, float]:
    """The cards of a GPU model -> bytes map without the names that only alias another entry (its lower-case
    name, or its family such as `a100`: jobs.io.prediction.gpu_memory_bytes adds them for lookups)."""

    def alias(name: str) -> bool:
        return any(other != name and name in (other.lower(), other.lower().split("-")[0]) for other in cards)

    return {name: mem for name, mem in cards.items() if not alias(name)}


@dataclass(frozen=True)
class Fitted:
    """Constants fitted on the development half only (bench/vram.py --fit; provenance in docs/vram.md):
    `act_scale` multiplies the counted activation bytes, `quant_act_scale` further multiplies them when
    the frozen weights are 4-bit (bitsandbytes keeps more per layer), `dequant_blocks` is how many
    transformer blocks' weights are live in 16-bit at once while 4/8-bit weights are dequantised."""

    act_scale: float = 0.8
    quant_act_scale: float = 1.6
    dequant_blocks: float = 0.5


FITTED = Fitted()


@dataclass(frozen=True)
class Architecture:
    """One row of features/data/architectures.tsv (LitGPT's Config fields)."""

    name: str
    aliases: tuple[str, ...]
    n_layer: int
    n_embd: int
    n_head: int
    n_query_groups: int
    head_size: int
    intermediate_size: int
    padded_vocab_size: int
    block_size: int
    mlp: str
    tied: bool
    bias: bool
    published_params_b: float
    source: str

    @property
    def q_dim(self) -> int:
        return self.n_head * self.head_size

    @property
    def kv_dim(self) -> int:
        return self.n_query_groups * self.head_size

    @property
    def block_linear_params(self) -> int:
        """Parameters of one transformer block's linear layers (attention and MLP; biases included)."""
        h, i = self.n_embd, self.intermediate_size
        attn = h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h
        mlp = (3 if self.mlp == "llama" else 2) * h * i
        biases = (
            (self.q_dim + 2 * self.kv_dim + h + (2 * i if self.mlp == "llama" else i) + h) if self.bias else 0
        )
        return attn + mlp + biases

    @property
    def embedding_params(self) -> int:
        return self.padded_vocab_size * self.n_embd

    @property
    def head_params(self) -> int:
        """The output projection (lm_head): 0 when tied to the embedding."""
        return 0 if self.tied else self.padded_vocab_size * self.n_embd

    @property
    def params(self) -> int:
        """Total parameters computed from the columns (norm weights included)."""
        norms = (2 * self.n_layer + 1) * self.n_embd
        return self.n_layer * self.block_linear_params + self.embedding_params + self.head_params + norms


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


@cache
def architectures() -> dict[str, Architecture]:
    """The shipped architecture table, keyed by every lower-cased name and alias (org prefix dropped too)."""
    rows = [line for line in ARCH_FILE.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    out: dict[str, Architecture] = {}
    for row in csv.DictReader(rows, delimiter="\t"):
        arch = Architecture(
            name=row["name"],
            aliases=tuple(a.strip() for a in row["aliases"].split(",") if a.strip()),
            n_layer=int(row["n_layer"]),
            n_embd=int(row["n_embd"]),
            n_head=int(row["n_head"]),
            n_query_groups=int(row["n_query_groups"]),
            head_size=int(row["head_size"]),
            intermediate_size=int(row["intermediate_size"]),
            padded_vocab_size=int(row["padded_vocab_size"]),
            block_size=int(row["block_size"]),
            mlp=row["mlp"],
            tied=row["tied"] == "1",
            bias=row["bias"] == "1",
            published_params_b=float(row["published_params_b"]),
            source=row["source"],
        )
        for name in (arch.name, *arch.aliases):
            out[_key(name)] = arch
            out[_key(name.rsplit("/", 1)[-1])] = arch
    return out


def find_architecture(model: str | None) -> Architecture | None:
    """The architecture a model name, hub id or checkpoint folder names (`checkpoints/meta-llama/
    Llama-2-7b-hf`, `mistralai/Mistral-7B-v0.1`), else None."""
    if not model:
        return None
    table = architectures()
    parts = [p for p in model.replace("\\", "/").split("/") if p and p not in (".", "..")]
    for part in reversed(parts):
        arch = table.get(_key(part))
        if arch is not None:
            return arch
    return table.get(_key(model))


@dataclass(frozen=True)
class Workload:
    """The static features the estimate reads (None: unknown). `method` is full, lora, qlora, adapter,
    adapter_v2 or inference; `precision` is LitGPT/Lightning's (`bf16-true`, `bf16-mixed`, `16-mixed`,
    `32-true`, ...); `strategy` fsdp, deepspeed or ddp; `world_size` the processes sharing the states."""

    model: str | None = None
    params: float | None = None
    method: str | None = None
    lora_rank: int | None = None
    lora_targets: tuple[str, ...] = ("query", "value")
    lora_dropout: float | None = None
    quantization: str | None = None
    precision: str | None = None
    micro_batch: int | None = None
    seq_len: int | None = None
    max_new_tokens: int | None = None
    gradient_checkpointing: bool | None = None
    optimizer: str | None = None
    strategy: str | None = None
    zero_stage: int | None = None
    world_size: int | None = None
    cpu_offload: bool | None = None
    num_workers: int | None = None
    full_state_dict_save: bool | None = None
    provenance: dict[str, str] = field(default_factory=dict, compare=False)

    def as_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["lora_targets"] = list(self.lora_targets)
        return out


@dataclass(frozen=True)
class Estimate:
    """Peak GPU memory per GPU: the terms (bytes), what was assumed for unknown features, and the arch."""

    peak_allocated_bytes: float
    peak_vram_bytes: float
    terms: dict[str, float]
    assumed: dict[str, object]
    architecture: str | None
    workload: Workload


def _param_bytes(precision: str) -> float:
    """Bytes of a stored parameter: 16-bit for `*-true` 16-bit precisions, else fp32 (mixed keeps fp32)."""
    p = precision.lower()
    return 2.0 if ("true" in p and ("16" in p)) else 4.0


def _act_bytes(precision: str) -> float:
    return 4.0 if precision.lower().startswith("32") else 2.0


def _lora_params(arch: Architecture, rank: int, targets: tuple[str, ...]) -> int:
    """Trainable LoRA parameters: r x (in + out) per adapted matrix per block (Hu et al. 2021)."""
    h, i = arch.n_embd, arch.intermediate_size
    shapes = {
        "query": (h, arch.q_dim),
        "key": (h, arch.kv_dim),
        "value": (h, arch.kv_dim),
        "projection": (arch.q_dim, h),
        "mlp": (h, i),
    }
    per_block = sum(rank * (a + b) for t, (a, b) in shapes.items() if t in targets)
    if "mlp" in targets:
        per_block += rank * (i + h) * (2 if arch.mlp == "llama" else 1)
    head = rank * (h + arch.padded_vocab_size) if "head" in targets else 0
    return arch.n_layer * per_block + head


def _trainable(w: Workload, arch: Architecture | None, total: float) -> float:
    if w.method in ("full", None):
        return total
    if w.method == "inference":
        return 0.0
    if arch is None:
        return 0.01 * total  # a PEFT method on an unknown architecture: ~1 % of the weights
    if w.method in ("lora", "qlora"):
        return float(_lora_params(arch, w.lora_rank or 8, w.lora_targets))
    # LitGPT adapter (Zhang et al. 2023, LLaMA-Adapter): a 10-token prompt per block from layer 2, and a
    # gate per head; v2 also trains a bias and a scale per linear output (counted per block).
    v1 = 10 * arch.n_embd * max(arch.n_layer - 2, 1) + arch.n_head * arch.n_layer
    if w.method == "adapter_v2":
        return v1 + 2 * arch.n_layer * (
            arch.q_dim + 2 * arch.kv_dim + 3 * arch.n_embd + 2 * arch.intermediate_size
        )
    return float(v1)


def _layer_act_elements(arch: Architecture) -> float:
    """Tensors autograd keeps per token for one block (elements): norms' inputs and their fp32 statistics
    (7h), q/k/v and their rotated copies and the attention output (4 q_dim + 3 kv_dim; flash attention
    keeps no s x s matrix, Dao et al. 2022), and the MLP's inputs/outputs (4 i gated, 2 i plain) — the
    per-layer count of Korthikanti et al. 2022 §4.1 redone for RMSNorm, GQA, rotary and gated MLPs."""
    mlp = (4 if arch.mlp == "llama" else 2) * arch.intermediate_size
    return 7 * arch.n_embd + 4 * arch.q_dim + 3 * arch.kv_dim + mlp


def _lora_branch_elements(arch: Architecture, targets: tuple[str, ...]) -> tuple[float, float]:
    """Per token: elements of the inputs of one block's LoRA-adapted linears, and of the head's. With
    dropout on the LoRA branch (LitGPT's `LoRALinear`: `lora_dropout(x) @ A.T @ B.T`; PEFT's alike),
    autograd keeps each adapted linear's dropped-out input and its mask beside the frozen layer's tensors:
    the fused q/k/v linear reads the block's input, the projection the attention output, the MLP's
    linears the block's input (fc_1, fc_2) and the intermediate (proj)."""
    h, i = arch.n_embd, arch.intermediate_size
    per_layer = 0.0
    if {"query", "key", "value"} & set(targets):
        per_layer += h
    if "projection" in targets:
        per_layer += arch.q_dim
    if "mlp" in targets:
        per_layer += (2 if arch.mlp == "llama" else 1) * h + i
    return per_layer, (h if "head" in targets else 0.0)


def estimate(w: Workload, fitted: Fitted = FITTED) -> Estimate | None:
    """The per-GPU peak of a workload, or None when neither an architecture nor a size is known."""
    arch = (w.model and find_architecture(w.model)) or None
    total = float(arch.params) if arch else (w.params or 0.0)
    if total <= 0:
        return None
    assumed: dict[str, object] = {}

    def pick(name: str, value: object, default: object) -> object:
        if value is None:
            assumed[name] = default
            return default
        return value

    method = str(pick("method", w.method, "full"))
    precision = str(pick("precision", w.precision, "bf16-mixed" if method != "inference" else "bf16-true"))
    micro_batch = int(pick("micro_batch", w.micro_batch, 1))  # type: ignore[arg-type]
    # Unknown length: training pads to the longest sample, at most the context (capped at 2048 here);
    # inference gets a short prompt (INFERENCE_PROMPT_TOKENS) plus the tokens it generates.
    default_seq = (
        INFERENCE_PROMPT_TOKENS if method == "inference" else min(arch.block_size if arch else 2048, 2048)
    )
    seq = int(pick("seq_len", w.seq_len, default_seq))  # type: ignore[arg-type]
    world = max(int(w.world_size or 1), 1)
    strategy = w.strategy if world > 1 else None
    zero = w.zero_stage if w.zero_stage is not None else (3 if strategy == "fsdp" else 0)
    ckpt = bool(w.gradient_checkpointing)
    quant = w.quantization if w.quantization in QUANT_BYTES else None
    pb, ab = _param_bytes(precision), _act_bytes(precision)
    weight_bytes = 2.0 if quant else pb  # a quantised model's unquantised parts are in the compute dtype

    if arch and quant:
        quantised = arch.n_layer * arch.block_linear_params
        weights = quantised * QUANT_BYTES[quant] + (total - quantised) * weight_bytes
    elif quant:
        weights = total * QUANT_BYTES[quant]
    else:
        weights = total * weight_bytes
    if zero >= 3:
        weights /= world

    trainable = _trainable(replace(w, method=method), arch, total)
    grads = trainable * pb / (world if zero >= 2 else 1)
    opt_name = str(pick("optimizer", w.optimizer, "adamw")).lower()
    per_param = 2.0 if opt_name in OPTIMIZER_8BIT else OPTIMIZER_STATES.get(opt_name, 2.0) * pb
    if strategy == "deepspeed" and pb == 4.0 and method != "inference":
        per_param += 4.0  # ZeRO's fp32 master copy beside 16-bit params (Rajbhandari et al. 2020, K = 12)
    optimizer = trainable * per_param / (world if zero >= 1 else 1)
    if w.cpu_offload:
        optimizer = 0.0

    tokens = micro_batch * seq
    if method == "inference":
        gen = seq + int(pick("max_new_tokens", w.max_new_tokens, 50))  # type: ignore[arg-type]
        if arch:
            kv = 2 * arch.n_layer * micro_batch * gen * arch.kv_dim * ab
            work = (
                micro_batch * gen * (_layer_act_elements(arch) * ab)
                + micro_batch * arch.padded_vocab_size * 4
            )
            activations = kv + work
        else:
            activations = 0.02 * weights
        grads = optimizer = 0.0
    elif arch:
        per_token_layer = _layer_act_elements(arch) * ab
        # The loss: 16-bit logits, the fp32 log-softmax output cross-entropy keeps, and the logits'
        # gradient when backward starts (LitGPT's chunked_cross_entropy; every layer's tensors still live).
        logits = arch.padded_vocab_size * (2 * ab + 4)
        if method in ("lora", "qlora"):
            dropout = float(pick("lora_dropout", w.lora_dropout, LITGPT_LORA_DROPOUT))  # type: ignore[arg-type]
            if dropout > 0:  # the dropped-out copy (activation dtype) and its mask (1 byte) per element
                branch_layer, branch_head = _lora_branch_elements(arch, w.lora_targets)
                per_token_layer += branch_layer * (ab + 1)
                logits += branch_head * (ab + 1)
        # With checkpointing: every block's input plus one block's tensors (recomputed in backward).
        full = arch.n_layer * per_token_layer
        layers = arch.n_layer * arch.n_embd * ab + per_token_layer if ckpt else full
        activations = fitted.act_scale * tokens * (layers + logits)
        if quant:
            activations *= fitted.quant_act_scale
    else:
        # No architecture: a dense decoder of this size (h from P ≈ 12 L h², L ≈ h / 128: Kaplan et al.
        # 2020's aspect ratio), activations by the same count.
        h = (total * 128 / 12) ** (1 / 3)
        layers_n = max(h / 128, 1)
        per_layer = (7 + 4 + 3 + 4 * 2.7) * h * ab
        layers = (layers_n * h * ab + per_layer) if ckpt else layers_n * per_layer
        activations = fitted.act_scale * tokens * layers

    transient = 0.0
    if quant and arch:
        transient = fitted.dequant_blocks * arch.block_linear_params * 2.0
    full_save = w.full_state_dict_save if w.full_state_dict_save is not None else strategy == "fsdp"
    if zero >= 3 and world > 1 and full_save and method != "inference":
        # Saving a full state dict gathers every unsharded weight on rank 0 (Lightning Fabric's
        # FSDPStrategy state_dict_type="full"): a second peak, beside the sharded states.
        gathered = weights * world
        transient = max(transient, gathered - activations)
    context = CUDA_CONTEXT_BYTES
    allocated = weights + grads + optimizer + activations + transient
    terms = {
        "weights": weights,
        "gradients": grads,
        "optimizer": optimizer,
        "activations": activations,
        "transient": transient,
        "context": context,
    }
    vram = allocated * (1 + ALLOCATOR_RESERVE_FRAC) + context
    return Estimate(allocated, vram, terms, assumed, arch.name if arch else None, w)


def fits(est: Estimate, gpu_mem_bytes: float) -> bool:
    """Whether the estimated peak (context and allocator reserve included) fits one card of this size."""
    return est.peak_vram_bytes <= gpu_mem_bytes


def changes_that_fit(
    w: Workload, gpu_mem_bytes: float | None, cards: list[tuple[str, float]], fitted: Fitted = FITTED
) -> list[dict[str, object]]:
    """The smallest changes after which the estimate fits (each with its estimate), most direct first: a
    larger card the cluster has, a smaller micro batch, gradient checkpointing, 4-bit quantisation (LoRA),
    LoRA instead of full fine-tuning, an 8-bit optimizer."""
    base = estimate(w, fitted)
    if base is None:
        return []
    out: list[dict[str, object]] = []
    for name, mem in sorted(cards, key=lambda c: c[1]):
        if (gpu_mem_bytes is None or mem > gpu_mem_bytes) and fits(base, mem):
            out.append(_change("gpu_model", name, f"use a {name} ({mem / GIB:.0f} GiB)", base))
            break
    if gpu_mem_bytes is None:
        return out
    tries: list[tuple[str, object, str, Workload]] = []
    mb = w.micro_batch or 1
    for smaller in sorted({mb // 2**k for k in range(1, 8) if mb // 2**k >= 1}, reverse=True):
        tries.append(
            ("micro_batch", smaller, f"micro batch {smaller} (was {mb})", replace(w, micro_batch=smaller))
        )
    if w.method != "inference" and not w.gradient_checkpointing:
        tries.append(
            (
                "gradient_checkpointing",
                True,
                "turn on gradient checkpointing",
                replace(w, gradient_checkpointing=True),
            )
        )
    if w.method in ("lora", "adapter", "adapter_v2") and not w.quantization:
        tries.append(
            (
                "quantization",
                "nf4",
                "4-bit NF4 weights (QLoRA)",
                replace(w, quantization="nf4", method="qlora" if w.method == "lora" else w.method),
            )
        )
    if w.method == "inference" and not w.quantization:
        tries.append(("quantization", "nf4", "4-bit NF4 weights", replace(w, quantization="nf4")))
    if w.method in ("full", None):
        tries.append(
            (
                "method",
                "lora",
                "LoRA (rank 8) instead of full fine-tuning",
                replace(w, method="lora", lora_rank=8),
            )
        )
        tries.append(("optimizer", "adamw8bit", "8-bit AdamW states", replace(w, optimizer="adamw8bit")))
    seen: set[str] = set()
    for key, value, text, changed in tries:
        if key in seen:
            continue
        est = estimate(changed, fitted)
        if est is not None and fits(est, gpu_mem_bytes):
            out.append(_change(key, value, text, est))
            seen.add(key)
    return out


def _change(key: str, value: object, text: str, est: Estimate) -> dict[str, object]:
    return {
        "change": key,
        "value": value,
        "what": text,
        "peak_allocated_bytes": round(est.peak_allocated_bytes),
        "peak_vram_bytes": round(est.peak_vram_bytes),
    }


def estimate_payload(
    w: Workload,
    gpu_model: str | None,
    gpu_mem_bytes: float | None,
    cards: list[tuple[str, float]],
    unknown: list[str],
) -> dict[str, object]:
    """The `jobfit estimate --json` object (docs/cli.md): the estimate, its terms, the fit verdict for the
    requested card and the changes that fit; `peak_*` null when the model is unknown."""
    est = estimate(w)
    payload: dict[str, object] = {
        "peak_allocated_bytes": None,
        "peak_vram_bytes": None,
        "terms": None,
        "architecture": None,
        "gpu_model": gpu_model,
        "gpu_mem_bytes": gpu_mem_bytes,
        "fits": None,
        "changes_that_fit": [],
        "features": w.as_dict(),
        "assumed": {},
        "unknown": sorted(set(unknown)),
    }
    if est is None:
        payload["unknown"] = sorted({*unknown, "model"})
        return payload
    payload |= {
        "peak_allocated_bytes": round(est.peak_allocated_bytes),
        "peak_vram_bytes": round(est.peak_vram_bytes),
        "terms": {k: round(v) for k, v in est.terms.items()},
        "architecture": est.architecture,
        "assumed": est.assumed,
    }
    if gpu_mem_bytes:
        ok = fits(est, gpu_mem_bytes)
        payload["fits"] = ok
        if not ok:
            payload["changes_that_fit"] = changes_that_fit(w, gpu_mem_bytes, cards)
    elif cards:
        payload["changes_that_fit"] = changes_that_fit(w, None, cards)
    return payload


def relative_error(predicted: float, measured: float) -> float:
    """|predicted - measured| / measured."""
    return abs(predicted - measured) / measured if measured else math.inf
