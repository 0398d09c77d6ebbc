"""`jobfit train --cluster C`: fit, calibrate and register one model per target; move `champion` on a win."""

from __future__ import annotations

import argparse

from features.table import TARGETS
from jobs.commands import add_common
from jobs.context import Context, UsageError
from jobs.stages.train import train
from models.train import QUANTILES, SPREADS, TrainParams


def target_list(value: str) -> list[str]:
    """argparse type for --targets mem,vram,cpus,runtime."""
    names = [t.strip() for t in value.split(",") if t.strip()]
    unknown = [t for t in names if t not in TARGETS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown target(s) {unknown}; choose from {', '.join(TARGETS)}")
    return names


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train the per-cluster prediction models (LightGBM quantile + conformal) and log them to MLflow",
        description="Build the submit-time feature table from silver.jobs/silver.scripts, train LightGBM "
        "quantile models per target (peak memory, peak VRAM, CPUs used, runtime) and a classifier of the "
        "share of its request a job needs, pick the variant (quantile and score scale, or the risk "
        "allocation over request fractions) on a later calibration slice and calibrate it there to the "
        "configured under-provision rate (90 % confidence in each time block of the slice; too few jobs: "
        "the request), measure it and every baseline on the newest "
        "slice, and register it in MLflow as jobfit-<cluster>-<target>. The `champion` alias moves only "
        "when the new version beats the champion on that newest slice. Also logs the history snapshot "
        "`jobfit recommend` reads.",
    )
    p.add_argument("--targets", type=target_list, default=list(TARGETS), help="comma-separated (default all)")
    p.add_argument("--rounds", type=int, default=TrainParams.num_boost_round, help="boosting rounds")
    p.add_argument(
        "--quantile",
        type=float,
        default=None,
        help=f"LightGBM quantile (0-1); default: the calibration slice picks among {QUANTILES} and the "
        "request-fraction risk allocation (fixing --quantile or --spread leaves the latter out)",
    )
    p.add_argument(
        "--spread",
        choices=SPREADS,
        default=None,
        help="conformal score scaling: none, or history (by the user's own spread); default: the "
        "calibration slice picks",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=TrainParams.num_threads,
        help="LightGBM threads (default 1: on a 2-core machine 2 threads trained 1.8x faster when idle, "
        "and many times slower while other work shared the cores)",
    )
    add_common(p, cluster_required=True)
    p.set_defaults(func=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    if args.rounds < 1 or args.threads < 1 or (args.quantile is not None and not 0 < args.quantile < 1):
        raise UsageError("--rounds and --threads must be >= 1 and --quantile between 0 and 1")
    params = TrainParams(
        quantile=args.quantile, num_boost_round=args.rounds, spread=args.spread, num_threads=args.threads
    )
    report = train(ctx, args.cluster, args.targets, params)
    ctx.emit(report, args.json, text=_text(report))
    return 0


def _text(report: dict[str, object]) -> str:
    lines = [f"cluster {report['cluster']}: {report['jobs']} finished jobs, target rate {report['rate']:.1%}"]
    for target, info in report["targets"].items():  # type: ignore[attr-defined]
        model = info["metrics"]["model"]
        state = "champion" if info["promoted"] else "not promoted"
        lines.append(
            f"  {target:8s} v{info['version']} ({info['variant']['name']}; {state}: {info['why']}); "
            "held-out under-provision "
            f"{model['under_rate']:.1%} ({model['under_rate_weighted']:.1%} resource-weighted), "
            f"net reclaimed {model['net_reclaimed_h']:.4g} (gross {model['reclaimed_h']:.4g}, misses "
            f"{model['miss_cost_h']:.4g}) of {model['reclaimable_h']:.4g} h"
        )
    for target, why in report["skipped"].items():  # type: ignore[attr-defined]
        lines.append(f"  {target:8s} skipped: {why}")
    return "\n".join(lines)
