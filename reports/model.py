"""Report data assembly: the gold figures of a cluster-month (plain records from jobs/stages/report.py) turned
into the sections the templates lay out. Every number a report prints is computed here, not in a template."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from conf import ReferenceFigures
from reports.charts import bar_chart, data_uri, trend_chart
from reports.format import num, pct, share, usd

# The waste breakdown's resources: key, label, unit, allocated, used, wasted, efficiency, alloc $, wasted $.
RESOURCES = (
    ("cpu", "CPU", "core-h", "cpu_alloc_core_h", "cpu_used_core_h", "cpu_wasted_core_h", "cpu_eff_pct",
     "cpu_alloc_usd", "cpu_wasted_usd"),
    ("memory", "Memory", "GiB-h", "mem_alloc_gib_h", "mem_used_gib_h", "mem_wasted_gib_h", "mem_eff_pct",
     "mem_alloc_usd", "mem_wasted_usd"),
    ("gpu", "GPU under-use", "GPU-h", "gpu_alloc_h", "gpu_used_h", "gpu_underused_h", "gpu_util_mean_pct",
     "gpu_alloc_usd", "gpu_underused_usd"),
)  # fmt: skip


def _f(value: Any) -> float | None:
    return None if value is None else float(value)


def _top(rows: Sequence[dict[str, Any]], key: str, n: int) -> list[dict[str, Any]]:
    """The `n` rows with the most wasted dollars (ties by name)."""
    return sorted(rows, key=lambda r: (-(r.get("wasted_usd") or 0.0), str(r.get(key))))[:n]


def headline(head: dict[str, Any]) -> dict[str, Any]:
    """The month's headline: the share of allocated capacity wasted and its dollar cost, and the counts."""
    return {
        "wasted_share_pct": _f(head["wasted_share_pct"]),
        "wasted_usd": _f(head["wasted_usd"]),
        "alloc_usd": _f(head["alloc_usd"]),
        "jobs": int(head["jobs"]),
        "gpu_jobs": int(head["gpu_jobs"]),
        "gpu_jobs_no_telemetry": int(head["gpu_jobs_no_telemetry"]),
        "gpu_coverage_pct": _f(head["gpu_coverage_pct"]),
        "failed_user_fixable_jobs": int(head["failed_user_fixable_jobs"]),
    }


