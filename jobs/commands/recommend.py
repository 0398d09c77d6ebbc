"""`jobfit recommend SCRIPT --cluster C --user U`: what the script will need, from the champion models."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from features.query import history_index
from features.table import TARGETS, filter_usable, with_script_key, with_targets
from features.workload import entry_points, referenced_files
from jobs.commands import add_common
from jobs.commands.estimate import read_named
from jobs.context import Context, UsageError
from jobs.io.prediction import gpu_memory_bytes, read_jobs
from models.recommend import MIN_USER_HISTORY
from models.serving.answer import recommendation
from models.serving.code import code_estimate
from pipelines.silver.scripts import parse_script

if TYPE_CHECKING:  # MLflow loads in a second or more: only the commands that use it import it
    from mlflow import MlflowClient


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "recommend",
        help="recommend --mem, --cpus-per-task, --gres=gpu, --time for a job script before it runs",
        description="Parse the job script, build its submit-time features with the user's history on the "
        "cluster, and ask each target's champion model (MLflow alias `champion`) for a calibrated "
        "recommendation. Answers 'not enough history' (and why) when the user has fewer than "
        f"{MIN_USER_HISTORY} finished jobs on the cluster.",
    )
    p.add_argument("script", help="the job script file ('-' reads standard input)")
    p.add_argument("--user", required=True, metavar="U", help="the user who will submit it")
    p.add_argument(
        "--fresh-history",
        action="store_true",
        help="read the user's history from silver.jobs (starts Spark) instead of the snapshot the last "
        "`jobfit train` logged (fast, but only as fresh as that training run)",
    )
    add_common(p, cluster_required=True)
    p.set_defaults(func=run)


def _read_script(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"no such script file: {path}")
    try:
        return file.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


def user_history(
    ctx: Context, client: MlflowClient, cluster: str, user: str, fresh: bool, gpu_mem: dict[str, float]
) -> tuple[pd.DataFrame, dict[str, object]]:
    """The user's finished jobs on the cluster (targets computed with `gpu_mem`, GPU model -> bytes) and
    where they came from: the newest snapshot `jobfit train` logged, or silver.jobs when `fresh` or when
    there is no snapshot."""
    from jobs.io.registry import load_history_snapshot

    snapshot = None if fresh else load_history_snapshot(client, cluster)
    if snapshot is not None:
        frame, info = snapshot
        return frame[frame["user"] == user], info
    history = filter_usable(read_jobs(ctx, cluster, user))
    info = {"source": "silver.jobs", "run_id": None, "taken_at": str(ctx.now()), "newest_end_ts": None}
    history = with_script_key(with_targets(history, gpu_mem))
    if len(history):
        info["newest_end_ts"] = str(history["end_ts"].max())
    return history, info


def recommend(
    ctx: Context,
    text: str,
    cluster: str,
    user: str,
    fresh_history: bool = False,
    sources: dict[str, str] | None = None,
) -> dict[str, object]:
    """The recommendation payload (documented in docs/cli.md) for one script, cluster and user; `sources`
    are the files its entry points name (path as named -> text), read for the code-aware estimate."""
    from jobs.io.registry import configure, load_champion

    info = parse_script(text)
    client = configure(ctx.settings)
    champions = {t: load_champion(client, cluster, t) for t in TARGETS}
    if not any(champions.values()):
        raise UsageError(
            f"no champion models for cluster {cluster!r} (run `jobfit train --cluster {cluster}`)"
        )
    config = ctx.cluster_config(cluster)[0]  # read once: a cluster without a yaml is said once
    gpu_mem = gpu_memory_bytes(config)
    history, source = user_history(ctx, client, cluster, user, fresh_history, gpu_mem)
    code = code_estimate(text, sources, info, gpu_mem)
    return recommendation(
        info,
        cluster,
        user,
        pd.Timestamp(ctx.now()),
        config,
        champions,
        history_index(history),
        source,
        gpu_mem,
        code,
    )


def run(ctx: Context, args: argparse.Namespace) -> int:
    text = _read_script(args.script)
    folder = Path.cwd() if args.script == "-" else Path(args.script).resolve().parent
    sources = read_named(folder, referenced_files(entry_points(text)))
    payload = recommend(ctx, text, args.cluster, args.user, args.fresh_history, sources)
    ctx.emit(payload, args.json, text=_text(payload))
    return 0


def _text(payload: dict[str, object]) -> str:
    source = payload["history_source"]
    seen = f"history from {source['source']} as of {source['taken_at']}"  # type: ignore[index]
    head = f"{payload['user']} on {payload['cluster']} ({payload['history_jobs']} finished jobs; {seen})"
    verdict = _verdict(payload.get("code_estimate"))  # type: ignore[arg-type]
    if payload["status"] != "ok":
        vram = payload["targets"].get("vram", {})  # type: ignore[attr-defined]
        lines = [f"{head}: not enough history — {payload['why']}"]
        if vram.get("status") == "code_estimate":
            flag = f"#SBATCH {vram['flag']} " if "flag" in vram else ""
            lines.append(f"  vram from the code alone: {flag}({vram['why']})")
        return "\n".join(lines + verdict)
    lines = [f"{head}: #SBATCH {' '.join(payload['flags'])}"]  # type: ignore[arg-type]
    for target, info in payload["targets"].items():  # type: ignore[attr-defined]
        if info["status"] != "ok":
            lines.append(f"  {target}: {info['status']} ({info['why']})")
    saving = payload["expected_saving"] or {}
    parts = [f"{v} {k.removesuffix('_h')}-h" for k, v in saving.items() if v is not None and k != "usd"]
    if saving.get("usd") is not None:
        parts.append(f"${saving['usd']:.2f}")
    lines.append(
        "  expected saving per run: " + (", ".join(parts) or "unknown (the script states no request)")
    )
    return "\n".join(lines + verdict)


def _verdict(code: dict[str, object] | None) -> list[str]:
    """The code-aware estimate as lines: the peak, the fit verdict and the changes that fit."""
    if not code:
        return []
    if code.get("status") != "ok":
        return [f"  code estimate: {code.get('status')} ({code.get('why')})"]
    peak = float(code["peak_vram_bytes"]) / 1e9  # type: ignore[arg-type]
    line = f"  code estimate: {peak:.2f} GB per GPU ({code.get('architecture')})"
    if code.get("fits") is False:
        line += f" — WILL NOT FIT one {code['gpu_model']} ({float(code['gpu_mem_bytes']) / 1e9:.2f} GB)"  # type: ignore[arg-type]
    elif code.get("fits"):
        line += f", fits one {code['gpu_model']}"
    out = [line]
    for change in code.get("changes_that_fit") or []:  # type: ignore[attr-defined]
        out.append(f"    fits with: {change['what']} -> {float(change['peak_vram_bytes']) / 1e9:.2f} GB")
    return out
