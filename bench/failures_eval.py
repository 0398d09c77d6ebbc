"""Failure diagnosis, measured: the confusion table on every real error log, log-classification throughput
(Python `classify_text` vs the Spark rlike chain, same run), and per-cause precision/recall on a simulated
month against truth.parquet.

    .venv/bin/python bench/failures_eval.py            # real logs + a 2,000-job simulated month
    .venv/bin/python bench/failures_eval.py --quick    # real logs + 600 jobs
    .venv/bin/python bench/failures_eval.py --no-sim   # real logs only
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from jobs.cli import main  # noqa: E402
from jobs.commands.ingest import SOURCES  # noqa: E402
from jobs.context import Context  # noqa: E402
from jobs.stages.failures import build_failures, score_against_truth  # noqa: E402
from pipelines.gold.failures.diagnose import with_text_diagnosis  # noqa: E402
from pipelines.gold.failures.patterns import classify_text  # noqa: E402
from pipelines.gold.failures.scoring import (  # noqa: E402
    confusion_table,
    error_log_body,
    expected_cause,
    precision_recall,
    precision_recall_text,
)

REAL = Path(os.environ.get("REAL_DATA_DIR", REPO / "tests" / "data" / "real"))


def real_logs(ctx: Context, copies: int) -> None:
    """Confusion table on the real error logs, and classification throughput in Python and on Spark."""
    files = sorted((REAL / "errorlogs").glob("*.txt"))
    logs = [(f.name, error_log_body(f.read_text(encoding="utf-8"))) for f in files]
    pairs = []
    for name, text in logs:
        d = classify_text(text)
        pairs.append((expected_cause(name), d.cause if d else "none"))
    right = sum(e == p for e, p in pairs)
    print(
        f"real error logs: {right}/{len(pairs)} classified as expected (the category a person assigned, "
        f"or scoring.EXCERPT_CAUSE)\n{confusion_table(pairs)}\n"
    )

    texts = [t for _, t in logs] * copies
    t0 = time.perf_counter()
    for t in texts:
        classify_text(t)
    py_s = time.perf_counter() - t0
    df = ctx.spark.createDataFrame([(t,) for t in texts], "text string").cache()
    df.count()
    with_text_diagnosis(df).select("log_cause").collect()  # warm-up (plan compile, codegen)
    t0 = time.perf_counter()
    with_text_diagnosis(df).select("log_cause", "log_evidence").collect()
    spark_s = time.perf_counter() - t0
    print(
        f"classification of {len(texts)} logs: Python {len(texts) / py_s:,.0f} logs/s, "
        f"Spark local {len(texts) / spark_s:,.0f} logs/s (Spark/Python = {py_s / spark_s:.2f}x)\n"
    )


def simulated(ctx: Context, jobs: int, month: str) -> None:
    """Simulate a month, ingest what exists, diagnose, score against truth."""
    with tempfile.TemporaryDirectory(prefix="jobfit-failures-eval-") as tmp:
        out = Path(tmp) / "sim"
        t0 = time.perf_counter()
        code = main(
            ["-q", "simulate", "--cluster", "demo", "--month", month, "--jobs", str(jobs), "--out", str(out)],
            ctx,
        )
        assert code == 0, "simulate failed"
        for source, folder in (("sacct", "sacct"), ("k8s", "k8s"), ("dcgm", "dcgm"), ("logs", "logs")):
            if source not in SOURCES:
                print(f"(ingest {source} is not available yet: its evidence is missing from this run)")
                continue
            if (out / folder).exists() and any((out / folder).iterdir()):
                assert (
                    main(["-q", "ingest", source, str(out / folder), "--cluster", "demo", "--json"], ctx) == 0
                )
        ingest_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        counts = build_failures(ctx, "demo", month, ctx.cluster("demo"))
        build_s = time.perf_counter() - t0
        scored = score_against_truth(ctx, "demo", month, str(out / "truth.parquet"))
    pairs = [(t, p) for t, p, _ in scored]
    with_evidence = [(t, p) for t, p, seen in scored if seen]
    print(
        f"simulated {jobs} jobs ({month}): ingest {ingest_s:.0f}s, diagnose {build_s:.0f}s, "
        f"{counts.jobs} diagnosed"
    )
    print(confusion_table(pairs))
    print()
    print(precision_recall_text(precision_recall(pairs)))
    print(
        f"\njobs with evidence archived ({len(with_evidence)} of {len(pairs)}; a Slurm FAILED job with no "
        "log and no telemetry showing its cause leaves only its exit code):"
    )
    print(precision_recall_text(precision_recall(with_evidence)))


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="600 simulated jobs instead of 2,000")
    parser.add_argument("--no-sim", action="store_true", help="real error logs only")
    parser.add_argument("--jobs", type=int, default=None, help="simulated jobs (overrides --quick)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jobfit-failures-wh-") as wh:
        environ = {
            **os.environ,
            "JOBFIT_WAREHOUSE": str(Path(wh) / "warehouse"),
            "JOBFIT_SPARK__MASTER": os.environ.get("JOBFIT_SPARK__MASTER", "local[2]"),
            "JOBFIT_SPARK__SHUFFLE_PARTITIONS": "2",
            "JOBFIT_SPARK__JARS_DIR": str(REPO / ".jars"),
        }
        ctx = Context(environ=environ, quiet=True)
        real_logs(ctx, copies=20 if args.quick else 100)
        if not args.no_sim:
            simulated(ctx, args.jobs or (600 if args.quick else 2000), "2026-11")


if __name__ == "__main__":
    run()
