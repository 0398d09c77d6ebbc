"""How time and memory grow with a cluster's month: ingest (every source), build and train at several sizes
of simulated month, the growth fitted per stage, and a projection to a 10M-job, 1B-sample month.

    .venv/bin/python bench/scaling.py                           # 10k, 100k and 1M jobs (hours on 2 cores)
    .venv/bin/python bench/scaling.py --sizes 10000,30000,100000
    .venv/bin/python bench/scaling.py --sizes 2000,5000 --dcgm-interval 600 --json out.json

Each stage runs as a fresh `jobfit` process (Spark start-up included, as the daily DAG runs it) with the
default settings (driver memory, shuffle partitions) unless JOBFIT_* variables say otherwise; its seconds
and the peak RSS of its Python and JVM are recorded. Telemetry grows with the jobs: the simulator writes
one DCGM scrape per GPU every `--dcgm-interval` seconds of each job's run (default: the simulator's own,
600 s), so DCGM samples are in proportion to GPU-hours. Per stage, time = c + k · n is fitted by least
squares (c the fixed cost: process and Spark start-up, imports; k the cost per job, or per DCGM line), and
the power-law exponent b of a log-log fit is printed beside it: b well below 1 says the fixed cost still
dominates at the sizes run, so a power law would understate the growth beyond them, while work that touches
every record grows at least linearly. The projection is c + k · n at a 10M-job, 1B-sample month, in one
run and as the DAGs schedule it (ingests a day's drop, build the month, train monthly), for time and for
the Python driver's peak RSS. Parts that grow faster than linearly (shuffles, MERGEs into larger tables)
would add to it: read it as the order of magnitude. `--from-json` re-prints an earlier run's figures.
docs/scale.md keeps the figures of a run.
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
GROWTH_HEADER = f"""\
growth: time = c + k · n fitted (n = jobs; DCGM ingest: n = DCGM lines), beside the power-law exponent b;
projected to a month of {TARGET_JOBS:,} jobs / {TARGET_SAMPLES:,} DCGM samples in one run (a backfill)
and as the DAGs schedule it: each ingest a day's drop (1/30), build the whole month (daily), train the
month (monthly). The Python driver's RSS is fitted and projected the same way (the JVM's peak is bounded
by spark.driver.memory and is not extrapolated):"""


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


def affine(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """(c, k) of y = c + k · x by least squares, k at least 0 (more data never costs less) and c at least
    0 (a fixed cost is not negative); None with fewer than two distinct sizes."""
    if len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    k = max(slope, 0.0)
    c = my - k * mx
    if c < 0:  # through the origin instead
        c, k = 0.0, sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
    return c, k


def report(runs: list[dict]) -> list[str]:
    """The measured table, the fitted growth and the projections, as printed lines."""
    lines = [f"{'stage':<20}" + "".join(f"{r['jobs']:>12,} jobs" for r in runs)]
    names = list(dict.fromkeys(name for r in runs for name in r["stages"]))
    for name in names:
        cells = []
        for r in runs:
            s = r["stages"].get(name)
            cells.append(f"{s['seconds']:>7.1f} s {s['python_mib']:>5}/{s['jvm_mib']:>5}M" if s else " " * 21)
        lines.append(f"{name:<20}" + "".join(cells))
    totals = [sum(s["seconds"] for s in r["stages"].values()) for r in runs]
    lines.append(f"{'total':<20}" + "".join(f"{t:>17.1f} s   " for t in totals))
    lines.append(f"{'DCGM lines':<20}" + "".join(f"{r['dcgm_lines']:>21,}" for r in runs))
    lines.append("(seconds, then peak RSS of the Python driver / its JVM in MiB)")
    lines.append("")
    lines.extend(GROWTH_HEADER.splitlines())
    lines.append(
        f"  {'stage':<18} {'b':>5} {'fixed c':>9} {'per 1M n':>10} {'month':>9} {'scheduled':>10} "
        f"{'Py MiB/1M n':>12} {'Py month':>9} {'Py sched.':>10}"
    )
    month_total = daily_total = 0.0
    for name in names:
        measured = [r for r in runs if name in r["stages"]]
        by_samples = name == "ingest dcgm"  # its work grows with the DCGM lines, the rest with the jobs
        xs = [float(r["dcgm_lines"] if by_samples else r["jobs"]) for r in measured]
        seconds = [r["stages"][name]["seconds"] for r in measured]
        python = [float(r["stages"][name]["python_mib"]) for r in measured]
        power, line, py = fit(xs, seconds), affine(xs, seconds), affine(xs, python)
        if power is None or line is None or py is None:
            lines.append(f"  {name:<18} (one size: no fit)")
            continue
        month_n = TARGET_SAMPLES if by_samples else TARGET_JOBS
        sched_n = month_n / 30 if name.startswith("ingest") else month_n
        month_s, sched_s = line[0] + line[1] * month_n, line[0] + line[1] * sched_n
        month_total += month_s
        if name != "train":
            daily_total += sched_s
        lines.append(
            f"  {name:<18} {power[1]:5.2f} {line[0]:7.1f} s {line[1] * 1e6:8.1f} s {month_s / 3600:7.1f} h"
            f" {sched_s / 3600:8.2f} h {py[1] * 1e6:12.0f} {(py[0] + py[1] * month_n) / 1024:7.1f} G"
            f" {(py[0] + py[1] * sched_n) / 1024:8.1f} G"
        )
    lines.append(f"  the month in one run: {month_total / 3600:.1f} h; the daily DAG at the month's end")
    lines.append(f"  (every ingest of a day, then build): {daily_total / 3600:.2f} h, on 2 cores")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="jobs per month, comma-separated")
    parser.add_argument(
        "--dcgm-interval", type=int, default=DEFAULT_INTERVAL_S, help="seconds between simulated DCGM scrapes"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the runs' figures here")
    parser.add_argument(
        "--from-json", metavar="FILE", help="print the table, fits and projections of an earlier run's --json"
    )
    args = parser.parse_args()
    if args.from_json:
        try:
            runs = json.loads(Path(args.from_json).read_text())
        except (OSError, ValueError) as err:
            parser.error(f"--from-json: cannot read {args.from_json}: {err}")
        for line in report(runs):
            print(line)
        return
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
            if args.json:  # after every size, so a long run that fails later keeps what it measured
                Path(args.json).write_text(json.dumps(runs, indent=1) + "\n")
    for line in report(runs):
        print(line)


if __name__ == "__main__":
    main()
