"""`jobfit serve` against `mlflow models serve` on loopback: latency at a fixed open-loop rate (figures).

    .venv/bin/python bench/serve.py                       # 200 requests/s for 20 s, then the rate steps
    .venv/bin/python bench/serve.py --rate 100 --seconds 10 --steps 50,100 --step-seconds 3

A small trained store is built in a temp dir without Spark (as tests/test_serve.py does): simulated demo
cluster jobs (tests/predict_data.synthetic_cluster), the four targets trained with a few rounds, registered
as champions, and the history snapshot. Then, in the same run, `jobfit serve --cluster demo` and
`mlflow models serve -m models:/jobfit-demo-<target>@champion --env-manager local` are started on free
loopback ports and driven by an asyncio + httpx client at a fixed open-loop rate with the same request mix:
jobfit gets `POST /v1/recommend` (four targets), MLflow gets `/invocations` with the feature row of the same
request (dataframe_split) for its one target. The client keeps at most --max-in-flight requests
outstanding; a request due while that many are outstanding is not sent and counts as an error
("dropped"), so an overloaded server gets a bounded backlog and the run ends in bounded time. Latency is
from the request's send to its answer. Last, one warm request path is profiled in-process (cProfile).
The client shares the machine's cores with both servers: figures are for this machine, not a capacity plan."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import pstats
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from conf import load_cluster, load_settings  # noqa: E402
from features.table import TARGETS, build_training_table, history_snapshot_columns  # noqa: E402
from jobs.io.prediction import gpu_memory_bytes  # noqa: E402
from models.recommend import query_row, with_query_features  # noqa: E402
from models.serving.answer import recommendation  # noqa: E402
from models.serving.job import job_info  # noqa: E402
from models.serving.schemas import RecommendRequest  # noqa: E402
from models.serving.state import cluster_state  # noqa: E402
from models.train import TrainParams, train_target  # noqa: E402
from tests.predict_data import synthetic_cluster  # noqa: E402

GOAL = (
    "goal: /v1/recommend for four targets p99 <= 5 ms at 200 rps, >= 2x faster than MLflow's server "
    "answering one target"
)
HELD_P99_MS = 10.0
SUBMIT_TS = pd.Timestamp("2026-03-15 12:00:00")
NEW_SCRIPT = """#!/bin/bash
#SBATCH --job-name=brand-new
#SBATCH --cpus-per-task=16
#SBATCH --mem=64G
#SBATCH --gres=gpu:1
#SBATCH --time=12:00:00
module load pytorch
srun python finetune.py --model net-7b --batch-size 16 --data /scratch/u1/other
"""


@dataclass
class Store:
    root: Path
    tracking_uri: str
    table: pd.DataFrame
    scripts: pd.DataFrame
    jobs: pd.DataFrame
    predictors: dict[str, object]
    gpu_mem: dict[str, float]


def build_store(n_jobs: int, n_users: int, rounds: int) -> Store:
    """Champions for the four targets of cluster demo plus the history snapshot, as `jobfit train` leaves
    them (trained from pandas frames: no Spark)."""
    import mlflow

    from jobs.io.registry import configure, log_history_snapshot, log_target

    root = Path(tempfile.mkdtemp(prefix="jobfit-bench-serve-"))
    tracking_uri = f"sqlite:///{root / 'mlflow.db'}"
    client = configure(load_settings({"JOBFIT_MLFLOW__TRACKING_URI": tracking_uri}))
    mlflow.create_experiment("jobfit-demo", artifact_location=(root / "artifacts").as_uri())
    jobs, scripts = synthetic_cluster(n_jobs, n_users=n_users, seed=5)
    gpu_mem = gpu_memory_bytes(load_cluster("demo"))
    table = build_training_table(jobs, scripts, gpu_mem)
    predictors = {}
    for target in TARGETS:
        result = train_target(table, TARGETS[target], TrainParams(num_boost_round=rounds), 0.02)
        log_target(client, "demo", result, None, 0.02)
        predictors[target] = result.predictor
    log_history_snapshot("demo", table[history_snapshot_columns()], "2026-04-01 00:00:00")
    return Store(root, tracking_uri, table, scripts, jobs, predictors, gpu_mem)


def request_mix(store: Store, n: int) -> list[dict[str, object]]:
    """`n` /v1/recommend bodies: users with history running their own scripts (some with a submit hook's
    job description), a new script, and a user without history; seeded, so every run sends the same."""
    rng = np.random.default_rng(7)
    text = dict(zip(store.scripts["script_hash"], store.scripts["text"], strict=True))
    pairs = store.jobs[["user", "script_hash"]].drop_duplicates().to_numpy()
    bodies: list[dict[str, object]] = []
    for i in range(n):
        user, script_hash = pairs[rng.integers(len(pairs))]
        body: dict[str, object] = {"cluster": "demo", "user": str(user), "script": text[script_hash]}
        if i % 4 == 1:
            body |= {
                "cpus_per_task": 8,
                "mem_per_node": "32G",
                "time_limit": "04:00:00",
                "gres": "gpu:a100:1",
            }
        elif i % 8 == 2:
            body["script"] = NEW_SCRIPT
        elif i % 16 == 3:
            body["user"] = "nobody"
        bodies.append(body)
    return bodies


def feature_row(store: Store, body: dict[str, object], by_user: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The one-row feature table `/v1/recommend` builds for a body (what a champion's predict reads)."""
    info = job_info(RecommendRequest(**body))
    history = by_user.get(str(body["user"]), store.table.iloc[0:0][history_snapshot_columns()])
    query = query_row(info, str(body["user"]), SUBMIT_TS, store.gpu_mem)
    return with_query_features(query, pd.DataFrame([asdict(info)]), history)


