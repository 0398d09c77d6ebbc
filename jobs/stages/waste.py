"""The waste summary (`jobfit waste`): a cluster-month's headline and breakdowns, read from gold."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import functions as F

from jobs.context import Context, UsageError
from jobs.io.tables import month_predicate, read_table, table_exists
from pipelines.gold.rollups import partition_breakdown, pod_usage_breakdown


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
        "kubernetes": _kubernetes(pod_usage_breakdown(usage).first()),
        "by_partition": _group_rows(partition_breakdown(usage).collect(), "partition", top),
        "by_account": _group_rows(
            read_table(spark, settings, "gold.account_month").where(predicate).collect(), "account", top
        ),
        "by_user": _group_rows(
            read_table(spark, settings, "gold.user_month").where(predicate).collect(), "user", top
        ),
        "price_sheet": json.loads(head["price_sheet_json"]) if head["price_sheet_json"] else None,
    }


def _kubernetes(row: Any) -> dict[str, Any]:
    """Pods' CPU and memory waste with coverage: the share of the month's pods with usage data."""
    pods = int(row["pods"]) if row is not None else 0
    with_usage = int(row["pods_with_usage"]) if row is not None else 0

    def resource(unit: str, prefix: str, known: str) -> dict[str, Any]:
        alloc = _num(row[f"{prefix}_alloc_{unit}"]) if row is not None else None
        used = _num(row[f"{prefix}_used_{unit}"]) if row is not None else None
        return {
            "unit": unit,
            "pods": int(row[known]) if row is not None else 0,
            "allocated": alloc,
            "used": used,
            "wasted": _num(row[f"{prefix}_wasted_{unit}"]) if row is not None else None,
            "efficiency_pct": round(used / alloc * 100.0, 6) if alloc and used is not None else None,
            "wasted_usd": _num(row[f"{prefix}_wasted_usd"]) if row is not None else None,
        }

    return {
        "pods": pods,
        "pods_with_usage": with_usage,
        "coverage_pct": round(with_usage / pods * 100.0, 6) if pods else None,
        "cpu": resource("core_h", "cpu", "pods_with_cpu"),
        "memory": resource("gib_h", "mem", "pods_with_memory"),
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
