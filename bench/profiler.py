"""Profiler traces: jobfit beside HTA and torch-tb-profiler on each real trace, and the streaming
reader's peak memory on synthetic traces of growing size.

    .venv/bin/python bench/profiler.py [--traces DIR] [--sizes-mb 50,400,2048] [--anchors PATH]

Per trace: jobfit's read + analysis wall time, HTA's and torch-tb-profiler's (when importable; `--anchors`
adds a folder where they are installed, e.g. `pip install --target /tmp/anchors HolisticTraceAnalysis
torch-tb-profiler`), and per-category differences in points: HTA's temporal breakdown (same window), and the
Overview (same window: torch-tb-profiler's one step spanning the host events when the trace has no
ProfilerStep; its Communication folded into kernel; its runtime is only the legacy `Runtime` category, which
is what 0.4.3 maps). Then, per size, a synthetic trace is written, and a child process reads it the way
`jobfit ingest profiler` does (both passes, EVENT_BATCH frames) and reports its peak RSS."""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from conf import load_settings  # noqa: E402
from pipelines.gold.bottlenecks.analyze import analyze_rank  # noqa: E402
from pipelines.gold.bottlenecks.breakdown import gpu_breakdown, prepare, step_breakdown  # noqa: E402
from pipelines.silver.profiler import EVENT_COLUMNS, EventTally, Reject, read_trace_events, read_trace_meta  # noqa: E402


def _jobfit(path: Path) -> tuple[float, pd.DataFrame, object]:
    t = time.perf_counter()
    with gzip.open(path) as f:
        meta = read_trace_meta(f)
    tally = EventTally()
    with gzip.open(path) as f:
        rows = [r for r in read_trace_events(f, tally) if not isinstance(r, Reject)]
    events = pd.DataFrame(rows, columns=list(EVENT_COLUMNS))
    analysis = analyze_rank(
        events, load_settings({}).bottlenecks, meta.rank, meta.compute_major, meta.device_name
    )
    return time.perf_counter() - t, events, analysis


def _hta(path: Path) -> tuple[float, dict[str, float]] | None:
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return None
    folder = tempfile.mkdtemp()
    os.symlink(path.resolve(), Path(folder) / path.name)
    t = time.perf_counter()
    try:
        df = TraceAnalysis(trace_dir=folder).get_temporal_breakdown(visualize=False)
    except Exception as exc:  # HTA raises on traces without GPU kernels
        return time.perf_counter() - t, {"error": str(type(exc).__name__)}  # type: ignore[dict-item]
    row = df.iloc[0]
    return time.perf_counter() - t, {
        "idle": row["idle_time_pctg"],
        "compute": row["compute_time_pctg"],
        "non_compute": row["non_compute_time_pctg"],
    }


def _tb(path: Path) -> tuple[float, dict[str, float], list[tuple[float, float]]] | None:
    try:
        from torch_tb_profiler.profiler.data import RunProfileData
        from torch_tb_profiler.profiler.event_parser import ProfileRole
    except ImportError:
        return None
    t = time.perf_counter()
    prof = RunProfileData.parse("w", "s", str(path), tempfile.gettempdir())
    elapsed = time.perf_counter() - t
    c = prof.avg_costs.costs
    whole = c[ProfileRole.Total]
    pct = {
        "kernel": 100 * (c[ProfileRole.Kernel] + c[ProfileRole.Communication]) / whole,
        "memcpy": 100 * c[ProfileRole.Memcpy] / whole,
        "memset": 100 * c[ProfileRole.Memset] / whole,
        "runtime": 100 * c[ProfileRole.Runtime] / whole,
        "dataloader": 100 * c[ProfileRole.DataLoader] / whole,
        "cpu_exec": 100 * c[ProfileRole.CpuOp] / whole,
        "other": 100 * c[ProfileRole.Other] / whole,
    }
    return elapsed, pct, []


