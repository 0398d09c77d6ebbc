"""`jobfit report --cluster C --month M`: the monthly PDF reports (admin, per account, per user)."""

from __future__ import annotations

import argparse
from pathlib import Path

from jobs.commands import add_common, require
from jobs.context import Context
from jobs.stages.report import make_reports

AUDIENCES = ("admin", "account", "user")
DEFAULT_OUT = "jobfit-reports"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="monthly PDF reports of waste, cost, failures and recommendations (admin, account, user)",
        description="Render the cluster-month's PDF reports from the gold tables `jobfit build` writes: the "
        "headline (share of allocated capacity wasted and its cost, its trend, the seed's figures beside "
        "it), "
        "waste by resource, partition, account and user, GPU memory headroom, failures and their fixes, what "
        "acting on the recommendations would have saved, and data coverage. Without --audience: the admin "
        "report plus one per account. --audience account without --account: every account; --audience user "
        "needs --user. Files: DIR/<cluster>-<month>-<audience>[-<name>].pdf.",
    )
    add_common(p, month=True, cluster_required=True)
    p.add_argument("--audience", choices=AUDIENCES, help="which report(s): admin, account or user")
    p.add_argument("--account", metavar="A", help="one account's report (implies --audience account)")
    p.add_argument("--user", metavar="U", help="one user's report (implies --audience user)")
    p.add_argument(
        "--out", default=DEFAULT_OUT, metavar="DIR", help=f"where the PDFs go (default ./{DEFAULT_OUT})"
    )
    p.set_defaults(func=run)


def _audience(args: argparse.Namespace) -> str | None:
    """The audience asked for, given or implied by --account / --user; a UsageError when they disagree."""
    require(not (args.account and args.user), "give --account or --user, not both")
    implied = "account" if args.account else "user" if args.user else None
    if args.audience and implied and args.audience != implied:
        raise_for = f"--{implied} {args.account or args.user}"
        require(False, f"--audience {args.audience} does not go with {raise_for}")
    audience = args.audience or implied
    require(audience != "user" or bool(args.user), "--audience user needs --user U")
    return audience


def run(ctx: Context, args: argparse.Namespace) -> int:
    require(args.month is not None, "report: give --month YYYY-MM")
    audience = _audience(args)
    out = Path(args.out)
    require(not out.exists() or out.is_dir(), f"--out {out} exists and is not a folder")
    payload = make_reports(ctx, args.cluster, args.month, audience, args.account, args.user, out)
    lines = [f"{r['path']} ({r['pages']} pages): {r['summary']}" for r in payload["reports"]]
    s = payload["seconds"]
    lines.append(
        f"read {s['sql']:.1f}s, recommendations {s['recommendations']:.1f}s, rendered {s['render']:.1f}s"
    )
    ctx.emit(payload, as_json=args.json, text="\n".join(lines))
    return 0
