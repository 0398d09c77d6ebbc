"""Benchmark `jobfit ingest sacct` end to end against a bare `pandas.read_csv(sep='|')` of the same file.

Generates N sacct --parsable2 lines (jobs with their .batch/.extern/.0 steps, arrays, per-CPU and per-node
ReqMem, every duration form), then times both in the same run and prints lines/second and the ratio, the
ingest's seconds per phase (the `phases_s` of its --json report; "process start" is the rest: Python
start-up and imports) and the peak RSS of the driver's Python process and of its JVM (VmHWM, polled).
The machine's load average is printed beside the figures: on a shared machine only the ratio means much.

    .venv/bin/python bench/ingest_sacct.py             # 1,000,000 lines
    .venv/bin/python bench/ingest_sacct.py --lines 20000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import psutil

REPO = Path(__file__).resolve().parents[1]
HEADER = (
    "JobID|JobIDRaw|JobName|User|Account|Partition|QOS|State|ExitCode|Submit|Start|End|Elapsed|Timelimit|"
    "AllocCPUS|ReqMem|MaxRSS|NTasks|NNodes|NodeList|AllocTRES|TotalCPU|TRESUsageInMax"
)
STATES = ["COMPLETED"] * 14 + [
    "FAILED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "CANCELLED by 1234",
    "RUNNING",
    "PENDING",
]


def _dur(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


def generate(
    path: Path,
    lines: int,
    seed: int = 7,
    first_job: int = 1_000_000,
    t0: datetime = datetime(2026, 1, 1),
    days: int = 30,
) -> int:
    """Write about `lines` sacct lines (a header plus jobs of 4 lines each): jobs numbered from
    `first_job` + 1, submitted over `days` days from `t0`; returns the lines written."""
    rng = random.Random(seed)
    written = 1
    with path.open("w") as out:
        out.write(HEADER + "\n")
        job = first_job
        while written + 4 <= lines:
            job += 1
            cpus = rng.choice([1, 2, 4, 8, 16, 32])
            gpus = rng.choice([0, 0, 0, 1, 2, 4])
            nodes = 1 if cpus < 32 else 2
            state = rng.choice(STATES)
            submit = t0 + timedelta(seconds=rng.randrange(days * 86400))
            start = submit + timedelta(seconds=rng.randrange(3600))
            elapsed = rng.randrange(60, 3 * 86400)
            end = (
                "Unknown"
                if state in ("RUNNING", "PENDING")
                else (start + timedelta(seconds=elapsed)).isoformat()
            )
            jid = f"{job}_{rng.randrange(100)}" if rng.random() < 0.3 else str(job)
            req_mem = rng.choice([f"{4000 * cpus}Mc", f"{16 * nodes}Gn", f"{8 * cpus}G", "0n"])
            tres = f"cpu={cpus},mem={8 * cpus}G,node={nodes},billing={cpus}"
            if gpus:
                tres += f",gres/gpu={gpus},gres/gpu:a100={gpus}"
            total_cpu = rng.randrange(elapsed * cpus + 1)
            common = f"{submit.isoformat()}|{start.isoformat()}|{end}|{_dur(elapsed)}"
            rss = f"{rng.randrange(1, 64_000_000)}K"
            usage = f"cpu={_dur(total_cpu)},mem={rss}" + (
                f",gres/gpumem={rng.randrange(1, 80_000)}M,gres/gpuutil={rng.randrange(101)}" if gpus else ""
            )
            node_list = f"n[{rng.randrange(100):03d}-{rng.randrange(100, 200):03d}]" if nodes > 1 else "n001"
            rows = [
                f"{jid}|{job}|train_{job % 97}|u{job % 50}|lab{job % 7}|gpu|normal|{state}|0:0|{common}|"
                f"{_dur(rng.choice([3600, 86400, 2 * 86400]))}|{cpus}|{req_mem}||1|{nodes}|{node_list}|"
                f"{tres}|{_dur(total_cpu)}|",
                f"{jid}.batch|{job}.batch|batch|||gpu||{state.split()[0]}|0:0|{common}||{cpus}||{rss}|1|1|n001|"
                f"|{_dur(total_cpu // 2)}|{usage}",
                f"{jid}.extern|{job}.extern|extern|||gpu||COMPLETED|0:0|{common}||{cpus}||1024K|1|{nodes}|"
                f"{node_list}||00:00.001|cpu=00:00:00,mem=1024K",
                f"{jid}.0|{job}.0|python|||gpu||{state.split()[0]}|0:0|{common}||{cpus}||{rss}|{cpus}|{nodes}|"
                f"{node_list}||{total_cpu % 60:02d}:{total_cpu % 59:02d}.{total_cpu % 1000:03d}|{usage}",
            ]
            out.write("\n".join(rows) + "\n")
            written += 4
    return written


def time_pandas(path: Path) -> float:
    """Seconds for a bare pandas.read_csv of the file (every field as text)."""
    started = time.perf_counter()
    frame = pd.read_csv(path, sep="|", dtype=str, keep_default_na=False)
    elapsed = time.perf_counter() - started
    assert len(frame) > 0
    return elapsed


def _peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set so far (Linux VmHWM), 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class PeakRss:
    """Polls a process tree's peak RSS: the root (the driver's Python) and its JVM descendants."""

    def __init__(self, pid: int, every_s: float = 0.2) -> None:
        self.python_bytes = 0
        self.jvm_bytes = 0
        self._pid, self._every_s = pid, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        root = psutil.Process(self._pid)
        while not self._stop.is_set():
            self.python_bytes = max(self.python_bytes, _peak_rss_bytes(self._pid))
            try:
                children = root.children(recursive=True)
            except psutil.Error:
                children = []
            for child in children:
                try:
                    if child.name() == "java":
                        self.jvm_bytes = max(self.jvm_bytes, _peak_rss_bytes(child.pid))
                except psutil.Error:
                    continue
            self._stop.wait(self._every_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run_jobfit(args: list[str], env: dict[str, str]) -> tuple[float, dict, PeakRss]:
    """`jobfit -q ARGS --json` as a fresh process (Spark start-up included): its seconds, its --json
    report ({} when it prints none) and its peak RSS; exits the bench when the command fails."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [str(REPO / ".venv" / "bin" / "jobfit"), "-q", *args, "--json"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    rss = PeakRss(proc.pid)
    out, err = proc.communicate()
    elapsed = time.perf_counter() - started
    rss.stop()
    if proc.returncode != 0:
        # The lines naming a Java or Python error (py4j's "An error occurred while calling ...", the JVM's
        # exception and its "Caused by"), not stack frames; then the tail.
        named = re.compile(r"(Error|Exception|error occurred)[:(]|Caused by")
        causes = [
            ln.strip() for ln in err.splitlines() if named.search(ln) and not ln.lstrip().startswith("at ")
        ]
        cause = "\n".join(dict.fromkeys(causes))
        sys.exit(
            f"jobfit {' '.join(args)} failed ({proc.returncode}):\n{cause[:3000]}\n{err.strip()[-1500:]}"
        )
    try:
        report = json.loads(out) if out.strip() else {}
    except ValueError:  # a --json that is not JSON is jobfit's bug; the run's figures still stand
        print(f"jobfit {' '.join(args)}: --json printed no JSON; its first 2000 characters:\n{out[:2000]}")
        report = {}
    return elapsed, report, rss


