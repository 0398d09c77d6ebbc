"""The daily increment against the size of the warehouse: one day's sacct dump and one day's DCGM scrapes
ingested into a warehouse already holding a month of 100k jobs and then one of 1M jobs (issue 18's goal:
the two increments within 1.5x of each other). Prints, per warehouse size, the set-up ingests' seconds, each
increment's seconds and its phases (`phases_s` of the --json report, sacct), the peak RSS of the driver's
Python and JVM, and the ratio of the large warehouse's increment to the small one's, in the same run.

    .venv/bin/python bench/ingest_increment.py                       # 100k and 1M jobs
    .venv/bin/python bench/ingest_increment.py --jobs 20000 100000   # a quicker pair

A warehouse of N jobs holds N sacct jobs (4 lines each: job, .batch, .extern, .0) submitted over January
2026 and `--samples-per-job` DCGM sample lines per job (default 1; each host one day of 30 s scrapes).
The increment is a day's dump: `--day-jobs` new jobs (default 7,500 = 30,000 lines) submitted on
1 February, `--day-redumps` jobs of the month's last ingest run recorded again (default 2,500: a real day's
dump re-records jobs submitted earlier; those the month left RUNNING now end, updates of stored keys, the
rest are unchanged), and `--day-samples` DCGM lines (default 300,000) of the next day's scrapes of the
first hosts. The re-recorded jobs reach back into the stored table, so the MERGE's key bounds
(`jobs.io.tables.key_bounds`) cover the files of that run as well as the new jobs'."""

from __future__ import annotations

import argparse
import os
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from ingest_dcgm import T0 as DCGM_T0  # bench/ is on sys.path when a bench runs as a script
from ingest_dcgm import generate as generate_dcgm
from ingest_sacct import HEADER, PeakRss, generate, load, run_jobfit

MONTH = datetime(2026, 1, 1)
DAY = datetime(2026, 2, 1)
# 10 lines a job (9.2M at 1M jobs) failed to ingest into the 1M-job warehouse in one run on the default
# driver (README, issue 18); the month is set up with 1 and the day's increment is 300k lines either way.
SAMPLES_PER_JOB = 1
SETUP_JOBS = 250_000  # jobs per set-up ingest run (1M sacct lines)


def _ingest(source: str, path: Path, warehouse: Path) -> tuple[float, dict, PeakRss]:
    env = {**os.environ, "JOBFIT_WAREHOUSE": str(warehouse)}
    return run_jobfit(["ingest", source, str(path), "--cluster", "bench"], env)


def _rss(rss: PeakRss) -> str:
    return f"Python {rss.python_bytes / 2**20:,.0f} MiB, JVM {rss.jvm_bytes / 2**20:,.0f} MiB"


def redump(month_part: Path, jobs: int, into: Path) -> int:
    """Append the last `jobs` jobs (4 lines each) of a month's ingest file to the day's dump, a job the
    month left RUNNING now COMPLETED at the day's start; returns the lines appended."""
    lines = month_part.read_text().splitlines()[1:][-4 * jobs :]
    fields = HEADER.split("|")
    state, end = fields.index("State"), fields.index("End")
    with into.open("a") as out:
        for line in lines:
            values = line.split("|")
            if values[state] == "RUNNING":
                values[state], values[end] = "COMPLETED", DAY.isoformat()
            out.write("|".join(values) + "\n")
    return len(lines)


