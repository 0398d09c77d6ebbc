"""The hooks stage (`jobfit hooks export`): the local cache Slurm's job_submit.lua reads, from the champions
and the history snapshot `jobfit train` logged (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from features.table import TARGETS
from jobs.context import Context, UsageError
from jobs.io.files import write_text_atomic
from models.hooks import ANY_SCRIPT, cache_entries, format_cache
from models.recommend import MIN_USER_HISTORY


def export_cache(ctx: Context, cluster: str, out: Path) -> dict[str, object]:
    """Compute and write the cache of one cluster; returns the summary (documented in docs/cli.md)."""
    from jobs.io.registry import configure, load_champion, load_history_snapshot

    client = configure(ctx.settings)
    champions = {t: load_champion(client, cluster, t) for t in TARGETS}
    if not any(champions.values()):
        raise UsageError(
            f"no champion models for cluster {cluster!r} (run `jobfit train --cluster {cluster}`)"
        )
    snapshot = load_history_snapshot(client, cluster)
    if snapshot is None:
        raise UsageError(
            f"no history snapshot for cluster {cluster!r} (run `jobfit train --cluster {cluster}`)"
        )
    history, source = snapshot
    made_at = ctx.now()
    ctx.progress(
        f"hooks export: {len(history)} finished jobs of cluster {cluster} from run {source['run_id']}"
    )
    entries = cache_entries(
        history,
        {t: c[0] if c else None for t, c in champions.items()},
        ctx.cluster_config(cluster)[0],
        pd.Timestamp(made_at),
    )
    models = {t: c[1] for t, c in champions.items() if c is not None}
    meta: dict[str, object] = {
        "cluster": cluster,
        "made_at": made_at.isoformat(timespec="seconds") + "Z",
        "models": ",".join(f"{t}={v}" for t, v in models.items()),
        "history_run_id": source["run_id"],
        "history_taken_at": source["taken_at"],
        "min_user_history": MIN_USER_HISTORY,
    }
    write_text_atomic(out, format_cache(entries, meta))
    return {
        "cluster": cluster,
        "out": str(out),
        "made_at": meta["made_at"],
        "model_versions": models,
        "history_source": source,
        "users": len({e.user for e in entries}),
        "entries": len(entries),
        "script_entries": sum(e.script_key != ANY_SCRIPT for e in entries),
    }
