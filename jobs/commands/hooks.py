"""`jobfit hooks export --cluster C --out FILE`: the local cache Slurm's job_submit.lua reads."""

from __future__ import annotations

import argparse
from pathlib import Path

from jobs.commands import add_common
from jobs.context import Context
from jobs.stages.hooks import export_cache
from models.recommend import MIN_USER_HISTORY


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "hooks",
        help="files for the scheduler-side hooks in hooks/slurm/ (`hooks export`: job_submit.lua's cache)",
        description="Scheduler-side hook support. See docs/hooks.md.",
    )
    hooks = p.add_subparsers(dest="hooks_command", metavar="SUBCOMMAND", parser_class=type(p))
    hooks.required = True
    export = hooks.add_parser(
        "export",
        help="write the per-(user, script) recommendation cache hooks/slurm/job_submit.lua reads",
        description="Recommend memory (MiB), time limit (minutes), CPUs and a GPU/MIG choice for every "
        f"user with at least {MIN_USER_HISTORY} finished jobs on the cluster, once per script key in "
        "their history and once for any other script, from the champion models and the history snapshot "
        "the last `jobfit train` logged (no Spark), and write them atomically (temporary file + rename) "
        "in the line format of docs/hooks.md.",
    )
    export.add_argument("--out", required=True, metavar="FILE", help="the cache file to (re)write")
    add_common(export, cluster_required=True)
    export.set_defaults(func=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    summary = export_cache(ctx, args.cluster, Path(args.out))
    text = (
        f"wrote {summary['entries']} entries for {summary['users']} users of {summary['cluster']} "
        f"to {summary['out']} (models {summary['model_versions']})"
    )
    ctx.emit(summary, args.json, text=text)
    return 0
