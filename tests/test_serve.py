"""`jobfit serve`: HTTP round trips against the real server (a `jobfit serve` subprocess on a free
loopback port) answering from champions registered in a tmp MLflow store, without Spark."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import mlflow
import pandas as pd
import pytest

from conf import ConfigError, load_cluster, load_settings
from features.table import TARGETS, build_training_table, history_snapshot_columns
from jobs.cli import main
from jobs.commands.recommend import recommend
from jobs.context import Context
from jobs.io.prediction import gpu_memory_bytes
from models.train import TrainParams, train_target
from tests.predict_data import synthetic_cluster
from tests.servers import jobfit_serve
from tests.test_slurm_hooks import CLI_FILTER, LUA, run_lua

REPO = Path(__file__).resolve().parents[1]
TOKEN = "t0ken-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MARKER = "SECRET-SCRIPT-MARKER-7f3a"
SCRIPT = f"""#!/bin/bash
#SBATCH --job-name=brand-new
#SBATCH --cpus-per-task=16
#SBATCH --mem=64G
#SBATCH --time=12:00:00
# {MARKER}
srun python finetune.py --model net-7b --batch-size 16
"""


@dataclass
class Store:
    tracking_uri: str
    table: pd.DataFrame


@dataclass
class Server:
    url: str
    store: Store
    process: subprocess.Popen[bytes]
    stderr: Path


def _publish(store: Store, target: str) -> str:
    """Train one target with 3 rounds and register it as the new champion; returns its version."""
    from jobs.io.registry import configure, log_target

    client = configure(load_settings({"JOBFIT_MLFLOW__TRACKING_URI": store.tracking_uri}))
    result = train_target(store.table, TARGETS[target], TrainParams(num_boost_round=3), 0.02)
    return str(log_target(client, "demo", result, None, 0.02)["version"])


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """Champions for mem and runtime of cluster demo plus the history snapshot, as `jobfit train` leaves
    them (trained from pandas frames: no Spark)."""
    from jobs.io.registry import configure, log_history_snapshot

    root = tmp_path_factory.mktemp("serve-store")
    tracking_uri = f"sqlite:///{root / 'mlflow.db'}"
    configure(load_settings({"JOBFIT_MLFLOW__TRACKING_URI": tracking_uri}))
    mlflow.create_experiment("jobfit-demo", artifact_location=(root / "artifacts").as_uri())
    jobs, scripts = synthetic_cluster(700, n_users=8, seed=5)
    table = build_training_table(jobs, scripts, gpu_memory_bytes(load_cluster("demo")))
    result = Store(tracking_uri, table)
    for target in ("mem", "runtime"):
        assert _publish(result, target) == "1"
    log_history_snapshot("demo", table[history_snapshot_columns()], "2026-04-01 00:00:00")
    return result


@pytest.fixture(scope="module")
def server(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    stderr = tmp_path_factory.mktemp("serve-log") / "stderr.txt"
    env = {"JOBFIT_MLFLOW__TRACKING_URI": store.tracking_uri, "JOBFIT_SERVE_TOKEN": TOKEN}
    with jobfit_serve("demo,ghost", env, REPO, stderr) as (url, process):
        yield Server(url, store, process, stderr)


def _post(server: Server, body: object, **kwargs: object) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/recommend", json=body, headers=AUTH, timeout=30, **kwargs)  # type: ignore[arg-type]


@pytest.mark.slow  # shares a ~40 s setup: a trained store and a started server
def test_recommend_answers_as_jobfit_recommend(server: Server) -> None:
    response = _post(server, {"cluster": "demo", "user": "u1", "script": SCRIPT})
    assert response.status_code == 200, response.text
    served = response.json()
    assert served["status"] == "ok" and served["history_source"]["source"] == "snapshot"
    assert served["targets"]["mem"]["model_version"] == "1"
    assert served["targets"]["mem"]["requested_bytes"] == 64 * 2**30
    assert served["targets"]["cpus"]["status"] == "no_model"
    assert any(f.startswith("--mem=") for f in served["flags"])
    assert any(f.startswith("--time=") for f in served["flags"])
    # The same answer as `jobfit recommend --json` (in-process; the snapshot path needs no Spark).
    ctx = Context(environ={"JOBFIT_MLFLOW__TRACKING_URI": server.store.tracking_uri}, quiet=True)
    local = recommend(ctx, SCRIPT, "demo", "u1")
    assert list(served) == list(local)
    same = ("cluster", "user", "script_hash", "history_jobs", "history_source", "script_runs", "status")
    assert {k: served[k] for k in same} == {k: local[k] for k in same}
    assert {t: v["status"] for t, v in served["targets"].items()} == {
        t: v["status"]  # type: ignore[index]
        for t, v in local["targets"].items()  # type: ignore[attr-defined]
    }
    # The job description a submit hook sees overrides the script's directives.
    hooked = _post(
        server,
        {
            "cluster": "demo",
            "user": "u1",
            "script": SCRIPT,
            "mem_per_cpu": "2G",
            "cpus_per_task": 4,
            "time_limit": "2-00:00:00",
            "gres": "gpu:a100:2",
            "partition": "gpu",
            "array_size": 10,
        },
    ).json()
    assert hooked["targets"]["mem"]["requested_bytes"] == 8 * 2**30
    assert hooked["targets"]["runtime"]["requested_s"] == 2 * 86400
    assert hooked["script_hash"] == served["script_hash"]
    # No script at all: the description alone; a user without history: "not enough history".
    bare = _post(server, {"cluster": "demo", "user": "nobody", "mem_per_node": "8G"}).json()
    assert bare["status"] == "not_enough_history" and bare["flags"] == []
    assert MARKER not in server.stderr.read_text()


@pytest.mark.slow
def test_unknown_cluster_or_no_champion_is_200_with_status(server: Server) -> None:
    unknown = _post(server, {"cluster": "elsewhere", "user": "u1", "script": SCRIPT})
    assert unknown.status_code == 200
    assert unknown.json()["status"] == "unknown_cluster" and "demo, ghost" in unknown.json()["why"]
    ghost = _post(server, {"cluster": "ghost", "user": "u1"})
    assert ghost.status_code == 200 and ghost.json()["status"] == "no_champion"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"cluster": "demo", "user": "u1", "bogus": 1}, "bogus: Extra inputs are not permitted"),
        ({"cluster": "demo"}, "user: Field required"),
        ({"cluster": "demo", "user": "u1", "cpus_per_task": 0}, "cpus_per_task"),
        ({"cluster": "demo", "user": "u1", "cpus_per_task": 10**9}, "cpus_per_task"),
        ({"cluster": "demo", "user": "u1", "time_limit": "900-00:00:00"}, "time_limit"),
        ({"cluster": "demo", "user": "u1", "mem_per_node": "64Q"}, "mem_per_node"),
        ({"cluster": "demo", "user": "u1", "mem_per_node": "999999T"}, "mem_per_node"),
        ({"cluster": "demo", "user": "u1", "mem_per_node": "1G", "mem_per_cpu": "1G"}, "not both"),
        ({"cluster": "demo", "user": "u1", "gres": "gpu:a100:500"}, "gres"),
        ({"cluster": "../etc", "user": "u1"}, "cluster"),
        (["not", "an", "object"], "valid dictionary"),
    ],
)
def test_bad_bodies_get_422_with_one_line(server: Server, body: object, expected: str) -> None:
    response = _post(server, body)
    assert response.status_code == 422, response.text
    assert list(response.json()) == ["error"] and expected in response.json()["error"]
    assert "\n" not in response.json()["error"]


@pytest.mark.slow
def test_malformed_json_and_oversized_bodies(server: Server) -> None:
    broken = httpx.post(f"{server.url}/v1/recommend", content=b'{"cluster": "demo",', headers=AUTH)
    assert broken.status_code == 422 and "not valid JSON" in broken.json()["error"]
    # No Content-Type (curl -d sends a form type): still read as JSON.
    plain = httpx.post(
        f"{server.url}/v1/recommend",
        content=b'{"cluster": "ghost", "user": "u1"}',
        headers=AUTH | {"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert plain.status_code == 200 and plain.json()["status"] == "no_champion"
    huge = {"cluster": "demo", "user": "u1", "script": "#" * (1024 * 1024)}
    assert _post(server, huge).status_code == 413
    # A chunked upload states no length: refused once it passes 1 MiB.
    chunks = (b" " * 65536 for _ in range(20))
    chunked = httpx.post(f"{server.url}/v1/recommend", content=chunks, headers=AUTH)
    assert chunked.status_code == 413 and "1048576" in chunked.json()["error"]


@pytest.mark.slow
def test_token_is_required_except_for_healthz(server: Server) -> None:
    assert httpx.get(f"{server.url}/healthz").json() == {"status": "alive"}
    for path in ("/readyz", "/metrics", "/openapi.json"):
        assert httpx.get(f"{server.url}{path}").status_code == 401
    wrong = httpx.post(
        f"{server.url}/v1/recommend",
        json={"cluster": "demo", "user": "u1"},
        headers={"Authorization": "Bearer nope"},
    )
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    assert httpx.post(f"{server.url}/admin/reload").status_code == 401


@pytest.mark.slow
def test_readyz_openapi_and_metrics(server: Server) -> None:
    ready = httpx.get(f"{server.url}/readyz", headers=AUTH).json()
    assert ready["ready"] is True
    assert ready["clusters"]["demo"]["versions"] == {"mem": "1", "vram": None, "cpus": None, "runtime": "1"}
    assert ready["clusters"]["demo"]["history_rows"] == 700
    assert set(ready["clusters"]["ghost"]["versions"].values()) == {None}
    schema = httpx.get(f"{server.url}/openapi.json", headers=AUTH).json()
    assert {"RecommendRequest", "RecommendResponse", "ErrorResponse", "Readiness"} <= set(
        schema["components"]["schemas"]
    )
    assert schema["components"]["schemas"]["RecommendRequest"]["additionalProperties"] is False
    before = _count(server, "/v1/recommend", 200)
    for _ in range(3):
        _post(server, {"cluster": "ghost", "user": "u1"})
    text = httpx.get(f"{server.url}/metrics", headers=AUTH).text
    assert _count(server, "/v1/recommend", 200) == before + 3
    assert 'jobfit_model_version{cluster="demo",target="mem",version="1"} 1' in text
    assert 'jobfit_http_request_duration_seconds_bucket{endpoint="/v1/recommend",le="+Inf"}' in text
    assert 'jobfit_http_requests_total{endpoint="/v1/recommend",status="401"}' in text
    assert 'jobfit_history_rows{cluster="demo"} 700' in text


@pytest.mark.slow
@pytest.mark.skipif(LUA is None, reason="lua5.4 is not installed (`make setup` installs it)")
def test_cli_filter_gets_its_advice_from_the_real_server(server: Server, tmp_path: Path) -> None:
    """hooks/slurm/cli_filter.lua in Lua 5.4 against this `jobfit serve`: what sbatch's options become is
    accepted, and the advice printed is the service's own answer for them."""
    scenario = f"""
JOBFIT_CLI.url = '{server.url}/v1/recommend'
JOBFIT_CLI.token = '{TOKEN}'
local options = {{type='sbatch', mem='64G', time='1-00:00:00', ['cpus-per-task']='8', ntasks='2',
    partition='gpu', ['job-name']='train'}}
out('rc', slurm_cli_pre_submit(options, 0))
out('mem', options.mem)
"""
    values, logs, _ = run_lua(CLI_FILTER, scenario, tmp_path, env={"USER": "u1"})
    assert (values["rc"], values["mem"]) == ("0", "64G")
    direct = _post(
        server,
        {
            "cluster": "demo",
            "user": "u1",
            "partition": "gpu",
            "ntasks": 2,
            "cpus_per_task": 8,
            "mem_per_node": "64G",
            "time_limit": "1-00:00:00",
            "job_name": "train",
        },
    ).json()
    assert direct["status"] == "ok" and direct["flags"]
    assert [level for level, _ in logs] == ["info"], logs
    expected = f"jobfit: from {direct['history_jobs']} finished jobs, this job needs about: #SBATCH "
    assert logs[0][1].startswith(expected + " ".join(direct["flags"])), logs[0][1]


