"""What a job runs, read without running it: the entry points of a job script, the files they name, and the
static features of the workload (model, method, precision, batch, sequence, sharding, ...) from the
script's arguments, its YAML/JSON configs and its Python source (`ast` only). Pure: files come in as a
{path as named: text} mapping that the submit hooks, `jobfit estimate` and the ingest read (bounded)."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml

from features.vram import Workload
from pipelines.silver.scripts import script_commands

# Bounds on what is read and sent at submit time (the request body limit is 1 MiB).
MAX_SOURCE_BYTES = 256 * 1024
MAX_SOURCES = 8
MAX_TOTAL_SOURCE_BYTES = 512 * 1024
MAX_CONFIG_NODES = 20_000
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's safe loader: 10x faster

# Options whose value is a config file the entry point reads.
CONFIG_OPTIONS = (
    "--config",
    "--config_file",
    "--config-file",
    "--cfg",
    "--deepspeed",
    "--deepspeed_config",
    "--ds_config",
    "--fsdp_config",
)
_CONFIG_EXT = (".yaml", ".yml", ".json")
_PY = re.compile(r"^python(?:\d+(?:\.\d+)?)?$")
# Launcher options that take no value (everything else given as `--opt value` consumes the next word).
_NO_VALUE = {
    "--standalone",
    "--no_python",
    "--no-python",
    "--multi_gpu",
    "--use_deepspeed",
    "--use_fsdp",
    "--cpu",
    "-u",
    "-O",
    "-B",
    "--no_local_rank",
    "--force_multi",
}


@dataclass(frozen=True)
class EntryPoint:
    """One command of the script that starts a workload: the launcher, what it runs (a .py path, a
    module, or a litgpt subcommand), the launcher's own options and the workload's arguments."""

    launcher: str
    target: str
    launcher_options: dict[str, str | None]
    args: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "launcher": self.launcher,
            "target": self.target,
            "launcher_options": self.launcher_options,
            "args": list(self.args),
        }


def _options(words: list[str]) -> tuple[dict[str, str | None], list[str]]:
    """Leading `--opt[=v]`/`--opt v`/`-x v` words as a dict, and the words after them."""
    opts: dict[str, str | None] = {}
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-m":
        word = words[i]
        name, eq, value = word.partition("=")
        if eq:
            opts[name] = value
        elif name in _NO_VALUE or i + 1 >= len(words) or words[i + 1].startswith("-") or _is_py(words[i + 1]):
            opts[name] = None
        else:
            opts[name] = words[i + 1]
            i += 1
        i += 1
    return opts, words[i:]


def _is_py(word: str) -> bool:
    return word.endswith(".py")


def _after_launcher(launcher: str, words: list[str]) -> EntryPoint | None:
    opts, rest = _options(words)
    if rest[:1] == ["-m"] and len(rest) >= 2:
        return EntryPoint(launcher, f"-m {rest[1]}", opts, tuple(rest[2:]))
    if "--module" in opts or "-m" in opts:
        return EntryPoint(launcher, f"-m {rest[0]}", opts, tuple(rest[1:])) if rest else None
    if rest:
        return EntryPoint(launcher, rest[0], opts, tuple(rest[1:]))
    return None


def _entry(words: list[str]) -> EntryPoint | None:
    """The entry point a command line starts, wherever its launcher sits (after srun, env, time, ...)."""
    for i, word in enumerate(words):
        base = os.path.basename(word)
        rest = words[i + 1 :]
        if base == "litgpt" and rest:
            sub = rest[0]
            args = rest[1:]
            if sub == "finetune" and args and not args[0].startswith("-") and not args[0].count("/"):
                sub, args = f"finetune_{args[0]}", args[1:]
            return EntryPoint("litgpt", sub, {}, tuple(args))
        if base == "torchrun":
            return _after_launcher("torchrun", rest)
        if base == "deepspeed" and rest:
            return _after_launcher("deepspeed", rest)
        if base == "accelerate" and rest[:1] == ["launch"]:
            return _after_launcher("accelerate", rest[1:])
        if _PY.match(base):
            opts, after = _options(rest)
            if after[:1] == ["-m"] and len(after) >= 2:
                module = after[1]
                if module in ("torch.distributed.run", "torch.distributed.launch"):
                    return _after_launcher("torchrun", after[2:])
                if module == "litgpt":
                    return _entry(["litgpt", *after[2:]])
                return EntryPoint("python", f"-m {module}", opts, tuple(after[2:]))
            if after and after[0] != "-c":
                return EntryPoint("python", after[0], opts, tuple(after[1:]))
            return None
    return None


def entry_points(script_text: str) -> list[EntryPoint]:
    """Every workload the script starts, in order (shell words; a line that does not split is skipped)."""
    out: list[EntryPoint] = []
    for line in script_commands(script_text).splitlines():
        for part in re.split(r"\s*(?:&&|\|\||;)\s*", line):
            try:
                words = shlex.split(part)
            except ValueError:
                continue
            entry = _entry(words)
            if entry is not None:
                out.append(entry)
    return out


def _option_values(args: tuple[str, ...] | list[str]) -> dict[str, str | None]:
    """`--key value`, `--key=value` and bare `--flag` arguments (later repeats win)."""
    values: dict[str, str | None] = {}
    i = 0
    while i < len(args):
        word = args[i]
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            if eq:
                values[name] = value
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                values[name] = args[i + 1]
                i += 1
            else:
                values[name] = None
        i += 1
    return values


def referenced_files(entries: list[EntryPoint]) -> list[str]:
    """The files the entry points name, as named: the .py each runs, the config files their options and
    positional arguments name (the accelerate config file too)."""
    names: list[str] = []
    for entry in entries:
        if entry.target.endswith(".py"):
            names.append(entry.target)
        for opt in ("--config_file", "--deepspeed_config_file", "--deepspeed", "--hostfile"):
            value = entry.launcher_options.get(opt)
            if value and value.endswith(_CONFIG_EXT):
                names.append(value)
        values = _option_values(entry.args)
        for opt in CONFIG_OPTIONS:
            value = values.get(opt[2:])
            if value and value.endswith(_CONFIG_EXT):
                names.append(value)
        names += [a for a in entry.args if not a.startswith("-") and a.endswith(_CONFIG_EXT)]
    seen: list[str] = []
    for name in names:
        if name not in seen:
            seen.append(name)
    return seen[:MAX_SOURCES]


# --- reading configs and sources --------------------------------------------------------------------


def _flatten(value: object, prefix: str, out: dict[str, object], budget: list[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out, budget)
    else:
        out[prefix] = value


def parse_config(text: str) -> dict[str, object]:
    """A YAML or JSON config as dotted keys -> leaf values (YAML safe loader; {} when unreadable)."""
    if len(text.encode("utf-8", "replace")) > MAX_SOURCE_BYTES:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = yaml.load(text, Loader=_YAML_LOADER)  # a safe loader (libyaml when built)
        except yaml.YAMLError:
            return {}
    out: dict[str, object] = {}
    if isinstance(data, dict):
        _flatten(data, "", out, [MAX_CONFIG_NODES])
    return out


def _literal(node: ast.AST) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        if isinstance(node, ast.Attribute):  # torch.bfloat16, torch.optim.AdamW
            return node.attr
        if isinstance(node, ast.Name):
            return node.id
        return None


def _call_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def python_facts(source: str) -> dict[str, object]:
    """What a Python entry point states literally (never run): argparse defaults, keyword arguments of
    TrainingArguments/LoraConfig/BitsAndBytesConfig/DataLoader/..., `from_pretrained("...")`,
    `gradient_checkpointing_enable()`, the optimizer class constructed. {} when it does not parse."""
    if len(source.encode("utf-8", "replace")) > MAX_SOURCE_BYTES:
        return {}
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return {}
    facts: dict[str, object] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        if name == "add_argument" and node.args:
            flag = _literal(node.args[0])
            default = next((kw.value for kw in node.keywords if kw.arg == "default"), None)
            if isinstance(flag, str) and flag.startswith("--") and default is not None:
                facts.setdefault(f"default:{flag[2:]}", _literal(default))
        elif name == "from_pretrained" and node.args:
            model = _literal(node.args[0])
            if isinstance(model, str):
                facts.setdefault("from_pretrained", model)
            for kw in node.keywords:
                if kw.arg:
                    facts.setdefault(kw.arg, _literal(kw.value))
        elif name in ("gradient_checkpointing_enable", "enable_gradient_checkpointing"):
            facts["gradient_checkpointing"] = True
        elif name in ("AdamW", "Adam", "SGD", "AdamW8bit", "PagedAdamW8bit", "Adam8bit", "Adafactor", "Lion"):
            facts.setdefault("optimizer_class", name)
        elif name in ("LoraConfig", "get_peft_model"):
            facts["peft"] = "lora"
        if name in (
            "TrainingArguments",
            "Seq2SeqTrainingArguments",
            "SFTConfig",
            "LoraConfig",
            "BitsAndBytesConfig",
            "DataLoader",
            "Trainer",
            "Fabric",
            "FSDPStrategy",
            "DeepSpeedStrategy",
        ):
            prefix = "lora." if name == "LoraConfig" else ""
            for kw in node.keywords:
                if kw.arg:
                    facts[f"{prefix}{kw.arg}"] = _literal(kw.value)
    return facts


# --- features ---------------------------------------------------------------------------------------

# Feature -> the config/argument keys that state it (last dotted component, `-` read as `_`), first wins.
KEYS: dict[str, tuple[str, ...]] = {
    "model": (
        "model_name_or_path",
        "pretrained_model_name_or_path",
        "base_model",
        "model_name",
        "model_id",
        "model",
        "checkpoint_dir",
        "from_pretrained",
    ),
    "micro_batch": (
        "micro_batch_size",
        "per_device_train_batch_size",
        "train_micro_batch_size_per_gpu",
        "batch_size",
    ),
    "seq_len": (
        "max_seq_length",
        "max_seq_len",
        "sequence_len",
        "seq_len",
        "seq_length",
        "cutoff_len",
        "max_length",
        "block_size",
        "model_max_length",
    ),
    "precision": ("precision", "mixed_precision", "torch_dtype", "dtype", "bnb_4bit_compute_dtype"),
    "quantization": ("quantize", "quantization", "bnb_4bit_quant_type"),
    "lora_rank": ("lora_r", "lora_rank", "lora.r"),
    "lora_dropout": ("lora_dropout", "lora.dropout"),
    "gradient_checkpointing": (
        "gradient_checkpointing",
        "activation_checkpointing",
        "use_gradient_checkpointing",
        "fsdp_activation_checkpointing",
    ),
    "optimizer": ("optim", "optimizer", "optimizer.type", "optimizer.class_path", "optimizer_class"),
    "zero_stage": ("zero_optimization.stage", "zero_stage"),
    "num_workers": ("num_workers", "dataloader_num_workers", "preprocessing_num_workers"),
    "max_new_tokens": ("max_new_tokens",),
}
_DEVICE_KEYS = ("devices", "num_processes", "nproc_per_node", "num_gpus", "world_size")
_NODE_KEYS = ("num_nodes", "nnodes", "num_machines")


def _norm(key: str) -> str:
    return key.replace("-", "_").lower()


def _lookup(values: Mapping[str, object], names: tuple[str, ...]) -> tuple[str, object] | None:
    """The first of `names` present (by full dotted key or by its last component), as (key, value)."""
    by_last: dict[str, tuple[str, object]] = {}
    for key, value in values.items():
        if value is None or value == "":
            continue
        by_last.setdefault(_norm(key).rsplit(".", 1)[-1], (key, value))
        by_last.setdefault(_norm(key), (key, value))
    for name in names:
        if name in by_last:
            return by_last[name]
    return None


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        number = int(float(str(value)))
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _fraction(value: object) -> float | None:
    """A probability in [0, 1) (a dropout rate), else None."""
    if isinstance(value, bool):
        return None
    try:
        number = float(str(value))
    except (TypeError, ValueError):
        return None
    return number if 0.0 <= number < 1.0 else None


def _truthy(value: object) -> bool | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, dict):
        return _truthy(value.get("enabled")) if "enabled" in value else bool(value)
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", "null", "none", ""):
        return False
    return None


def _precision(value: object, values: Mapping[str, object]) -> str | None:
    text = str(value).lower() if value is not None else ""
    table = {
        "bf16-true": "bf16-true",
        "bf16-mixed": "bf16-mixed",
        "bf16": "bf16-mixed",
        "bfloat16": "bf16-true",
        "16-mixed": "16-mixed",
        "fp16": "16-mixed",
        "16": "16-mixed",
        "float16": "16-true",
        "16-true": "16-true",
        "32-true": "32-true",
        "32": "32-true",
        "fp32": "32-true",
        "float32": "32-true",
        "no": "32-true",
    }
    if text in table:
        return table[text]
    for flag, name in (
        ("bf16", "bf16-mixed"),
        ("fp16", "16-mixed"),
        ("bf16.enabled", "bf16-mixed"),
        ("fp16.enabled", "16-mixed"),
    ):
        if _truthy(values.get(flag)) is True:
            return name
    return None


def _quantization(values: Mapping[str, object]) -> str | None:
    hit = _lookup(values, KEYS["quantization"])
    text = str(hit[1]).lower() if hit else ""
    double = _truthy(values.get("bnb_4bit_use_double_quant")) is True
    if "nf4" in text or "fp4" in text:
        kind = "fp4" if "fp4" in text else "nf4"
        return f"{kind}-dq" if ("-dq" in text or double) else kind
    if "int8" in text or _truthy(values.get("load_in_8bit")) is True:
        return "int8"
    if _truthy(values.get("load_in_4bit")) is True or str(values.get("adapter", "")).lower() == "qlora":
        return "nf4-dq" if double else "nf4"
    return None


def _lora_targets(values: Mapping[str, object]) -> tuple[str, ...] | None:
    litgpt = {t: values.get(f"lora_{t}") for t in ("query", "key", "value", "projection", "mlp", "head")}
    if any(v is not None for v in litgpt.values()):
        return tuple(t for t, v in litgpt.items() if _truthy(v) is True)
    modules = (
        values.get("lora.target_modules") or values.get("target_modules") or values.get("lora_target_modules")
    )
    if isinstance(modules, str):
        modules = [m.strip() for m in modules.split(",")]
    if isinstance(modules, list):
        names = " ".join(str(m) for m in modules).lower()
        if "all" in names:
            return ("query", "key", "value", "projection", "mlp")
        mapping = {
            "q_proj": "query",
            "k_proj": "key",
            "v_proj": "value",
            "o_proj": "projection",
            "query_key_value": "query",
        }
        found = {t for m, t in mapping.items() if m in names}
        if re.search(r"gate_proj|up_proj|down_proj|fc1|fc2|dense_h_to_4h", names):
            found.add("mlp")
        return tuple(sorted(found)) or None
    return None


def _method(
    entry: EntryPoint | None, values: Mapping[str, object], quant: str | None
) -> tuple[str | None, str]:
    target = (entry.target if entry else "").lower()
    if entry and entry.launcher == "litgpt":
        if target in ("generate", "chat", "serve") or target.startswith("generate"):
            return "inference", "litgpt subcommand"
        if "adapter_v2" in target:
            return "adapter_v2", "litgpt subcommand"
        if "adapter" in target:
            return "adapter", "litgpt subcommand"
        if "lora" in target:
            return ("qlora" if quant else "lora"), "litgpt subcommand"
        if target in ("finetune", "finetune_full", "pretrain"):
            return "full", "litgpt subcommand"
    declared = str(values.get("finetuning_type") or values.get("adapter") or values.get("peft") or "").lower()
    if (
        declared in ("lora", "qlora")
        or _lookup(values, KEYS["lora_rank"])
        or values.get("use_peft") in (True, "true")
    ):
        return ("qlora" if quant else "lora"), "config"
    if declared == "full":
        return "full", "config"
    if re.search(r"generate|infer|predict|serve", target):
        return "inference", "entry point name"
    if re.search(r"lora", target):
        return ("qlora" if quant else "lora"), "entry point name"
    return None, ""


@dataclass
class Capture:
    """The result of reading one job script: its entry points, the files they name (read or not), the
    workload features with where each came from, and what could not be known."""

    entries: list[EntryPoint]
    files: list[str]
    read: list[str]
    workload: Workload
    unknown: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "entry_points": [e.as_dict() for e in self.entries],
            "files_named": self.files,
            "files_read": self.read,
            "unknown": self.unknown,
            "notes": self.notes,
        }


def _source_for(name: str, sources: Mapping[str, str]) -> str | None:
    if name in sources:
        return sources[name]
    base = os.path.normpath(name)
    for key, text in sources.items():
        if os.path.normpath(key) == base or os.path.basename(key) == os.path.basename(name):
            return text
    return None


def capture(script_text: str, sources: Mapping[str, str] | None = None, gpus: int | None = None) -> Capture:
    """Read a job script's workload: its last training/inference entry point, the configs and Python it
    names (from `sources`, {path as named: text}), with the script's own arguments overriding config
    values and both overriding the Python's literal defaults. `gpus`: the job's GPUs per node (the
    world size a distributed launcher without explicit counts gets)."""
    sources = sources or {}
    entries = entry_points(script_text)
    files = referenced_files(entries)
    entry = entries[-1] if entries else None
    layers: list[tuple[str, dict[str, object]]] = []  # lowest precedence first
    read: list[str] = []
    for name in files:
        text = _source_for(name, sources)
        if text is None:
            continue
        read.append(name)
        if name.endswith(".py"):
            facts = python_facts(text)
            defaults = {k.removeprefix("default:"): v for k, v in facts.items() if k.startswith("default:")}
            layers.append((name, defaults | {k: v for k, v in facts.items() if not k.startswith("default:")}))
        else:
            layers.append((name, parse_config(text)))
    if entry is not None:
        args = {k: v for k, v in _option_values(entry.args).items()}
        args = {k: (True if v is None else v) for k, v in args.items()}
        if entry.launcher == "litgpt" and entry.args and not entry.args[0].startswith("-"):
            args.setdefault("checkpoint_dir", entry.args[0])
        layers.append(("script arguments", args))
        launcher = {k.lstrip("-"): (True if v is None else v) for k, v in entry.launcher_options.items()}
        layers.append((f"{entry.launcher} options", launcher))
    values: dict[str, object] = {}
    origin: dict[str, str] = {}
    for where, layer in layers:
        for key, value in layer.items():
            values[key] = value
            origin[key] = where
    # Dotted config keys are also visible by their last component (`train.micro_batch_size`).
    for key in list(values):
        if "." in key:
            last = key.rsplit(".", 1)[-1]
            if last not in values or origin.get(last, "") != "script arguments":
                values.setdefault(last, values[key])
                origin.setdefault(last, origin[key])
    return _features(entries, entry, files, read, values, origin, gpus)


def _features(
    entries: list[EntryPoint],
    entry: EntryPoint | None,
    files: list[str],
    read: list[str],
    values: dict[str, object],
    origin: dict[str, str],
    gpus: int | None,
) -> Capture:
    provenance: dict[str, str] = {}

    def get(feature: str) -> object:
        hit = _lookup(values, KEYS[feature])
        if hit is None:
            return None
        provenance[feature] = f"{hit[0]} ({origin.get(hit[0], '?')})"
        return hit[1]

    model = get("model")
    quant = _quantization(values)
    method, method_from = _method(entry, values, quant)
    if method:
        provenance["method"] = method_from
    precision = _precision(get("precision"), values)
    devices = _lookup(values, _DEVICE_KEYS)
    nodes = _lookup(values, _NODE_KEYS)
    world = (_int(devices[1]) if devices else None) or None
    if world is None and entry and entry.launcher in ("torchrun", "deepspeed", "accelerate") and gpus:
        world = gpus
    if world and nodes and _int(nodes[1]):
        world *= _int(nodes[1]) or 1
    strategy = None
    stage = _int(get("zero_stage"))
    distributed = str(values.get("distributed_type") or "").lower()
    fsdp = values.get("fsdp") or values.get("fsdp_config") or values.get("fsdp_sharding_strategy")
    if stage is not None or "deepspeed" in distributed or (entry and entry.launcher == "deepspeed"):
        strategy = "deepspeed"
    elif fsdp or "fsdp" in distributed or str(values.get("strategy", "")).lower() == "fsdp":
        strategy = "fsdp"
        sharding = str(values.get("fsdp_sharding_strategy") or values.get("fsdp") or "full_shard").lower()
        stage = 2 if ("grad_op" in sharding or sharding == "2") else 0 if "no_shard" in sharding else 3
    elif entry and entry.launcher == "litgpt" and world and world > 1 and method != "inference":
        # LitGPT's finetune/pretrain scripts use FSDPStrategy with activation checkpointing per Block and
        # state_dict_type="full" when devices > 1 (litgpt/finetune/*.py).
        strategy, stage = "fsdp", 3
    ckpt_value = get("gradient_checkpointing")
    ckpt = _truthy(ckpt_value) if ckpt_value is not None else None
    if ckpt is None and strategy == "fsdp" and entry and entry.launcher == "litgpt":
        ckpt = True
        provenance["gradient_checkpointing"] = "litgpt FSDP default (activation_checkpointing_policy={Block})"
    offload = (
        any(
            str(v).lower() == "cpu"
            for k, v in values.items()
            if "offload_optimizer.device" in k or k.endswith("offload_optimizer_device")
        )
        or _truthy(values.get("cpu_offload")) is True
        or _truthy(values.get("fsdp_offload_params")) is True
    )
    optimizer = get("optimizer")
    opt_text = (
        str(optimizer).rsplit(".", 1)[-1].lower().replace("_torch", "").replace("_hf", "")
        if optimizer
        else None
    )
    micro = get("micro_batch")
    if micro is None and entry and entry.launcher == "litgpt" and method != "inference":
        micro = None  # left to the estimate's stated assumption
    workload = Workload(
        model=str(model) if model is not None else None,
        params=None,
        method=method,
        lora_rank=_int(get("lora_rank")),
        lora_targets=_lora_targets(values) or ("query", "value"),
        lora_dropout=_fraction(get("lora_dropout")),
        quantization=quant,
        precision=precision,
        micro_batch=_int(micro),
        seq_len=_int(get("seq_len")),
        max_new_tokens=_int(get("max_new_tokens")),
        gradient_checkpointing=ckpt,
        optimizer=opt_text,
        strategy=strategy,
        zero_stage=stage,
        world_size=world,
        cpu_offload=offload or None,
        num_workers=_int(get("num_workers")),
        provenance=provenance,
    )
    if workload.params is None and workload.model:
        from features.scripts import parse_model_params

        workload = _with_params(workload, parse_model_params(workload.model))
    unknown = [
        name
        for name, value in (
            ("model", workload.model),
            ("method", workload.method),
            ("precision", workload.precision),
            ("micro_batch", workload.micro_batch if method != "inference" else 1),
            ("seq_len", workload.seq_len),
        )
        if value is None
    ]
    notes = [f"{name} named but not read" for name in files if name not in read]
    if entry is None:
        notes.append("no python/torchrun/accelerate/deepspeed/litgpt entry point in the script")
    return Capture(entries, files, read, workload, unknown, notes)


def _with_params(w: Workload, params: float | None) -> Workload:
    from dataclasses import replace

    return replace(w, params=params)


def bounded_sources(named: Mapping[str, bytes | str]) -> dict[str, str]:
    """Sources kept within the submit-time bounds (MAX_SOURCES files, MAX_SOURCE_BYTES each,
    MAX_TOTAL_SOURCE_BYTES in all; a larger file is left out, not cut)."""
    out: dict[str, str] = {}
    total = 0
    for name, data in named.items():
        raw = data.encode("utf-8", "replace") if isinstance(data, str) else data
        if (
            len(out) >= MAX_SOURCES
            or len(raw) > MAX_SOURCE_BYTES
            or total + len(raw) > MAX_TOTAL_SOURCE_BYTES
        ):
            continue
        out[name] = raw.decode("utf-8", "replace")
        total += len(raw)
    return out