def one_size(
    jobs: int, day_jobs: int, day_redumps: int, day_samples: int, per_job: int, tmp: Path
) -> dict[str, float]:
    """Set up a warehouse of `jobs` jobs, then time the day's two increments; returns their seconds."""
    root = tmp / f"w{jobs}"
    root.mkdir()
    warehouse = root / "warehouse"
    # The month lands in runs of at most SETUP_JOBS jobs, as a backfill would (4M lines in one run overflow
    # the default 4 GiB driver: docs/scale.md).
    lines = seconds = 0.0
    last_part: Path | None = None
    for part, first in enumerate(range(0, jobs, SETUP_JOBS)):
        n = min(SETUP_JOBS, jobs - first)
        base = root / f"month-{part}.sacct"
        days = 31 * n // jobs or 1
        start = MONTH + timedelta(days=days * part)
        lines += generate(base, 4 * n + 1, seed=7 + part, first_job=1_000_000 + first, t0=start, days=days)
        took, report, rss = _ingest("sacct", base, warehouse)
        seconds += took
        if last_part is not None:
            last_part.unlink()  # only the last run's file is read again (the day's re-recorded jobs)
        last_part = base
    print(f"  set-up sacct: {lines:,.0f} lines in {seconds:.1f} s ({_rss(rss)}, the last run)", flush=True)
    scrapes = root / "month-dcgm"
    scrapes.mkdir()
    _, samples, _ = generate_dcgm(scrapes, per_job * jobs, seed=11, t0=DCGM_T0)
    seconds, report, rss = _ingest("dcgm", scrapes, warehouse)
    print(f"  set-up dcgm: {samples:,} lines in {seconds:.1f} s ({_rss(rss)})", flush=True)
    day = root / "day.sacct"
    day_lines = generate(day, 4 * day_jobs + 1, seed=8, first_job=10_000_000, t0=DAY, days=1)
    assert last_part is not None  # jobs > 0
    day_lines += redump(last_part, day_redumps, day)
    last_part.unlink()
    sacct_s, report, rss = _ingest("sacct", day, warehouse)
    assert report["read"] == day_lines, report
    phases = ", ".join(f"{k} {v:.1f}" for k, v in report.get("phases_s", {}).items())
    counts = {k: report.get(k) for k in ("inserted", "updated", "unchanged")}
    print(f"  increment sacct counts: {counts}")
    print(f"  increment sacct: {day_lines:,} lines in {sacct_s:.1f} s ({_rss(rss)}); phases s: {phases}")
    day_scrapes = root / "day-dcgm"
    day_scrapes.mkdir()
    _, day_samples_n, _ = generate_dcgm(day_scrapes, day_samples, seed=12, t0=DCGM_T0 + timedelta(days=1))
    dcgm_s, report, rss = _ingest("dcgm", day_scrapes, warehouse)
    print(f"  increment dcgm: {day_samples_n:,} lines in {dcgm_s:.1f} s ({_rss(rss)})", flush=True)
    return {"sacct": sacct_s, "dcgm": dcgm_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs=2, default=[100_000, 1_000_000], metavar=("SMALL", "LARGE"))
    parser.add_argument("--day-jobs", type=int, default=7_500)
    parser.add_argument(
        "--day-redumps",
        type=int,
        default=2_500,
        help="stored jobs the day's dump records again (default 2,500)",
    )
    parser.add_argument("--day-samples", type=int, default=300_000)
    parser.add_argument(
        "--samples-per-job", type=int, default=SAMPLES_PER_JOB, help="DCGM lines stored per job (default 1)"
    )
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="jobfit-increment-") as tmp:
        for jobs in args.jobs:
            print(f"warehouse of {jobs:,} jobs; load average {load()}", flush=True)
            results[jobs] = one_size(
                jobs, args.day_jobs, args.day_redumps, args.day_samples, args.samples_per_job, Path(tmp)
            )
    small, large = args.jobs
    print(f"\nincrement into {large:,} jobs / into {small:,} jobs (goal <= 1.5x); load average {load()}")
    for source in ("sacct", "dcgm"):
        ratio = results[large][source] / results[small][source]
        verdict = "reached" if ratio <= 1.5 else "not reached"
        print(
            f"  {source}: {results[large][source]:.1f} s / {results[small][source]:.1f} s = {ratio:.2f}x "
            f"({verdict})"
        )


if __name__ == "__main__":
    main()
