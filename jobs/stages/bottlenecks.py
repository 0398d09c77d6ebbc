"""Build gold.profiler_ranks and gold.job_bottlenecks from the profiler traces of a cluster (all, one job, or
the jobs of one month): each trace is analysed on Spark, one task per trace
(`pipelines.gold.bottlenecks.analyze.analyze_rank` in `applyInPandas`); a job's findings are then formed
from its ranks on the driver and priced with the cluster's GPU-hour prices."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from conf import BottleneckSettings, ClusterConfig
from jobs.context import Context
from jobs.io.tables import merge_into, read_table, replace_where, sql_string
from jobs.stages.bottleneck_counters import build_counter_findings
from pipelines.gold.bottlenecks.analyze import (
    Collective,
    Finding,
    Frame,
    RankAnalysis,
    analyze_rank,
    job_findings,
)
from pipelines.schemas import (
    GOLD_JOB_BOTTLENECKS,
    GOLD_PROFILER_RANKS,
    SILVER_JOBS,
    SILVER_PROFILER_EVENTS,
    SILVER_PROFILER_TRACES,
)
from pipelines.silver.profiler import EVENT_COLUMNS

_RESULT_SCHEMA = "trace_id string, analysis string"


def _analyse(settings: BottleneckSettings, facts: dict[str, dict[str, Any]]):
    """The per-trace function applyInPandas runs: events in, one row (trace_id, analysis as JSON) out."""

    def run(pdf: pd.DataFrame) -> pd.DataFrame:
        trace_id = str(pdf["trace_id"].iloc[0])
        f = facts.get(trace_id, {})
        result = analyze_rank(
            pdf[list(EVENT_COLUMNS)], settings, f.get("rank"), f.get("compute_major"), f.get("device_name")
        )
        return pd.DataFrame({"trace_id": [trace_id], "analysis": [json.dumps(asdict(result))]})

    return run


def _rank_from_json(text: str) -> RankAnalysis:
    d = json.loads(text)
    d["findings"] = [
        Finding(**{**x, "frame": Frame(**x["frame"]) if x["frame"] else None}) for x in d["findings"]
    ]
    d["collectives"] = [Collective(*c) for c in d["collectives"]]  # JSON keeps a named tuple as a list
    return RankAnalysis(**d)


def _empty_rank(rank: int | None, note: str) -> RankAnalysis:
    return RankAnalysis(
        rank,
        0,
        "none",
        0.0,
        0.0,
        dict.fromkeys(("kernel", "memcpy", "memset", "runtime", "dataloader", "cpu_exec", "other"), 0.0),
        None,
        None,
        0,
        False,
        False,
        [],
        [note],
    )


def select_traces(ctx: Context, cluster: str, job_id: str | None, month: str | None) -> DataFrame:
    """The cluster's traces (optionally one job's, or those of jobs that ended in a month)."""
    traces = read_table(ctx.spark, ctx.settings, SILVER_PROFILER_TRACES.name).where(
        F.col("cluster") == cluster
    )
    if job_id is not None:
        return traces.where(F.col("job_id") == job_id)
    if month is not None:
        jobs = read_table(ctx.spark, ctx.settings, SILVER_JOBS.name).where(F.col("cluster") == cluster)
        job_month = jobs.select(
            "job_id", F.date_format(F.coalesce("end_ts", "start_ts"), "yyyy-MM").alias("job_month")
        )
        traces = traces.join(job_month, on="job_id", how="left")
        trace_month = F.coalesce("job_month", F.date_format(F.coalesce("start_ts", "ingested_at"), "yyyy-MM"))
        return traces.where(trace_month == month).drop("job_month")
    return traces


def build_bottlenecks(
    ctx: Context, cluster: str, config: ClusterConfig, job_id: str | None = None, month: str | None = None
) -> dict[str, Any]:
    """Analyse the selected traces, write both gold tables, and return the jobs' results (docs/cli.md)."""
    spark, settings = ctx.spark, ctx.settings
    s = settings.bottlenecks
    traces = [r.asDict() for r in select_traces(ctx, cluster, job_id, month).collect()]
    facts = {t["trace_id"]: t for t in traces}
    analyses: dict[str, RankAnalysis] = {}
    if traces:
        ids = list(facts)
        events = read_table(spark, settings, SILVER_PROFILER_EVENTS.name).where(
            (F.col("cluster") == cluster) & F.col("trace_id").isin(ids)
        )
        small = {
            k: {"rank": v["rank"], "compute_major": v["compute_major"], "device_name": v["device_name"]}
            for k, v in facts.items()
        }
        rows = events.groupBy("trace_id").applyInPandas(_analyse(s, small), _RESULT_SCHEMA).collect()
        analyses = {r["trace_id"]: _rank_from_json(r["analysis"]) for r in rows}
        for t in traces:
            analyses.setdefault(t["trace_id"], _empty_rank(t["rank"], "the trace has no events"))
    jobs = _jobs(ctx, cluster, {t["job_id"] for t in traces if t["job_id"]})
    now = ctx.now()
    rank_rows = [_rank_row(t, analyses[t["trace_id"]], jobs.get(t["job_id"] or ""), now) for t in traces]
    if rank_rows:
        merge_into(
            spark,
            settings,
            GOLD_PROFILER_RANKS.name,
            spark.createDataFrame(rank_rows, GOLD_PROFILER_RANKS.schema),
        )
    results, finding_rows = [], []
    by_job: dict[str | None, list[dict[str, Any]]] = {}
    for t in traces:
        by_job.setdefault(t["job_id"], []).append(t)
    for jid, its in sorted(by_job.items(), key=lambda kv: str(kv[0])):
        ranks = [analyses[t["trace_id"]] for t in its]
        hosts = {t["rank"]: t["host"] for t in its}
        findings = job_findings(ranks, hosts, s)
        job = jobs.get(jid or "")
        priced = [_priced(f, job, config) for f in findings]
        results.append(_job_json(cluster, jid, its, ranks, findings, priced))
        if jid is not None:
            month_of = _month(job, its[0], now)
            finding_rows += [
                _finding_row(cluster, jid, month_of, job, f, p, now)
                for f, p in zip(findings, priced, strict=True)
            ]
    if by_job:
        written = [j for j in by_job if j is not None]
        if written:
            listed = ", ".join(sql_string(j) for j in written)
            frame = spark.createDataFrame(finding_rows, GOLD_JOB_BOTTLENECKS.schema)
            replace_where(
                spark,
                settings,
                GOLD_JOB_BOTTLENECKS.name,
                frame,
                f"cluster = {sql_string(cluster)} AND job_id IN ({listed}) "
                "AND coalesce(source, 'profiler') = 'profiler'",
            )
    return {
        "cluster": cluster,
        "jobs": _with_counters(cluster, results, build_counter_findings(ctx, cluster, config, job_id, month)),
    }