def dataframe_split(row: pd.DataFrame) -> bytes:
    split = json.loads(row.to_json(orient="split", date_format="iso", default_handler=str))
    return json.dumps({"dataframe_split": {"columns": split["columns"], "data": split["data"]}}).encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as err:
        # A session of its own: `mlflow models serve` runs its server as a child, stopped with it.
        return subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )


def stop(process: subprocess.Popen[bytes], sig: int) -> None:
    """Signal the process group this bench started (the server and any worker it spawned)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def wait_ready(process: subprocess.Popen[bytes], url: str, log: Path, timeout: float) -> str | None:
    """None once `url` answers 200, else why not (the process exited, or the timeout passed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return f"exited {process.returncode}: {log.read_text()[-1500:]}"
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return None
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    return f"not ready after {timeout:.0f} s: {log.read_text()[-1500:]}"


def rss_mb(pid: int) -> tuple[float, float]:
    """(the process's RSS, the RSS of it and all its descendants) in MB."""
    try:
        import psutil
    except ImportError:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                own = int(line.split()[1]) / 1024
                return own, own
        return float("nan"), float("nan")
    proc = psutil.Process(pid)
    own = proc.memory_info().rss / 2**20
    tree = own + sum(c.memory_info().rss for c in proc.children(recursive=True)) / 2**20
    return own, tree


async def drive(url: str, bodies: list[bytes], rate: float, seconds: float, cap: int, timeout: float) -> dict:
    """Send len = rate x seconds requests at a fixed rate (open loop), cycling through `bodies`."""
    headers = {"Content-Type": "application/json"}
    limits = httpx.Limits(max_connections=cap, max_keepalive_connections=cap)
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    in_flight = 0
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:

        async def one(body: bytes) -> None:
            nonlocal in_flight
            t = time.perf_counter()
            try:
                response = await client.post(url, content=body, headers=headers)
                if response.status_code == 200:
                    latencies.append((time.perf_counter() - t) * 1000)
                else:
                    errors[f"http {response.status_code}"] += 1
            except httpx.HTTPError as exc:
                errors[type(exc).__name__] += 1
            finally:
                in_flight -= 1

        for body in bodies[:5]:  # warm the connection (and any lazy set-up), not measured
            await client.post(url, content=body, headers=headers)
        tasks = []
        n = int(rate * seconds)
        begin = time.perf_counter()
        for i in range(n):
            delay = begin + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if in_flight >= cap:
                errors["dropped (in-flight cap)"] += 1
                continue
            in_flight += 1
            tasks.append(asyncio.create_task(one(bodies[i % len(bodies)])))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - begin
    lat = np.array(latencies) if latencies else np.array([np.nan])
    return {
        "rate": rate,
        "sent": len(tasks),
        "ok": len(latencies),
        "achieved": len(latencies) / elapsed,
        "errors": dict(errors),
        "n_errors": sum(errors.values()),
        "p50": float(np.percentile(lat, 50)),
        "p95": float(np.percentile(lat, 95)),
        "p99": float(np.percentile(lat, 99)),
    }


def held(run: dict) -> bool:
    return run["p99"] < HELD_P99_MS and run["n_errors"] == 0 and run["achieved"] >= 0.95 * run["rate"]


def show(name: str, run: dict) -> None:
    errors = ", ".join(f"{k} {v}" for k, v in run["errors"].items()) or "none"
    print(
        f"  {name:<8s} {run['rate']:5.0f} rps offered, {run['achieved']:6.1f} achieved: "
        f"p50 {run['p50']:8.1f} ms  p95 {run['p95']:8.1f} ms  p99 {run['p99']:8.1f} ms  "
        f"({run['ok']} ok; errors: {errors})",
        flush=True,
    )


def highest_held(
    name: str, url: str, bodies: list[bytes], steps: list[float], args: argparse.Namespace
) -> float:
    """The highest step rate held with p99 under 10 ms (0 if none); stops at the first step not held."""
    best = 0.0
    for rate in steps:
        run = asyncio.run(drive(url, bodies, rate, args.step_seconds, args.max_in_flight, args.timeout))
        show(name, run)
        if not held(run):
            break
        best = rate
    return best


def profile(store: Store, mix: list[dict[str, object]], calls: int) -> None:
    """cProfile over `calls` warm in-process answers (request parsing + models/serving/answer.py), with
    the same predictors the servers load; prints the per-call median and the top 10 cumulative entries."""
    snapshot = store.table[history_snapshot_columns()]
    state = cluster_state(
        "demo",
        load_cluster("demo"),
        {t: (p, "1") for t, p in store.predictors.items()},
        snapshot,
        {"source": "snapshot"},
        store.gpu_mem,
    )
    bodies = [b for b in mix if b["user"] != "nobody"][:calls]

    def answer(body: dict[str, object]) -> dict[str, object]:
        request = RecommendRequest(**body)
        info = job_info(request)
        return recommendation(
            info,
            "demo",
            request.user,
            SUBMIT_TS,
            state.config,
            state.champions,
            state.history,
            {"source": "snapshot"},
            state.gpu_mem_bytes,
        )

    answer(bodies[0])  # warm
    times = []
    for body in bodies:
        t = time.perf_counter()
        answer(body)
        times.append((time.perf_counter() - t) * 1000)
    profiler = cProfile.Profile()
    profiler.enable()
    for body in bodies:
        answer(body)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = sorted(stats.items(), key=lambda kv: kv[1][3], reverse=True)
    print(
        f"profile: {len(bodies)} warm in-process answers (4 targets): median {np.median(times):.1f} ms per "
        "answer; top 10 by cumulative time (ms per answer, calls per answer)"
    )
    for (path, line, func), (_cc, nc, _tt, ct, _callers) in rows[:10]:
        where = f"{Path(path).name}:{line}" if line else path
        print(f"  {ct * 1000 / len(bodies):8.1f} ms  {nc / len(bodies):7.1f}x  {func}  ({where})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200, help="requests/s of the main run (default 200)")
    parser.add_argument("--seconds", type=float, default=20, help="length of the main run (default 20)")
    parser.add_argument("--steps", default="50,100,200,400", help="rates tried for the highest held rate")
    parser.add_argument("--step-seconds", type=float, default=5, help="length of each step (default 5)")
    parser.add_argument("--max-in-flight", type=int, default=32, help="outstanding requests at most")
    parser.add_argument("--timeout", type=float, default=15, help="client timeout per request (s)")
    parser.add_argument("--target", default="mem", choices=list(TARGETS), help="the target MLflow serves")
    parser.add_argument("--jobs", type=int, default=2000, help="simulated jobs in the store")
    parser.add_argument("--rounds", type=int, default=20, help="boosting rounds per target")
    parser.add_argument("--profile-calls", type=int, default=50)
    parser.add_argument("--idle-rate", type=float, default=2, help="rate of the unloaded run (default 2)")
    args = parser.parse_args()
    steps = [float(s) for s in args.steps.split(",") if s]

    t = time.perf_counter()
    store = build_store(args.jobs, max(8, args.jobs // 100), args.rounds)
    print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"store: {args.jobs} simulated jobs of cluster demo, 4 targets x {args.rounds} rounds, history "
        f"snapshot {len(store.table)} rows ({time.perf_counter() - t:.0f} s to build)",
        flush=True,
    )
    mix = request_mix(store, 64)
    by_user = {str(u): g for u, g in store.table[history_snapshot_columns()].groupby("user", sort=False)}
    rows = [feature_row(store, body, by_user) for body in mix]
    jobfit_bodies = [json.dumps(b).encode() for b in mix]
    mlflow_bodies = [dataframe_split(r) for r in rows]

    bindir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBFIT_")}
    # `mlflow models serve` execs `uvicorn` by name: the venv's, also when the venv is not activated.
    env["PATH"] = os.pathsep.join([str(bindir), env.get("PATH", "")])
    jobfit_env = env | {"JOBFIT_MLFLOW__TRACKING_URI": store.tracking_uri}
    mlflow_env = env | {
        "MLFLOW_TRACKING_URI": store.tracking_uri,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
    }
    jobfit_cmd = (
        [str(bindir / "jobfit")] if (bindir / "jobfit").exists() else [sys.executable, "-m", "jobs.cli"]
    )
    p1, p2 = free_port(), free_port()
    model_uri = f"models:/jobfit-demo-{args.target}@champion"
    mlflow_cmd = [str(bindir / "mlflow"), "models", "serve", "-m", model_uri, "--env-manager", "local"]
    logs = {"jobfit": store.root / "jobfit-serve.log", "mlflow": store.root / "mlflow-serve.log"}
    procs = {
        "jobfit": start(
            [*jobfit_cmd, "serve", "--cluster", "demo", "--port", str(p1)], jobfit_env, logs["jobfit"]
        ),
        "mlflow": start(
            [*mlflow_cmd, "-p", str(p2), "-h", "127.0.0.1"],
            mlflow_env,
            logs["mlflow"],
        ),
    }
    try:
        why = {
            "jobfit": wait_ready(procs["jobfit"], f"http://127.0.0.1:{p1}/readyz", logs["jobfit"], 120),
            "mlflow": wait_ready(procs["mlflow"], f"http://127.0.0.1:{p2}/ping", logs["mlflow"], 120),
        }
        if why["jobfit"]:
            sys.exit(f"jobfit serve did not start: {why['jobfit']}")
        urls = {
            "jobfit": f"http://127.0.0.1:{p1}/v1/recommend",
            "mlflow": f"http://127.0.0.1:{p2}/invocations",
        }
        bodies = {"jobfit": jobfit_bodies, "mlflow": mlflow_bodies}
        names = ["jobfit"]
        if why["mlflow"]:
            print(f"mlflow models serve {model_uri} could not be served: {why['mlflow']}")
        else:
            names.insert(0, "mlflow")
            # The same numbers as in-process: MLflow's server predicts what the champion predicts.
            got = httpx.post(
                urls["mlflow"], content=mlflow_bodies[0], headers={"Content-Type": "application/json"}
            )
            served = got.json()["predictions"][0] if got.status_code == 200 else got.text[:300]
            local = float(store.predictors[args.target].predict(rows[0])[0])  # type: ignore[attr-defined]
            print(f"check: mlflow /invocations {args.target} = {served}, in-process predict = {local}")
        answers = [httpx.post(urls["jobfit"], content=b, timeout=60).json() for b in jobfit_bodies[:16]]
        statuses = Counter(a.get("status") for a in answers)
        print(f"check: jobfit /v1/recommend statuses over the first 16 bodies of the mix: {dict(statuses)}")

        print(f"\nunloaded: {args.idle_rate:g} requests/s for 5 s (service time, no queueing)")
        for name in names:
            show(name, asyncio.run(drive(urls[name], bodies[name], args.idle_rate, 5, 4, args.timeout)))
        print(
            f"\nmain run: {args.rate:.0f} requests/s offered for {args.seconds:.0f} s, open loop, at most "
            f"{args.max_in_flight} in flight (jobfit: 4 targets per request; mlflow: 1 target, {args.target})"
        )
        main_runs = {}
        for name in names:
            main_runs[name] = asyncio.run(
                drive(urls[name], bodies[name], args.rate, args.seconds, args.max_in_flight, args.timeout)
            )
            show(name, main_runs[name])
        print(
            f"\nhighest rate held (p99 < {HELD_P99_MS:.0f} ms, no errors, >= 95% achieved), "
            f"{args.step_seconds:.0f} s steps"
        )
        best = {name: highest_held(name, urls[name], bodies[name], steps, args) for name in names}
        print("\nsummary")
        for name in names:
            r = main_runs[name]
            print(
                f"  {name:<8s} at {args.rate:.0f} rps: p50 {r['p50']:.1f} / p95 {r['p95']:.1f} / "
                f"p99 {r['p99']:.1f} ms, "
                f"achieved {r['achieved']:.1f} rps, errors {r['n_errors']}; highest held "
                + (f"{best[name]:.0f} rps" if best[name] else f"none (not even {steps[0]:.0f} rps)")
            )
        for name in names:
            own, tree = rss_mb(procs[name].pid)
            print(f"  {name:<8s} RSS after the run: {own:.0f} MB (process), {tree:.0f} MB (with children)")
        jobfit_p99 = main_runs["jobfit"]["p99"]
        if "mlflow" in main_runs:
            ratio = jobfit_p99 / main_runs["mlflow"]["p99"]
            print(f"  p99 jobfit / mlflow at {args.rate:.0f} rps: {ratio:.2f} (goal: <= 0.5)")
            faster = ratio <= 0.5
        else:
            print("  p99 jobfit / mlflow: no figure (MLflow's server could not serve the model)")
            faster = False
        reached = args.rate == 200 and jobfit_p99 <= 5 and held(main_runs["jobfit"]) and faster
        print(f"  {GOAL}: {'reached' if reached else 'not reached'}")
        if args.rate != 200:
            print("  (the goal is judged at 200 rps only)")
    finally:
        for proc in procs.values():
            stop(proc, signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                stop(proc, signal.SIGKILL)
    print()
    profile(store, mix, args.profile_calls)
    shutil.rmtree(store.root, ignore_errors=True)


if __name__ == "__main__":
    main()
