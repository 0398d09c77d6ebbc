"""Real servers for tests: a free loopback port, and `jobfit serve` started as a subprocess."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.child_env import child_env


def free_port() -> int:
    """A TCP port nothing listens on at the moment, on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def jobfit_serve(
    clusters: str, env: Mapping[str, str], cwd: Path, log: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`jobfit serve --cluster CLUSTERS` on a free port, with this process's environment less its JOBFIT_*
    variables plus `env`, stderr to `log`; yields (base URL, process) once /healthz answers, then stops it."""
    port = free_port()
    full_env = child_env(**env)
    cmd = [sys.executable, "-m", "jobs.cli", "serve", "--cluster", clusters, "--port", str(port)]
    with log.open("w") as err:  # a file, not a pipe: a full pipe would stall the server
        process = subprocess.Popen(cmd, cwd=cwd, env=full_env, stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"jobfit serve exited {process.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.3)
    else:
        process.kill()
        pytest.fail(f"jobfit serve did not start: {log.read_text()[-2000:]}")
    try:
        yield url, process
    finally:
        process.terminate()
        process.wait(timeout=20)