def _with_counters(
    cluster: str, results: list[dict[str, Any]], counted: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The traces' job objects with each job's DCGM counter summary and findings added (`counters` null
    without profiling counters), and a job object for each job classified from counters alone."""
    for job in results:
        extra = counted.pop(job["job_id"], None) if job["job_id"] is not None else None
        job["counters"] = extra["counters"] if extra else None
        job["findings"] += extra["findings"] if extra else []
    for jid, extra in sorted(counted.items()):
        results.append({"job_id": jid, "cluster": cluster, "attribution": [], "ranks": [], **extra})
    return results


def _jobs(ctx: Context, cluster: str, ids: set[str]) -> dict[str, dict[str, Any]]:
    if not ids:
        return {}
    rows = (
        read_table(ctx.spark, ctx.settings, SILVER_JOBS.name)
        .where((F.col("cluster") == cluster) & F.col("job_id").isin(sorted(ids)))
        .select(
            "job_id",
            "user",
            "account",
            "alloc_gpus",
            "req_gpus",
            "elapsed_s",
            "gpu_model",
            "start_ts",
            "end_ts",
        )
        .collect()
    )
    return {r["job_id"]: r.asDict() for r in rows}


def _month(job: dict[str, Any] | None, trace: dict[str, Any], now: datetime) -> str:
    when = (
        (job or {}).get("end_ts")
        or (job or {}).get("start_ts")
        or trace.get("start_ts")
        or trace["ingested_at"]
        or now
    )
    return when.strftime("%Y-%m")


def _priced(
    f: Finding, job: dict[str, Any] | None, config: ClusterConfig
) -> tuple[float | None, float | None]:
    """GPU-hours and USD recoverable: the finding's share of the job's GPU-hours at its model's price."""
    if not job or not job.get("elapsed_s"):
        return None, None
    gpus = job.get("alloc_gpus") or job.get("req_gpus") or 0
    if not gpus:
        return None, None
    hours = gpus * job["elapsed_s"] / 3600 * f.share_pct / 100
    return hours, hours * config.prices.gpu_hour_for(job.get("gpu_model"))


def _rank_row(
    t: dict[str, Any], a: RankAnalysis, job: dict[str, Any] | None, now: datetime
) -> dict[str, Any]:
    b, g, i = a.breakdown_pct, a.gpu_pct or {}, a.idle_split_pct or {}
    return {
        "cluster": t["cluster"],
        "trace_id": t["trace_id"],
        "job_id": t["job_id"],
        "month": _month(job, t, now),
        "rank": t["rank"],
        "source_file": t["source_file"],
        "steps": a.steps,
        "step_source": a.step_source,
        "mean_step_us": a.mean_step_us,
        "warmup_us": a.warmup_us,
        **{
            f"{k}_pct": float(b[k])
            for k in ("kernel", "memcpy", "memset", "runtime", "dataloader", "cpu_exec", "other")
        },
        "gpu_idle_pct": g.get("idle"),
        "gpu_compute_pct": g.get("compute"),
        "gpu_non_compute_pct": g.get("non_compute"),
        "idle_host_wait_pct": i.get("host_wait"),
        "idle_kernel_wait_pct": i.get("kernel_wait"),
        "idle_other_pct": i.get("other"),
        "kernels": a.kernels,
        "has_gpu": a.has_gpu,
        "has_stacks": a.has_stacks,
        "notes": "; ".join(a.notes) or None,
        "built_at": now,
    }


def _finding_row(
    cluster: str,
    job_id: str,
    month: str,
    job: dict[str, Any] | None,
    f: Finding,
    priced: tuple[float | None, float | None],
    now: datetime,
) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "job_id": job_id,
        "kind": f.kind,
        "month": month,
        "user": (job or {}).get("user"),
        "account": (job or {}).get("account"),
        "rank": f.rank,
        "share_pct": float(f.share_pct),
        "evidence": f.evidence,
        "fix": f.fix,
        "code": {"file": f.frame.file, "line": f.frame.line, "function": f.frame.function}
        if f.frame
        else None,
        "gpu_hours_recoverable": priced[0],
        "usd_recoverable": priced[1],
        "built_at": now,
        "source": "profiler",
    }


