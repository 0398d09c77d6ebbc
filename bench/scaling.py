"""How time and memory grow with a cluster's month: ingest (every source), build and train at several sizes
of simulated month, a power law fitted to each stage, and a projection to a 10M-job, 1B-sample month.

    .venv/bin/python bench/scaling.py                           # 10k, 100k and 1M jobs (hours on 2 cores)
    .venv/bin/python bench/scaling.py --sizes 10000,30000,100000
    .venv/bin/python bench/scaling.py --sizes 2000,5000 --dcgm-interval 600 --json out.json

Each stage runs as a fresh `jobfit` process (Spark start-up included, as the daily DAG runs it) with the
default settings (driver memory, shuffle partitions) unless JOBFIT_* variables say otherwise; its seconds
and the peak RSS of its Python and JVM are recorded. Telemetry grows with the jobs: the simulator writes
one DCGM scrape per GPU every `--dcgm-interval` seconds of each job's run (default: the simulator's own,
600 s), so DCGM samples are in proportion to GPU-hours. The fit is log-log least squares, time = a · n^b,
per stage over the sizes run (the exponent b over all of them), and the projection scales the largest
measured size by the local exponent of the two largest (start-up costs flatten the curve at small sizes,
so the all-sizes exponent would understate the growth). With one size there is no fit. The projection
extrapolates far beyond what was measured: read it as the order of magnitude, with the exponents as the
finding. docs/scale.md keeps the figures of a run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path

from ingest_sacct import load, run_jobfit  # bench/ is on sys.path when a bench runs as a script

from conf import load_cluster
from jobs.commands.demo import INGEST_ORDER
from jobs.simulator import simulate
from jobs.simulator.dcgm import DEFAULT_INTERVAL_S
from pipelines.units import MIB

REPO = Path(__file__).resolve().parents[1]
MONTH = "2026-03"
# The month a centre asks about: 10M jobs and 1B DCGM samples.
TARGET_JOBS = 10_000_000
TARGET_SAMPLES = 1_000_000_000


def run_stage(args: list[str], env: dict[str, str]) -> dict:
    """One `jobfit` command as a fresh process: seconds, peak RSS (MiB) and its --json."""
    seconds, report, rss = run_jobfit(args, env)
    return {
        "seconds": round(seconds, 1),
        "python_mib": round(rss.python_bytes / MIB),
        "jvm_mib": round(rss.jvm_bytes / MIB),
        "report": report,
    }


def measure(n_jobs: int, interval_s: int, root: Path) -> dict:
    """Simulate a month of n_jobs, then ingest every source, build and train it; the figures per stage."""
    sim = root / f"sim-{n_jobs}"
    started = time.perf_counter()
    result = simulate(load_cluster("demo"), MONTH, n_jobs, seed=1, out=sim, dcgm_interval_s=interval_s)
    simulate_s = time.perf_counter() - started
    env = {
        **os.environ,
        "JOBFIT_WAREHOUSE": str(root / f"warehouse-{n_jobs}"),
        "JOBFIT_MLFLOW__TRACKING_URI": f"sqlite:///{root / f'mlflow-{n_jobs}.db'}",
    }
    stages: dict[str, dict] = {}
    for folder, source in INGEST_ORDER:
        if (sim / folder).is_dir() and any((sim / folder).iterdir()):
            stages[f"ingest {source}"] = run_stage(
                ["ingest", source, str(sim / folder), "--cluster", "demo"], env
            )
    stages["build"] = run_stage(["build", "--cluster", "demo", "--month", MONTH], env)
    stages["train"] = run_stage(["train", "--cluster", "demo"], env)
    dcgm = stages.get("ingest dcgm", {}).get("report", {})
    for stage in stages.values():
        stage.pop("report")
    return {
        "jobs": n_jobs,
        "lines": result.lines,
        "dcgm_lines": result.lines.get("dcgm", 0),
        "dcgm_rows": dcgm.get("inserted", 0),
        "simulate_s": round(simulate_s, 1),
        "stages": stages,
        "load_after": load(),
    }


def fit(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """(a, b) of y = a · x^b by least squares on logs; None with fewer than two distinct sizes."""
    points = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len({p[0] for p in points}) < 2:
        return None
    mx = sum(p[0] for p in points) / len(points)
    my = sum(p[1] for p in points) / len(points)
    b = sum((p[0] - mx) * (p[1] - my) for p in points) / sum((p[0] - mx) ** 2 for p in points)
    return math.exp(my - b * mx), b


def report(runs: list[dict]) -> list[str]:
    """The measured table, the fitted exponents and the projection, as printed lines."""
    lines = [f"{'stage':<20}" + "".join(f"{r['jobs']:>12,} jobs" for r in runs)]
    names = list(dict.fromkeys(name for r in runs for name in r["stages"]))
    for name in names:
        cells = []
        for r in runs:
            s = r["stages"].get(name)
            cells.append(
                f"{s['seconds']:>9.1f} s {max(s['python_mib'], s['jvm_mib']):>5}M" if s else " " * 17
            )
        lines.append(f"{name:<20}" + "".join(cells))
    totals = [sum(s["seconds"] for s in r["stages"].values()) for r in runs]
    lines.append(f"{'total':<20}" + "".join(f"{t:>15.1f} s " for t in totals))
    lines.append(f"{'DCGM lines':<20}" + "".join(f"{r['dcgm_lines']:>17,}" for r in runs))
    lines.append("")
    lines.append("fit time = a · n^b (n = jobs; DCGM ingest: n = DCGM lines), projection to a month of")
    lines.append(f"{TARGET_JOBS:,} jobs and {TARGET_SAMPLES:,} DCGM samples; peak RSS fitted the same way:")
    projected_total = 0.0
    for name in names:
        measured = [r for r in runs if name in r["stages"]]
        by_samples = name == "ingest dcgm"
        xs = [r["dcgm_lines"] if by_samples else r["jobs"] for r in measured]
        target = TARGET_SAMPLES if by_samples else TARGET_JOBS
        seconds = [r["stages"][name]["seconds"] for r in measured]
        rss = [max(r["stages"][name]["python_mib"], r["stages"][name]["jvm_mib"]) for r in measured]
        overall, local, local_rss = fit(xs, seconds), fit(xs[-2:], seconds[-2:]), fit(xs[-2:], rss[-2:])
        if overall is None or local is None or local_rss is None:
            lines.append(f"  {name:<18} (one size: no fit)")
            continue
        projected = seconds[-1] * (target / xs[-1]) ** local[1]
        projected_gib = rss[-1] * (target / xs[-1]) ** local_rss[1] / 1024
        projected_total += projected
        lines.append(
            f"  {name:<18} b = {overall[1]:4.2f} (largest two: {local[1]:4.2f}) → {projected / 3600:8.1f} h"
            f"   peak RSS b = {local_rss[1]:4.2f} → {projected_gib:6.1f} GiB"
        )
    lines.append(f"  {'total':<18}           {projected_total / 3600:8.1f} h on this machine's settings")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="jobs per month, comma-separated")
    parser.add_argument(
        "--dcgm-interval", type=int, default=DEFAULT_INTERVAL_S, help="seconds between simulated DCGM scrapes"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the runs' figures here")
    args = parser.parse_args()
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    except ValueError:
        parser.error(f"--sizes: not a comma-separated list of integers: {args.sizes!r}")
    if not sizes or min(sizes) < 100:
        parser.error("--sizes: at least one size, each of 100 jobs or more")
    print(f"sizes {sizes}, DCGM every {args.dcgm_interval} s; load average {load()}", flush=True)
    runs = []
    with tempfile.TemporaryDirectory(prefix="jobfit-scaling-") as tmp:
        for n in sizes:
            run = measure(n, args.dcgm_interval, Path(tmp))
            runs.append(run)
            print(
                f"{n:,} jobs done: {json.dumps(run['stages'])}; load average {run['load_after']}", flush=True
            )
    for line in report(runs):
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    main()
