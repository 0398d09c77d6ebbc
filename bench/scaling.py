"""How time and memory grow with a cluster's month: ingest (every source), build and train at several sizes
of simulated month, the growth fitted per stage, and a projection to a 10M-job, 1B-sample month.

    .venv/bin/python bench/scaling.py                           # 10k, 100k and 1M jobs (hours on 2 cores)
    .venv/bin/python bench/scaling.py --sizes 10000,30000,100000
    .venv/bin/python bench/scaling.py --sizes 2000,5000 --dcgm-interval 600 --json out.json
    # a size too long for one sitting: resumable, each sitting with its own same-day baseline
    .venv/bin/python bench/scaling.py --sizes 1000000 --workdir DIR --json DIR/s.json --reference 10000 \
        --budget 150

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

Seconds from different days do not compare: the same code on this machine has run twice as slowly one day
as another. So every stage records the same stage at a reference size measured in the same sitting (the
sitting's smallest size, or `--reference N` run fresh first), the table prints each stage's ratio to it,
and the fit expresses every stage in its earliest reference's day: seconds / own reference × that
reference. With `--workdir`, simulated months and warehouses are kept there and the `--json` file is
written after every stage, so a size too long for one sitting is measured stage by stage over several;
`--budget` does not start a stage predicted (from the sizes measured before, scaled by today's reference)
to end past it. A stage interrupted midway leaves its warehouse in an unknown state: the bench refuses to
go on from it and says what to remove.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
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


def simulated(n_jobs: int, interval_s: int, root: Path) -> tuple[Path, dict]:
    """The month of n_jobs under root (simulated now, or kept from an earlier sitting of the same workdir):
    its folder and {"lines", "simulate_s"}."""
    sim = root / f"sim-{n_jobs}"
    marker = sim / "simulated.json"
    if marker.is_file():
        kept = json.loads(marker.read_text())
        if kept.get("interval_s") == interval_s:
            return sim, kept
    started = time.perf_counter()
    result = simulate(load_cluster("demo"), MONTH, n_jobs, seed=1, out=sim, dcgm_interval_s=interval_s)
    kept = {
        "lines": result.lines,
        "simulate_s": round(time.perf_counter() - started, 1),
        "interval_s": interval_s,
    }
    marker.write_text(json.dumps(kept) + "\n")
    return sim, kept


def stage_commands(sim: Path) -> list[tuple[str, list[str]]]:
    """(stage name, jobfit arguments) in the order the DAG runs them: each source's ingest, build, train."""
    commands = [
        (f"ingest {source}", ["ingest", source, str(sim / folder), "--cluster", "demo"])
        for folder, source in INGEST_ORDER
        if (sim / folder).is_dir() and any((sim / folder).iterdir())
    ]
    commands.append(("build", ["build", "--cluster", "demo", "--month", MONTH]))
    commands.append(("train", ["train", "--cluster", "demo"]))
    return commands


class Budget:
    """Whether a stage may start: it must be predicted to end within `minutes` of the bench's start. The
    prediction is the stage's time at the sizes measured before (c + k · n on their ratios to their own
    sitting's reference, times this sitting's reference); a stage with no such history always starts."""

    def __init__(self, minutes: float | None, runs: list[dict]) -> None:
        self.deadline = None if minutes is None else time.perf_counter() + minutes * 60
        self.runs = runs

    def predicted_s(self, name: str, n: float, reference: dict | None) -> float | None:
        points = [
            (
                float(r["dcgm_lines"] if name == "ingest dcgm" else r["jobs"]),
                s["seconds"] / s["reference"]["seconds"],
            )
            for r in self.runs
            if (s := r["stages"].get(name)) and "seconds" in s and s.get("reference")
        ]
        line = affine([x for x, _ in points], [y for _, y in points])
        if line is None or reference is None:
            return None
        return (line[0] + line[1] * n) * reference["seconds"]

    def allows(self, name: str, n: float, reference: dict | None) -> tuple[bool, float | None]:
        predicted = self.predicted_s(name, n, reference)
        if self.deadline is None or predicted is None:
            return True, predicted
        return time.perf_counter() + predicted <= self.deadline, predicted


