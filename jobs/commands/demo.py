"""`jobfit demo` — the main job: simulate a month, ingest every source, run every later stage, summarise."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from conf import ConfigError
from jobs.commands import add_common, month_arg, require
from jobs.commands.ingest import DEFAULT_TAIL_KB, SOURCES
from jobs.context import Context, DataError, UsageError
from jobs.simulator import simulate
from jobs.simulator.dcgm import DEFAULT_INTERVAL_S

DEFAULT_JOBS = 1000
DEFAULT_SEED = 42
# Simulator folder -> ingest source, in the order the sources depend on each other: accounting first
# (silver.jobs), then what attaches to jobs (scripts, telemetry attribution, logs), then pods and their usage.
INGEST_ORDER = (
    ("sacct", "sacct"),
    ("scripts", "scripts"),
    ("dcgm", "dcgm"),
    ("k8s", "k8s"),
    ("k8s_metrics", "k8s-metrics"),
    ("logs", "logs"),
    ("profiler", "profiler"),
)
# Share of the simulated training jobs that leave torch.profiler traces (small, so ingest and analysis stay
# quick).
DEMO_PROFILED_SHARE = 0.05
# Share of the GPU hosts whose dcgm-exporter also exports the DCGM profiling fields: the jobs without a trace
# get findings from those counters (docs/bottlenecks.md, "Jobs without a trace").
DEMO_DCGM_PROF_SHARE = 0.5
# Each source's options as `jobfit ingest` defaults them.
INGEST_OPTIONS: dict[str, dict[str, Any]] = {"sacct": {"fmt": None}, "logs": {"tail_kb": DEFAULT_TAIL_KB}}


def _build(ctx: Context, cluster: str, month: str, out: Path) -> dict[str, Any]:
    from jobs.stages.build import build

    return build(ctx, cluster, month).as_dict()


def _bottlenecks(ctx: Context, cluster: str, month: str, out: Path) -> dict[str, Any]:
    """The month's profiled jobs analysed and priced; the summary keeps the top findings by GPU-hours."""
    from jobs.stages.bottlenecks import build_bottlenecks

    config, _ = ctx.cluster_config(cluster)
    result = build_bottlenecks(ctx, cluster, config, month=month)
    found = [{"job_id": j["job_id"], **f} for j in result["jobs"] for f in j["findings"]]
    found.sort(key=lambda f: -(f["gpu_hours_recoverable"] or 0))
    by_kind: dict[str, int] = {}
    for f in found:
        by_kind[f["kind"]] = by_kind.get(f["kind"], 0) + 1
    traced = sum(1 for f in found if f["source"] != "dcgm")
    return {
        "jobs": len(result["jobs"]),
        "findings": len(found),
        "from_traces": traced,
        "from_counters": len(found) - traced,
        "by_kind": by_kind,
        "top": found[:5],
    }


def _failures(ctx: Context, cluster: str, month: str, out: Path) -> dict[str, Any]:
    from jobs.stages.failures import failures_summary

    return failures_summary(ctx, cluster, month)


def _waste(ctx: Context, cluster: str, month: str, out: Path) -> dict[str, Any]:
    from jobs.stages.waste import waste_summary

    return waste_summary(ctx, cluster, month, top=10)


def _train(ctx: Context, cluster: str, month: str, out: Path) -> dict[str, Any]:
    from features.table import TARGETS
    from jobs.stages.train import train
    from models.train import TrainParams

    return train(ctx, cluster, list(TARGETS), TrainParams())


def _evaluate(ctx: Context, cluster: str, month: str, out: Path) -> dict[str, Any]:
    from jobs.stages.evaluate import evaluate

    return evaluate(ctx, cluster)


def _hooks_export(ctx: Context, cluster: str, month: str, out: Path) -> dict[str, Any]:
    from jobs.stages.hooks import export_cache

    return export_cache(ctx, cluster, out / "slurm_job_submit_cache.tsv")