def _r(x: float | None, n: int = 2) -> float | None:
    return None if x is None else round(float(x), n)


def _job_json(
    cluster: str,
    job_id: str | None,
    traces: list[dict[str, Any]],
    ranks: list[RankAnalysis],
    findings: list[Finding],
    priced: list[tuple[float | None, float | None]],
) -> dict[str, Any]:
    """One job's `jobfit bottlenecks --json` object (docs/cli.md)."""
    return {
        "job_id": job_id,
        "cluster": cluster,
        "attribution": sorted({t["attribution"] for t in traces}),
        "ranks": [
            {
                "rank": a.rank,
                "trace": t["source_file"],
                "steps": a.steps,
                "step_source": a.step_source,
                "breakdown_pct": {k: _r(v) for k, v in a.breakdown_pct.items()},
                "gpu_pct": {k: _r(v) for k, v in a.gpu_pct.items()} if a.gpu_pct else None,
                "idle_split_pct": {k: _r(v) for k, v in a.idle_split_pct.items()}
                if a.idle_split_pct
                else None,
                "notes": a.notes,
            }
            for t, a in sorted(
                zip(traces, ranks, strict=True), key=lambda p: (p[1].rank is None, p[1].rank or 0)
            )
        ],
        "findings": [
            {
                "kind": f.kind,
                "source": "profiler",
                "rank": f.rank,
                "share_pct": _r(f.share_pct),
                "evidence": f.evidence,
                "fix": f.fix,
                "file": f.frame.file if f.frame else None,
                "line": f.frame.line if f.frame else None,
                "gpu_hours_recoverable": _r(p[0], 3),
                "usd_recoverable": _r(p[1], 2),
            }
            for f, p in zip(findings, priced, strict=True)
        ],
    }
