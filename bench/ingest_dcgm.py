"""Benchmark `jobfit ingest dcgm` (bronze, parse, pivot, attribution, MERGE) against a bare pyarrow read of
the same files (lines into one column), in the same run; prints samples/second for both and the ratio.

Generates N dcgm-exporter sample lines (Prometheus text with millisecond timestamps): hosts x 8 GPUs x
4 metrics (GPU_UTIL, FB_USED, FB_FREE, POWER_USAGE) every 30 s, one file per host, a quarter of the GPUs
carrying an `hpc_job` label, and silver.jobs rows covering the other GPUs' hosts so attribution by overlap
has work to do. A "sample" is one metric line.

    .venv/bin/python bench/ingest_dcgm.py                    # 10,000,000 sample lines
    .venv/bin/python bench/ingest_dcgm.py --samples 200000   # a quick run
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GPUS_PER_HOST = 8
METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE")
T0 = datetime(2026, 11, 1)
STEP_S = 30


def generate(
    folder: Path, samples: int, seed: int = 11, t0: datetime = T0
) -> tuple[list[Path], int, list[str]]:
    """Write about `samples` metric lines over hosts from `t0` (at most a day of scrapes per host); returns
    (files, lines written, host names)."""
    rng = random.Random(seed)
    per_step = GPUS_PER_HOST * len(METRICS)
    steps = max(1, min(2880, samples // (per_step * 4)))  # at most a day of 30 s scrapes per host
    hosts = [f"g{i:04d}" for i in range(max(1, samples // (per_step * steps)))]
    t0_ms = int(t0.timestamp() * 1000)
    files, written = [], 0
    for host in hosts:
        path = folder / f"{host}.prom"
        with path.open("w") as out:
            for step in range(steps):
                ts = t0_ms + step * STEP_S * 1000
                for gpu in range(GPUS_PER_HOST):
                    job = f',hpc_job="{host}-{gpu}"' if gpu % 4 == 0 else ""
                    labels = (
                        f'gpu="{gpu}",UUID="GPU-{host}-{gpu}",modelName="NVIDIA A100-SXM4-80GB",'
                        f'hostname="{host}"{job}'
                    )
                    used = rng.randrange(0, 81920)
                    values = (rng.randrange(0, 101), used, 81920 - used, round(rng.uniform(50, 400), 1))
                    for metric, value in zip(METRICS, values, strict=True):
                        out.write(f"{metric}{{{labels}}} {value} {ts}\n")
                        written += 1
        files.append(path)
    return files, written, hosts


def baseline(files: list[Path]) -> float:
    """Seconds for pyarrow to read every file's lines into one string column (no parsing at all)."""
    import pyarrow as pa
    from pyarrow import csv

    start = time.perf_counter()
    opts = csv.ParseOptions(delimiter="\t", quote_char=False)
    read = csv.ReadOptions(column_names=["line"])
    tables = [csv.read_csv(p, read_options=read, parse_options=opts) for p in files]
    pa.concat_tables(tables)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10_000_000, help="metric lines (default 10,000,000)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    args = parser.parse_args(argv)

    from jobs.context import Context
    from jobs.io.tables import merge_into
    from jobs.stages.ingest.dcgm import run
    from pipelines.schemas import SILVER_JOBS

    with tempfile.TemporaryDirectory(prefix="bench-dcgm-") as tmp:
        folder = Path(tmp) / "scrapes"
        folder.mkdir()
        files, lines, hosts = generate(folder, args.samples)
        size_mb = sum(p.stat().st_size for p in files) / 1e6
        print(f"generated {lines:,} sample lines in {len(files)} file(s), {size_mb:.0f} MB")
        base_s = baseline(files)
        ctx = Context(
            environ={
                "JOBFIT_WAREHOUSE": str(Path(tmp) / "warehouse"),
                "JOBFIT_SPARK__MASTER": args.master,
                "JOBFIT_SPARK__SHUFFLE_PARTITIONS": "4",
            },
            quiet=True,
        )
        spark = ctx.spark
        spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
        names = [f.name for f in SILVER_JOBS.schema.fields]
        jobs = [
            {n: None for n in names}
            | {
                "cluster": "bench",
                "job_id": f"j{i}",
                "source": "slurm",
                "state": "COMPLETED",
                "start_ts": T0,
                "end_ts": T0 + timedelta(days=2),
                "node_list": host,
                "alloc_gpus": GPUS_PER_HOST,
                "is_final": True,
                "ingested_at": T0,
            }
            for i, host in enumerate(hosts)
        ]
        frame = spark.createDataFrame([tuple(j[n] for n in names) for j in jobs], SILVER_JOBS.schema)
        merge_into(spark, ctx.settings, SILVER_JOBS.name, frame)
        start = time.perf_counter()
        report = run(ctx, [str(folder)], "bench")
        ingest_s = time.perf_counter() - start
        spark.stop()
    print(report.text())
    print(f"baseline  pyarrow.csv read : {base_s:8.2f} s  {lines / base_s:14,.0f} samples/s")
    print(f"jobfit ingest dcgm         : {ingest_s:8.2f} s  {lines / ingest_s:14,.0f} samples/s")
    print(f"ratio (jobfit / baseline time): {ingest_s / base_s:,.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