def _serve(ctx: Context, cluster: str, month: str, out: Path) -> dict[str, Any]:
    """One request to `jobfit serve`, for the user with the most finished jobs, as a submit hook sends it."""
    import pandas as pd

    from jobs.stages.serve import ask_once

    jobs = pd.read_parquet(out / "truth.parquet", columns=["user"])
    user = str(jobs["user"].value_counts().idxmax())
    return ask_once(ctx, cluster, {"cluster": cluster, "user": user, "nodes": 1, "time_limit": "04:00:00"})


def _busiest_user(out: Path) -> str:
    """The simulated user with the most jobs (the demo's one user report)."""
    import pandas as pd

    jobs = pd.read_parquet(out / "truth.parquet", columns=["user"])
    return str(jobs["user"].value_counts().idxmax())


def _report_admin(ctx: Context, cluster: str, month: str, out: Path) -> dict[str, Any]:
    from jobs.stages.report import make_reports

    return make_reports(ctx, cluster, month, "admin", None, None, out / "reports")


def _report_user(ctx: Context, cluster: str, month: str, out: Path) -> dict[str, Any]:
    from jobs.stages.report import make_reports

    return make_reports(ctx, cluster, month, "user", None, _busiest_user(out), out / "reports")


def _emails(ctx: Context, cluster: str, month: str, out: Path) -> dict[str, Any]:
    from jobs.stages.emails import send_digests

    return send_digests(ctx, cluster, month, out / "outbox", send=False, dry_run=False)


# The later stages, in order: (name, runner(ctx, cluster, month, out) -> what its command prints with
# --json, the rest of the command line that does the same step on its own).
_MONTH = ("--month", "{month}")
STAGES: tuple[tuple[str, Callable[[Context, str, str, Path], dict[str, Any]], tuple[str, ...]], ...] = (
    ("build", _build, _MONTH),
    ("bottlenecks", _bottlenecks, _MONTH),
    ("failures", _failures, _MONTH),
    ("waste", _waste, _MONTH),
    ("train", _train, ()),
    ("evaluate", _evaluate, ()),
    ("hooks export", _hooks_export, ("--out", "{out}/slurm_job_submit_cache.tsv")),
    ("serve", _serve, ()),
    ("report", _report_admin, (*_MONTH, "--audience", "admin", "--out", "{out}/reports")),
    ("report", _report_user, (*_MONTH, "--user", "{user}", "--out", "{out}/reports")),
    ("emails", _emails, (*_MONTH, "--outbox", "{out}/outbox")),
)


@dataclass
class Step:
    """One command the demo ran: arguments, exit status, seconds, and its --json output if it gave one."""

    command: str
    argv: list[str]
    exit: int
    seconds: float
    result: Any = None
    error: str | None = None


@dataclass
class DemoReport:
    """What the demo produced and where."""

    out: str
    cluster: str
    month: str
    warehouse: str
    simulation: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    tables: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["steps"] = [dict(s.__dict__) for s in self.steps]
        return d

    def text(self) -> str:
        sim = self.simulation
        lines = [
            f"jobfit demo: {sim.get('slurm_jobs')} Slurm jobs and {sim.get('pods')} pods simulated on "
            f"{self.cluster} for {self.month} in {self.out}/ (ground truth: {self.out}/truth.parquet)",
        ]
        for s in self.steps:
            mark = "ok" if s.exit == 0 else f"FAILED (exit {s.exit}): {s.error or ''}".rstrip()
            lines.append(f"  {s.command:<18} {mark} [{s.seconds:.0f}s]{_headline(s)}")
        if self.skipped:
            lines.append(f"  not available yet: {', '.join(self.skipped)}")
        if self.tables:
            lines.append(f"tables under {self.warehouse}:")
            lines += [f"  {name:<22} {rows:>9} rows" for name, rows in self.tables.items()]
        lines.append(
            f'look around: jobfit sql "SELECT state, count(*) FROM silver.jobs GROUP BY state"  '
            f"[{self.seconds:.0f}s in all]"
        )
        return "\n".join(lines)


