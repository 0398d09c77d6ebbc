"""`jobfit estimate SCRIPT [--gpu-model M] [--cluster C] [--json]`: the code-aware VRAM estimate of one job
script, reading the entry point and the configs it names as the submit hooks do (no warehouse, no Spark)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from features.vram import GIB, card_bytes, estimate_payload
from features.workload import MAX_SOURCE_BYTES, bounded_sources, capture, entry_points, referenced_files
from jobs.commands import add_common
from jobs.context import Context, UsageError
from pipelines.silver.scripts import parse_script


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "estimate",
        help="estimate a job script's peak GPU memory from its own code and config, and say if it fits",
        description="Read the job script's entry points (python X.py, torchrun, accelerate launch, "
        "deepspeed, python -m, litgpt ... --config C.yaml) and the files they name (relative to the script's "
        "folder, then the current directory; at most 8 files of 256 KiB), derive the model, method, "
        "precision, batch, sequence and sharding without running anything, and estimate the peak GPU memory "
        "per GPU with each "
        "term (docs/vram.md). The card is --gpu-model, else the script's --gres/--gpus type.",
    )
    p.add_argument("script", help="the job script file ('-' reads standard input; files resolve from .)")
    p.add_argument(
        "--gpu-model", metavar="M", help="the card to check against (a cluster yaml model or a known card)"
    )
    add_common(p)
    p.set_defaults(func=run)


def _read(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def read_named(folder: Path, names: list[str]) -> dict[str, str]:
    """The files a script names, read relative to its folder, then the current directory (bounded)."""
    found: dict[str, str] = {}
    for name in names:
        for base in (folder, Path.cwd()):
            text = _read(Path(name) if Path(name).is_absolute() else base / name)
            if text is not None:
                found[name] = text
                break
    return bounded_sources(found)


def run(ctx: Context, args: argparse.Namespace) -> int:
    if args.script == "-":
        text, folder = sys.stdin.read(), Path.cwd()
    else:
        path = Path(args.script)
        if not path.is_file():
            raise UsageError(f"no such script file: {args.script}")
        text, folder = path.read_text(encoding="utf-8", errors="replace"), path.resolve().parent
    info = parse_script(text)
    sources = read_named(folder, referenced_files(entry_points(text)))
    cap = capture(text, sources, gpus=info.req_gpus)
    cards: dict[str, float] = {}
    if args.cluster:
        config = ctx.cluster_config(args.cluster)[0]
        cards = {name: spec.memory_gib * GIB for name, spec in config.gpu_models.items()}
    gpu_model = args.gpu_model or info.gpu_type
    mem = card_bytes(gpu_model, cards)
    if gpu_model and mem is None:
        raise UsageError(
            f"unknown GPU model {gpu_model!r}: name one of the cluster's (--cluster) or a known card"
        )
    payload = estimate_payload(
        cap.workload, gpu_model, mem, sorted(cards.items(), key=lambda c: c[1]), cap.unknown
    )
    payload["capture"] = cap.as_dict()
    ctx.emit(payload, args.json, text=_text(payload))
    return 0


def _gb(value: object) -> str:
    return f"{float(value) / 1e9:.2f} GB" if isinstance(value, (int, float)) else "?"  # type: ignore[arg-type]


def _text(p: dict[str, object]) -> str:
    if p["peak_allocated_bytes"] is None:
        return (
            "no estimate: the model is unknown ("
            + ", ".join(p["capture"]["notes"] or ["no model named"])
            + ")"
        )  # type: ignore[index]
    terms = p["terms"]
    lines = [
        f"peak allocated {_gb(p['peak_allocated_bytes'])}, with CUDA context and allocator reserve "
        f"{_gb(p['peak_vram_bytes'])} per GPU ({p['architecture']})",
        "  " + ", ".join(f"{k} {_gb(v)}" for k, v in terms.items()),  # type: ignore[union-attr]
    ]
    if p["assumed"]:
        lines.append("  assumed: " + ", ".join(f"{k}={v}" for k, v in p["assumed"].items()))  # type: ignore[union-attr]
    if p["fits"] is not None:
        card = f"{p['gpu_model']} ({_gb(p['gpu_mem_bytes'])})"
        lines.append(f"  fits one {card}" if p["fits"] else f"  WILL NOT FIT one {card}")
    for change in p["changes_that_fit"]:  # type: ignore[union-attr]
        lines.append(f"  fits with: {change['what']} -> {_gb(change['peak_vram_bytes'])}")
    return "\n".join(lines)
