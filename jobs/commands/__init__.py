"""One module per `jobfit` command; each defines `register(subparsers)` and a `run(ctx, args)`."""

from __future__ import annotations

import argparse
import re

from jobs.context import UsageError

MONTH_RE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


def month_arg(value: str) -> str:
    """argparse type for --month YYYY-MM."""
    if not MONTH_RE.match(value):
        raise argparse.ArgumentTypeError(f"expected YYYY-MM, got {value!r}")
    return value


def add_common(
    parser: argparse.ArgumentParser, cluster: bool = True, month: bool = False, cluster_required: bool = False
) -> None:
    """The options every command shares: --cluster, --month where it matters, --json."""
    if cluster:
        parser.add_argument(
            "--cluster",
            required=cluster_required,
            metavar="C",
            help="cluster name (conf/clusters/<C>.yaml)"
            + ("" if cluster_required else "; default: all clusters"),
        )
    if month:
        parser.add_argument("--month", type=month_arg, metavar="YYYY-MM", help="calendar month (UTC)")
    parser.add_argument("--json", action="store_true", help="machine-readable output on stdout")


def require(condition: bool, message: str) -> None:
    """Raise a UsageError (exit 2, one line) unless the condition holds."""
    if not condition:
        raise UsageError(message)
