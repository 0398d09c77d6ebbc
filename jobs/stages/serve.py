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


def ask_once(ctx: Context, cluster: str, request: dict[str, object]) -> dict[str, object]:
    """Start the server on a free loopback port, POST one /v1/recommend as a submit hook would, stop it:
    the answer a hook gets (what `jobfit demo` shows)."""
    import socket
    import threading
    import time

    import httpx
    import pandas as pd
    import uvicorn

    from models.serving.app import create_app
    from models.serving.state import StateHolder

    holder = StateHolder(loader=lambda: load_state(ctx, [cluster]))
    holder.reload()
    app = create_app(holder, clock=lambda: pd.Timestamp(ctx.now()))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError(f"jobfit serve did not start on 127.0.0.1:{port}")
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}/v1/recommend"
        response = httpx.post(url, json=request, timeout=30)
        return {
            "url": url,
            "request": request,
            "http_status": response.status_code,
            "answer": response.json(),
        }
    finally:
        server.should_exit = True
        thread.join(timeout=10)
