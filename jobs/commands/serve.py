"""`jobfit serve --cluster C[,C2...]`: the recommendation service submit hooks call (docs/serve.md)."""

from __future__ import annotations

import argparse
import ipaddress
import threading
from typing import TYPE_CHECKING

import pandas as pd

from conf import SERVE_TOKEN_VAR
from jobs.commands import add_common
from jobs.context import Context, UsageError

if TYPE_CHECKING:
    from models.serving.state import StateHolder


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve recommendations over HTTP for submit hooks (POST /v1/recommend)",
        description="Load each cluster's champion models (MLflow alias `champion`) and the history snapshot "
        "`jobfit train` logged, then answer POST /v1/recommend, /healthz, /readyz, /metrics and "
        f"POST /admin/reload on HOST:PORT. When ${SERVE_TOKEN_VAR} is set, every endpoint but /healthz "
        "requires `Authorization: Bearer <token>`. See docs/serve.md.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: loopback only)")
    p.add_argument("--port", type=_port, default=8080, help="TCP port (default 8080)")
    p.add_argument(
        "--reload-every",
        type=_seconds,
        default=0,
        metavar="S",
        help="also reload champions and history snapshot every S seconds (default 0: only on "
        "POST /admin/reload)",
    )
    add_common(p, cluster_required=True)
    p.set_defaults(func=run)


def _port(value: str) -> int:
    if not value.isdigit() or not 0 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port 0-65535, got {value!r}")
    return int(value)


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"expected seconds between 0 and 604800, got {value!r}")
    return seconds


def poll(ctx: Context, holder: StateHolder, every_s: float, stop: threading.Event) -> None:
    """Reload every `every_s` seconds until `stop` is set; a failed load keeps the old models."""
    while not stop.wait(every_s):
        try:
            holder.reload()
        except Exception as exc:  # MLflow down for a moment: keep serving what is loaded
            ctx.progress(f"reload failed, previous models kept: {type(exc).__name__}: {exc}")


def clusters_arg(value: str) -> list[str]:
    """`a,b` -> ["a", "b"] (a UsageError for an empty name)."""
    names = [name.strip() for name in value.split(",")]
    if not all(names):
        raise UsageError(f"--cluster: empty cluster name in {value!r}")
    return list(dict.fromkeys(names))


def run(ctx: Context, args: argparse.Namespace) -> int:
    import uvicorn

    from jobs.stages.serve import load_state
    from models.serving.app import create_app
    from models.serving.state import StateHolder

    clusters = clusters_arg(args.cluster)
    token = ctx.environ.get(SERVE_TOKEN_VAR) or None
    if not token and not _is_loopback(args.host):
        ctx.progress(
            f"warning: binding {args.host} without ${SERVE_TOKEN_VAR}: anyone who reaches it may call it"
        )
    holder = StateHolder(loader=lambda: load_state(ctx, clusters))
    state = holder.reload()
    ready = {c: s.versions() for c, s in state.clusters.items()}
    ctx.emit(
        {"host": args.host, "port": args.port, "token": bool(token), "clusters": ready},
        args.json,
        text=f"jobfit serve: http://{args.host}:{args.port} ({', '.join(clusters)}; "
        f"token {'on' if token else 'off'})",
    )
    app = create_app(holder, token=token, clock=lambda: pd.Timestamp(ctx.now()))
    stop = threading.Event()
    if args.reload_every > 0:
        threading.Thread(target=poll, args=(ctx, holder, args.reload_every, stop), daemon=True).start()
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    finally:
        stop.set()
    return 0


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
