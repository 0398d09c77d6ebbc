"""What `jobfit report` and `jobfit emails` read: one cluster-month's gold figures, failures, coverage and
recommendations, as plain records (the SQL that feeds the reports; rendering is in reports/)."""

from __future__ import annotations

import calendar
import json
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from conf import ClusterConfig, cluster_names
from jobs.context import DEFAULT_SHEET, Context, UsageError
from jobs.io.files import write_bytes_atomic
from jobs.io.tables import read_table, table_exists
from pipelines.gold.rollups import partition_breakdown, user_month
from pipelines.gold.waste import vram_fit_options

# A job counts towards the CPU-time figure comparable to the seed's only as the seed's scan counts it:
# completed, at least 10 s long, with TotalCPU at least 0.1 % of its allocation ("tracked").
SEED_MIN_ELAPSED_S = 10
SEED_MIN_CPU_FRAC = 0.001


def _plain(row: Row | None) -> dict[str, Any] | None:
    """A Row as a dict of plain Python values (nested rows and arrays too)."""
    return None if row is None else row.asDict(recursive=True)


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.collect()]


def _scope_filter(account: str | None, user: str | None) -> F.Column:
    cond = F.lit(True)
    if account is not None:
        cond = cond & (F.col("account") == account)
    if user is not None:
        cond = cond & (F.col("user") == user)
    return cond


def _scoped(df: DataFrame | None, scope: F.Column) -> DataFrame | None:
    return None if df is None else df.where(scope)


def require_month(ctx: Context, cluster: str, month: str) -> None:
    """A UsageError (exit 2) unless gold holds the cluster-month."""
    hint = f"run `jobfit build --cluster {cluster} --month {month}` first"
    if not table_exists(ctx.spark, ctx.settings, "gold.cluster_month"):
        raise UsageError(f"no gold tables yet: {hint}")
    found = (
        read_table(ctx.spark, ctx.settings, "gold.cluster_month")
        .where((F.col("cluster") == cluster) & (F.col("month") == month))
        .count()
    )
    if not found:
        raise UsageError(f"no gold for {cluster} {month}: {hint}")


def accounts_and_users(ctx: Context, cluster: str, month: str) -> tuple[list[str], list[str]]:
    """The accounts and users with finished jobs in the cluster-month, sorted."""
    usage = _usage(ctx, cluster, month)
    accounts = sorted(r["account"] for r in usage.select("account").distinct().collect() if r["account"])
    users = sorted(r["user"] for r in usage.select("user").distinct().collect() if r["user"])
    return accounts, users


def _usage(ctx: Context, cluster: str, month: str) -> DataFrame:
    return read_table(ctx.spark, ctx.settings, "gold.job_usage").where(
        (F.col("cluster") == cluster) & (F.col("month") == month)
    )


def _failures(ctx: Context, cluster: str, month: str) -> DataFrame:
    return read_table(ctx.spark, ctx.settings, "gold.failures").where(
        (F.col("cluster") == cluster) & (F.col("month") == month)
    )


def _head(ctx: Context, cluster: str, month: str, account: str | None, user: str | None) -> dict[str, Any]:
    """The month row of the scope: gold.cluster_month, gold.account_month or gold.user_month."""
    table, cond = "gold.cluster_month", F.lit(True)
    if user is not None:
        table, cond = "gold.user_month", F.col("user") == user
    elif account is not None:
        table, cond = "gold.account_month", F.col("account") == account
    df = read_table(ctx.spark, ctx.settings, table).where(
        (F.col("cluster") == cluster) & (F.col("month") == month) & cond
    )
    head = _plain(df.first())
    if head is None:
        who = f"user {user}" if user is not None else f"account {account}"
        raise UsageError(f"{who} has no finished jobs on {cluster} in {month} (see `jobfit waste`)")
    return head


