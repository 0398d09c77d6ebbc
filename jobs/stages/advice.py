"""What acting on the recommendations would have saved in a cluster-month: `jobfit recommend`'s answer for
every (user, script) that ran in the month, times its runs; and the champions' measured accuracy."""

from __future__ import annotations

from typing import Any

import pandas as pd
from pyspark.sql import functions as F

from features.query import history_index
from features.table import TARGETS, filter_usable, with_script_key, with_targets
from jobs.context import Context
from jobs.io.prediction import gpu_memory_bytes, read_jobs
from jobs.io.tables import read_table
from jobs.stages.report import month_end
from models.serving.answer import recommendation
from pipelines.silver.scripts import parse_script


def _script_runs(ctx: Context, cluster: str, month: str, users: set[str] | None) -> list[dict[str, Any]]:
    """(account, user, script_hash, runs, text) of the month's finished jobs that have a script."""
    spark, settings = ctx.spark, ctx.settings
    usage = read_table(spark, settings, "gold.job_usage").where(
        (F.col("cluster") == cluster) & (F.col("month") == month)
    )
    if users is not None:
        usage = usage.where(F.col("user").isin(sorted(users)))
    jobs = read_table(spark, settings, "silver.jobs").where(
        (F.col("cluster") == cluster) & F.col("script_hash").isNotNull()
    )
    scripts = read_table(spark, settings, "silver.scripts").where(F.col("cluster") == cluster)
    runs = (
        usage.select("job_id", "account", "user")
        .join(jobs.select("job_id", "script_hash"), on="job_id", how="inner")
        .groupBy("account", "user", "script_hash")
        .agg(F.count(F.lit(1)).alias("runs"))
        .join(scripts.select("script_hash", "text"), on="script_hash", how="inner")
    )
    return [r.asDict() for r in runs.collect()]


def _history(ctx: Context, cluster: str, gpu_mem: dict[str, float]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The cluster's finished jobs as `jobfit recommend` reads them: the snapshot the newest `jobfit train`
    logged, else silver.jobs."""
    from jobs.io.registry import configure, load_history_snapshot

    snapshot = load_history_snapshot(configure(ctx.settings), cluster)
    if snapshot is not None:
        return snapshot
    history = with_script_key(with_targets(filter_usable(read_jobs(ctx, cluster)), gpu_mem))
    return history, {
        "source": "silver.jobs",
        "run_id": None,
        "taken_at": str(ctx.now()),
        "newest_end_ts": None,
    }


def month_recommendations(
    ctx: Context, cluster: str, month: str, users: set[str] | None = None
) -> dict[str, Any]:
    """Per (account, user, script) of the month: the recommendation (flags, status, why), its expected
    saving per run and over the month's runs in USD; `status` `no_model` (and why) when the cluster has
    no champion. Savings are against the script's own request, as `jobfit recommend` computes them."""
    from jobs.io.registry import configure, load_champion

    client = configure(ctx.settings)
    champions = {t: load_champion(client, cluster, t) for t in TARGETS}
    if not any(champions.values()):
        why = f"no champion models for cluster {cluster} (run `jobfit train --cluster {cluster}`)"
        return {"status": "no_model", "why": why, "items": []}
    config = ctx.cluster_config(cluster)[0]
    gpu_mem = gpu_memory_bytes(config)
    runs = _script_runs(ctx, cluster, month, users)
    history, source = _history(ctx, cluster, gpu_mem)
    index = history_index(history)
    submit_ts = pd.Timestamp(month_end(month))
    answers: dict[tuple[str, str], dict[str, Any]] = {}
    items = []
    for run in sorted(runs, key=lambda r: (r["user"] or "", r["script_hash"], r["account"] or "")):
        key = (run["user"], run["script_hash"])
        if key not in answers:
            info = parse_script(run["text"])
            answers[key] = recommendation(
                info, cluster, run["user"], submit_ts, config, champions, index, source, gpu_mem
            )
        answer = answers[key]
        saving = answer["expected_saving"] or {}
        per_run = saving.get("usd")
        items.append(
            {
                "account": run["account"],
                "user": run["user"],
                "script_hash": run["script_hash"],
                "script_text": run["text"],
                "runs": int(run["runs"]),
                "status": answer["status"],
                "why": answer["why"],
                "flags": list(answer["flags"]),
                "history_jobs": answer["history_jobs"],
                "saving_usd_per_run": per_run,
                "saving_usd_month": None if per_run is None else per_run * int(run["runs"]),
            }
        )
    return {"status": "ok", "why": None, "items": items, "history_source": source}


def champion_accuracy(ctx: Context, cluster: str) -> dict[str, Any]:
    """Each target's champion against the baselines, as its training run measured them on the newest
    held-out slice (metrics.json of the run that registered the champion version)."""
    import mlflow

    from jobs.io.registry import champion_version, configure, model_name
    from models.metrics import compare_to_baselines

    client = configure(ctx.settings)
    rate = ctx.settings.predict.underprovision_rate
    out: dict[str, Any] = {}
    for target in TARGETS:
        name = model_name(cluster, target)
        version = champion_version(client, name)
        if version is None:
            continue
        run_id = client.get_model_version(name, version).run_id
        metrics = mlflow.artifacts.load_dict(f"runs:/{run_id}/metrics.json")
        compared = compare_to_baselines(metrics, rate)
        model = metrics["model"]
        best = compared.get("best_baseline")
        out[target] = {
            "version": version,
            "best_baseline": best,
            "gain_pct": compared.get("gain_pct"),
            "model_within_rate": compared.get("model_within_rate"),
            "model_under_rate": model.get("under_rate"),
            "model_reclaimed_h": model.get("reclaimed_h"),
            "baseline_under_rate": metrics[best].get("under_rate") if best else None,
            "baseline_reclaimed_h": metrics[best].get("reclaimed_h") if best else None,
            "request_reclaimed_h": metrics.get("request", {}).get("reclaimed_h"),
            "n": model.get("n"),
        }
    return out
