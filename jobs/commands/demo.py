"""`jobfit demo` — the main job: simulate a month, ingest every source, run every later stage, summarise."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from jobs.commands import add_common, month_arg, require
from jobs.context import Context, DataError
from jobs.simulator import simulate
from jobs.simulator.dcgm import DEFAULT_INTERVAL_S

DEFAULT_JOBS = 1000
DEFAULT_SEED = 42
# Simulator folder -> ingest source, in the order the sources depend on each other: accounting first
# (silver.jobs), then what attaches to jobs (scripts, telemetry attribution, logs), then pods.
INGEST_ORDER = (
    ("sacct", "sacct"),
    ("scripts", "scripts"),
    ("dcgm", "dcgm"),
    ("k8s", "k8s"),
    ("logs", "logs"),
)
# Later stages, run when their command exists: (command, takes --month).
STAGES = (
    ("build", True),
    ("failures", True),
    ("waste", True),
    ("train", False),
    ("evaluate", False),
    ("report", True),
    ("emails", True),
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
        "--out, ingests every source through `jobfit ingest`, then runs each later stage that exists "
        "(build, failures, waste, train, evaluate, report, emails) and prints what it produced and where. "
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


class _Tee(io.TextIOBase):
    """stderr that still reaches the terminal (progress) and is kept (to quote a failing step's error)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.seen = io.StringIO()

    def write(self, text: str) -> int:
        self.seen.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def _run_command(ctx: Context, argv: list[str], label: str) -> Step:
    """Run `jobfit ARGV --json` in-process on this context's Spark session, keeping its JSON output."""
    from jobs.cli import main

    ctx.progress(f"demo: {label} ...")
    started = time.monotonic()
    buf = io.StringIO()
    err = _Tee(sys.stderr)
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        code = main([*argv, "--json"], ctx=ctx)
    text = buf.getvalue()
    try:
        result: Any = json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        result = text.strip()
    error_lines = [
        ln for ln in err.seen.getvalue().splitlines() if ln.startswith("jobfit: error") or "failed" in ln
    ]
    step = Step(
        label, argv, code, round(time.monotonic() - started, 1), result, error_lines[-1] if code else None
    )
    ctx.progress(f"demo: {label} {'done' if code == 0 else f'failed (exit {code})'} in {step.seconds:.0f}s")
    return step


def run(ctx: Context, args: argparse.Namespace) -> int:
    from jobs.cli import COMMANDS
    from jobs.commands.ingest import SOURCES

    require(1 <= args.jobs <= 1_000_000, f"--jobs must be between 1 and 1000000, got {args.jobs}")
    cluster = ctx.cluster(args.cluster)
    month = args.month or _previous_month(ctx.now())
    out = Path(args.out)
    require(not out.exists() or out.is_dir(), f"--out {out} exists and is not a folder")
    started = time.monotonic()
    report = DemoReport(out=str(out), cluster=cluster.name, month=month, warehouse=ctx.settings.warehouse)
    ctx.progress(f"demo: simulating {args.jobs} jobs on {cluster.name} for {month} into {out}/ ...")
    sim = simulate(
        cluster, month, args.jobs, args.seed, out, dcgm_interval_s=DEFAULT_INTERVAL_S, progress=ctx.progress
    )
    report.simulation = sim.as_dict()
    _ = ctx.spark  # start Spark before a step runs with stderr captured: the JVM launcher needs the real one
    for folder, source in INGEST_ORDER:
        if not any((out / folder).iterdir()):
            continue
        if source not in SOURCES:
            report.skipped.append(f"ingest {source}")
            continue
        argv = ["ingest", source, str(out / folder), "--cluster", cluster.name]
        report.steps.append(_run_command(ctx, argv, f"ingest {source}"))
    for command, takes_month in STAGES:
        if command not in COMMANDS:
            report.skipped.append(command)
            continue
        argv = [command, "--cluster", cluster.name, *(["--month", month] if takes_month else [])]
        report.steps.append(_run_command(ctx, argv, command))
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