def _trend(
    ctx: Context, cluster: str, month: str, account: str | None, user: str | None, months: int
) -> list[dict[str, Any]]:
    """The scope's last `months` built months up to `month`, oldest first."""
    table, cond = "gold.cluster_month", F.lit(True)
    if user is not None:
        table, cond = "gold.user_month", F.col("user") == user
    elif account is not None:
        table, cond = "gold.account_month", F.col("account") == account
    rows = _rows(
        read_table(ctx.spark, ctx.settings, table)
        .where((F.col("cluster") == cluster) & (F.col("month") <= month) & cond)
        .select("month", "alloc_usd", "wasted_usd", "wasted_share_pct", "jobs")
        .orderBy(F.desc("month"))
        .limit(months)
    )
    return sorted(rows, key=lambda r: r["month"])


def _vram(usage: DataFrame, config: ClusterConfig) -> list[dict[str, Any]]:
    """GPU jobs with a measured VRAM peak, grouped by their card and the smallest GPU or MIG slice holding
    the peak; `smaller` marks groups that would have fit a smaller GPU or slice than they ran on."""
    sizes = dict(vram_fit_options(config))
    rows = _rows(
        usage.where((F.col("alloc_gpus") > 0) & F.col("vram_fits").isNotNull())
        .groupBy("gpu_model", "mig_profile", "vram_card_bytes", "vram_fits")
        .agg(
            F.count(F.lit(1)).alias("jobs"),
            F.sum("gpu_alloc_h").alias("gpu_alloc_h"),
            F.sum("gpu_alloc_usd").alias("gpu_alloc_usd"),
        )
    )
    for r in rows:
        fit_bytes = sizes.get(r["vram_fits"])
        r["smaller"] = bool(
            fit_bytes is not None and r["vram_card_bytes"] and fit_bytes < r["vram_card_bytes"]
        )
        r["ran_on"] = " ".join(x for x in (r["gpu_model"], r["mig_profile"]) if x) or "unknown GPU"
    return sorted(rows, key=lambda r: (-(r["gpu_alloc_usd"] or 0.0), r["ran_on"], r["vram_fits"]))


def _cpu_time_like_seed(usage: DataFrame) -> dict[str, Any]:
    """Core-hours allocated and used by the jobs the seed's scan would track (its CPU-time waste measure)."""
    tracked = usage.where(
        (F.col("state") == "COMPLETED")
        & (F.col("elapsed_s") >= SEED_MIN_ELAPSED_S)
        & F.col("cpu_used_core_h").isNotNull()
        & (F.col("cpu_used_core_h") >= F.col("cpu_alloc_core_h") * SEED_MIN_CPU_FRAC)
    )
    r = tracked.agg(
        F.count(F.lit(1)).alias("jobs"),
        F.sum("cpu_alloc_core_h").alias("alloc_core_h"),
        F.sum("cpu_used_core_h").alias("used_core_h"),
    ).first()
    return {"jobs": int(r["jobs"]), "alloc_core_h": r["alloc_core_h"], "used_core_h": r["used_core_h"]}


def _failure_figures(failures: DataFrame, top: int) -> dict[str, Any]:
    """Per-cause jobs, user-fixable jobs, lost GPU-hours, core-hours and dollars; the costliest fixable."""
    by_cause = _rows(
        failures.groupBy("cause").agg(
            F.count(F.lit(1)).alias("jobs"),
            F.sum(F.col("user_fixable").cast("int")).alias("user_fixable"),
            F.sum("lost_gpu_hours").alias("lost_gpu_h"),
            F.sum("lost_core_hours").alias("lost_core_h"),
            F.sum("lost_usd").alias("lost_usd"),
            F.sum(F.when(F.col("user_fixable"), F.col("lost_usd")).otherwise(0.0)).alias("fixable_lost_usd"),
        )
    )
    fixes = _rows(
        failures.where(F.col("user_fixable"))
        .select("job_id", "user", "account", "state", "cause", "suggested_fix", "lost_gpu_hours", "lost_usd")
        .orderBy(F.desc("lost_usd"), "job_id")
        .limit(top)
    )
    return {"by_cause": by_cause, "top_fixes": fixes}


# What a finding row says, for the report's table and the user's e-mail (gold.job_bottlenecks columns).
_FINDING_COLUMNS = (
    "job_id",
    "user",
    "account",
    "kind",
    "source",
    "rank",
    "share_pct",
    "evidence",
    "fix",
    "gpu_hours_recoverable",
    "usd_recoverable",
)