def trend(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The last built months (oldest first) with the share wasted, and their chart."""
    points = [(r["month"], _f(r["wasted_share_pct"])) for r in rows]
    chart = trend_chart(points, lambda v: pct(v, 0), "share of allocated capacity wasted, by month")
    return {"rows": [dict(r) for r in rows], "chart": data_uri(chart), "months": len(rows)}


def resources(head: dict[str, Any]) -> dict[str, Any]:
    """Waste by resource (CPU, memory, GPU under-use, idle GPUs, failed runs) with each one's share of the
    month's wasted dollars; idle GPUs are part of GPU under-use and not added twice."""
    total = _f(head["wasted_usd"])
    rows = []
    for key, label, unit, alloc, used, wasted, eff, alloc_usd, wasted_usd in RESOURCES:
        rows.append(
            {
                "key": key,
                "label": label,
                "unit": unit,
                "allocated": _f(head[alloc]),
                "used": _f(head[used]),
                "wasted": _f(head[wasted]),
                "efficiency_pct": _f(head[eff]),
                "alloc_usd": _f(head[alloc_usd]),
                "wasted_usd": _f(head[wasted_usd]),
                "share_of_waste_pct": share(_f(head[wasted_usd]), total),
                "part_of_total": True,
            }
        )
    rows.append(
        {
            "key": "gpu_idle",
            "label": "of which idle GPUs",
            "unit": "GPU-h",
            "allocated": None,
            "used": None,
            "wasted": _f(head["gpu_idle_h"]),
            "efficiency_pct": None,
            "alloc_usd": None,
            "wasted_usd": _f(head["gpu_idle_usd"]),
            "share_of_waste_pct": share(_f(head["gpu_idle_usd"]), total),
            "part_of_total": False,
        }
    )
    rows.append(
        {
            "key": "failed_runs",
            "label": "Failed runs (user-fixable)",
            "unit": "jobs",
            "allocated": None,
            "used": None,
            "wasted": float(head["failed_user_fixable_jobs"]),
            "efficiency_pct": None,
            "alloc_usd": None,
            "wasted_usd": _f(head["failed_run_usd"]),
            "share_of_waste_pct": share(_f(head["failed_run_usd"]), total),
            "part_of_total": True,
        }
    )
    chart = bar_chart(
        [(r["label"], r["wasted_usd"]) for r in rows], usd, "wasted dollars by resource", width_px=640
    )
    return {"rows": rows, "total_usd": total, "chart": data_uri(chart)}


def ranking(rows: Sequence[dict[str, Any]], key: str, title: str, top_n: int) -> dict[str, Any]:
    """One breakdown (partition, account or user): the top `top_n` by wasted dollars and their chart."""
    top = [
        {
            "name": r.get(key) if r.get(key) is not None else "(none)",
            "jobs": int(r["jobs"]),
            "alloc_usd": _f(r["alloc_usd"]),
            "wasted_usd": _f(r["wasted_usd"]),
            "wasted_share_pct": _f(r["wasted_share_pct"]),
            "cpu_wasted_core_h": _f(r["cpu_wasted_core_h"]),
            "mem_wasted_gib_h": _f(r["mem_wasted_gib_h"]),
            "gpu_underused_h": _f(r["gpu_underused_h"]),
        }
        for r in _top(rows, key, top_n)
    ]
    chart = bar_chart([(r["name"], r["wasted_usd"]) for r in top], usd, f"wasted dollars by {title}")
    return {"title": title, "rows": top, "total_rows": len(rows), "chart": data_uri(chart)}


def vram(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """GPU VRAM headroom: jobs that would have fit a smaller GPU or a MIG slice, by card and fit."""
    smaller = [r for r in rows if r["smaller"]]
    measured_jobs = sum(int(r["jobs"]) for r in rows)
    chart = bar_chart(
        [(f"{r['ran_on']} → {r['vram_fits']}", _f(r["gpu_alloc_usd"])) for r in smaller[:10]],
        usd,
        "allocated GPU dollars of jobs that fit a smaller GPU or MIG slice",
    )
    return {
        "rows": [dict(r) for r in rows],
        "measured_jobs": measured_jobs,
        "smaller_jobs": sum(int(r["jobs"]) for r in smaller),
        "smaller_gpu_h": sum(r["gpu_alloc_h"] or 0.0 for r in smaller),
        "smaller_usd": sum(r["gpu_alloc_usd"] or 0.0 for r in smaller),
        "chart": data_uri(chart),
    }


def failures(figures: dict[str, Any], titles: dict[str, str]) -> dict[str, Any]:
    """Failures by cause (jobs, lost GPU-hours and dollars), the user-fixable share, and the top fixes."""
    causes = sorted(figures["by_cause"], key=lambda r: (-(r["lost_usd"] or 0.0), -r["jobs"], r["cause"]))
    rows = [
        {
            "cause": r["cause"],
            "title": titles.get(r["cause"], r["cause"]),
            "jobs": int(r["jobs"]),
            "user_fixable": int(r["user_fixable"] or 0),
            "lost_gpu_h": _f(r["lost_gpu_h"]) or 0.0,
            "lost_core_h": _f(r["lost_core_h"]) or 0.0,
            "lost_usd": _f(r["lost_usd"]) or 0.0,
            "fixable_lost_usd": _f(r["fixable_lost_usd"]) or 0.0,
        }
        for r in causes
    ]
    jobs = sum(r["jobs"] for r in rows)
    fixable = sum(r["user_fixable"] for r in rows)
    lost = sum(r["lost_usd"] for r in rows)
    fixable_lost = sum(r["fixable_lost_usd"] for r in rows)
    chart = bar_chart([(r["title"], r["lost_usd"]) for r in rows], usd, "dollars lost to failures, by cause")
    return {
        "rows": rows,
        "jobs": jobs,
        "user_fixable_jobs": fixable,
        "user_fixable_share_pct": share(fixable, jobs),
        "lost_usd": lost,
        "lost_gpu_h": sum(r["lost_gpu_h"] for r in rows),
        "user_fixable_lost_usd": fixable_lost,
        "user_fixable_lost_share_pct": share(fixable_lost, lost),
        "top_fixes": [dict(r, title=titles.get(r["cause"], r["cause"])) for r in figures["top_fixes"]],
        "chart": data_uri(chart),
    }


def bottlenecks(figures: dict[str, Any], titles: dict[str, str]) -> dict[str, Any]:
    """What held GPUs back while jobs ran (gold.job_bottlenecks): recoverable GPU-hours and dollars by kind
    and the top findings with the user's line, most GPU-hours first."""
    kinds = sorted(
        figures["by_kind"],
        key=lambda r: (-(r["gpu_hours_recoverable"] or 0.0), -r["jobs"], r["kind"]),
    )
    rows = [
        {
            "kind": r["kind"],
            "title": titles.get(r["kind"], r["kind"]),
            "jobs": int(r["jobs"]),
            "findings": int(r["findings"]),
            "sources": list(r["sources"]),
            "gpu_hours_recoverable": _f(r["gpu_hours_recoverable"]) or 0.0,
            "usd_recoverable": _f(r["usd_recoverable"]) or 0.0,
        }
        for r in kinds
    ]
    top = [
        dict(r, title=titles.get(r["kind"], r["kind"]), where=code_line(r.get("file"), r.get("line")))
        for r in figures["top"]
    ]
    chart = bar_chart(
        [(r["title"], r["gpu_hours_recoverable"]) for r in rows],
        lambda v: f"{num(v)} GPU-h",
        "recoverable GPU-hours by bottleneck",
    )
    return {
        "analysed": figures["analysed"],
        "rows": rows,
        "top": top,
        "jobs": figures["jobs"],
        "findings": figures["findings"],
        "gpu_hours_recoverable": sum(r["gpu_hours_recoverable"] for r in rows),
        "usd_recoverable": sum(r["usd_recoverable"] for r in rows),
        "chart": data_uri(chart),
    }


def code_line(file: str | None, line: int | None) -> str | None:
    """`file:line` of a finding's user frame, or None when the trace had no stacks (counters never do)."""
    if not file:
        return None
    return f"{file}:{line}" if line is not None else file


def comparisons(
    figures: dict[str, Any], head: dict[str, Any], refs: ReferenceFigures
) -> list[dict[str, Any]]:
    """The seed's public figures beside ours, each measured the way the seed measured it where we can."""
    seed = figures["cpu_time_like_seed"]
    alloc, used = seed["alloc_core_h"], seed["used_core_h"]
    ours_cpu = None if not alloc else (1.0 - (used or 0.0) / alloc) * 100.0
    return [
        {
            "what": "share of CPU-time wasted",
            "ours_pct": ours_cpu,
            "ours_how": f"1 - TotalCPU / (cores x elapsed), core-hour weighted, over {seed['jobs']:,} "
            "completed jobs of 10 s or more with TotalCPU at least 0.1 % of their allocation "
            "(the seed's own rule)",
            "theirs_pct": refs.cpu_time_wasted.value_pct,
            "source": refs.cpu_time_wasted.source,
            "measures": refs.cpu_time_wasted.measures,
        },
        {
            "what": "GPU effective use",
            "ours_pct": _f(head["gpu_util_mean_pct"]),
            "ours_how": "GPU-hours used / GPU-hours allocated, over the GPU jobs with telemetry "
            f"({pct(_f(head['gpu_coverage_pct']))} of allocated GPU-time has samples)",
            "theirs_pct": refs.gpu_effective_use.value_pct,
            "source": refs.gpu_effective_use.source,
            "measures": refs.gpu_effective_use.measures,
        },
    ]


def recommendations(recs: dict[str, Any], accuracy: dict[str, Any], top_n: int) -> dict[str, Any]:
    """What acting on the recommendations would have saved this month, per account and per script, and
    the champions' measured accuracy against the baselines."""
    items = recs["items"]
    priced = [i for i in items if i["status"] == "ok" and i["saving_usd_month"] is not None]
    accounts: dict[str, dict[str, Any]] = {}
    for i in priced:
        a = accounts.setdefault(
            i["account"] or "(none)",
            {"account": i["account"] or "(none)", "saving_usd": 0.0, "runs": 0, "users": set()},
        )
        a["saving_usd"] += i["saving_usd_month"]
        a["runs"] += i["runs"]
        a["users"].add(i["user"])
    by_account = sorted(
        ({**a, "users": len(a["users"])} for a in accounts.values()),
        key=lambda a: (-a["saving_usd"], a["account"]),
    )
    saving = [i for i in priced if i["saving_usd_month"] > 0]
    top = sorted(saving, key=lambda i: (-i["saving_usd_month"], i["user"], i["script_hash"]))[:top_n]
    chart = bar_chart([(a["account"], a["saving_usd"]) for a in by_account[:top_n]], usd, "saving by account")
    return {
        "status": recs["status"],
        "why": recs["why"],
        "saving_usd": sum(i["saving_usd_month"] for i in priced),
        "scripts": len({(i["user"], i["script_hash"]) for i in items}),
        "priced_scripts": len({(i["user"], i["script_hash"]) for i in priced}),
        "not_enough_history_users": len({i["user"] for i in items if i["status"] == "not_enough_history"}),
        "by_account": by_account[:top_n],
        "top": [dict(i, changes=sbatch_changes(i["script_text"], i["flags"])) for i in top],
        "chart": data_uri(chart),
        "accuracy": [{"target": target, **values} for target, values in sorted(accuracy.items())],
    }


def coverage(figures: dict[str, Any], head: dict[str, Any]) -> dict[str, Any]:
    """Data coverage in plain words: GPU telemetry, quarantined records, clusters on the default prices."""
    c = figures["coverage"]
    gpu_jobs = int(head["gpu_jobs"])
    blind = int(head["gpu_jobs_no_telemetry"])
    return {
        "gpu_jobs": gpu_jobs,
        "gpu_jobs_with_telemetry": gpu_jobs - blind,
        "gpu_jobs_no_telemetry": blind,
        "gpu_coverage_pct": _f(head["gpu_coverage_pct"]),
        "quarantined": [{"source": s, "records": n} for s, n in c["quarantined"].items()],
        "quarantined_total": sum(c["quarantined"].values()),
        "default_sheet_clusters": c["default_sheet_clusters"],
        "price_sheet": c["price_sheet"],
        "default_sheet": c["default_sheet"],
    }


# Long option -> short option, for finding the line of a script that sets what a flag changes.
_SHORT = {"--time": "-t", "--cpus-per-task": "-c", "--mem": None, "--gres": None}


def sbatch_changes(script_text: str, flags: Sequence[str]) -> list[dict[str, str | None]]:
    """For each recommended flag (`--mem=12544M`), the script's `#SBATCH` line that sets that option now
    (None when the script does not set it) and the line to write instead."""
    lines = [ln.strip() for ln in script_text.splitlines() if ln.lstrip().startswith("#SBATCH")]
    out = []
    for flag in flags:
        option = flag.split("=", 1)[0]
        short = _SHORT.get(option)
        pattern = re.compile(
            rf"(^|\s){re.escape(option)}(=|\s)" + (rf"|(^|\s){re.escape(short)}(\s|=|\d)" if short else "")
        )
        now = next((ln for ln in lines if pattern.search(ln.removeprefix("#SBATCH"))), None)
        out.append({"option": option, "now": now, "new": f"#SBATCH {flag}"})
    return out


def user_jobs(rows: Sequence[dict[str, Any]], total: int) -> dict[str, Any]:
    """One user's costliest jobs (as listed) and how many jobs they ran in all."""
    return {"rows": [dict(r) for r in rows], "shown": len(rows), "total": total}


def month_report(
    figures: dict[str, Any],
    recs: dict[str, Any],
    accuracy: dict[str, Any],
    titles: dict[str, str],
    bottleneck_titles: dict[str, str],
    refs: ReferenceFigures,
    top_n: int,
    generated_at: str,
) -> dict[str, Any]:
    """Every section of one report (admin, account or user) from the month's figures."""
    head = figures["head"]
    kind = "user" if figures["user"] is not None else "account" if figures["account"] is not None else "admin"
    scope = {
        "admin": f"cluster {figures['cluster']}",
        "account": f"account {figures['account']} on {figures['cluster']}",
        "user": f"user {figures['user']} on {figures['cluster']}",
    }[kind]
    items = recs["items"]
    if kind == "account":
        items = [i for i in items if i["account"] == figures["account"]]
    elif kind == "user":
        items = [i for i in items if i["user"] == figures["user"]]
    return {
        "kind": kind,
        "cluster": figures["cluster"],
        "month": figures["month"],
        "account": figures["account"],
        "user": figures["user"],
        "scope": scope,
        "generated_at": generated_at,
        "headline": headline(head),
        "trend": trend(figures["trend"]),
        "comparisons": comparisons(figures, head, refs) if kind == "admin" else [],
        "resources": resources(head),
        "rankings": [
            ranking(figures["by_partition"], "partition", "partition", top_n),
            *([ranking(figures["by_account"], "account", "account", top_n)] if kind == "admin" else []),
            *([ranking(figures["by_user"], "user", "user", top_n)] if kind != "user" else []),
        ],
        "vram": vram(figures["vram"]),
        "failures": failures(figures["failures"], titles),
        "bottlenecks": bottlenecks(figures["bottlenecks"], bottleneck_titles),
        "recommendations": recommendations(
            {**recs, "items": items}, accuracy if kind != "user" else {}, top_n
        ),
        "coverage": coverage(figures, head),
        "jobs": user_jobs(figures["jobs"], figures["jobs_total"]),
        "prices": figures["prices"],
    }


def summary_line(report: dict[str, Any]) -> str:
    """One line saying what the report's headline says."""
    h, r = report["headline"], report["recommendations"]
    advice = (
        f"recommendations would have saved {usd(r['saving_usd'])} "
        f"({num(r['priced_scripts'], 0)} scripts priced)"
        if r["status"] == "ok"
        else f"no recommendations ({r['why']})"
    )
    return (
        f"{report['scope']} {report['month']}: {usd(h['wasted_usd'])} of {usd(h['alloc_usd'])} allocated "
        f"wasted ({pct(h['wasted_share_pct'])}) over {h['jobs']:,} jobs; failures lost "
        f"{usd(report['failures']['lost_usd'])}; {advice}"
    )