def compare(folder: Path) -> None:
    print(
        f"{'trace':<46} {'jobfit s':>8} {'HTA s':>7} {'tb s':>7}  "
        "HTA diff (idle/compute/non-compute) | tb max diff"
    )
    for path in sorted(folder.glob("*.gz")):
        secs, events, analysis = _jobfit(path)
        hta = _hta(path)
        tb = _tb(path)
        ev = prepare(events)
        gb = gpu_breakdown(ev)
        hta_txt, tb_txt = "n/a", "n/a"
        if hta is not None and gb is not None and "error" not in hta[1]:
            ours = gb.pct()
            hta_txt = "/".join(f"{ours[k] - hta[1][k]:+.2f}" for k in ("idle", "compute", "non_compute"))
        elif hta is not None:
            hta_txt = f"HTA: {hta[1].get('error')}; jobfit: {'no GPU' if gb is None else 'ok'}"
        if tb is not None:
            host = ev[ev["kind"].isin(("cpu_op", "user_annotation", "python_function"))]
            steps = [(float(host["ts_us"].min()), float(host["end_us"].max()))]
            if ev["is_step"].any():
                from pipelines.gold.bottlenecks.breakdown import find_steps

                steps = find_steps(ev).ranges
            ours = step_breakdown(ev, steps, runtime_cats=frozenset({"Runtime"})).pct
            diffs = {k: ours[k] - tb[1][k] for k in ours}
            worst = max(diffs, key=lambda k: abs(diffs[k]))
            tb_txt = f"{worst} {diffs[worst]:+.2f}"
        print(
            f"{path.name[:46]:<46} {secs:>8.2f} {hta[0] if hta else float('nan'):>7.2f} "
            f"{tb[0] if tb else float('nan'):>7.2f}  {hta_txt} | {tb_txt}  "
            f"findings: {[f.kind for f in analysis.findings]}"
        )


def write_synthetic(path: Path, target_bytes: int) -> int:
    """A Kineto-shaped trace of about `target_bytes`, written event by event (never held in memory)."""
    written = 0
    with path.open("w") as f:
        f.write('{"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [\n')
        i, t = 0, 1_700_000_000_000_000.0
        while written < target_bytes:
            ev = [
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::addmm",
                    "pid": 1,
                    "tid": 1,
                    "ts": t,
                    "dur": 40.5,
                    "args": {
                        "External id": i,
                        "Call stack": "/home/u/train.py(42): step;/home/u/train.py(90): main",
                    },
                },
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 5,
                    "dur": 8.0,
                    "args": {"correlation": i, "External id": i},
                },
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "ampere_sgemm_128x64_nn",
                    "pid": 0,
                    "tid": 7,
                    "ts": t + 20,
                    "dur": 30.0,
                    "args": {
                        "device": 0,
                        "stream": 7,
                        "correlation": i,
                        "registers per thread": 128,
                        "est. achieved occupancy %": 25,
                    },
                },
            ]
            text = ",\n".join(json.dumps(e) for e in ev) + ",\n"
            f.write(text)
            written += len(text)
            i, t = i + 1, t + 60
        f.write('{"ph": "i", "name": "end", "ts": 0}]}\n')
    return path.stat().st_size


_CHILD = """
import sys, resource
sys.path.insert(0, {repo!r})
from pathlib import Path
from jobs.stages.ingest.profiler import _batches, _open, scan_trace
from pipelines.silver.profiler import EventTally, read_trace_events
p = Path({path!r})
s = scan_trace(p, str(p))
rows, rejects, tally = 0, [], EventTally()
with _open(p) as f:
    for frame in _batches(read_trace_events(f, tally), rejects):
        rows += len(frame)
print(rows, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def memory(sizes_mb: list[int]) -> None:
    print(f"\n{'trace MB':>9} {'events':>11} {'peak RSS MB':>12} {'seconds':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for mb in sizes_mb:
            path = Path(tmp) / f"synthetic_{mb}.json"
            size = write_synthetic(path, mb * 2**20)
            t = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-c", _CHILD.format(repo=str(REPO), path=str(path))],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            print(
                f"{size / 2**20:>9.0f} {int(out[0]):>11,} {int(out[1]) / 1024:>12.0f} "
                f"{time.perf_counter() - t:>8.1f}"
            )
            path.unlink()


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "data" / "real" / "profiler")
    parser.add_argument("--sizes-mb", default="50,400", help="synthetic trace sizes (2048 for the 2 GB run)")
    parser.add_argument("--anchors", help="a folder holding HTA and torch-tb-profiler (pip --target)")
    args = parser.parse_args()
    if args.anchors:
        sys.path.insert(0, args.anchors)
    if not args.traces.is_dir():
        args.traces = REPO / "tests" / "data" / "real" / "profiler"
    compare(args.traces)
    memory([int(x) for x in args.sizes_mb.split(",") if x])
    _ = resource  # the child reports its own peak RSS


if __name__ == "__main__":
    main()