def _bottlenecks(ctx: Context, cluster: str, month: str) -> DataFrame | None:
    """gold.job_bottlenecks of the cluster-month (`source` null in a table written before counters: the
    profiler's), or None before any `jobfit bottlenecks` run."""
    if not table_exists(ctx.spark, ctx.settings, "gold.job_bottlenecks"):
        return None
    return (
        read_table(ctx.spark, ctx.settings, "gold.job_bottlenecks")
        .where((F.col("cluster") == cluster) & (F.col("month") == month))
        .withColumn("source", F.coalesce(F.col("source"), F.lit("profiler")))
    )


def _finding_rows(findings: DataFrame, limit: int | None = None) -> list[dict[str, Any]]:
    """Findings with the user's file and line, most recoverable GPU-hours first (unpriced last)."""
    ordered = findings.select(
        *_FINDING_COLUMNS, F.col("code.file").alias("file"), F.col("code.line").alias("line")
    ).orderBy(F.desc_nulls_last("gpu_hours_recoverable"), "job_id", "kind", "source")
    return _rows(ordered.limit(limit) if limit is not None else ordered)


def _bottleneck_figures(findings: DataFrame | None, top: int) -> dict[str, Any]:
    """Per finding kind: jobs, findings and recoverable GPU-hours and dollars; the top `top` findings by
    recoverable GPU-hours; how many jobs have any finding, from a trace or from counters."""
    if findings is None:
        return {"analysed": False, "by_kind": [], "top": [], "jobs": 0, "findings": 0}
    by_kind = _rows(
        findings.groupBy("kind").agg(
            F.countDistinct("job_id").alias("jobs"),
            F.count(F.lit(1)).alias("findings"),
            F.sum("gpu_hours_recoverable").alias("gpu_hours_recoverable"),
            F.sum("usd_recoverable").alias("usd_recoverable"),
            F.sort_array(F.collect_set("source")).alias("sources"),
        )
    )
    totals = findings.agg(F.countDistinct("job_id").alias("jobs"), F.count(F.lit(1)).alias("n")).first()
    return {
        "analysed": True,
        "by_kind": by_kind,
        "top": _finding_rows(findings, top),
        "jobs": int(totals["jobs"]),
        "findings": int(totals["n"]),
    }


def _coverage(ctx: Context, cluster: str, month: str, sheet: str) -> dict[str, Any]:
    """Quarantined records by source (the cluster's, all ingests so far) and the clusters of the month that
    were priced by the default sheet."""
    quarantine: dict[str, int] = {}
    if table_exists(ctx.spark, ctx.settings, "quarantine"):
        for r in (
            read_table(ctx.spark, ctx.settings, "quarantine")
            .where(F.col("cluster") == cluster)
            .groupBy("source")
            .count()
            .collect()
        ):
            quarantine[r["source"]] = int(r["count"])
    built = {
        r["cluster"]
        for r in read_table(ctx.spark, ctx.settings, "gold.cluster_month")
        .where(F.col("month") == month)
        .select("cluster")
        .collect()
    }
    with_yaml = set(cluster_names(environ=ctx.environ))
    return {
        "quarantined": dict(sorted(quarantine.items())),
        "default_sheet_clusters": sorted(built - with_yaml),
        "price_sheet": sheet,
        "default_sheet": sheet == DEFAULT_SHEET,
    }


def _user_jobs(usage: DataFrame, limit: int) -> tuple[list[dict[str, Any]], int]:
    """The user's jobs with the most wasted dollars (at most `limit`), and how many jobs there are."""
    columns = (
        "job_id",
        "state",
        "partition",
        "elapsed_s",
        "alloc_cpus",
        "alloc_gpus",
        "cpu_eff_pct",
        "mem_eff_pct",
        "gpu_util_mean_pct",
        "has_gpu_telemetry",
        "vram_fits",
        "failure_cause",
        "alloc_usd",
        "wasted_usd",
    )
    rows = _rows(usage.select(*columns).orderBy(F.desc_nulls_last("wasted_usd"), "job_id").limit(limit))
    return rows, usage.count()


