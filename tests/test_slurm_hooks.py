"""The Slurm hooks (hooks/slurm/*.lua) in a real Lua 5.4 against a stub `slurm` table (tests/lua/)."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from models.hooks import ANY_SCRIPT, CacheEntry, format_cache
from models.serving.schemas import RecommendRequest
from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
LUA = shutil.which("lua5.4")
pytestmark = pytest.mark.skipif(LUA is None, reason="lua5.4 is not installed (`make setup` installs it)")
JOB_SUBMIT = ROOT / "hooks" / "slurm" / "job_submit.lua"
CLI_FILTER = ROOT / "hooks" / "slurm" / "cli_filter.lua"
SCRIPT = "#!/bin/bash\n#SBATCH --mem=64G\nsrun python train.py --batch-size 32\n"


def run_lua(
    hook: Path, scenario: str, tmp_path: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[dict[str, str], list[tuple[str, str]], float]:
    """Run a scenario against a hook (environment: this one plus `env`; in `cwd`, else this folder);
    returns (out(key, value) pairs, (level, message) logs, seconds)."""
    file = tmp_path / "scenario.lua"
    file.write_text(scenario)
    start = time.monotonic()
    done = subprocess.run(
        [LUA, str(ROOT / "tests" / "lua" / "harness.lua"), str(hook), str(file)],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    values, logs = {}, []
    for line in done.stdout.splitlines():
        if line.startswith("log\t"):
            _, level, message = line.split("\t", 2)
            logs.append((level, message))
        else:
            key, _, value = line.partition("=")
            values[key] = value
    return values, logs, elapsed


def lua_str(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


# --- job_submit.lua ---------------------------------------------------------------------------------


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    path = tmp_path / "cache.tsv"
    sha = hashlib.sha256(SCRIPT.encode()).hexdigest()
    entries = [
        CacheEntry("alice", ANY_SCRIPT, 8192, 120, 4, None),
        CacheEntry("alice", sha, 20480, 60, 8, "gpu:1g.10gb"),
        CacheEntry("alice", "nightly", 2048, 30, 1, None),
    ]
    path.write_text(format_cache(entries, {"cluster": "demo", "made_at": "2026-12-04T17:00:00Z"}))
    return path


def submit_scenario(cache: Path, job: str, setup: str = "", calls: int = 1) -> str:
    return f"""
JOBFIT_SUBMIT.cache_path = {lua_str(str(cache))}
JOBFIT_SUBMIT.recheck_s = 0
{setup}
for i = 1, {calls} do
    local job = {job}
    out("rc" .. i, slurm_job_submit(job, {{}}, 1000))
    out("mem" .. i, job.min_mem_per_node)
    out("time" .. i, job.time_limit)
