"""Bottlenecks from DCGM profiling counters against the simulator's truth on a simulated month: precision and
recall overall and per kind, findings on healthy jobs, and the misses (truth -> found).

    .venv/bin/python bench/bottleneck_counters.py [--jobs 1500] [--seed 3] [--dcgm-interval 600]

The month's scrapes go through the DCGM parser and `counter_profiles` on Spark and `classify` on the driver
(tests/counters_sim.py; no warehouse: the ingest's MERGE and validation are bench/ingest_dcgm.py's). The
truth (jobs/simulator/counters.py) comes from each job's workload; the counters from per-kind distributions
that overlap the thresholds' regions. docs/bottlenecks.md, "Jobs without a trace"."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from conf import load_settings  # noqa: E402
from jobs.context import Context  # noqa: E402
from tests.counters_sim import misses, per_kind, simulate_and_score  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--dcgm-interval", type=int, default=600)
    args = ap.parse_args()
    environ = {"JOBFIT_SPARK__MASTER": "local[2]", "JOBFIT_SPARK__SHUFFLE_PARTITIONS": "4"}
    settings = load_settings(environ)
    spark = Context(environ=environ, quiet=True).spark
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        pr, found, truth = simulate_and_score(
            spark, Path(tmp) / "sim", args.jobs, args.seed, args.dcgm_interval, settings.bottlenecks
        )
    seconds = time.monotonic() - started
    print(
        f"{args.jobs} jobs (seed {args.seed}, DCGM every {args.dcgm_interval} s): {pr['jobs']} GPU jobs "
        f"classified from counters, {pr['true_bottlenecks']} with a true bottleneck, "
        f"{pr['findings']} findings"
    )
    print(
        f"precision {pr['precision']:.3f}  recall {pr['recall']:.3f}  "
        f"findings on healthy jobs {pr['false_on_healthy']}"
    )
    print(f"{'kind':<22}{'truth':>7}{'found':>7}{'hits':>7}{'precision':>11}{'recall':>8}")
    for kind, t, f, h in per_kind(found, truth):
        p = f"{h / f:.2f}" if f else "-"
        r = f"{h / t:.2f}" if t else "-"
        print(f"{kind:<22}{t:>7}{f:>7}{h:>7}{p:>11}{r:>8}")
    missed = misses(found, truth)
    print(
        "misses (truth -> found): "
        + (", ".join(f"{a}->{b} {n}" for (a, b), n in missed.most_common()) or "none")
    )
    print(f"{seconds:.1f}s (simulate, parse, profile, classify)")


if __name__ == "__main__":
    main()
