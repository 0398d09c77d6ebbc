"""The simulator's Kineto traces against their truth at scale: per finding kind, precision and recall of
`jobfit bottlenecks`' rules (analyze_rank + job_findings, no Spark), findings on healthy jobs, and whether the
named line is the one the workload model put the cause on.

    .venv/bin/python bench/profiler_sim.py [--jobs 500] [--seed 1]

The truth (jobs/simulator/kineto.py): a cause is a bottleneck when removing it from the workload model (same
random draws) shortens the mean step by at least 10 %; docs/simulator.md, "Profiler traces"."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from conf import load_settings  # noqa: E402
from tests.profiler_sim import simulate_and_score  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    started = time.monotonic()
    score, results = simulate_and_score(args.jobs, args.seed, load_settings({}).bottlenecks)
    seconds = time.monotonic() - started
    ranks = sum(r.model.facts.ranks for r in results)
    events = sum(r.events for r in results)
    print(f"{args.jobs} profiled jobs (seed {args.seed}), {ranks} rank traces, {events} events")
    print(score.table())
    print(
        f"{seconds:.1f}s ({1000 * seconds / max(ranks, 1):.0f} ms per rank trace: play, truth replays, "
        "read, analyse)"
    )


if __name__ == "__main__":
    main()