def _headline(step: Step) -> str:
    r = step.result
    if not isinstance(r, dict):
        return ""
    if step.command.startswith("ingest "):
        return f": read {r.get('read')}, inserted {r.get('inserted')}, quarantined {r.get('quarantined')}"
    head = r.get("headline")
    if step.command == "waste" and isinstance(head, dict) and "wasted_share_pct" in head:
        usd = head.get("wasted_usd", 0)
        return f": {head['wasted_share_pct']:.1f} % of allocated capacity wasted, ${usd:,.0f}"
    if step.command == "failures" and "by_cause" in r:
        causes = ", ".join(f"{c} {v.get('jobs')}" for c, v in list(r["by_cause"].items())[:4])
        return f": {r.get('jobs')} jobs diagnosed ({causes}), ${r.get('lost_usd', 0):,.0f} lost"
    if step.command == "bottlenecks" and "top" in r:
        kinds = ", ".join(f"{k} {n}" for k, n in r["by_kind"].items())
        lines = [
            f": {r['jobs']} jobs, {r['findings']} findings ({r['from_traces']} from profiler traces, "
            f"{r['from_counters']} from DCGM counters: {kinds or 'none'})"
        ]
        for f in r["top"]:
            where = f" at {f['file']}:{f['line']}" if f["file"] else ""
            hours = f["gpu_hours_recoverable"]
            cost = f", {hours:.1f} GPU-h" if hours is not None else ""
            of = "of step time" if f["source"] != "dcgm" else "of its GPU time (DCGM counters)"
            share = f"{f['share_pct']:.0f} % {of}"
            lines.append(f"      {f['job_id']}: {f['kind']} {share}{cost}{where}")
        return "\n".join(lines)
    if step.command == "report" and r.get("reports"):
        return "".join(f": {x['path']} ({x['pages']} pages)" for x in r["reports"])
    if step.command == "emails" and "written" in r:
        return f": {r['written']} digest(s) written to {r['outbox']}"
    if step.command == "hooks export" and "entries" in r:
        return f": {r['entries']} cache entries for {r['users']} users in {r['out']}"
    if step.command == "serve" and isinstance(r.get("answer"), dict):
        a = r["answer"]
        flags = " ".join(a.get("flags") or []) or a.get("why") or ""
        return f": POST {r['url']} for {a.get('user')} -> HTTP {r['http_status']}, {a.get('status')}: {flags}"
    for key in ("headline", "summary"):
        if isinstance(r.get(key), str):
            return f": {r[key]}"
    return ""


def _previous_month(now: datetime) -> str:
    year, month = (now.year, now.month - 1) if now.month > 1 else (now.year - 1, 12)
    return f"{year:04d}-{month:02d}"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="simulate a month on the demo cluster, ingest it, run every stage, and summarise",
        description="The one command to see jobfit work: simulates a month of jobs (jobfit simulate) into "
        "--out, ingests every source with `jobfit ingest`'s runners, then runs each later stage "
        "(build, bottlenecks of the profiled jobs, failures, waste, train, evaluate, hooks export, one "
        "request to jobfit serve, the admin report and one user's report as PDFs in DIR/reports, the e-mail "
        "digests as .eml files in DIR/outbox) and prints what it produced and where. "
        "Tables go to the configured warehouse. Progress on stderr.",
    )
    add_common(p, cluster=False)
    p.add_argument("--cluster", default="demo", metavar="C", help="cluster to simulate (default: demo)")
    p.add_argument(
        "--month", type=month_arg, metavar="YYYY-MM", help="month to simulate (default: last month)"
    )
    p.add_argument(
        "--jobs", type=int, default=DEFAULT_JOBS, metavar="N", help=f"jobs (default {DEFAULT_JOBS})"
    )
    p.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, metavar="S", help=f"seed (default {DEFAULT_SEED})"
    )
    p.add_argument(
        "--out", default="demo", metavar="DIR", help="where the simulated files go (default ./demo)"
    )
    p.set_defaults(func=run)