end
"""


def test_sha256_matches_jobfit_script_hash(tmp_path: Path) -> None:
    texts = ["", "abc", "a" * 55, "a" * 56, "b" * 64, "c" * 1000, SCRIPT, "#!/bin/sh\necho héllo ✓\n"]
    lines = "\n".join(f"out({i}, JOBFIT_SUBMIT.sha256({lua_str(t)}))" for i, t in enumerate(texts))
    values, _, _ = run_lua(JOB_SUBMIT, lines, tmp_path)
    assert values.pop("load_rc") == "0"
    assert values == {str(i): hashlib.sha256(t.encode()).hexdigest() for i, t in enumerate(texts)}


def test_job_submit_advises_by_default_and_changes_nothing(cache: Path, tmp_path: Path) -> None:
    job = (
        f"{{user_name='alice', script={lua_str(SCRIPT)}, min_mem_per_node=65536, time_limit=1440, "
        "cpus_per_task=16}"
    )
    values, logs, _ = run_lua(JOB_SUBMIT, submit_scenario(cache, job), tmp_path)
    assert values["rc1"] == "0" and values["mem1"] == "65536" and values["time1"] == "1440"
    # The script's own entry (its sha256), not the user's: every number of that entry in the advice.
    assert logs == [
        (
            "user",
            "jobfit advice (from script): --mem=20480M (you asked 65536M) --time=60 (minutes; you asked "
            "1440) 8 CPUs in all (you asked 16) --gres=gpu:1g.10gb",
        )
    ]
    # Unknown script: the job name's entry, then the user's `*` entry; an unknown user: silence.
    named = "{user_name='alice', script='#!/bin/sh\\n', name='nightly', min_mem_per_node=4096}"
    _, logs, _ = run_lua(JOB_SUBMIT, submit_scenario(cache, named), tmp_path)
    assert logs[0][1].startswith("jobfit advice (from job name): --mem=2048M (you asked 4096M) --time=30")
    other = "{user_name='alice', name='x', time_limit=60}"
    _, logs, _ = run_lua(JOB_SUBMIT, submit_scenario(cache, other), tmp_path)
    assert logs == [("user", "jobfit advice (from your jobs): --mem=8192M")]  # 120 min > asked 60: no advice
    values, logs, _ = run_lua(
        JOB_SUBMIT, submit_scenario(cache, "{user_name='bob', time_limit=60}"), tmp_path
    )
    assert values["rc1"] == "0" and logs == []


def test_job_submit_enforces_only_where_opted_in_and_never_raises(cache: Path, tmp_path: Path) -> None:
    job = (
        f"{{user_name='alice', partition='{{part}}', script={lua_str(SCRIPT)}, min_mem_per_node=65536, "
        "time_limit=1440}"
    )
    setup = "JOBFIT_SUBMIT.enforce_partitions = {preempt = true}"
    values, logs, _ = run_lua(
        JOB_SUBMIT, submit_scenario(cache, job.replace("{part}", "preempt"), setup), tmp_path
    )
    assert (values["rc1"], values["mem1"], values["time1"]) == ("0", "20480", "60")
    assert logs[0] == (
        "user",
        "jobfit: set to what script needed: --mem 65536M -> 20480M, --time 1440 -> 60 min",
    )
    # A job listing one partition that did not opt in: advice only.
    values, _, _ = run_lua(
        JOB_SUBMIT, submit_scenario(cache, job.replace("{part}", "preempt,gpu"), setup), tmp_path
    )
    assert (values["mem1"], values["time1"]) == ("65536", "1440")
    # A user who opted in; requests below the recommendation stay as asked (never raised), unset stays unset;
    # time_min bounds how far the limit goes down.
    by_user = "JOBFIT_SUBMIT.enforce_users = {alice = true}"
    small = (
        f"{{user_name='alice', script={lua_str(SCRIPT)}, min_mem_per_node=1024, time_limit=300, time_min=90}}"
    )
    values, logs, _ = run_lua(JOB_SUBMIT, submit_scenario(cache, small, by_user), tmp_path)
    assert (values["mem1"], values["time1"]) == ("1024", "90")
    unset = f"{{user_name='alice', script={lua_str(SCRIPT)}}}"
    values, _, _ = run_lua(JOB_SUBMIT, submit_scenario(cache, unset, by_user), tmp_path)
    assert (values["mem1"], values["time1"]) == ("nil", "nil")
    # NO_VAL (what slurmctld passes for an unset time limit) is not a number to lower.
    noval = f"{{user_name='alice', script={lua_str(SCRIPT)}, time_limit=slurm.NO_VAL}}"
    values, _, _ = run_lua(JOB_SUBMIT, submit_scenario(cache, noval, by_user), tmp_path)
    assert values["time1"] == str(0xFFFFFFFE)


def test_job_submit_fails_open(cache: Path, tmp_path: Path) -> None:
    job = "{user_name='alice', min_mem_per_node=65536, time_limit=1440}"
    # Missing cache: nothing said, nothing changed.
    values, logs, _ = run_lua(JOB_SUBMIT, submit_scenario(tmp_path / "absent.tsv", job), tmp_path)
    assert (values["rc1"], values["mem1"], logs) == ("0", "65536", [])
    # Corrupt cache (not ours, or truncated numbers): no advice, a log line for the admin, success.
    bad = tmp_path / "bad.tsv"
    bad.write_bytes(b"\x00\xffgarbage\tline\n")
    values, logs, _ = run_lua(JOB_SUBMIT, submit_scenario(bad, job), tmp_path)
    assert values["rc1"] == "0" and values["mem1"] == "65536"
    assert [level for level, _ in logs] == ["info"] and "not a jobfit cache" in logs[0][1]
    half = tmp_path / "half.tsv"
    half.write_text("jobfit-hooks-cache\t1\nalice\t*\tlots\t\n")
    values, logs, _ = run_lua(JOB_SUBMIT, submit_scenario(half, job), tmp_path)
    assert values["rc1"] == "0" and values["mem1"] == "65536" and logs == []
    # An odd job description (tables where numbers belong) and a Slurm API that raises: caught by pcall.
    odd = "{user_name='alice', min_mem_per_node={}, time_limit='soon', cpus_per_task={}}"
    broken = "JOBFIT_SUBMIT.enforce_users = {alice = true}; slurm.log_user = function() error('boom') end"
    values, logs, _ = run_lua(JOB_SUBMIT, submit_scenario(cache, odd, broken), tmp_path)
    assert values["rc1"] == "0" and values["time1"] == "soon"
    assert len(logs) == 1 and logs[0][0] == "info" and "advice skipped" in logs[0][1] and "boom" in logs[0][1]
    # slurm_job_modify: the same guarantees (a modification has no user name: nothing to look up).
    values, logs, _ = run_lua(
        JOB_SUBMIT,
        f"JOBFIT_SUBMIT.cache_path = {lua_str(str(cache))}\n"
        "out('rc', slurm_job_modify({time_limit=5}, {}, {}, 0))",
        tmp_path,
    )
    assert values["rc"] == "0" and logs == []


def test_job_submit_rereads_a_changed_cache(cache: Path, tmp_path: Path) -> None:
    newer = tmp_path / "newer.tsv"
    newer.write_text(
        format_cache(
            [CacheEntry("alice", ANY_SCRIPT, 1024, 10, 1, None)], {"made_at": "2026-12-04T18:00:00Z"}
        )
    )
    job = "{user_name='alice', min_mem_per_node=65536}"
    scenario = f"""