def time_jobfit(path: Path, warehouse: Path) -> tuple[float, dict, PeakRss]:
    """`jobfit ingest sacct` of the file into the warehouse: seconds, report and peak RSS."""
    env = {**os.environ, "JOBFIT_WAREHOUSE": str(warehouse)}
    return run_jobfit(["ingest", "sacct", str(path), "--cluster", "bench"], env)


def load() -> str:
    """The 1, 5 and 15 minute load averages, as uptime prints them."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lines", type=int, default=1_000_000, help="sacct lines to generate (default 1,000,000)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jobfit-bench-") as tmp:
        path = Path(tmp) / "sacct.txt"
        lines = generate(path, args.lines)
        size_mb = path.stat().st_size / 1e6
        print(f"generated {lines:,} lines ({size_mb:.0f} MB); load average {load()}")
        pandas_s = time_pandas(path)
        jobfit_s, report, rss = time_jobfit(path, Path(tmp) / "warehouse")
        pandas_after_s = time_pandas(path)  # again after: the load may have changed during the ingest
        assert report["read"] == lines, report
        print(
            f"pandas.read_csv(sep='|'): {pandas_s:8.1f} s  {lines / pandas_s:12,.0f} lines/s"
            f"  (after the ingest: {pandas_after_s:.1f} s)"
        )
        print(f"jobfit ingest sacct:      {jobfit_s:8.1f} s  {lines / jobfit_s:12,.0f} lines/s")
        bare_s = (pandas_s + pandas_after_s) / 2
        print(f"ratio (jobfit / pandas time, mean of the two reads): {jobfit_s / bare_s:.1f}x")
        phases = report.get("phases_s", {})
        print("phases (s, × bare read):")
        rows = [("process start", jobfit_s - sum(phases.values())), *phases.items()]
        for name, seconds in rows:
            print(f"  {name:<14} {seconds:8.1f}  {seconds / bare_s:6.1f}x")
        mib = 2**20
        print(
            f"peak RSS: driver Python {rss.python_bytes / mib:,.0f} MiB, JVM {rss.jvm_bytes / mib:,.0f} MiB"
        )
        print(f"load average after: {load()}")
        print(
            f"report: inserted {report['inserted']:,}, quarantined {report['quarantined']:,}, "
            f"skipped {report['skipped']:,}, superseded {report['superseded']:,}"
        )


if __name__ == "__main__":
    main()
