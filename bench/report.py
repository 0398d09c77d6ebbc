"""`jobfit report` on a large month: the seconds to render the admin report of a 1,000,000-job month once gold
is built, beside the seconds of the SQL that feeds it, in one run (goal: the whole report within 60 s).

Gold is made directly, not through ingest: gold.job_usage rows drawn with Spark (users, accounts, partitions,
CPU, memory and GPU figures priced by the demo sheet, a share of failed jobs), then gold.user_month,
gold.account_month and gold.cluster_month by `pipelines.gold.rollups` and gold.failures for the failed jobs —
the tables `jobfit build` writes, with the same schemas. No model is trained, so the report's recommendation
section says so (its time is printed apart).

    .venv/bin/python bench/report.py              # 1,000,000 jobs
    .venv/bin/python bench/report.py --jobs 100000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from conf import load_cluster  # noqa: E402
from jobs.context import Context  # noqa: E402
from jobs.io.tables import read_table, replace_where  # noqa: E402
from jobs.stages.report import make_reports  # noqa: E402
from pipelines.gold.rollups import account_month, cluster_month, user_month  # noqa: E402
from pipelines.schemas import GOLD_FAILURES, GOLD_JOB_USAGE  # noqa: E402

CLUSTER, MONTH = "demo", "2026-03"
GOAL_S = 60.0


def _job_usage(spark: SparkSession, jobs: int) -> DataFrame:
    """`jobs` gold.job_usage rows of one month: 400 users in 40 accounts, a fifth on GPUs, 5 % failed."""
    prices = load_cluster(CLUSTER).prices
    gpu_usd = prices.gpu_hour_usd["A100-SXM4-80GB"]
    r = lambda seed: F.rand(seed)  # noqa: E731
    df = spark.range(jobs).select(
        F.col("id"),
        (F.col("id") % 400).alias("u"),
        (r(1) * 20 * 3600 + 60).cast("long").alias("elapsed_s"),
        (F.pow(F.lit(2), (r(2) * 6).cast("int"))).cast("int").alias("alloc_cpus"),
        r(3).alias("cpu_frac"),
        (r(4) * 60 + 1).alias("req_gib"),
        r(5).alias("mem_frac"),
        F.when(r(6) < 0.2, (r(7) * 4 + 1).cast("int")).otherwise(0).alias("alloc_gpus"),
        r(8).alias("util"),
        r(9).alias("fail"),
    )
    hours = F.col("elapsed_s") / 3600.0
    gpu = F.col("alloc_gpus") > 0
    cols = {
        "cluster": F.lit(CLUSTER),
        "month": F.lit(MONTH),
        "job_id": F.col("id").cast("string"),
        "source": F.lit("slurm"),
        "user": F.concat(F.lit("u"), F.col("u").cast("string")),
        "account": F.concat(F.lit("acct"), (F.col("u") % 40).cast("string")),
        "partition": F.when(gpu, F.lit("gpu")).otherwise(F.lit("cpu")),
        "state": F.when(F.col("fail") < 0.05, F.lit("FAILED")).otherwise(F.lit("COMPLETED")),
        "elapsed_s": F.col("elapsed_s"),
        "alloc_cpus": F.col("alloc_cpus"),
        "cpu_alloc_core_h": F.col("alloc_cpus") * hours,
        "cpu_used_core_h": F.col("alloc_cpus") * hours * F.col("cpu_frac"),
        "cpu_wasted_core_h": F.col("alloc_cpus") * hours * (1 - F.col("cpu_frac")),
        "mem_alloc_gib_h": F.col("req_gib") * hours,
        "mem_used_gib_h": F.col("req_gib") * hours * F.col("mem_frac"),
        "mem_wasted_gib_h": F.col("req_gib") * hours * (1 - F.col("mem_frac")),
        "alloc_gpus": F.col("alloc_gpus"),
        "gpu_model": F.when(gpu, F.lit("A100-SXM4-80GB")),
        "has_gpu_telemetry": gpu & (F.col("util") > 0.1),
        "gpu_coverage_pct": F.when(gpu, F.when(F.col("util") > 0.1, 100.0).otherwise(0.0)),
        "gpu_alloc_h": F.col("alloc_gpus") * hours,
        "gpu_util_mean_pct": F.when(gpu & (F.col("util") > 0.1), F.col("util") * 100),
        "gpu_used_h": F.when(gpu & (F.col("util") > 0.1), F.col("alloc_gpus") * hours * F.col("util")),
        "gpu_underused_h": F.when(
            gpu & (F.col("util") > 0.1), F.col("alloc_gpus") * hours * (1 - F.col("util"))
        ),
        "gpu_idle_h": F.when(
            gpu & (F.col("util") < 0.2) & (F.col("util") > 0.1), F.col("alloc_gpus") * hours
        ),
        "vram_peak_bytes": F.when(gpu, (F.col("util") * 80 * 2**30).cast("long")),
        "vram_card_bytes": F.when(gpu, F.lit(80 * 2**30).cast("long")),
        "vram_fits": F.when(
            gpu,
            F.when(F.col("util") < 0.12, F.lit("A100-SXM4-80GB 1g.10gb")).otherwise(F.lit("A100-SXM4-80GB")),
        ),
        "is_user_fixable_failure": F.col("fail") < 0.03,
    }
    df = df.select(*(v.alias(k) for k, v in cols.items()))
    usd = {
        "cpu_alloc_usd": F.col("cpu_alloc_core_h") * prices.core_hour_usd,
        "mem_alloc_usd": F.col("mem_alloc_gib_h") * prices.gib_hour_usd,
        "gpu_alloc_usd": F.col("gpu_alloc_h") * gpu_usd,
        "cpu_wasted_usd": F.col("cpu_wasted_core_h") * prices.core_hour_usd,
        "mem_wasted_usd": F.col("mem_wasted_gib_h") * prices.gib_hour_usd,
        "gpu_idle_usd": F.col("gpu_idle_h") * gpu_usd,
        "gpu_underused_usd": F.col("gpu_underused_h") * gpu_usd,
    }
    df = df.select("*", *(v.alias(k) for k, v in usd.items()))
    alloc = F.col("cpu_alloc_usd") + F.col("mem_alloc_usd") + F.col("gpu_alloc_usd")
    unused = (
        F.col("cpu_wasted_usd") + F.col("mem_wasted_usd") + F.coalesce(F.col("gpu_underused_usd"), F.lit(0.0))
    )
    failed = F.when(F.col("is_user_fixable_failure"), alloc - unused).otherwise(0.0)
    df = df.select("*", alloc.alias("alloc_usd"), failed.alias("failed_run_usd"))
    df = df.withColumn("wasted_usd", unused + F.col("failed_run_usd"))
    return df.select(*GOLD_JOB_USAGE.columns_from({c: c for c in df.columns}))


def _failures(usage: DataFrame) -> DataFrame:
    """gold.failures rows for the failed jobs of `usage`."""
    failed = usage.where(F.col("state") == "FAILED")
    fixable = F.coalesce(F.col("is_user_fixable_failure"), F.lit(False))
    cols = {
        "cluster": "cluster", "job_id": "job_id", "month": "month", "user": "user", "account": "account",
        "partition": "partition", "state": "state", "elapsed_s": "elapsed_s", "gpus": "alloc_gpus",
        "cpus": "alloc_cpus",
        "cause": F.when(fixable, F.lit("host_oom")).otherwise(F.lit("node_failure")),
        "user_fixable": fixable,
        "confidence": F.lit(0.95),
        "primary_source": F.lit("accounting"),
        "rule": F.lit("bench"),
        "evidence": F.lit("bench: synthetic"),
        "suggested_fix": F.when(fixable, F.lit("request more memory (--mem)")).otherwise(F.lit("resubmit")),
        "has_log": F.lit(False),
        "has_telemetry": F.lit(False),
        "lost_gpu_hours": F.coalesce(F.col("gpu_alloc_h"), F.lit(0.0)),
        "lost_core_hours": F.col("cpu_alloc_core_h"),
        "lost_usd": F.col("alloc_usd"),
        "built_at": F.current_timestamp(),
    }  # fmt: skip
    given = {k: v for k, v in cols.items() if k in GOLD_FAILURES.columns}
    return failed.select(*GOLD_FAILURES.columns_from(given))


def build_gold(ctx: Context, jobs: int) -> float:
    """Write the synthetic month's gold tables; returns the seconds it took."""
    started = time.perf_counter()
    spark, settings = ctx.spark, ctx.settings
    predicate = f"cluster = '{CLUSTER}' AND month = '{MONTH}'"
    replace_where(spark, settings, "gold.job_usage", _job_usage(spark, jobs), predicate)
    usage = read_table(spark, settings, "gold.job_usage")
    replace_where(spark, settings, "gold.failures", _failures(usage), predicate)
    replace_where(spark, settings, "gold.user_month", user_month(usage), predicate)
    replace_where(spark, settings, "gold.account_month", account_month(usage), predicate)
    sheet = json.dumps(load_cluster(CLUSTER).prices.model_dump())
    marks = spark.createDataFrame(
        [(CLUSTER, MONTH, None)], "cluster string, month string, source_watermark_ts timestamp"
    )
    replace_where(spark, settings, "gold.cluster_month", cluster_month(usage, marks, sheet), predicate)
    return time.perf_counter() - started


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--keep", metavar="DIR", help="warehouse here, kept (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jobfit-bench-report-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        ctx = Context(
            environ={
                "JOBFIT_WAREHOUSE": str(root / "warehouse"),
                "JOBFIT_MLFLOW__TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}",
                "JOBFIT_SPARK__JARS_DIR": str(REPO / ".jars"),
            },
            quiet=True,
        )
        gold_s = build_gold(ctx, args.jobs)
        print(f"gold for {args.jobs:,} jobs written in {gold_s:.1f}s (setup, not timed below)")
        make_reports(ctx, CLUSTER, MONTH, "admin", None, None, root / "warm")  # warm-up: JIT, plan caches
        started = time.perf_counter()
        payload = make_reports(ctx, CLUSTER, MONTH, "admin", None, None, root / "out")
        total_s = time.perf_counter() - started
        s = payload["seconds"]
        (made,) = payload["reports"]
        print(f"admin report of a {args.jobs:,}-job month: {made['pages']} pages, {made['bytes']:,} bytes")
        print(f"  SQL feeding it      {s['sql']:8.2f} s")
        ratio = s["render"] / max(s["sql"], 1e-9)
        why = payload["recommendations"]["why"] or "ok"
        verdict = "reached" if total_s <= GOAL_S else "not reached"
        print(f"  render (Jinja+PDF)  {s['render']:8.2f} s   ratio render/SQL {ratio:.2f}")
        print(f"  recommendations     {s['recommendations']:8.2f} s   ({why})")
        print(f"  total               {total_s:8.2f} s   goal <= {GOAL_S:.0f} s: {verdict}")


if __name__ == "__main__":
    main_bench()