def measure(
    n_jobs: int,
    interval_s: int,
    root: Path,
    run: dict,
    reference: dict[str, dict] | None,
    budget: Budget,
    save: Callable[[], None],
) -> bool:
    """Simulate a month of n_jobs (or keep the one under root), then ingest every source, build and train
    it, filling `run` stage by stage and calling `save` after each; stages `run` already holds (measured in
    an earlier sitting of the same root) are not run again. `reference` maps each stage to this sitting's
    figures for it at the reference size; None when this run is the sitting's reference (the smallest
    size). False when the budget stopped it before its last stage."""
    sim, kept = simulated(n_jobs, interval_s, root)
    run.update(
        jobs=n_jobs,
        lines=kept["lines"],
        dcgm_lines=kept["lines"].get("dcgm", 0),
        simulate_s=kept["simulate_s"],
    )
    run.setdefault("stages", {})
    env = {
        **os.environ,
        "JOBFIT_WAREHOUSE": str(root / f"warehouse-{n_jobs}"),
        "JOBFIT_MLFLOW__TRACKING_URI": f"sqlite:///{root / f'mlflow-{n_jobs}.db'}",
    }
    for name, args in stage_commands(sim):
        done = run["stages"].get(name)
        if done and "seconds" in done:
            continue
        if done:
            sys.exit(
                f"{name} at {n_jobs:,} jobs was started on {done['started']} and never finished: its"
                f" warehouse is in an unknown state. Remove {root / f'warehouse-{n_jobs}'} and"
                f" {root / f'mlflow-{n_jobs}.db'} and the {n_jobs}-job entry of the --json file to measure"
                " that size again."
            )
        n = float(run["dcgm_lines"] if name == "ingest dcgm" else n_jobs)
        ok, predicted = budget.allows(name, n, reference.get(name) if reference else None)
        if not ok:
            print(f"{name} at {n_jobs:,} jobs not started: predicted {predicted:.0f} s, past the --budget")
            return False
        run["stages"][name] = {"started": time.strftime("%Y-%m-%d %H:%M"), "load_before": load()}
        save()
        figures = run_stage(args, env)
        if name == "ingest dcgm":
            run["dcgm_rows"] = figures["report"].get("inserted", 0)
        figures.pop("report")
        stage = {
            **figures,
            "day": time.strftime("%Y-%m-%d"),
            "load_before": run["stages"][name]["load_before"],
        }
        settings = {k: v for k, v in os.environ.items() if k.startswith("JOBFIT_")}
        if settings:  # what the run changed from the defaults (the reference may have run without)
            stage["settings"] = settings
        stage["load_after"] = load()
        stage["reference"] = (
            reference[name] if reference else {"jobs": n_jobs, **figures, "day": stage["day"]}
        )
        run["stages"][name] = stage
        save()
        predicted_text = f", predicted {predicted:.0f} s" if predicted is not None else ""
        print(
            f"  {n_jobs:,} jobs {name}: {json.dumps(figures)}{predicted_text}; load {stage['load_after']}",
            flush=True,
        )
    run["load_after"] = load()
    save()
    return True


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


def base_references(runs: list[dict], names: list[str]) -> dict[str, dict]:
    """Per stage, the earliest day's reference figures, when every run cites one of the same size (the day
    the fit is expressed in); stages with no or mixed references are left out (fitted on raw seconds)."""
    base = {}
    for name in names:
        refs = [r["stages"][name].get("reference") for r in runs if name in r["stages"]]
        if refs and all(refs) and len({ref["jobs"] for ref in refs}) == 1:
            base[name] = min(refs, key=lambda ref: ref["day"])
    return base


def normalised_seconds(stage: dict, base: dict | None) -> float:
    """A stage's seconds as on its base reference's day: its ratio to its own sitting's reference (same day,
    same machine) times the base reference's seconds. Sittings on days the machine ran at another speed
    then fit one curve; without a base, the raw seconds."""
    if base is None:
        return stage["seconds"]
    return stage["seconds"] / stage["reference"]["seconds"] * base["seconds"]


def same_day_ratios(runs: list[dict], names: list[str]) -> list[str]:
    """Each stage's seconds as a multiple of its own sitting's reference (the same stage at the reference
    size, measured the same day): the growth, free of the machine's speed on the day."""
    if not any(s.get("reference") for r in runs for s in r["stages"].values()):
        return []
    lines = ["", "ratio to the same stage at the reference size, measured in the same sitting (its day):"]
    for name in names:
        cells = []
        for r in runs:
            s = r["stages"].get(name)
            ref = s.get("reference") if s else None
            cells.append(
                f"{s['seconds'] / ref['seconds']:>6.2f}× {ref['jobs'] // 1000:>3}k {ref['day'][5:]}"
                if ref
                else " " * 21
            )
        lines.append(f"{name:<20}" + "".join(cells))
    return lines


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
    # A run measured over sittings may still lack stages: its sum is no total.
    totals = [
        f"{sum(s['seconds'] for s in r['stages'].values()):>17.1f} s   "
        if len(r["stages"]) == len(names)
        else "partial, {} of {}".format(len(r["stages"]), len(names)).rjust(21)
        for r in runs
    ]
    lines.append(f"{'total':<20}" + "".join(totals))
    lines.append(f"{'DCGM lines':<20}" + "".join(f"{r['dcgm_lines']:>21,}" for r in runs))
    lines.append("(seconds, then peak RSS of the Python driver / its JVM in MiB)")
    lines.extend(same_day_ratios(runs, names))
    lines.append("")
    lines.extend(GROWTH_HEADER.splitlines())
    lines.append(
        f"  {'stage':<18} {'b':>5} {'fixed c':>9} {'per 1M n':>10} {'month':>9} {'scheduled':>10} "
        f"{'Py MiB/1M n':>12} {'Py month':>9} {'Py sched.':>10}"
    )
    month_total = daily_total = 0.0
    base = base_references(runs, names)
    for name in names:
        measured = [r for r in runs if name in r["stages"]]
        by_samples = name == "ingest dcgm"  # its work grows with the DCGM lines, the rest with the jobs
        xs = [float(r["dcgm_lines"] if by_samples else r["jobs"]) for r in measured]
        seconds = [normalised_seconds(r["stages"][name], base.get(name)) for r in measured]
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


