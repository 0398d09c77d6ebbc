"""The per-user monthly digest: who gets one (thresholds, opt-out, ranking), what it says, and the MIME
message (plain text and HTML parts). No sending here: jobs/stages/emails.py delivers."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any

from conf import EmailSettings
from reports.format import usd
from reports.model import code_line, sbatch_changes
from reports.render import render


def is_worth_saying(user: Mapping[str, Any], settings: EmailSettings) -> bool:
    """Whether a user's month clears the thresholds: enough dollars and share wasted, or enough failed runs
    they could have prevented (gold's `failed_user_fixable_jobs`: failed states, a user-fixable cause)."""
    wasted, share_pct = user["wasted_usd"] or 0.0, user["wasted_share_pct"] or 0.0
    wasteful = wasted >= settings.min_wasted_usd and share_pct >= settings.min_wasted_share_pct
    return wasteful or int(user["failed_user_fixable_jobs"]) >= settings.min_failed_jobs


def candidates(users: Sequence[Mapping[str, Any]], settings: EmailSettings) -> tuple[list[str], list[str]]:
    """(users with something worth saying, those of them who opted out), both sorted."""
    worth = sorted(u["user"] for u in users if u["user"] and is_worth_saying(u, settings))
    opted = set(settings.opt_out)
    return [u for u in worth if u not in opted], [u for u in worth if u in opted]


def user_savings_usd(items: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per user, what acting on their priced recommendations would have saved this month (USD)."""
    out: dict[str, float] = {}
    for i in items:
        if i["status"] == "ok" and i["saving_usd_month"] is not None:
            out[i["user"]] = out.get(i["user"], 0.0) + i["saving_usd_month"]
    return out


def ranked(users: Sequence[Mapping[str, Any]], savings_usd: Mapping[str, float]) -> list[Mapping[str, Any]]:
    """Users by what the recommendations would have saved them first, then by wasted dollars, then name."""
    return sorted(
        users, key=lambda u: (-savings_usd.get(u["user"], 0.0), -(u["wasted_usd"] or 0.0), u["user"])
    )


def recipient(user: str, settings: EmailSettings) -> str:
    """The user's address: `emails.addresses[user]`, else user@`emails.domain`."""
    return settings.addresses.get(user) or f"{user}@{settings.domain}"


def message_id(cluster: str, month: str, user: str, domain: str) -> str:
    """The digest's Message-ID: the same for one user's month on every run (a receiving system can drop a
    duplicate the sender could not rule out)."""
    digest = hashlib.sha256(f"{cluster}\0{month}\0{user}".encode()).hexdigest()[:20]
    return f"<jobfit.{month}.{digest}@{domain}>"


def digest(
    user_row: Mapping[str, Any],
    items: Sequence[Mapping[str, Any]],
    failures: Sequence[Mapping[str, Any]],
    recs_status: str,
    recs_why: str | None,
    settings: EmailSettings,
    bottlenecks: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """What one user's digest says: the month's waste, the top recommendations as sbatch lines (or why there
    are none), the failures with their fix, and what held their GPUs back while jobs ran (the line to change
    and the GPU-hours it would give back)."""
    mine = [i for i in items if i["user"] == user_row["user"]]
    priced = sorted(
        (i for i in mine if i["status"] == "ok" and i["saving_usd_month"]),
        key=lambda i: (-i["saving_usd_month"], i["script_hash"]),
    )
    no_history = next((i["why"] for i in mine if i["status"] == "not_enough_history"), None)
    if recs_status != "ok":
        advice_why = recs_why
    elif priced:
        advice_why = None
    elif no_history:
        advice_why = f"not enough history: {no_history}"
    elif mine:
        advice_why = "your scripts already ask for about what they need, or state no request to lower"
    else:
        advice_why = "none of your jobs this month has its batch script on record"
    shown = [
        dict(i, changes=sbatch_changes(i["script_text"], i["flags"]))
        for i in priced[: settings.max_recommendations]
    ]
    resources = [
        ("CPU", user_row["cpu_wasted_core_h"], "core-h", user_row["cpu_wasted_usd"]),
        ("Memory", user_row["mem_wasted_gib_h"], "GiB-h", user_row["mem_wasted_usd"]),
        ("GPU under-use", user_row["gpu_underused_h"], "GPU-h", user_row["gpu_underused_usd"]),
    ]
    return {
        "user": user_row["user"],
        "cluster": user_row["cluster"],
        "month": user_row["month"],
        "jobs": int(user_row["jobs"]),
        "alloc_usd": user_row["alloc_usd"],
        "wasted_usd": user_row["wasted_usd"],
        "wasted_share_pct": user_row["wasted_share_pct"],
        "resources": [{"label": r[0], "wasted": r[1], "unit": r[2], "wasted_usd": r[3]} for r in resources],
        "failed_fixable_jobs": int(user_row["failed_user_fixable_jobs"]),
        "failed_run_usd": user_row["failed_run_usd"],
        "recommendations": shown,
        "saving_usd": sum(i["saving_usd_month"] for i in priced),
        "advice_why": advice_why,
        "failures": [dict(f) for f in failures[: settings.max_failures]],
        "failures_total": len(failures),
        "bottlenecks": [
            dict(b, where=code_line(b.get("file"), b.get("line")))
            for b in bottlenecks[: settings.max_bottlenecks]
        ],
        "bottlenecks_total": len(bottlenecks),
        "bottleneck_gpu_hours": sum(b["gpu_hours_recoverable"] or 0.0 for b in bottlenecks),
        "bottleneck_usd": sum(b["usd_recoverable"] or 0.0 for b in bottlenecks),
    }


def subject(view: Mapping[str, Any]) -> str:
    """The digest's subject line: the month's wasted dollars, or its failures when nothing was wasted."""
    head = f"[jobfit] {view['cluster']} {view['month']}:"
    if view["saving_usd"]:
        return f"{head} the sbatch lines that would have saved you {usd(view['saving_usd'])}"
    if (view["wasted_usd"] or 0) > 0:
        return f"{head} {usd(view['wasted_usd'])} of your {usd(view['alloc_usd'])} allocation went unused"
    return f"{head} {view['failures_total']} failed job(s) and how to fix them"


def build_message(
    view: Mapping[str, Any], sender: str, to: str, msg_id: str, sent_at: datetime
) -> EmailMessage:
    """The MIME message: multipart/alternative with the plain-text part first and the HTML part second."""
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = subject(view)
    msg["Date"] = format_datetime(sent_at)
    msg["Message-ID"] = msg_id
    msg["X-Jobfit-Cluster"] = view["cluster"]
    msg["X-Jobfit-Month"] = view["month"]
    msg.set_content(render("email.txt", dict(view)), subtype="plain", charset="utf-8")
    msg.add_alternative(render("email.html", dict(view)), subtype="html", charset="utf-8")
    return msg
