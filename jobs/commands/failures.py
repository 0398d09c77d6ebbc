"""`jobfit failures --cluster C --month M [--job ID] [--json]`: why jobs failed, what it cost, the fix."""

from __future__ import annotations

import argparse

from pyspark.sql import functions as F

from jobs.commands import add_common, require
from jobs.context import Context, UsageError
from jobs.io.tables import read_table
from jobs.stages.failures import diagnose, failures_summary
from pipelines.schemas import GOLD_FAILURES

# The gold.failures columns `--job` shows (and returns with --json), in the table's order: all but the
# grouping and bookkeeping ones.
JOB_FIELDS = tuple(
    c
    for c in GOLD_FAILURES.columns
    if c not in ("account", "partition", "end_ts", "cpus", "has_log", "has_telemetry", "built_at")
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "failures",
        help="why jobs failed: per-cause counts, lost GPU-hours and dollars, or one job's diagnosis",
        description="Diagnose every failed, timed-out, OOM, node-failed, preempted or cancelled job of a "
        "cluster-month (one primary cause each, with evidence, a confidence and a fix quoting the job's own "
        "numbers), write them to gold.failures and print per-cause counts, lost GPU-hours and "
        "dollars and the "
        "most affected users. With --job, print one job's diagnosis (computed from the silver tables; "
        "--month is then optional).",
    )
    add_common(p, month=True, cluster_required=True)
    p.add_argument("--job", metavar="ID", help="diagnose one job (as the scheduler shows its id, e.g. 123_4)")
    p.set_defaults(func=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    if args.job:
        return _one_job(ctx, args)
    require(args.month is not None, "failures: give --month YYYY-MM (or --job ID for one job)")
    summary = failures_summary(ctx, args.cluster, args.month)
    ctx.emit(summary, as_json=args.json, text=_summary_text(summary))
    return 0


def _summary_text(s: dict) -> str:
    lines = [
        f"{s['cluster']} {s['month']}: {s['jobs']} failed/cancelled job(s), "
        f"{s['user_fixable_jobs']} fixable by "
        f"their users; lost {s['lost_gpu_hours']:.1f} GPU-h, {s['lost_core_hours']:.1f} core-h, "
        f"${s['lost_usd']:,.2f}",
    ]
    if s["by_cause"]:
        lines.append(f"  {'cause':<16} {'jobs':>6} {'fixable':>7} {'GPU-h':>9} {'USD':>11}  confidence")
        for name, c in s["by_cause"].items():
            lines.append(
                f"  {name:<16} {c['jobs']:>6} {c['user_fixable']:>7} {c['lost_gpu_hours']:>9.1f} "
                f"{c['lost_usd']:>11,.2f}  {c['mean_confidence']:.2f}"
            )
    if s["top_users"]:
        lines.append("  top users by lost dollars:")
        lines += [
            f"    {u['user'] or '(unknown)'}: {u['jobs']} job(s), ${u['lost_usd']:,.2f}, "
            f"mostly {u['top_cause']}"
            for u in s["top_users"]
        ]
    return "\n".join(lines)


def _traceback_lines(d: dict) -> list[str]:
    """The run-ending exception and the user's frame, when the job's log shows them."""
    lines = []
    if d["exception"]:
        e = d["exception"]
        lines.append(f"  exception: {e['type']}" + (f": {e['message']}" if e["message"] else ""))
    if d["code"]:
        c = d["code"]
        lines.append(f"  your code: {c['file']}:{c['line']} in {c['function']}: {c['text'] or ''}")
    return lines


def _one_job(ctx: Context, args: argparse.Namespace) -> int:
    config, sheet = ctx.cluster_config(args.cluster)
    jobs = read_table(ctx.spark, ctx.settings, "silver.jobs")
    found = (
        jobs.where((F.col("cluster") == args.cluster) & (F.col("job_id") == args.job)).select("state").first()
    )
    if found is None:
        raise UsageError(f"failures: no job {args.job} on cluster {args.cluster} in silver.jobs")
    row = diagnose(ctx, args.cluster, config, args.month, job_id=args.job).first()
    if row is None:
        payload = {"cluster": args.cluster, "job_id": args.job, "state": found["state"], "cause": None}
        text = f"job {args.job} ended {found['state']}" + (
            f" outside {args.month}" if args.month else ": not a failure, nothing to diagnose"
        )
        ctx.emit(payload, as_json=args.json, text=text)
        return 0
    values = row.asDict(recursive=True)  # exception and code are structs: plain dicts in the output
    d = {**{k: values[k] for k in JOB_FIELDS}, "price_sheet": sheet}
    blame = "fixable by the user" if d["user_fixable"] else "not the user's fault"
    text = "\n".join(
        [
            f"job {d['job_id']} ({d['user']}, {d['state']}): {d['cause']} / {d['detail']} "
            f"(confidence {d['confidence']:.2f}, {blame})",
            *_traceback_lines(d),
            f"  fix: {d['suggested_fix']}",
            f"  evidence: {d['evidence']}",
            f"  lost: {d['lost_gpu_hours']:.1f} GPU-h, {d['lost_core_hours']:.1f} core-h, "
            f"${d['lost_usd']:,.2f} (prices: {d['price_sheet']})",
        ]
    )
    ctx.emit(d, as_json=args.json, text=text)
    return 0
