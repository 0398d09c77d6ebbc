"""`jobfit` — the command line. Each command lives in jobs/commands/<name>.py with `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from conf import ConfigError
from jobs.context import Context, DataError, UsageError

# The public CLI contract (DESIGN.md); a command is listed here once it exists.
COMMANDS = (
    "ingest",
    "sql",
    "sql-server",
    "failures",
    "bottlenecks",
    "explain",
    "build",
    "waste",
    "train",
    "evaluate",
    "recommend",
    "estimate",
    "serve",
    "hooks",
    "report",
    "emails",
    "simulate",
    "demo",
)


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad arguments as one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser(commands: Sequence[str] = COMMANDS) -> argparse.ArgumentParser:
    """The parser with the given commands registered (all by default)."""
    parser = _Parser(
        prog="jobfit",
        description="Find the compute HPC and GPU clusters waste, price it, predict what jobs need, "
        "and explain why they fail.",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in commands:
        importlib.import_module(f"jobs.commands.{name.replace('-', '_')}").register(sub)
    return parser


def _named_command(argv: Sequence[str]) -> tuple[str, ...]:
    """Only the command argv names, when it names one: importing every command's module pulls in Spark,
    which a command that needs none (`jobfit explain`) must not wait for."""
    words = [a for a in argv if not a.startswith("-")]
    return (words[0],) if words and words[0] in COMMANDS else COMMANDS


def main(argv: Sequence[str] | None = None, ctx: Context | None = None) -> int:
    """Run one command; returns the exit status (0 ok, 1 data check failed, 2 bad input)."""
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        args = build_parser(_named_command(argv)).parse_args(argv)
        ctx = ctx or Context()
        ctx.quiet = ctx.quiet or args.quiet
        return int(args.func(ctx, args) or 0)
    except (UsageError, ConfigError) as exc:
        print(f"jobfit: error: {exc}", file=sys.stderr)
        return 2
    except DataError as exc:
        print(f"jobfit: data check failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("jobfit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