def sitting_reference(n_jobs: int, interval_s: int) -> dict[str, dict]:
    """Every stage at n_jobs, fresh in a temporary folder: this sitting's same-day baseline, per stage."""
    run: dict = {}
    with tempfile.TemporaryDirectory(prefix="jobfit-scaling-ref-") as tmp:
        measure(n_jobs, interval_s, Path(tmp), run, None, Budget(None, []), lambda: None)
    return baseline(run)


def baseline(run: dict) -> dict[str, dict]:
    """A run measured as its sitting's reference: each stage's figures, as the other sizes cite them."""
    return {name: stage["reference"] for name, stage in run["stages"].items()}


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
    parser.add_argument(
        "--workdir",
        metavar="DIR",
        help="keep each size's simulated month and warehouse here, and resume: with --json FILE, the stages"
        " FILE already holds are not run again (default: a temporary folder, removed at the end)",
    )
    parser.add_argument(
        "--reference",
        type=int,
        metavar="N",
        help="first run every stage at N jobs in a fresh folder: this sitting's same-day baseline for the"
        " stages it measures (default: the smallest of --sizes, which must then be measured in this sitting)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        metavar="MINUTES",
        help="do not start a stage predicted to end later than this many minutes after the start; stop there,"
        " keeping what was measured (resume with --workdir)",
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
    if args.reference is not None and args.reference < 100:
        parser.error("--reference: 100 jobs or more")
    if args.workdir and not args.json:
        parser.error("--workdir resumes from the --json file: give --json FILE too")
    runs: list[dict] = []
    if args.workdir and args.json and Path(args.json).is_file():
        try:
            runs = json.loads(Path(args.json).read_text())
        except ValueError as err:
            parser.error(f"--json: {args.json} holds no earlier run's figures: {err}")
    by_size = {r["jobs"]: r for r in runs}
    if args.reference is None and args.workdir and sizes[0] in by_size:
        parser.error(
            f"--reference: {sizes[0]:,} jobs were measured in an earlier sitting, so they are no same-day"
            " baseline for this one; name a size to run fresh first (e.g. --reference 10000)"
        )

    def save() -> None:
        if args.json:  # after every stage, so a long run that fails later keeps what it measured
            Path(args.json).write_text(json.dumps(sorted(runs, key=lambda r: r["jobs"]), indent=1) + "\n")

    budget = Budget(args.budget, runs)
    print(f"sizes {sizes}, DCGM every {args.dcgm_interval} s; load average {load()}", flush=True)
    reference = None
    if args.reference is not None:
        # Kept beside --json for the day: a sitting restarted the same day reuses its reference.
        kept = (
            Path(f"{args.json}.reference-{args.reference}-{time.strftime('%Y-%m-%d')}") if args.json else None
        )
        if kept is not None and kept.is_file():
            reference = json.loads(kept.read_text())
        else:
            reference = sitting_reference(args.reference, args.dcgm_interval)
            if kept is not None:
                kept.write_text(json.dumps(reference) + "\n")
        print(f"reference, {args.reference:,} jobs: {json.dumps(reference)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="jobfit-scaling-") as tmp:
        root = Path(args.workdir) if args.workdir else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for n in sizes:
            run = by_size.get(n)
            if run is None:
                run = by_size[n] = {}
                runs.append(run)
            finished = measure(n, args.dcgm_interval, root, run, reference, budget, save)
            if reference is None:  # the sitting's first (smallest) size is the others' baseline
                reference = baseline(run)
            if not finished:
                break
            print(f"{n:,} jobs done; load average {run['load_after']}", flush=True)
    for line in report([r for r in runs if all("seconds" in s for s in r.get("stages", {}).values())]):
        print(line)


if __name__ == "__main__":
    main()