JOBFIT_SUBMIT.cache_path = {lua_str(str(cache))}
JOBFIT_SUBMIT.recheck_s = 0
slurm_job_submit({job}, {{}}, 1000)
os.rename({lua_str(str(newer))}, {lua_str(str(cache))})
slurm_job_submit({job}, {{}}, 1000)
"""
    _, logs, _ = run_lua(JOB_SUBMIT, scenario, tmp_path)
    assert [m.split(": ", 1)[1].split(" ")[0] for _, m in logs] == ["--mem=8192M", "--mem=1024M"]


# --- cli_filter.lua ---------------------------------------------------------------------------------

ANSWER = {
    "cluster": "demo",
    "user": "alice",
    "script_hash": None,
    "history_jobs": 37,
    "history_source": {"source": "snapshot", "run_id": "r1", "taken_at": "2026-12-04", "newest_end_ts": None},
    "script_runs": 0,
    "status": "ok",
    "why": None,
    "flags": ["--mem=20G", "--cpus-per-task=4", "--time=01:00:00"],
    "targets": {"mem": {"status": "ok", "model_version": "3", "flag": "--mem=20G"}},
    "expected_saving": {"core_h": 12.0, "gib_h": 44.0, "gpu_h": None, "reserved_h": 11.0, "usd": 1.25},
}


@pytest.fixture
def server() -> Iterator[tuple[int, list[dict[str, object]], dict[str, object]]]:
    """A tiny HTTP server on loopback: answers POSTs per `behaviour` (sleep_s, body), records requests."""
    seen: list[dict[str, object]] = []
    behaviour: dict[str, object] = {"sleep_s": 0.0, "body": json.dumps(ANSWER).encode()}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            seen.append({"path": self.path, "body": json.loads(self.rfile.read(length))})
            time.sleep(float(behaviour["sleep_s"]))  # type: ignore[arg-type]
            body = behaviour["body"]
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))  # type: ignore[arg-type]
                self.end_headers()
                self.wfile.write(body)  # type: ignore[arg-type]
            except OSError:
                pass  # the client gave up (the slow case)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1], seen, behaviour
    httpd.shutdown()
    httpd.server_close()


def cli_scenario(port: int) -> str:
    return f"""
JOBFIT_CLI.url = 'http://127.0.0.1:{port}/v1/recommend'
local options = {{type='sbatch', mem='64G', time='1-00:00:00', ['cpus-per-task']='8', ntasks='2',
    partition='gpu', account='lab', gres='gpu:a100:1', ['job-name']='train'}}
