"""`jobfit ingest SOURCE PATH... --cluster C` — raw files into bronze, silver and quarantine.

The arguments of each source live here; the work is the stage runner `jobs/stages/ingest/<source>.py`,
`run(ctx, paths, cluster, **options) -> IngestReport`. Listing a source in SOURCES makes it a subcommand."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from jobs.commands import add_common
from jobs.context import Context

DEFAULT_TAIL_KB = 64


def _sacct_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--format",
        dest="fmt",
        metavar="F1,F2,...",
        help="field order of files without a header line, as given to sacct --format "
        "(e.g. JobID,JobName,State,Elapsed); a file's own header line takes precedence",
    )


def _profiler_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--job",
        metavar="ID",
        help="the job the traces belong to; default: a job id in the path, else the host and time window",
    )


def _scripts_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--sources",
        metavar="DIR",
        help="a side folder of sources per job, DIR/<job id>/<path as the script names it> (training "
        "scripts, configs), into silver.sources (by sha256) and silver.job_sources",
    )


def _logs_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tail-kb",
        type=int,
        default=DEFAULT_TAIL_KB,
        metavar="N",
        help=f"keep the last N KiB of each file (default {DEFAULT_TAIL_KB}); errors are at the end",
    )


@dataclass(frozen=True)
class Source:
    """One `jobfit ingest` source: its one-line help, its own options (argparse dests = run's keywords)."""

    help: str
    add_options: Callable[[argparse.ArgumentParser], None] | None = None
    options: tuple[str, ...] = field(default_factory=tuple)

    def stage(self, name: str):
        """The runner module, imported only when the source is used (Spark, pandas load there)."""
        return importlib.import_module(f"jobs.stages.ingest.{name.replace('-', '_')}")


SOURCES: dict[str, Source] = {
    "sacct": Source(
        "sacct --parsable/--parsable2 dumps (with a header line, or given --format) into the job tables",
        _sacct_options,
        ("fmt",),
    ),
    "k8s": Source("Kubernetes Pod objects (JSON lines, or kubectl get pods -o json lists) into silver.jobs"),
    "k8s-metrics": Source(
        "kubelet /metrics/resource or cAdvisor /metrics/cadvisor scrapes, dumps or archives (container CPU "
        "seconds, working-set memory) into silver.pod_samples and silver.pod_usage, per pod"
    ),
    "dcgm": Source(
        "dcgm-exporter scrapes (Prometheus text) or archives (CSV or Parquet: timestamp,metric,labels,value) "
        "into silver.gpu_samples, attributed to jobs"
    ),
    "scripts": Source(
        "job scripts (files named by job id, or sacct --batch-script output) into silver.scripts; with "
        "--sources, the files each job's entry points read",
        _scripts_options,
        ("sources",),
    ),
    "swf": Source(
        "Standard Workload Format logs (Parallel Workloads Archive, .swf or .swf.gz) into silver.jobs"
    ),
    "logs": Source(
        "job stdout/stderr files named by job id (123.err, slurm-123.out, 123_7.err) into silver.job_logs "
        "(their last --tail-kb KiB), for `jobfit failures`",
        _logs_options,
        ("tail_kb",),
    ),
    "partitions": Source(
        "`scontrol show partition [-o]` dumps into silver.partitions (MaxTime resolves a job's "
        "Timelimit=Partition_Limit when the cluster yaml states no max_time)"
    ),
    "profiler": Source(
        "PyTorch profiler (Kineto/CUPTI) traces (*.pt.trace.json[.gz], or folders of per-rank traces) into "
        "silver.profiler_traces and silver.profiler_events, attributed to jobs, for `jobfit bottlenecks`",
        _profiler_options,
        ("job",),
    ),
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ingest",
        help="read sacct dumps, pod records and usage, scripts, telemetry or SWF logs into the tables",
        description="Read raw files into bronze (raw lines), silver (typed, deduplicated by MERGE) and "
        "quarantine (rejected records with their reason). Ingesting the same file twice adds nothing.",
    )
    sources = p.add_subparsers(dest="source", metavar="SOURCE")
    sources.required = True
    for name, source in SOURCES.items():
        sp = sources.add_parser(name, help=source.help, description=source.help)
        sp.add_argument(
            "paths", nargs="+", metavar="PATH", help="files or folders; - reads stdin; gzip is read as is"
        )
        add_common(sp, cluster_required=True)
        if source.add_options is not None:
            source.add_options(sp)
        sp.set_defaults(func=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    source = SOURCES[args.source]
    options = {key: getattr(args, key) for key in source.options}
    report = source.stage(args.source).run(ctx, args.paths, args.cluster, **options)
    ctx.emit(report.as_dict(), as_json=args.json, text=report.text())
    return 0
