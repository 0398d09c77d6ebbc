"""`jobfit waste` — a cluster-month's waste headline, broken down by resource, partition, account, user."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pyspark.sql import functions as F

from jobs.commands import add_common, require
from jobs.context import Context, UsageError
from jobs.io.tables import month_predicate, read_table, table_exists
from pipelines.gold.rollups import partition_breakdown


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


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def _group_rows(rows: list[Any], key: str, top: int) -> list[dict[str, Any]]:
    ordered = sorted(rows, key=lambda r: (-(r["wasted_usd"] or 0.0), str(r[key])))[:top]
    return [
        {
            key: r[key],
            "jobs": int(r["jobs"]),
            "alloc_usd": _num(r["alloc_usd"]),
            "wasted_usd": _num(r["wasted_usd"]),
            "wasted_share_pct": _num(r["wasted_share_pct"]),
            "cpu_wasted_core_h": _num(r["cpu_wasted_core_h"]),
            "mem_wasted_gib_h": _num(r["mem_wasted_gib_h"]),
            "gpu_underused_h": _num(r["gpu_underused_h"]),
            "gpu_jobs_no_telemetry": int(r["gpu_jobs_no_telemetry"]),
        }
        for r in ordered
    ]


def waste_summary(ctx: Context, cluster: str, month: str | None, top: int) -> dict[str, Any]:
    """The --json payload of `jobfit waste` (shape in docs/cli.md)."""
    spark, settings = ctx.spark, ctx.settings
    hint = f"run `jobfit build --cluster {cluster}` first"
    if not table_exists(spark, settings, "gold.cluster_month"):
        raise UsageError(f"no gold tables yet: {hint}")
    months = read_table(spark, settings, "gold.cluster_month").where(F.col("cluster") == cluster)
    if month is None:
        latest = months.agg(F.max("month").alias("m")).first()
        month = latest["m"] if latest else None
        if month is None:
            raise UsageError(f"no month built for cluster {cluster}: {hint}")
    predicate = month_predicate(cluster, month)
    head = months.where(F.col("month") == month).first()
    if head is None:
        raise UsageError(
            f"no gold for {cluster} {month}: run `jobfit build --cluster {cluster} --month {month}`"
        )
    usage = read_table(spark, settings, "gold.job_usage").where(predicate)
    return {
        "cluster": cluster,
        "month": month,
        "headline": {
            "wasted_share_pct": _num(head["wasted_share_pct"]),
            "wasted_usd": _num(head["wasted_usd"]),
            "alloc_usd": _num(head["alloc_usd"]),
            "jobs": int(head["jobs"]),
            "gpu_jobs": int(head["gpu_jobs"]),
            "gpu_jobs_no_telemetry": int(head["gpu_jobs_no_telemetry"]),
            "gpu_coverage_pct": _num(head["gpu_coverage_pct"]),
            "failed_user_fixable_jobs": int(head["failed_user_fixable_jobs"]),
        },
        "by_resource": _by_resource(head),
        "by_partition": _group_rows(partition_breakdown(usage).collect(), "partition", top),
        "by_account": _group_rows(
            read_table(spark, settings, "gold.account_month").where(predicate).collect(), "account", top
        ),
        "by_user": _group_rows(
            read_table(spark, settings, "gold.user_month").where(predicate).collect(), "user", top
        ),
        "price_sheet": json.loads(head["price_sheet_json"]) if head["price_sheet_json"] else None,
    }


def _by_resource(head: Any) -> list[dict[str, Any]]:
    def row(resource: str, unit: str, prefix: str, used: str, wasted: str, eff: str, wasted_usd: str) -> dict:
        return {
            "resource": resource,
            "unit": unit,
            "allocated": _num(head[f"{prefix}_alloc_{unit}"]),
            "used": _num(head[used]),
            "wasted": _num(head[wasted]),
            "efficiency_pct": _num(head[eff]),
            "alloc_usd": _num(head[f"{prefix}_alloc_usd"]),
            "wasted_usd": _num(head[wasted_usd]),
        }

    gpu = row("gpu", "h", "gpu", "gpu_used_h", "gpu_underused_h", "gpu_util_mean_pct", "gpu_underused_usd")
    gpu.update(
        idle=_num(head["gpu_idle_h"]),
        idle_usd=_num(head["gpu_idle_usd"]),
        coverage_pct=_num(head["gpu_coverage_pct"]),
    )
    return [
        row("cpu", "core_h", "cpu", "cpu_used_core_h", "cpu_wasted_core_h", "cpu_eff_pct", "cpu_wasted_usd"),
        row("memory", "gib_h", "mem", "mem_used_gib_h", "mem_wasted_gib_h", "mem_eff_pct", "mem_wasted_usd"),
        gpu,
        {
            "resource": "failed_runs",
            "unit": "jobs",
            "allocated": None,
            "used": None,
            "wasted": int(head["failed_user_fixable_jobs"]),
            "efficiency_pct": None,
            "alloc_usd": None,
            "wasted_usd": _num(head["failed_run_usd"]),
        },
    ]


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