def _count(server: Server, endpoint: str, status: int) -> int:
    text = httpx.get(f"{server.url}/metrics", headers=AUTH).text
    key = f'jobfit_http_requests_total{{endpoint="{endpoint}",status="{status}"}} '
    return next((int(line.removeprefix(key)) for line in text.splitlines() if line.startswith(key)), 0)


@pytest.mark.slow
def test_reload_under_load_drops_no_request(server: Server) -> None:
    assert _publish(server.store, "mem") == "2"  # a new champion the running server has not seen
    stop = threading.Event()
    reloaded_at: list[float] = []
    results: list[tuple[int, str, str, float]] = []  # status code, status, mem model version, time sent

    def hammer() -> None:
        deadline = time.monotonic() + 120  # bounded by time even if the reloads hang, not by a count
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as client:
            while not stop.is_set() and time.monotonic() < deadline:
                sent = time.monotonic()
                r = client.post("/v1/recommend", json={"cluster": "demo", "user": "u1", "script": SCRIPT})
                body = r.json()
                version = body.get("targets", {}).get("mem", {}).get("model_version", "")
                results.append((r.status_code, body.get("status", body.get("error", "")), version, sent))

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    reloads = [httpx.post(f"{server.url}/admin/reload", headers=AUTH, timeout=60) for _ in range(3)]
    reloaded_at.append(time.monotonic())
    time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    assert all(r.status_code == 200 for r in reloads), [r.text for r in reloads]
    assert reloads[-1].json()["clusters"]["demo"]["versions"]["mem"] == "2"
    assert results and all(code == 200 and status == "ok" for code, status, _, _ in results), results[:5]
    assert {version for _, _, version, _ in results} <= {"1", "2"}
    after = [version for _, _, version, sent in results if sent > reloaded_at[0]]
    # every request sent after the reload saw the new champion
    assert after and set(after) == {"2"}, after[:5]
    text = httpx.get(f"{server.url}/metrics", headers=AUTH).text
    assert 'jobfit_reloads_total{result="ok"} 3' in text