def month_figures(
    ctx: Context,
    cluster: str,
    month: str,
    account: str | None = None,
    user: str | None = None,
) -> dict[str, Any]:
    """Every figure one report shows, for the cluster-month or one account's or user's part of it, as plain
    records (reports.model turns them into sections). `seconds` is the time the reads took."""
    started = time.monotonic()
    settings = ctx.settings.reports
    config, sheet = ctx.cluster_config(cluster)
    scope = _scope_filter(account, user)
    usage = _usage(ctx, cluster, month).where(scope).cache()
    failures = _failures(ctx, cluster, month).where(scope)
    head = _head(ctx, cluster, month, account, user)
    figures: dict[str, Any] = {
        "cluster": cluster,
        "month": month,
        "account": account,
        "user": user,
        "head": head,
        "trend": _trend(ctx, cluster, month, account, user, settings.trend_months),
        "by_partition": _rows(partition_breakdown(usage)),
        "by_account": [],
        "by_user": [],
        "vram": _vram(usage, config),
        "cpu_time_like_seed": _cpu_time_like_seed(usage),
        "failures": _failure_figures(failures, settings.top_n if user is None else settings.user_jobs),
        "bottlenecks": _bottleneck_figures(
            _scoped(_bottlenecks(ctx, cluster, month), scope),
            settings.top_n if user is None else settings.user_jobs,
        ),
        "coverage": _coverage(ctx, cluster, month, sheet),
        "prices": json.loads(head["price_sheet_json"]) if head.get("price_sheet_json") else None,
        "jobs": [],
        "jobs_total": int(head["jobs"]),
    }
    if account is None and user is None:
        predicate = (F.col("cluster") == cluster) & (F.col("month") == month)
        figures["by_account"] = _rows(
            read_table(ctx.spark, ctx.settings, "gold.account_month").where(predicate)
        )
        figures["by_user"] = _rows(read_table(ctx.spark, ctx.settings, "gold.user_month").where(predicate))
        figures["prices"] = figures["prices"] or json.loads(config.prices.model_dump_json())
    elif user is None:
        figures["by_user"] = _rows(user_month(usage))
    else:
        figures["jobs"], figures["jobs_total"] = _user_jobs(usage, settings.user_jobs)
    if figures["prices"] is None:
        figures["prices"] = json.loads(config.prices.model_dump_json())
    usage.unpersist()
    figures["seconds"] = round(time.monotonic() - started, 3)
    return figures


def month_end(month: str) -> str:
    """The last second of a YYYY-MM month, as 'YYYY-MM-DD 23:59:59'."""
    year, mon = (int(x) for x in month.split("-"))
    return f"{month}-{calendar.monthrange(year, mon)[1]:02d} 23:59:59"


def user_rows(ctx: Context, cluster: str, month: str) -> list[dict[str, Any]]:
    """gold.user_month of the cluster-month: every user's month figures."""
    predicate = (F.col("cluster") == cluster) & (F.col("month") == month)
    return _rows(read_table(ctx.spark, ctx.settings, "gold.user_month").where(predicate))


def user_failures(ctx: Context, cluster: str, month: str, users: Iterable[str]) -> dict[str, list[dict]]:
    """Each listed user's failures of the month with cause, fix and lost dollars, costliest first."""
    wanted = sorted(set(users))
    out: dict[str, list[dict]] = {u: [] for u in wanted}
    if not wanted:
        return out
    rows = _rows(
        _failures(ctx, cluster, month)
        .where(F.col("user").isin(wanted))
        .select(
            "user", "job_id", "state", "cause", "user_fixable", "suggested_fix", "lost_gpu_hours", "lost_usd"
        )
        .orderBy(F.desc("lost_usd"), "job_id")
    )
    for r in rows:
        out[r["user"]].append(r)
    return out


