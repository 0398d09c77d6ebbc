"""`jobfit sql QUERY` — Spark SQL over the tables, registered by name (silver.jobs, gold.job_usage, ...)."""

from __future__ import annotations

import argparse

from jobs.commands import add_common
from jobs.context import Context, UsageError
from jobs.io.tables import register_tables


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sql",
        help="run Spark SQL over jobfit's tables",
        description="Run one Spark SQL query over the tables (bronze.*, silver.*, gold.*, quarantine), "
        'each registered under its name, e.g. `jobfit sql "SELECT state, count(*) FROM silver.jobs '
        'GROUP BY state"`.',
    )
    p.add_argument("query", help="one SQL statement")
    p.add_argument("--limit", type=int, default=200, help="rows to print at most (default 200)")
    add_common(p, cluster=False)
    p.set_defaults(func=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    from pyspark.errors import AnalysisException, ParseException

    tables = register_tables(ctx.spark, ctx.settings)
    try:
        df = ctx.spark.sql(args.query)
    except (ParseException, AnalysisException) as exc:
        first = str(exc).strip().splitlines()[0]
        hint = "" if tables else " (no tables yet: run `jobfit ingest` first)"
        raise UsageError(f"query failed: {first}{hint}") from None
    rows = df.limit(args.limit + 1).collect()
    truncated = len(rows) > args.limit
    rows = rows[: args.limit]
    if args.json:
        ctx.emit(
            {"columns": df.columns, "rows": [r.asDict(recursive=True) for r in rows], "truncated": truncated},
            as_json=True,
        )
        return 0
    widths = [max([len(c)] + [len(_cell(r[i])) for r in rows]) for i, c in enumerate(df.columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(df.columns, widths, strict=True))]
    lines += ["  ".join(_cell(v).ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    if truncated:
        lines.append(f"... (first {args.limit} rows; use --limit)")
    ctx.emit(None, as_json=False, text="\n".join(lines))
    return 0


def _cell(value: object) -> str:
    return "NULL" if value is None else str(value)
