"""Simulate + ingest throughput: jobs/s of `jobfit simulate`, and lines/s of `jobfit ingest` per source, each
beside a bare read of the same files in the same run (the ratio says what the pipeline costs over I/O).

    .venv/bin/python bench/simulate_ingest.py            # 100,000 jobs
    .venv/bin/python bench/simulate_ingest.py --quick    # 5,000 jobs
    .venv/bin/python bench/simulate_ingest.py --jobs 20000 --no-ingest
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

from conf import load_cluster
from jobs.cli import main
from jobs.commands.ingest import SOURCES
from jobs.context import Context
from jobs.simulator import simulate

FOLDERS = (("sacct", "sacct"), ("scripts", "scripts"), ("dcgm", "dcgm"), ("k8s", "k8s"), ("logs", "logs"))


def bare_read(folder: Path) -> tuple[int, float]:
    """Lines in every file under the folder and the seconds a plain Python read of them takes."""
    started = time.perf_counter()
    lines = 0
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            lines += len(p.read_bytes().decode("utf-8", errors="replace").splitlines())
    return lines, time.perf_counter() - started


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="5,000 jobs")
    parser.add_argument("--no-ingest", action="store_true", help="time the simulator only")
    parser.add_argument("--keep", metavar="DIR", help="write here and keep it (default: a temporary folder)")
    args = parser.parse_args()
    n = 5000 if args.quick else args.jobs
    with tempfile.TemporaryDirectory(prefix="jobfit-bench-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        out = root / "sim"
        started = time.perf_counter()
        result = simulate(load_cluster("demo"), "2026-03", n, seed=1, out=out)
        sim_s = time.perf_counter() - started
        total_lines = sum(result.lines.values())
        print(
            f"simulate: {n} jobs in {sim_s:.1f}s = {n / sim_s:,.0f} jobs/s, "
            f"{total_lines / sim_s:,.0f} lines/s"
        )
        for source, lines in result.lines.items():
            print(f"  {source:<8} {result.files[source]:>8} files {lines:>10} lines")
        if args.no_ingest:
            return
        ctx = Context(
            environ={
                "JOBFIT_WAREHOUSE": str(root / "warehouse"),
                "JOBFIT_SPARK__MASTER": "local[2]",
                "JOBFIT_SPARK__SHUFFLE_PARTITIONS": "2",
                "JOBFIT_MLFLOW__TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}",
            },
            quiet=True,
        )
        _ = ctx.spark
        print(
            f"{'source':<8} {'lines':>10} {'ingest s':>9} {'lines/s':>10} {'bare read lines/s':>18} "
            f"{'ratio':>7}"
        )
        for folder, source in FOLDERS:
            if source not in SOURCES:
                print(f"{source:<8} (no `jobfit ingest {source}` in this build)")
                continue
            lines, bare_s = bare_read(out / folder)
            buf = io.StringIO()
            started = time.perf_counter()
            with contextlib.redirect_stdout(buf):
                code = main(["ingest", source, str(out / folder), "--cluster", "demo", "--json"], ctx=ctx)
            ingest_s = time.perf_counter() - started
            report = json.loads(buf.getvalue()) if code == 0 else {}
            bare_rate = lines / bare_s if bare_s else float("inf")
            rate = lines / ingest_s
            print(
                f"{source:<8} {lines:>10} {ingest_s:>9.1f} {rate:>10,.0f} {bare_rate:>18,.0f} "
                f"{bare_rate / rate:>6.0f}x  (exit {code}, quarantined {report.get('quarantined')})"
            )


if __name__ == "__main__":
    main_bench()