def user_bottlenecks(ctx: Context, cluster: str, month: str, users: Iterable[str]) -> dict[str, list[dict]]:
    """Each listed user's bottleneck findings of the month (gold.job_bottlenecks), most recoverable
    GPU-hours first; empty lists before any `jobfit bottlenecks` run."""
    wanted = sorted(set(users))
    out: dict[str, list[dict]] = {u: [] for u in wanted}
    findings = _bottlenecks(ctx, cluster, month)
    if not wanted or findings is None:
        return out
    for r in _finding_rows(findings.where(F.col("user").isin(wanted))):
        out[r["user"]].append(r)
    return out


def safe_name(name: str) -> str:
    """A user or account name as a file-name part (all but letters, digits, `.`, `_`, `-` become `_`)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"


def make_reports(
    ctx: Context,
    cluster: str,
    month: str,
    audience: str | None,
    account: str | None,
    user: str | None,
    out: Path,
) -> dict[str, Any]:
    """Render the month's PDF reports into `out`: without an audience the admin report and one per account;
    `admin`, `account` (one with `account`, else every account) or `user` (one, `user`). Returns the
    `jobfit report --json` payload: each file with its pages and headline, and the seconds spent reading
    (SQL) and rendering."""
    from jobs.stages.advice import champion_accuracy, month_recommendations
    from pipelines.gold.bottlenecks.rules import RULES
    from pipelines.gold.failures.taxonomy import CAUSES
    from reports.model import month_report, summary_line
    from reports.render import report_pdf

    started = time.monotonic()
    require_month(ctx, cluster, month)
    accounts, users = accounts_and_users(ctx, cluster, month)
    wanted: list[tuple[str, str | None, str | None]] = []
    if audience in (None, "admin"):
        wanted.append(("admin", None, None))
    if audience in (None, "account"):
        if account is not None and account not in accounts:
            raise UsageError(f"account {account} has no finished jobs on {cluster} in {month}")
        wanted += [("account", a, None) for a in ([account] if account is not None else accounts)]
    if audience == "user":
        if user not in users:
            raise UsageError(f"user {user} has no finished jobs on {cluster} in {month}")
        wanted.append(("user", None, user))
    settings = ctx.settings.reports
    titles = {name: cause.title for name, cause in CAUSES.items()}
    sql_s = time.monotonic() - started
    t0 = time.monotonic()
    recs = month_recommendations(ctx, cluster, month, users={user} if audience == "user" else None)
    accuracy = champion_accuracy(ctx, cluster)
    advice_s = time.monotonic() - t0
    generated_at = ctx.now().strftime("%Y-%m-%d %H:%M UTC")
    written, render_s = [], 0.0
    for kind, acc, usr in wanted:
        ctx.progress(f"report: {kind} {acc or usr or cluster} {month} ...")
        figures = month_figures(ctx, cluster, month, account=acc, user=usr)
        sql_s += figures["seconds"]
        t0 = time.monotonic()
        report = month_report(
            figures,
            recs,
            accuracy,
            titles,
            {kind: rule.title for kind, rule in RULES.items()},
            settings.references,
            settings.top_n,
            generated_at,
        )
        pdf, pages = report_pdf(report)
        name = f"{cluster}-{month}-{kind}" + (f"-{safe_name(acc or usr or '')}" if kind != "admin" else "")
        path = out / f"{safe_name(name)}.pdf"
        write_bytes_atomic(path, pdf)
        render_s += time.monotonic() - t0
        h = report["headline"]
        written.append(
            {
                "audience": kind,
                "account": acc,
                "user": usr,
                "path": str(path),
                "pages": pages,
                "bytes": len(pdf),
                "wasted_usd": h["wasted_usd"],
                "alloc_usd": h["alloc_usd"],
                "wasted_share_pct": h["wasted_share_pct"],
                "summary": summary_line(report),
            }
        )
    return {
        "cluster": cluster,
        "month": month,
        "out": str(out),
        "reports": written,
        "recommendations": {"status": recs["status"], "why": recs["why"]},
        "seconds": {
            "sql": round(sql_s, 2),
            "recommendations": round(advice_s, 2),
            "render": round(render_s, 2),
            "total": round(time.monotonic() - started, 2),
        },
    }