out('setup', slurm_cli_setup_defaults(options, false))
out('rc', slurm_cli_pre_submit(options, 0))
out('post', slurm_cli_post_submit(0, 42, 0))
out('mem', options.mem)
"""


def test_cli_filter_prints_the_advice(server: tuple[int, list, dict], tmp_path: Path) -> None:
    port, seen, _ = server
    values, logs, _ = run_lua(CLI_FILTER, cli_scenario(port), tmp_path)
    assert (values["setup"], values["rc"], values["post"], values["mem"]) == ("0", "0", "0", "64G")
    assert logs == [
        (
            "info",
            "jobfit: from 37 finished jobs, this job needs about: #SBATCH --mem=20G --cpus-per-task=4 "
            "--time=01:00:00 (saves about $1.25 per run)",
        )
    ]
    body = seen[0]["body"]
    assert seen[0]["path"] == "/v1/recommend"
    assert isinstance(body.pop("user"), str)  # $USER, else `id -un`
    assert body == {
        "cluster": "demo",
        "partition": "gpu",
        "account": "lab",
        "ntasks": 2,
        "cpus_per_task": 8,
        "mem_per_node": "65536M",
        "time_limit": "1440",
        "gres": "gpu:a100:1",
        "job_name": "train",
    }
    # What the hook sends is what the service accepts (the round trip itself: tests/test_serve.py).
    RecommendRequest(**body, user="someone")


def test_cli_filter_fails_open(server: tuple[int, list, dict], tmp_path: Path) -> None:
    port, _, behaviour = server
    # Endpoint down: nothing listens on the port.
    values, logs, elapsed = run_lua(CLI_FILTER, cli_scenario(free_port()), tmp_path)
    assert values["rc"] == "0" and [lvl for lvl, _ in logs] == ["debug"] and elapsed < 1.5
    # Endpoint slow: the 1 s limit ends the wait; the submission goes on.
    behaviour["sleep_s"] = 3.0
    values, logs, elapsed = run_lua(CLI_FILTER, cli_scenario(port), tmp_path)
    assert values["rc"] == "0" and [lvl for lvl, _ in logs] == ["debug"] and elapsed < 1.5
    # Malformed, wrong-shaped or not-ok answers: no advice.
    behaviour["sleep_s"] = 0.0
    for body in (
        b"{not json",
        b"[1,2]",
        b'{"status":"ok","flags":"--mem=1G"}',
        b'{"status":"not_enough_history","flags":[]}',
    ):
        behaviour["body"] = body
        values, logs, _ = run_lua(CLI_FILTER, cli_scenario(port), tmp_path)
        assert values["rc"] == "0" and all(level == "debug" for level, _ in logs), (body, logs)


def test_cli_filter_option_parsers(tmp_path: Path) -> None:
    cases = {"4G": 4096, "500": 500, "500M": 500, "1T": 1048576, "2048K": 2, "lots": None}
    times = {"30": 30, "10:30": 11, "02:00:00": 120, "1-00:00:00": 1440, "2-3": 2 * 1440 + 180, "x": None}
    lines = [f"out('m{k}', JOBFIT_CLI.mem_mb({lua_str(k)}))" for k in cases]
    lines += [f"out('t{k}', JOBFIT_CLI.time_min({lua_str(k)}))" for k in times]
    values, _, _ = run_lua(CLI_FILTER, "\n".join(lines), tmp_path)
    assert {k: values[f"m{k}"] for k in cases} == {
        k: "nil" if v is None else str(v) for k, v in cases.items()
    }
    assert {k: values[f"t{k}"] for k in times} == {
        k: "nil" if v is None else str(v) for k, v in times.items()
    }


def test_cli_filter_leaves_job_steps_alone(server: tuple[int, list, dict], tmp_path: Path) -> None:
    port, seen, _ = server
    srun = f"""
JOBFIT_CLI.url = 'http://127.0.0.1:{port}/v1/recommend'
out('rc', slurm_cli_pre_submit({{type='srun', mem='64G', jobid=JOBID, argv={{'python', 'train.py'}}}}, 0))
"""
    env = {"SLURM_JOB_ID": "", "SLURM_JOBID": ""}  # as on a login node, whatever runs the tests
    # srun on a login node, no allocation: a new job, advised (the files it names asked for first).
    values, logs, _ = run_lua(CLI_FILTER, srun.replace("JOBID", "'unset'"), tmp_path, env=env)
    assert values["rc"] == "0" and [s["path"] for s in seen] == ["/v1/workload/files", "/v1/recommend"]
    # A step of a running job (inside sbatch/salloc, or srun --jobid): no request, no advice.
    seen.clear()
    step = {"SLURM_JOB_ID": "42", "SLURM_JOBID": "42"}
    values, logs, _ = run_lua(CLI_FILTER, srun.replace("JOBID", "'unset'"), tmp_path, env=step)
    assert values["rc"] == "0" and logs == [] and seen == []
    values, logs, _ = run_lua(CLI_FILTER, srun.replace("JOBID", "'42'"), tmp_path, env=env)
    assert values["rc"] == "0" and logs == [] and seen == []