def _run_step(ctx: Context, label: str, argv: list[str], call: Callable[[], Any]) -> Step:
    """Run one stage, timing it; a stage's bad-input or data-check error becomes a failed step (exit 2 or
    1, as `jobfit ARGV` would exit) with its message, and the demo goes on."""
    ctx.progress(f"demo: {label} ...")
    started = time.monotonic()
    result, code, error = None, 0, None
    try:
        result = call()
    except (UsageError, ConfigError) as exc:
        code, error = 2, str(exc)
    except DataError as exc:
        code, error = 1, str(exc)
    if hasattr(result, "as_dict"):
        result = result.as_dict()
    step = Step(label, argv, code, round(time.monotonic() - started, 1), result, error)
    ctx.progress(
        f"demo: {label} {'done' if code == 0 else f'failed (exit {code}): {error}'} in {step.seconds:.0f}s"
    )
    return step


def run(ctx: Context, args: argparse.Namespace) -> int:
    require(1 <= args.jobs <= 1_000_000, f"--jobs must be between 1 and 1000000, got {args.jobs}")
    cluster = ctx.cluster(args.cluster)
    month = args.month or _previous_month(ctx.now())
    out = Path(args.out)
    require(not out.exists() or out.is_dir(), f"--out {out} exists and is not a folder")
    started = time.monotonic()
    report = DemoReport(out=str(out), cluster=cluster.name, month=month, warehouse=ctx.settings.warehouse)
    ctx.progress(f"demo: simulating {args.jobs} jobs on {cluster.name} for {month} into {out}/ ...")
    sim = simulate(
        cluster,
        month,
        args.jobs,
        args.seed,
        out,
        dcgm_interval_s=DEFAULT_INTERVAL_S,
        progress=ctx.progress,
        profiled_share=DEMO_PROFILED_SHARE,
        dcgm_prof_share=DEMO_DCGM_PROF_SHARE,
    )
    report.simulation = sim.as_dict()
    for folder, source in INGEST_ORDER:
        if not any((out / folder).iterdir()):
            continue
        if source not in SOURCES:
            report.skipped.append(f"ingest {source}")
            continue
        paths = [str(out / folder)]
        runner = SOURCES[source].stage(source)
        options = INGEST_OPTIONS.get(source, {})
        argv = ["ingest", source, *paths, "--cluster", cluster.name]
        report.steps.append(
            _run_step(ctx, f"ingest {source}", argv, partial(runner.run, ctx, paths, cluster.name, **options))
        )
    user = _busiest_user(out)
    for name, stage, rest in STAGES:
        argv = [
            *name.split(),
            "--cluster",
            cluster.name,
            *(a.format(month=month, out=out, user=user) for a in rest),
        ]
        report.steps.append(_run_step(ctx, name, argv, partial(stage, ctx, cluster.name, month, out)))
    report.tables = _table_counts(ctx)
    report.seconds = round(time.monotonic() - started, 1)
    ctx.emit(report.as_dict(), as_json=args.json, text=report.text())
    failed = [s.command for s in report.steps if s.exit != 0]
    if failed:
        raise DataError(f"demo steps failed: {', '.join(failed)} (their messages are above)")
    return 0


def _table_counts(ctx: Context) -> dict[str, int]:
    """Rows in every table the run wrote (bronze, silver, gold, quarantine), by name."""
    from jobs.io.tables import read_table, table_exists
    from pipelines.schemas import BRONZE_SOURCES, TABLES

    names = [*(f"bronze.{s}" for s in BRONZE_SOURCES), *TABLES]
    counts = {}
    for name in names:
        if table_exists(ctx.spark, ctx.settings, name):
            counts[name] = read_table(ctx.spark, ctx.settings, name).count()
    return counts
