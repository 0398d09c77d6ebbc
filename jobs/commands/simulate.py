"""`jobfit simulate` — write a month of cluster activity in real formats, with its ground truth."""

from __future__ import annotations

import argparse
from pathlib import Path

from jobs.commands import add_common, require
from jobs.context import Context
from jobs.simulator import simulate
from jobs.simulator.dcgm import DEFAULT_INTERVAL_S

MAX_JOBS = 10_000_000


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="write a simulated month (sacct dumps, scripts, DCGM scrapes, pods, logs) plus truth.parquet",
        description="Simulate a month of jobs on a cluster from conf/clusters/<C>.yaml and write them in the "
        "formats real clusters produce: sacct/*.txt, scripts/<jobid>.sh, dcgm/*.prom, k8s/pods.jsonl, "
        "logs/<jobid>.err, plus truth.parquet (the ground truth per job) and bad_records.jsonl. "
        "The same seed writes the same bytes. Files are described in docs/simulator.md.",
    )
    add_common(p, cluster_required=True, month=True)
    p.add_argument("--jobs", type=int, default=1000, metavar="N", help="jobs to simulate (10%% of them pods)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default 0)")
    p.add_argument(
        "--out", required=True, metavar="DIR", help="output folder (its simulator outputs are replaced)"
    )
    p.add_argument(
        "--inject-bad-records",
        type=int,
        default=0,
        metavar="K",
        help="insert K malformed records into the sacct, dcgm and k8s files; listed in bad_records.jsonl",
    )
    p.add_argument(
        "--dcgm-interval",
        type=int,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help=f"seconds between DCGM scrapes (default {DEFAULT_INTERVAL_S})",
    )
    p.add_argument(
        "--jobstats-share",
        type=float,
        default=0.0,
        metavar="F",
        help="share (0..1) of the GPU jobs that carry a Princeton jobstats summary in sacct's AdminComment "
        "instead of DCGM scrapes (default 0)",
    )
    p.add_argument(
        "--profiled-share",
        type=float,
        default=0.0,
        metavar="F",
        help="share (0..1) of the GPU training jobs that leave torch.profiler (Kineto) traces in "
        "profiler/job_<id>/, with their truth in profiler_truth.csv (default 0)",
    )
    p.add_argument(
        "--dcgm-prof-share",
        type=float,
        default=0.0,
        metavar="F",
        help="share (0..1) of the hosts whose dcgm-exporter also exports the DCGM profiling fields "
        "(GR_ENGINE_ACTIVE, DRAM_ACTIVE, PCIe, NVLink, ...), with each GPU job's true bottleneck in "
        "truth.parquet (default 0)",
    )
    p.set_defaults(func=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    require(args.month is not None, "simulate needs --month YYYY-MM")
    require(1 <= args.jobs <= MAX_JOBS, f"--jobs must be between 1 and {MAX_JOBS}, got {args.jobs}")
    require(args.seed >= 0, f"--seed must be non-negative, got {args.seed}")
    require(
        args.inject_bad_records >= 0,
        f"--inject-bad-records must be non-negative, got {args.inject_bad_records}",
    )
    require(
        10 <= args.dcgm_interval <= 3600,
        f"--dcgm-interval must be 10..3600 seconds, got {args.dcgm_interval}",
    )
    for name in ("jobstats_share", "profiled_share", "dcgm_prof_share"):
        share = getattr(args, name)
        require(0.0 <= share <= 1.0, f"--{name.replace('_', '-')} must be between 0 and 1, got {share}")
    cluster = ctx.cluster(args.cluster)
    require(bool(cluster.partitions), f"cluster {args.cluster} declares no partitions to simulate")
    out = Path(args.out)
    require(not out.exists() or out.is_dir(), f"--out {out} exists and is not a folder")
    result = simulate(
        cluster,
        args.month,
        args.jobs,
        args.seed,
        out,
        inject_bad=args.inject_bad_records,
        dcgm_interval_s=args.dcgm_interval,
        progress=ctx.progress,
        jobstats_share=args.jobstats_share,
        profiled_share=args.profiled_share,
        dcgm_prof_share=args.dcgm_prof_share,
    )
    ctx.emit(result.as_dict(), as_json=args.json, text=result.text())
    return 0
