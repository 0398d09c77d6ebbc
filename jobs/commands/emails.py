"""`jobfit emails --cluster C --month M (--outbox DIR | --send)`: the per-user monthly digests."""

from __future__ import annotations

import argparse
from pathlib import Path

from jobs.commands import add_common, require
from jobs.context import Context
from jobs.stages.emails import send_digests


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "emails",
        help="per-user monthly digests (waste, sbatch lines to change, failures, fixes): .eml or SMTP",
        description="One digest per user with something worth saying this month (thresholds and opt-out "
        "list in conf `emails`), largest saving first, as plain text and HTML: the month's waste, the top "
        "recommendations as the exact sbatch lines, failures with their fix, or why there is none. "
        "By default writes .eml files into the outbox (--outbox DIR, default the configured `outbox`); "
        "--send hands them to the SMTP relay in conf `smtp` (password only from $JOBFIT_SMTP_PASSWORD or the "
        "variable smtp.password_env names), retrying temporary failures with back-off. The ledger table "
        "ops.email_ledger records every delivery: a re-run sends nobody the same month twice, and a run "
        "killed half-way sends only the rest.",
    )
    add_common(p, month=True, cluster_required=True)
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--outbox", metavar="DIR", help="write .eml files under DIR/<cluster>/<month>/ (the default)"
    )
    where.add_argument("--send", action="store_true", help="send through the configured SMTP relay")
    p.add_argument(
        "--dry-run", action="store_true", help="say who would get a digest; write and send nothing"
    )
    p.set_defaults(func=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    require(args.month is not None, "emails: give --month YYYY-MM")
    outbox = Path(args.outbox) if args.outbox else None
    require(
        outbox is None or not outbox.exists() or outbox.is_dir(),
        f"--outbox {outbox} exists and is not a folder",
    )
    payload = send_digests(ctx, args.cluster, args.month, outbox, args.send, args.dry_run)
    ctx.emit(payload, as_json=args.json, text=_text(payload))
    return 0


def _text(p: dict) -> str:
    head = (
        f"{p['cluster']} {p['month']}: {p['candidates']} user(s) with something worth saying, "
        f"{p['already_delivered']} already had theirs ({p['transport']}), {len(p['opted_out'])} opted out"
    )
    lines = [head]
    for m in p["messages"]:
        where = m["path"] or m["recipient"]
        extra = f" ({m['detail']})" if m.get("detail") else ""
        lines.append(f"  {m['status']:<12} {m['user']:<16} {where}{extra}")
    if p["transport"] == "outbox" and not p["dry_run"]:
        lines.append(f"outbox: {p['outbox']}")
    if p["refused"]:
        lines.append(
            f"{p['refused']} recipient(s) refused by the relay (in the ledger; a re-run tries them again)"
        )
    return "\n".join(lines)
