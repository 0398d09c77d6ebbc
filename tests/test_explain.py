"""`jobfit explain LOG`: one log diagnosed at the prompt with no warehouse and no Spark, on the real logs."""

from __future__ import annotations

import gzip
import io
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.cli import main
from pipelines.gold.failures.explain import _batch_size, explain_log
from pipelines.gold.failures.fix_table import script_knobs
from pipelines.gold.failures.scoring import expected_cause
from pipelines.silver.scripts import parse_script
from tests.failures_helpers import real_error_logs, real_traceback_logs

REPO = Path(__file__).resolve().parents[1]
JSON_KEYS = {
    "cause",
    "title",
    "user_fixable",
    "confidence",
    "detail",
    "evidence",
    "suggested_fix",
    "exception",
    "code",
}


def _explain(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["explain", *argv])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_every_real_traceback_log_through_the_command(
    real_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, label, text in real_traceback_logs(real_data):
        log = tmp_path / name
        log.write_text(text, encoding="utf-8")
        status, out, err = _explain(capsys, str(log), "--json")
        assert status == 0 and err == "", name
        got = json.loads(out)
        assert set(got) == JSON_KEYS
        assert (got["exception"] or {}).get("type", "") == label["exception_type"], name
        if label["user_file"]:
            code = got["code"]
            assert (code["file"], str(code["line"]), code["function"], code["text"]) == (
                label["user_file"],
                label["user_line"],
                label["user_function"],
                label["user_code"],
            ), name
        else:
            assert got["code"] is None, name


def test_real_error_logs_keep_their_causes() -> None:
    logs = real_error_logs(REPO / "tests" / "data" / "real")
    wrong = [(n, explain_log(t).cause) for n, _, t in logs if explain_log(t).cause != expected_cause(n)]
    assert not wrong


def test_the_fix_names_the_users_line_and_the_script_line(real_data: Path, tmp_path: Path) -> None:
    logs = {name[:2]: text for name, _, text in real_traceback_logs(real_data)}
    # 4 x A100-40GB torchrun job, OOM in rank 2 under trainer.train()
    script = "#!/bin/bash\n#SBATCH --gres=gpu:4\n#SBATCH --mem=64G\n\ntorchrun -m src.train \\\n"
    script += "  --per_device_train_batch_size 8 \\\n  --gradient_checkpointing false\n"
    d = explain_log(logs["04"], script)
    assert (d.cause, d.user_fixable, d.confidence) == ("gpu_oom", True, 0.95)
    assert d.suggested_fix == (
        "train_lora_qwen_gridsybil_pseudo_ident.py:329 `trainer.train()`: CUDA ran out of memory on a "
        "39.4 GiB GPU (tried to allocate 18.84 GiB more): reduce the per-GPU batch size from 8 or enable "
        "activation checkpointing / mixed precision, or request a GPU with more memory (job script line 6: "
        "`--per_device_train_batch_size 8`; line 7: `--gradient_checkpointing`)"
    )
    assert "torchrun: rank 2 failed first (exit code 1)" in d.evidence
    # host OOM: the DataLoader worker was killed by the cgroup; the fix names --mem and num_workers lines
    host = explain_log(logs["18"], "#SBATCH --mem=32G\npython main.py --num_workers 16\n")
    assert host.cause == "host_oom" and host.suggested_fix.startswith("clustering.py:116 `correct += 1`: ")
    assert host.suggested_fix.endswith("(job script line 1: `#SBATCH --mem=32G`; line 2: `--num_workers 16`)")
    assert host.evidence.startswith("log (slurm_oom_kill): slurmstepd: error: Detected 1 oom_kill event")
    # device-side assert: the line shown is only where the error surfaced, and the fix says so
    cuda = explain_log(logs["34"])
    assert (cuda.cause, cuda.detail) == ("software_error", "device_assert")
    assert cuda.suggested_fix.startswith(
        "main.py:214 `total_loss += loss.item() * batch_size`: a CUDA kernel"
    )


def test_a_hardware_fault_is_not_pinned_on_the_users_line() -> None:
    text = (
        "Nov 03 02:14:05 g012 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.\n"
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 9, in <module>\n'
        "    loss.backward()\n"
        "RuntimeError: NCCL error: unhandled cuda error\n"
        "Nov 03 02:14:06 g012 [rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600001 ms\n"
    )
    d = explain_log(text)
    assert (d.cause, d.user_fixable) == ("gpu_hardware", False)
    assert d.code == {
        "file": "/home/u/train.py",
        "line": 9,
        "function": "<module>",
        "text": "loss.backward()",
    }
    assert d.suggested_fix.startswith("Xid 79 (GPU has fallen off the bus)")
    # the Xid decides (the log line quoted first); the NCCL watchdog a second later is quoted with its time
    assert d.evidence.startswith("log (xid_system): Nov 03 02:14:05 g012 kernel: NVRM: Xid")
    assert "; at the moment: Nov 03 02:14:06 g012 [rank1]:[E ProcessGroupNCCL.cpp:563]" in d.evidence


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "no such file"),
        ("dir", "is a directory"),
        (b"\x7fELF\x02\x01\x01" + bytes(range(32)) * 200, "is not a text log"),
        (random.Random(0).randbytes(4000), "is not a text log"),
        ("log line\n".encode("utf-16"), "is not a text log"),
    ],
    ids=["missing", "directory", "binary", "random", "utf16"],
)
def test_bad_input_is_one_line_and_exit_2(
    content: bytes | str | None, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "slurm-1.out"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    status, out, err = _explain(capsys, str(path))
    assert status == 2 and out == ""
    assert err.startswith("jobfit: error: explain: ") and reason in err and err.count("\n") == 1


def test_odd_but_readable_logs_get_a_diagnosis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    latin1 = tmp_path / "latin1.err"
    latin1.write_bytes(
        "Schritt 3: Verlust 0,41 \xb5s\n".encode("latin-1")
        + b'Traceback (most recent call last):\n  File "/home/j\xfcrgen/train.py", line 3, in <module>\n'
        + b"    import deepspeed\nModuleNotFoundError: No module named 'deepspeed'\n"
    )
    status, out, _ = _explain(capsys, str(latin1), "--json")
    got = json.loads(out)
    assert status == 0 and (got["cause"], got["detail"]) == ("software_error", "import_error")
    assert got["code"]["file"] == "/home/j\ufffdrgen/train.py"
    packed = tmp_path / "slurm-7.out.gz"
    packed.write_bytes(gzip.compress(latin1.read_bytes()))
    status, out, _ = _explain(capsys, str(packed), "--json")
    assert status == 0 and json.loads(out)["detail"] == "import_error"
    broken = tmp_path / "slurm-8.out.gz"
    broken.write_bytes(gzip.compress(latin1.read_bytes())[:40])
    status, out, err = _explain(capsys, str(broken))
    assert status == 2 and "is not a readable gzip file" in err and err.count("\n") == 1
    empty = tmp_path / "empty.out"
    empty.write_bytes(b"")
    status, out, _ = _explain(capsys, str(empty), "--json")
    assert status == 0 and (json.loads(out)["cause"], json.loads(out)["code"]) == ("unknown", None)


def test_stdin_and_a_long_log_read_from_the_tail(
    real_data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = {name[:2]: text for name, _, text in real_traceback_logs(real_data)}
    noise = "".join(f"step {i} loss 0.{i % 97:02d} lr 3e-4 tokens/s 81234\n" for i in range(120_000))
    data = (noise + logs["39"]).encode("utf-8")  # ~5 MB: only the last --tail-kb are read
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    status, out, _ = _explain(capsys, "-", "--json")
    got = json.loads(out)
    assert status == 0 and got["exception"]["type"] == "wandb.errors.errors.UsageError"
    assert (got["code"]["file"], got["code"]["line"]) == ("/mnt/fastdata/acq22mc/exp/tdmolflow/train.py", 623)


def test_explain_imports_no_spark(real_data: Path) -> None:
    log = real_data / "tracebacks" / "29_other__JuliusHuizing_master-thesis-ds_errors.md.txt"
    code = (
        "import sys\nfrom jobs.cli import main\n"
        f"status = main(['explain', {str(log)!r}, '--json'])\n"
        "assert status == 0\n"
        "assert not [m for m in sys.modules if m.startswith(('pyspark', 'pandas'))], 'imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)["code"]["function"] == "clean_mesh"


@pytest.mark.parametrize(
    "text",
    [
        'Traceback (most recent call last):\n  File "x.py", line 1, in f\n    g()\n' + "a." * 30_000 + "!\n",
        "1" * 60_000 + "%|\n",
        "Assertion block: " + "a.cu:1: " * 8_000,
        "".join(chr(32 + (i * 7919) % 95) for i in range(65_536)),
    ],
    ids=["dotted", "digits", "kernel_asserts", "noise"],
)
def test_a_hostile_tail_is_read_in_linear_time(text: str) -> None:
    # each of these took 8-25 s before the reader's regexes were bounded (a lazy \S+? searched from
    # every position); a real log's 64 KiB tail reads in tens of milliseconds
    started = time.perf_counter()
    explain_log(text)
    assert time.perf_counter() - started < 3.0


@pytest.mark.parametrize(
    "script",
    [
        "torchrun train.py --per_device_train_batch_size 8\n",
        "python train.py --bs=16 --jobs 3\n",
        "accelerate launch run.py \\\n  --train_batch_size ${BS}\n",
        "python eval.py --micro-batch-size 4 --batch_size 64\n",
        "python prep.py --workers 8\n",
    ],
)
def test_the_prompt_reads_the_batch_size_the_gold_build_quotes(script: str) -> None:
    # gold quotes silver.scripts.batch_size (pipelines/silver/scripts.py); explain must quote the same number
    found = _batch_size(script_knobs(script, "gpu_oom"))
    assert (int(found) if found else None) == parse_script(script).batch_size


# torchrun's summary when a worker died: the launcher's traceback and its Root Cause block, no worker error.
TORCHRUN_SUMMARY = """Traceback (most recent call last):
  File "/opt/conda/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/run.py", line 806, in main
    run(args)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-03_02:14:05
  host      : g012
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 88)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""
KEY_ERROR = (
    "Traceback (most recent call last):\n"
    '  File "/home/u/train.py", line 9, in <module>\n'
    "    lr = cfg['lr']\n"
    "KeyError: 'lr'\n"
)


@pytest.mark.parametrize(
    ("text", "cause", "detail"),
    [
        # issue 15: a worker-failed summary names no cause; it is not the network's fault
        (TORCHRUN_SUMMARY, "unknown", "distributed_worker_failed"),
        (
            "E0323 21:57:08.583000 23 torch/distributed/elastic/multiprocessing/api.py:869] failed "
            "(exitcode: 1) local_rank: 0 (pid: 88) of binary: /opt/venv/bin/python3",
            "unknown",
            "distributed_worker_failed",
        ),
        # ... unless a rank's own error is in the log
        (
            "".join(f"[rank1]: {line}\n" for line in KEY_ERROR.splitlines()) + TORCHRUN_SUMMARY,
            *("software_error", "python_exception"),
        ),
        # the worker was SIGKILLed: recognised, still no cause the line can name
        (
            TORCHRUN_SUMMARY.replace("exitcode  : 1", "exitcode  : -9").replace(
                "traceback : To enable", "traceback : Signal 9 (SIGKILL) received by PID 88; To enable"
            ),
            "unknown",
            "sigkill",
        ),
        # a health check counting no ECC errors is not a hardware fault; a count above zero is
        (
            "GPU health: 0 uncorrectable ECC errors, 0 correctable\n" + KEY_ERROR,
            "software_error",
            "python_exception",
        ),
        (
            "Volatile Uncorrectable ECC errors: 0\nDouble Bit ECC Errors: 0\n" + KEY_ERROR,
            *("software_error", "python_exception"),
        ),
        ("no uncorrectable ECC errors found\nepoch 3 loss 0.2", "unknown", "no_evidence"),
        ("dcgmi health: 3 uncorrectable ECC errors on GPU 2", "gpu_hardware", "ecc"),
        ("GPU 2: 10 uncorrectable ECC errors", "gpu_hardware", "ecc"),
        # a stray shell line does not outrank the traceback's own exception
        (
            "ls: cannot access '/scratch/u/old': No such file or directory\n"
            "mkdir: cannot create directory '/shared/x': Permission denied\n" + KEY_ERROR,
            "software_error",
            "python_exception",
        ),
        # ... and alone, or as Python's own exception, they still count
        (
            "/var/spool/slurmd/job1/slurm_script: line 12: ./run.sh: Permission denied",
            *("software_error", "permission_denied"),
        ),
        (
            "python: can't open file '/x/train.py': [Errno 2] No such file or directory",
            *("software_error", "file_not_found"),
        ),
        (
            KEY_ERROR.replace("KeyError: 'lr'", "PermissionError: [Errno 13] Permission denied: '/x'"),
            *("software_error", "permission_denied"),
        ),
        # forms that were not recognised
        (KEY_ERROR.replace("KeyError: 'lr'", "MemoryError"), "host_oom", "memory_error"),
        (
            KEY_ERROR.replace(
                "KeyError: 'lr'",
                "numpy.core._exceptions._ArrayMemoryError: Unable to allocate "
                "7.28 TiB for an array with shape (1000000, 1000000) and data type float64",
            ),
            "host_oom",
            "memory_error",
        ),
        (
            "[rank3]: RuntimeError: NCCL communicator was aborted on rank 3.",
            "nccl_error",
            "communicator_aborted",
        ),
        (
            "torch.distributed.DistNetworkError: Connection reset by peer\n" + TORCHRUN_SUMMARY,
            "nccl_error",
            "dist_network",
        ),
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
            "address. port: 29500, useIpv6: False, code: -98, name: EADDRINUSE, "
            "message: address already in use",
            "software_error",
            "port_in_use",
        ),
        (
            "mpirun noticed that process rank 3 with PID 4242 on node c101 exited on signal 9 (Killed).",
            "unknown",
            "sigkill",
        ),
        (
            "/var/spool/slurmd/job5/slurm_script: line 20: 777 Bus error               "
            "(core dumped) python t.py",
            "software_error",
            "bus_error",
        ),
        ("epoch 3 loss 0.1\nKilled\n", "unknown", "sigkill"),
        (
            "/var/spool/slurmd/job5/slurm_script: line 20: 777 Killed                  python t.py",
            *("unknown", "sigkill"),
        ),
        # not a kill: the word inside a sentence; not Python's MemoryError: torch's and Java's
        ("the run was not killed, it finished\nKilled processes: none", "unknown", "no_evidence"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "gpu_oom", "cuda_oom"),
        (
            "Exception in thread main java.lang.OutOfMemoryError: Java heap space",
            "software_error",
            "jvm_heap",
        ),
    ],
)
def test_known_misreadings(text: str, cause: str, detail: str) -> None:
    d = explain_log(text)
    assert (d.cause, d.detail) == (cause, detail), d.evidence
    assert "(unknown)" not in d.suggested_fix.split(":")[0], d.suggested_fix


def test_a_worker_failed_summary_stays_off_the_network_and_points_at_the_rank() -> None:
    d = explain_log(TORCHRUN_SUMMARY)
    assert (d.cause, d.user_fixable, d.confidence) == ("unknown", False, 0.3)
    assert d.suggested_fix.startswith("the launcher (torchrun) reported a failed worker without its error")
    assert d.exception is not None and d.exception["type"].endswith("ChildFailedError")


def test_the_fix_quotes_the_exception_that_ended_the_run() -> None:
    # the first exception-like line printed is torchrun's; the rank's KeyError ended the run
    text = "".join(f"[rank1]: {line}\n" for line in KEY_ERROR.splitlines()) + TORCHRUN_SUMMARY
    d = explain_log(text)
    assert d.suggested_fix.startswith("train.py:9 `lr = cfg['lr']`: KeyError: 'lr': fix the error")
    stray = explain_log("mkdir: cannot create directory '/shared/x': Permission denied\n" + KEY_ERROR)
    assert "KeyError: 'lr': fix the error" in stray.suggested_fix


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (KEY_ERROR.replace("KeyError: 'lr'", "MemoryError"), "MemoryError: the process could not get more"),
        ("Killed", "Killed: a process was killed by SIGKILL from outside"),
        ("x\nBus error\n", "bus error (SIGBUS)"),
        ("NCCL communicator was aborted on rank 0", "the NCCL communicator was aborted after an earlier"),
        ("name: EADDRINUSE, message: address already in use", "set MASTER_PORT"),
        ("torch.distributed.DistNetworkError: timed out", "rendezvous store"),
    ],
)
def test_new_forms_have_their_own_fix(text: str, words: str) -> None:
    assert words in explain_log(text).suggested_fix


def test_a_frame_without_source_text_is_named_without_empty_quotes() -> None:
    # A traceback from a node where the file is not readable prints the frame line and no source line.
    log = (
        "Traceback (most recent call last):\n"
        '  File "/home/u1/train.py", line 3, in <module>\n'
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    fix = explain_log(log).suggested_fix
    assert fix.startswith("train.py:3: ") and "``" not in fix, fix
