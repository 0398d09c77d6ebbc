"""`jobfit sql-server` — a Spark Connect server with Delta and every jobfit table registered by name, for
notebooks: `SparkSession.builder.remote("sc://127.0.0.1:15002").getOrCreate()`, then `spark.sql(...)`."""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING

from jobs.commands import add_common
from jobs.commands.serve import _is_loopback, _port, _seconds
from jobs.context import Context, UsageError
from jobs.io.tables import register_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from conf import Settings

CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
# Spark Connect's own pre-shared token (the server checks it; pyspark clients send it from the same variable).
TOKEN_VAR = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
_START_TIMEOUT_S = 60.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sql-server",
        help="serve jobfit's tables to notebooks over Spark Connect",
        description="Start a Spark Connect server (Delta, every jobfit table registered by name: "
        "silver.jobs, gold.user_month, ...) and run until interrupted (Ctrl-C or SIGTERM). Clients "
        'connect with SparkSession.builder.remote("sc://HOST:PORT"). Not read-only: a Connect client '
        "can run any statement with this process's access to the warehouse; bind to loopback (the "
        "default) unless every client reaching the port is trusted. See docs/cli.md.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: loopback only)")
    p.add_argument("--port", type=_port, default=15002, help="TCP port (default 15002, Spark Connect's)")
    p.add_argument(
        "--refresh",
        type=_seconds,
        default=60,
        metavar="S",
        help="register tables written since the start every S seconds (default 60; 0: only at start)",
    )
    add_common(p, cluster=False)
    p.set_defaults(func=run)


def connect_settings(settings: Settings, host: str, port: int) -> Settings:
    """The settings with Spark Connect's plugin added to the session (bound to host:port)."""
    conf = dict(settings.spark.conf)
    plugins = [p for p in conf.get("spark.plugins", "").split(",") if p.strip()]
    conf["spark.plugins"] = ",".join(dict.fromkeys([*plugins, CONNECT_PLUGIN]))
    conf["spark.connect.grpc.binding.address"] = host
    conf["spark.connect.grpc.binding.port"] = str(port)
    spark = settings.spark.model_copy(update={"conf": conf})
    return settings.model_copy(update={"spark": spark})


def run(ctx: Context, args: argparse.Namespace) -> int:
    from jobs.io.spark import build_session

    if not args.port:
        raise UsageError("--port: expected a port 1-65535, got 0")
    _check_free(args.host, args.port)
    if not _is_loopback(args.host):
        ctx.progress(
            f"warning: binding {args.host}: anyone who reaches port {args.port} can read and write the "
            "warehouse as this process" + ("" if ctx.environ.get(TOKEN_VAR) else f" (no ${TOKEN_VAR} set)")
        )
    settings = connect_settings(ctx.settings, args.host, args.port)
    ctx.progress("starting Spark with Spark Connect ...")
    spark = build_session(settings)
    ctx.use_spark(spark)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        _wait_listening(args.host, args.port)
        tables = register_tables(spark, settings)
        url = f"sc://{_client_host(args.host)}:{args.port}"
        ctx.emit(
            {
                "url": url,
                "host": args.host,
                "port": args.port,
                "token": bool(ctx.environ.get(TOKEN_VAR)),
                "refresh_s": args.refresh,
                "tables": tables,
            },
            args.json,
            text=f"jobfit sql-server: {url} ({len(tables)} tables; "
            f'SparkSession.builder.remote("{url}").getOrCreate(); Ctrl-C stops)',
        )
        sys.stdout.flush()  # the line a supervisor (or a test) waits for, even when stdout is a pipe
        _serve(ctx, spark, settings, args.refresh, stop)
    finally:
        spark.stop()
    ctx.progress("Spark Connect server stopped")
    return 0


def _serve(
    ctx: Context, spark: SparkSession, settings: Settings, refresh_s: float, stop: threading.Event
) -> None:
    """Wait for a stop signal; every `refresh_s` seconds (0: never) register the tables written since."""
    next_refresh = time.monotonic() + refresh_s
    while not stop.wait(0.5):
        if refresh_s and time.monotonic() >= next_refresh:
            next_refresh = time.monotonic() + refresh_s
            try:
                added = register_tables(spark, settings, keep=True)
            except Exception as exc:  # a warehouse briefly unreachable: keep serving what is registered
                ctx.progress(f"refresh failed, tables kept: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            if added:
                ctx.progress(f"registered {', '.join(added)}")


def _check_free(host: str, port: int) -> None:
    """A UsageError (exit 2) when host:port cannot be bound, before Spark is started for nothing."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _wait_listening(host: str, port: int) -> None:
    """Return once the Connect server accepts connections; a UsageError if it never does (port taken)."""
    target = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((target, port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise UsageError(f"Spark Connect did not start listening on {host}:{port}")


def _client_host(host: str) -> str:
    """The host a client puts in its sc:// URL (this machine's name when bound to every address)."""
    if host in ("0.0.0.0", "::", ""):
        return socket.getfqdn()
    return f"[{host}]" if ":" in host else host