def test_serve_token_variable_is_allowed_and_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert load_settings({"JOBFIT_SERVE_TOKEN": "x"}).warehouse
    with pytest.raises(ConfigError):
        load_settings({"JOBFIT_SERVE_TOKN": "x"})
    assert main(["serve", "--cluster", "a,,b"], ctx=Context(environ={})) == 2
    assert main(["serve", "--cluster", "a", "--port", "99999"], ctx=Context(environ={})) == 2
    assert capsys.readouterr().err.strip().count("\n") == 1


def test_poll_reloads_and_a_failed_load_keeps_the_old_state() -> None:
    from jobs.commands.serve import poll
    from models.serving.state import ServingState, StateHolder

    calls: list[int] = []

    def loader() -> ServingState:
        calls.append(len(calls))
        if len(calls) == 2:
            raise OSError("MLflow is down")
        return ServingState(clusters={}, loaded_at=str(len(calls)))

    holder = StateHolder(loader=loader)
    first = holder.reload()
    with pytest.raises(OSError):
        holder.reload()
    assert holder.state is first and (holder.reloads, holder.failed_reloads) == (1, 1)
    stop = threading.Event()
    thread = threading.Thread(target=poll, args=(Context(environ={}, quiet=True), holder, 0.01, stop))
    thread.start()
    deadline = time.monotonic() + 10
    while holder.reloads < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(timeout=10)
    assert holder.reloads >= 3 and holder.state is not first and not thread.is_alive()
