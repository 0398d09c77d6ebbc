"""`jobfit ingest SOURCE PATH... --cluster C` — raw files into bronze, silver and quarantine.

Each source is a module `jobs/ingest_<source>.py` with `HELP` (one line), `add_arguments(parser)` and
`run(ctx, args) -> IngestReport`; listing it in SOURCES makes it a subcommand."""

from __future__ import annotations

import argparse
import importlib

from jobs.commands import add_common
from jobs.context import Context

# source name -> module; a source is listed once its module exists.
SOURCES: dict[str, str] = {
    "sacct": "jobs.stages.ingest.sacct",
    "k8s": "jobs.stages.ingest.k8s",
    "dcgm": "jobs.stages.ingest.dcgm",
    "scripts": "jobs.stages.ingest.scripts",
    "swf": "jobs.stages.ingest.swf",
    "logs": "jobs.stages.ingest.logs",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ingest",
        help="read sacct dumps, pod records, scripts, telemetry or SWF logs into the tables",
        description="Read raw files into bronze (raw lines), silver (typed, deduplicated by MERGE) and "
        "quarantine (rejected records with their reason). Ingesting the same file twice adds nothing.",
    )
    sources = p.add_subparsers(dest="source", metavar="SOURCE")
    sources.required = True
    for name, module_name in SOURCES.items():
        module = importlib.import_module(module_name)
        sp = sources.add_parser(name, help=module.HELP, description=module.HELP)
        sp.add_argument(
            "paths", nargs="+", metavar="PATH", help="files or folders; - reads stdin; gzip is read as is"
        )
        add_common(sp, cluster_required=True)
        module.add_arguments(sp)
        sp.set_defaults(func=_runner(module))


def _runner(module):
    def run(ctx: Context, args: argparse.Namespace) -> int:
        report = module.run(ctx, args)
        ctx.emit(report.as_dict(), as_json=args.json, text=report.text())
        return 0

    return run
