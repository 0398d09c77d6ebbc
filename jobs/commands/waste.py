"""`jobfit waste` — a cluster-month's waste headline, broken down by resource, partition, account, user."""

from __future__ import annotations

import argparse
from typing import Any

from jobs.commands import add_common, require
from jobs.context import Context
from jobs.stages.waste import waste_summary


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "waste",
        help="a cluster-month's wasted share of allocated capacity, its cost, and who wasted it",
        description="Print the month's headline (share of allocated capacity wasted and its dollar cost) and "
        "the breakdown by resource, partition, account and user, from the gold tables `jobfit build` writes. "
        "Defaults: the configured default cluster and the latest month built for it.",
    )
    add_common(p, month=True)
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows per breakdown (default 10)")
    p.set_defaults(func=run)


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} %"


def _qty(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.1f}"


def render(summary: dict[str, Any]) -> str:
    """The human text: the headline first, then what and who wasted it."""
    h = summary["headline"]
    where = f"{summary['cluster']} {summary['month']}"
    lines = [
        f"{where}: {_money(h['wasted_usd'])} of {_money(h['alloc_usd'])} allocated "
        f"was wasted ({_pct(h['wasted_share_pct'])})",
        f"{h['jobs']} finished job(s), {h['gpu_jobs']} on GPUs; "
        f"{h['gpu_jobs_no_telemetry']} GPU job(s) without telemetry (unknown, not counted as idle)",
        f"GPU telemetry covers {_pct(h['gpu_coverage_pct'])} of allocated GPU-time",
        "",
        f"{'by resource':<22}{'allocated':>12}{'used':>12}{'wasted':>12}{'efficiency':>12}{'wasted $':>12}",
    ]
    names = {"cpu": "CPU core-h", "memory": "memory GiB-h", "gpu": "GPU-h (under-used)"}
    for r in summary["by_resource"]:
        if r["resource"] == "failed_runs":
            label = f"failed runs ({r['wasted']} job(s) the user could fix)"
            lines.append(f"{label:<70}{_money(r['wasted_usd']):>12}")
            continue
        lines.append(
            f"{names[r['resource']]:<22}{_qty(r['allocated']):>12}{_qty(r['used']):>12}{_qty(r['wasted']):>12}"
            f"{_pct(r['efficiency_pct']):>12}{_money(r['wasted_usd']):>12}"
        )
        if r["resource"] == "gpu":
            lines.append(
                f"{'  of which idle':<22}{'':>24}{_qty(r['idle']):>12}{'':>12}{_money(r['idle_usd']):>12}"
            )
    k8s = summary.get("kubernetes") or {}
    if k8s.get("pods"):
        lines += [
            "",
            f"Kubernetes: {k8s['pods_with_usage']} of {k8s['pods']} pod(s) with usage data "
            f"(coverage {_pct(k8s['coverage_pct'])}; pods without are unknown, not counted)",
        ]
        for name, r in (("  pod CPU core-h", k8s["cpu"]), ("  pod memory GiB-h", k8s["memory"])):
            lines.append(
                f"{name:<22}{_qty(r['allocated']):>12}{_qty(r['used']):>12}{_qty(r['wasted']):>12}"
                f"{_pct(r['efficiency_pct']):>12}{_money(r['wasted_usd']):>12}"
            )
    for title, key, rows in (
        ("partition", "partition", summary["by_partition"]),
        ("account", "account", summary["by_account"]),
        ("user", "user", summary["by_user"]),
    ):
        lines += [
            "",
            f"{'top ' + title + 's by waste':<22}{'jobs':>8}{'allocated $':>14}{'wasted $':>12}{'share':>10}",
        ]
        lines += [
            f"{r[key]!s:<22}{r['jobs']:>8}{_money(r['alloc_usd']):>14}{_money(r['wasted_usd']):>12}"
            f"{_pct(r['wasted_share_pct']):>10}"
            for r in rows
        ]
    return "\n".join(lines)


def run(ctx: Context, args: argparse.Namespace) -> int:
    require(args.top > 0, f"--top must be positive, got {args.top}")
    cluster = args.cluster or ctx.settings.default_cluster
    summary = waste_summary(ctx, cluster, args.month, args.top)
    ctx.emit(summary, as_json=args.json, text=render(summary))
    return 0
