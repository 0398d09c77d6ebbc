"""cli_filter.lua sends the job script and the files its entry points name (issue 25): in a real Lua 5.4
against a real `jobfit serve` (the will-not-fit advice for a real LitGPT config) and against a recording
stub (the bounds, and failing open on files it must not or cannot send)."""

from __future__ import annotations

import http.server
import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from models.serving.schemas import RecommendRequest
from tests.servers import free_port, jobfit_serve
from tests.test_slurm_hooks import CLI_FILTER, LUA, lua_str, run_lua

pytestmark = pytest.mark.skipif(LUA is None, reason="lua5.4 is not installed (`make setup` installs it)")

# LitGPT's full fine-tune of Llama 2 7B on 4 devices (FSDP), which ran out of memory on an A10G (row r117).
CONFIG = Path("vram") / "configs" / "43c4432" / "llama-2-7b" / "full.yaml"
JOB = """#!/bin/bash
#SBATCH --job-name=llama2-full
#SBATCH --gres=gpu:a10g:1
srun litgpt finetune_full --config configs/full.yaml
"""


def _scenario(url: str, options: str, timeout_s: float = 1) -> str:
    return f"""
JOBFIT_CLI.url = {lua_str(url)}
JOBFIT_CLI.timeout_s = {timeout_s}
local options = {options}
out('rc', slurm_cli_pre_submit(options, 0))
out('gres', options.gres)
"""


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`jobfit serve --cluster demo` on a free port over an empty MLflow store (no champions: the answer is
    `no_champion`, and its code estimate is the whole advice)."""
    store = tmp_path_factory.mktemp("empty-mlflow")
    env = {"JOBFIT_MLFLOW__TRACKING_URI": f"sqlite:///{store / 'mlflow.db'}"}
    with jobfit_serve("demo", env, store, store / "stderr.txt") as (url, _):
        yield url


def test_cli_filter_sends_script_and_config_and_says_it_will_not_fit(
    live: str, real_data: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    (work / "configs").mkdir(parents=True)
    shutil.copy(real_data / CONFIG, work / "configs" / "full.yaml")
    (tmp_path / "job.sh").write_text(JOB)
    config_text = (real_data / CONFIG).read_text()
    ask = {"cluster": "demo", "user": "u1", "gres": "gpu:a10g:1", "job_name": "llama2-full", "script": JOB}
    # What the server says with the config, and without it (then it cannot know the model).
    direct = httpx.post(f"{live}/v1/recommend", json={**ask, "sources": {"configs/full.yaml": config_text}})
    code = direct.json()["code_estimate"]
    assert code["status"] == "ok" and code["fits"] is False and code["gpu_model"] == "a10g"
    assert code["peak_vram_bytes"] > code["gpu_mem_bytes"]
    blind = httpx.post(f"{live}/v1/recommend", json=ask).json()["code_estimate"]
    assert blind["status"] == "unknown_model" and "configs/full.yaml named but not read" in blind["why"]
    wanted = httpx.post(f"{live}/v1/workload/files", json={"script": JOB}).json()
    assert wanted["files"] == ["configs/full.yaml"] and wanted["max_files"] == 8

    # sbatch job.sh from tmp_path with --chdir work: the script beside sbatch, the config under --chdir.
    options = (
        f"{{type='sbatch', argv={{'job.sh'}}, chdir={lua_str(str(work))}, gres='gpu:a10g:1', "
        "['job-name']='llama2-full'}"
    )
    values, logs, elapsed = run_lua(
        CLI_FILTER, _scenario(f"{live}/v1/recommend", options), tmp_path, env={"USER": "u1"}, cwd=tmp_path
    )
    assert (values["rc"], values["gres"]) == ("0", "gpu:a10g:1")
    infos = [message for level, message in logs if level == "info"]
    assert len(infos) == 1, logs
    gib = code["peak_vram_bytes"] / 2**30
    card = code["gpu_mem_bytes"] / 2**30
    assert infos[0].startswith(
        f"jobfit: this job will not fit one a10g: its code and config need about {gib:.1f} GiB per GPU, "
        f"the card has {card:.1f} GiB; fits with: "
    ), infos[0]
    first = code["changes_that_fit"][0]
    assert f"{first['what']} ({first['peak_vram_bytes'] / 2**30:.1f} GiB)" in infos[0]
    assert elapsed < 5

    # Without --chdir the files are read relative to the working directory.
    options = "{type='sbatch', argv={'../job.sh'}, gres='gpu:a10g:1', ['job-name']='llama2-full'}"
    _, logs, _ = run_lua(
        CLI_FILTER, _scenario(f"{live}/v1/recommend", options), tmp_path, env={"USER": "u1"}, cwd=work
    )
    assert [m for lvl, m in logs if lvl == "info"] == infos, logs


# --- against a recording stub: bounds and failing open ----------------------------------------------


@pytest.fixture
def stub() -> Iterator[tuple[str, list[tuple[str, dict[str, Any]]], dict[str, Any]]]:
    """Answers /v1/workload/files with `files` (or `files_status`) and /v1/recommend with a no-history
    answer; records (path, body) of every POST."""
    seen: list[tuple[str, dict[str, Any]]] = []
    behaviour: dict[str, Any] = {"files": [], "files_status": 200, "files_sleep_s": 0.0}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            seen.append((self.path, body))
            status = 200
            if self.path.endswith("/v1/workload/files"):
                time.sleep(behaviour["files_sleep_s"])
                status = behaviour["files_status"]
                answer: dict[str, Any] = {"files": behaviour["files"], "max_files": 8}
            else:
                answer = {"status": "not_enough_history", "flags": ["--gres=gpu:A100-SXM4-40GB:1"]}
            payload = json.dumps(answer).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass  # the hook gave up (the slow case)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1/recommend", seen, behaviour
    httpd.shutdown()
    httpd.server_close()


def test_cli_filter_sends_only_bounded_readable_named_files(stub: Any, tmp_path: Path) -> None:
    url, seen, behaviour = stub
    kib = 1024
    (tmp_path / "train.py").write_text("import torch\nparser.add_argument('--lr', default=1e-4)\n")
    (tmp_path / "cfg.yaml").write_text("model_name: mistral-7b\nmicro_batch_size: 4\n")
    (tmp_path / "big.yaml").write_text("k: v\n" * (256 * kib // 5 + 1))  # over 256 KiB: left out
    (tmp_path / "dir.yaml").mkdir()  # not a readable file
    (tmp_path / "bad.json").write_bytes(b'{"a": "\xff\xfe"}')  # not UTF-8
    for name in ("a.json", "b.json", "c.json"):  # 3 x 200 KiB: the third would pass 512 KiB in all
        (tmp_path / name).write_text(json.dumps({"pad": "x" * (200 * kib - 20)}))
    (tmp_path / "secret.yaml").write_text("password: hunter2\n")
    script = (
        "#!/bin/bash\nsrun torchrun --nproc_per_node 2 train.py --config cfg.yaml --ds_config big.yaml "
        "--cfg dir.yaml --deepspeed bad.json --fsdp_config missing.yaml a.json b.json c.json\n"
    )
    (tmp_path / "job.sh").write_text(script)
    # The server asks for every named file, plus two the script does not name (never read or sent).
    behaviour["files"] = [
        "train.py",
        "cfg.yaml",
        "big.yaml",
        "dir.yaml",
        "bad.json",
        "missing.yaml",
        "a.json",
        "b.json",
        "c.json",
        "secret.yaml",
        "/etc/passwd",
    ]
    job, here = lua_str(str(tmp_path / "job.sh")), lua_str(str(tmp_path))
    options = f"{{type='sbatch', argv={{{job}}}, chdir={here}}}"
    values, logs, _ = run_lua(CLI_FILTER, _scenario(url, options), tmp_path)
    assert values["rc"] == "0"
    assert [path for path, _ in seen] == ["/v1/workload/files", "/v1/recommend"]
    assert seen[0][1] == {"script": script}
    body = seen[1][1]
    assert body["script"] == script
    assert sorted(body["sources"]) == ["a.json", "b.json", "cfg.yaml", "train.py"]
    assert body["sources"]["cfg.yaml"] == (tmp_path / "cfg.yaml").read_text()
    RecommendRequest(**body)  # what the hook sends is what the service accepts
    not_sent = sorted(m for lvl, m in logs if lvl == "debug")
    assert not_sent == [
        "jobfit: bad.json not sent: not UTF-8 text",
        "jobfit: big.yaml not sent: over 262144 bytes",
        "jobfit: c.json not sent: over the 524288 bytes in all",
        "jobfit: dir.yaml not sent: unreadable",
        "jobfit: missing.yaml not sent: unreadable",
    ]
    # A no-history answer with a code-based flag is still advice.
    assert (
        "info",
        "jobfit: too little history; from its code and config, this job needs about: "
        "#SBATCH --gres=gpu:A100-SXM4-40GB:1",
    ) in logs


def test_cli_filter_wrap_and_srun_commands_are_the_script(stub: Any, tmp_path: Path) -> None:
    url, seen, behaviour = stub
    (tmp_path / "t.yaml").write_text("micro_batch_size: 2\n")
    behaviour["files"] = ["t.yaml"]
    wrap = "python train.py --config t.yaml"
    options = f"{{type='sbatch', wrap={lua_str(wrap)}, chdir={lua_str(str(tmp_path))}}}"
    run_lua(CLI_FILTER, _scenario(url, options), tmp_path)
    # The text sbatch itself stores for --wrap (Slurm's sbatch.c), so its sha256 is the job's script_hash.
    wrapped = f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{wrap}\n"
    assert seen[-1][1]["script"] == wrapped and seen[-1][1]["sources"] == {"t.yaml": "micro_batch_size: 2\n"}
    options = (
        f"{{type='srun', argv={{'python', 'train.py', '--config', 't.yaml', '--note', 'a b'}}, "
        f"chdir={lua_str(str(tmp_path))}}}"
    )
    run_lua(CLI_FILTER, _scenario(url, options), tmp_path)
    assert seen[-1][1]["script"] == "#!/bin/sh\npython train.py --config t.yaml --note 'a b'\n"
    # No launcher named: the script goes alone, with no question about files.
    seen.clear()
    options = f"{{type='sbatch', wrap='hostname', chdir={lua_str(str(tmp_path))}}}"
    run_lua(CLI_FILTER, _scenario(url, options), tmp_path)
    assert [path for path, _ in seen] == ["/v1/recommend"] and "sources" not in seen[0][1]


def test_cli_filter_fails_open_on_the_files_question(stub: Any, tmp_path: Path) -> None:
    url, seen, behaviour = stub
    (tmp_path / "t.yaml").write_text("micro_batch_size: 2\n")
    options = f"{{type='sbatch', wrap='python train.py --config t.yaml', chdir={lua_str(str(tmp_path))}}}"
    # The files endpoint errs (an older server: 404): the script is still sent, without files.
    behaviour["files_status"] = 404
    values, _, _ = run_lua(CLI_FILTER, _scenario(url, options), tmp_path)
    assert values["rc"] == "0" and seen[-1][0] == "/v1/recommend" and "sources" not in seen[-1][1]
    # Slow: the 1 s budget is spent on the question; no advice, and the submission waits about 1 s.
    behaviour["files_status"], behaviour["files_sleep_s"] = 200, 3.0
    seen.clear()
    values, logs, elapsed = run_lua(CLI_FILTER, _scenario(url, options), tmp_path)
    assert values["rc"] == "0" and [p for p, _ in seen] == ["/v1/workload/files"] and elapsed < 1.8
    assert [lvl for lvl, _ in logs] == ["debug"]
    # Nothing listening: no advice, no delay.
    dead = f"http://127.0.0.1:{free_port()}/v1/recommend"
    values, logs, elapsed = run_lua(CLI_FILTER, _scenario(dead, options), tmp_path)
    assert values["rc"] == "0" and [lvl for lvl, _ in logs] == ["debug"] and elapsed < 1.5
    # A script file that cannot be read (missing, too large, a folder): advice from the options alone.
    behaviour["files_sleep_s"] = 0.0
    (tmp_path / "huge.sh").write_text("#" * (512 * 1024 + 1))
    for name in ("missing.sh", "huge.sh", "."):
        seen.clear()
        options = f"{{type='sbatch', argv={{{lua_str(str(tmp_path / name))}}}, gres='gpu:1'}}"
        values, _, _ = run_lua(CLI_FILTER, _scenario(url, options), tmp_path)
        assert values["rc"] == "0" and [p for p, _ in seen] == ["/v1/recommend"]
        assert "script" not in seen[0][1] and seen[0][1]["gres"] == "gpu:1"
