"""`jobfit sql QUERY` — Spark SQL over the tables, registered by name (silver.jobs, gold.job_usage, ...)."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

from jobs.commands import add_common
from jobs.context import Context, UsageError
from jobs.io.tables import register_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sql",
        help="run Spark SQL over jobfit's tables",
        description="Run one Spark SQL query over the tables (bronze.*, silver.*, gold.*, quarantine), "
        'each registered under its name, e.g. `jobfit sql "SELECT state, count(*) FROM silver.jobs '
        'GROUP BY state"`. Read-only: a statement that is not a query (INSERT, DELETE, UPDATE, MERGE, DROP, '
        "CREATE, ALTER, TRUNCATE, SET, CALL, ...) is refused unless --allow-writes is given; DESCRIBE, SHOW "
        "and EXPLAIN are queries here.",
    )
    p.add_argument("query", help="one SQL statement")
    p.add_argument("--limit", type=int, default=200, help="rows to print at most (default 200)")
    p.add_argument(
        "--allow-writes",
        action="store_true",
        help="also run statements that write, drop or change tables or settings (refused by default, exit 2)",
    )
    add_common(p, cluster=False)
    p.set_defaults(func=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    from pyspark.errors import AnalysisException, ParseException

    tables = register_tables(ctx.spark, ctx.settings)
    try:
        if not args.allow_writes:
            refused = _not_a_query(ctx.spark, args.query)
            if refused:
                raise UsageError(
                    f"refused: {refused} is not a query (jobfit sql is read-only; --allow-writes runs it)"
                )
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


# Statements that only read, though Spark calls them commands.
READ_ONLY_COMMANDS = frozenset(
    {
        "DescribeRelation",
        "DescribeColumn",
        "DescribeDeltaHistory",
        "ShowTables",
        "ShowColumns",
        "ShowViews",
        "ExplainCommand",
    }
)
# Plans of Spark's own query package that are not commands and yet write or run something.
_WRITING_PLANS = frozenset({"InsertIntoDir", "Call", "InsertIntoStatement"})
_QUERY_PACKAGES = ("org.apache.spark.sql.catalyst.plans.logical.", "org.apache.spark.sql.catalyst.analysis.")


def _not_a_query(spark: SparkSession, query: str) -> str | None:
    """The name of the first plan node that makes `query` more than a read (None for a read), from
    Spark's parser without running anything: a command (but READ_ONLY_COMMANDS at the top), a parsed
    write statement, a plan outside Spark's query packages (Delta's RESTORE, ...) or _WRITING_PLANS;
    CTE definitions (WITH ... INSERT) are walked too."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(query)  # type: ignore[attr-defined]
    command = jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.Command")
    statement = jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.ParsedStatement")
    if plan.getClass().getSimpleName() in READ_ONLY_COMMANDS:
        return None
    todo = [plan]
    while todo:
        node = todo.pop()
        cls = node.getClass()
        name = str(cls.getSimpleName())
        writes = command.isInstance(node) or statement.isInstance(node) or name in _WRITING_PLANS
        if writes or not str(cls.getName()).startswith(_QUERY_PACKAGES):
            return _words(name)
        children = node.children()
        todo += [children.apply(i) for i in range(children.size())]
        if name == "UnresolvedWith":
            ctes = node.cteRelations()
            todo += [ctes.apply(i)._2() for i in range(ctes.size())]
    return None


def _words(plan_name: str) -> str:
    """`DropTable` -> `DROP TABLE`-like words for the message (`DeleteFromTable` -> `DELETE FROM TABLE`)."""
    words = re.findall(r"[A-Z][a-z]*", plan_name.removesuffix("Command").removesuffix("Statement"))
    return " ".join(words).upper() or plan_name


def _cell(value: object) -> str:
    return "NULL" if value is None else str(value)
