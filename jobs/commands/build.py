"""`jobfit build` — silver → gold per cluster-month (the stage is jobs/stages/build.py)."""

from __future__ import annotations

import argparse

from jobs.commands import add_common
from jobs.context import Context
from jobs.stages.build import build


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "build",
        help="build gold (per-job usage, failures, month rollups) from silver",
        description="Build gold.job_usage, gold.failures and gold.user_month/account_month/cluster_month "
        "from the silver tables. Without --month, rebuilds only the cluster-months whose silver data or "
        "price sheet changed since the last build; with --month, rebuilds that month.",
    )
    add_common(p, month=True)
    p.set_defaults(func=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    report = build(ctx, args.cluster, args.month)
    ctx.emit(report.as_dict(), as_json=args.json, text=report.text())
    return 0
