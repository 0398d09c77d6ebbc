"""`jobfit explain` at the prompt, measured: wall time of the whole command (interpreter start-up included) on
a 10 MB log whose end is a real traceback, and on a 2 GB one through stdin (streamed); goal p50 ≤ 1.5 s.

    .venv/bin/python bench/explain.py              # 10 MB log, 9 runs
    .venv/bin/python bench/explain.py --big        # also a 2 GB log through stdin (writes 2 GB to a temp dir)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REAL = REPO / "tests" / "data" / "real" / "tracebacks"
TAIL = "04_cuda_oom__brendansu_CAV-Agent-Defense_transcript-2026-03-24.txt"  # torchrun, 4 ranks, OOM
GOAL_P50_S = 1.5


def _log(path: Path, size_bytes: int) -> None:
    """Training-progress noise up to `size_bytes`, then the real log's text (its header line kept)."""
    line = b"{'loss': 1.2345, 'grad_norm': 0.812, 'learning_rate': 2.00e-05, 'epoch': 0.42}\n"
    with path.open("wb") as f:
        block = line * (1 << 14)
        written = 0
        while written < size_bytes:
            f.write(block)
            written += len(block)
        f.write((REAL / TAIL).read_bytes())


def _run(args: list[str], stdin: Path | None = None) -> tuple[float, dict]:
    started = time.perf_counter()
    with stdin.open("rb") if stdin else open("/dev/null", "rb") as f:
        done = subprocess.run(
            [sys.executable, "-m", "jobs.cli", "explain", *args, "--json"],
            stdin=f,
            capture_output=True,
            check=True,
            cwd=REPO,
        )
    return time.perf_counter() - started, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--big", action="store_true", help="also stream a 2 GB log through stdin")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "slurm-1234.out"
        _log(log, 10 * 10**6)
        times = []
        for _ in range(args.runs):
            seconds, out = _run([str(log)])
            times.append(seconds)
        code = out["code"]
        print(
            f"10 MB log ({log.stat().st_size:,} B): cause {out['cause']}, code {code['file']}:{code['line']}"
        )
        print(
            f"  jobfit explain wall time over {args.runs} runs: p50 {statistics.median(times):.3f} s, "
            f"max {max(times):.3f} s (goal p50 <= {GOAL_P50_S} s)"
        )
        if args.big:
            big = Path(tmp) / "big.out"
            _log(big, 2 * 10**9)
            seconds, out = _run(["-"], stdin=big)
            print(f"2 GB log through stdin: {seconds:.1f} s, cause {out['cause']}")


if __name__ == "__main__":
    main()
