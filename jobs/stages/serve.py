"""The serving stage's loading half: every served cluster's champions (by MLflow alias) and the newest
history snapshot `jobfit train` logged, as a ServingState for models/serving (no Spark)."""

from __future__ import annotations

from collections.abc import Sequence

from features.table import TARGETS
from jobs.context import Context
from jobs.io.prediction import gpu_memory_bytes
from models.serving.state import ServingState, cluster_state


def load_state(ctx: Context, clusters: Sequence[str]) -> ServingState:
    """Load each cluster's champions and history snapshot; a cluster with neither still appears (its
    requests are answered `no_champion`). MLflow errors propagate (a reload keeps the old state)."""
    from jobs.io.registry import configure, load_champion, load_history_snapshot

    client = configure(ctx.settings)
    loaded = {}
    for cluster in clusters:
        config = ctx.cluster_config(cluster)[0]
        champions = {t: load_champion(client, cluster, t) for t in TARGETS}
        snapshot = load_history_snapshot(client, cluster)
        frame, source = snapshot if snapshot is not None else (None, None)
        loaded[cluster] = cluster_state(cluster, config, champions, frame, source, gpu_memory_bytes(config))
        versions = ", ".join(f"{t} v{c[1]}" for t, c in champions.items() if c is not None) or "no champions"
        rows = len(frame) if frame is not None else 0
        ctx.progress(f"{cluster}: {versions}; history snapshot {rows} rows")
    return ServingState(clusters=loaded, loaded_at=str(ctx.now()))
