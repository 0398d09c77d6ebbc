"""The traceback reader (pure Python, no Spark): every real labelled traceback log, then the forms the real
set lacks (written here after the documented formats of CPython, torch, Keras and torchrun)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.gold.failures.tracebacks import frame_owner, read_tracebacks
from tests.failures_helpers import real_traceback_logs


def _got(text: str) -> tuple[str, str, str, str, str]:
    r = read_tracebacks(text)
    c = r.code
    return (
        r.exc_type or "",
        c.file if c else "",
        str(c.line) if c else "",
        c.function if c else "",
        c.text if c else "",
    )


def test_every_real_traceback_gives_the_labelled_exception_and_user_frame(real_data: Path) -> None:
    logs = real_traceback_logs(real_data)
    assert len(logs) == 20, "the real tracebacks folder changed"
    misses = []
    for name, label, text in logs:
        want = tuple(
            label[k] for k in ("exception_type", "user_file", "user_line", "user_function", "user_code")
        )
        got = _got(text)
        if got != want:
            misses.append((name, got, want))
    framed = [n for n, label, _ in logs if label["user_file"]]
    print(
        f"\nreal tracebacks: {len(logs) - len(misses)}/{len(logs)} exception type and user frame "
        f"(file, line, function, text) as labelled ({len(framed)} with a user frame, "
        f"{len(logs) - len(framed)} without); misses: {misses}"
    )
    assert not misses


def test_logs_labelled_without_a_user_frame_give_none(real_data: Path) -> None:
    for name, label, text in real_traceback_logs(real_data):
        if not label["user_file"]:
            reading = read_tracebacks(text)
            assert reading.code is None and reading.code_json() is None, name


def test_torchrun_summary_names_the_root_cause_rank(real_data: Path) -> None:
    logs = {name[:2]: text for name, _, text in real_traceback_logs(real_data)}
    reading = read_tracebacks(logs["04"])
    assert reading.launcher is not None and (reading.launcher.rank, reading.launcher.exitcode) == (2, 1)
    assert not reading.launcher.has_traceback and reading.stream == "rank2"
    # the interleaved copy of a chained traceback: the class is rebuilt from the pieces Python wrote
    chained = read_tracebacks(logs["21"])
    assert chained.garbled and chained.exc_type == "requests.exceptions.ConnectionError"
    assert chained.message.startswith("HTTPSConnectionPool(host='api.swanlab.cn'")


NONFATAL_FIRST = """\
--- Logging error ---
Traceback (most recent call last):
  File "/usr/lib/python3.10/logging/__init__.py", line 1100, in emit
    msg = self.format(record)
TypeError: not all arguments converted during string formatting
Call stack:
  File "/home/u/proj/train.py", line 12, in <module>
    log.info("step", step)
Message: 'step'
Arguments: (3,)
Traceback (most recent call last):
  File "/home/u/proj/train.py", line 20, in <module>
    run()
  File "/home/u/proj/train.py", line 17, in run
    open(cfg)
FileNotFoundError: [Errno 2] No such file or directory: 'cfg.yaml'
Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f2c>
Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1478, in __del__
    self._shutdown_workers()
AttributeError: '_MultiProcessingDataLoaderIter' object has no attribute '_workers_status'
"""

DIRECT_CAUSE = """\
Traceback (most recent call last):
  File "/home/u/proj/data.py", line 8, in load
    return json.load(f)
  File "/usr/lib/python3.11/json/__init__.py", line 293, in load
    return loads(fp.read(),
json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/home/u/proj/train.py", line 50, in <module>
    cfg = load(path)
  File "/home/u/proj/data.py", line 10, in load
    raise ValueError(f"bad config {path}") from e
ValueError: bad config run.json
"""

KERAS = """\
Traceback (most recent call last):
  File "/home/u/proj/fit.py", line 30, in <module>
    model.fit(x, y, epochs=3)
  File "/opt/conda/lib/python3.10/site-packages/keras/utils/traceback_utils.py", line 70, in error_handler
    raise e.with_traceback(filtered_tb) from None
  File "/tmp/__autograph_generated_filezf2p7c6k.py", line 15, in tf__train_function
    retval_ = ag__.converted_call(ag__.ld(step_function), (ag__.ld(self), ag__.ld(iterator)), None, fscope)
ValueError: in user code:

    File "/opt/conda/lib/python3.10/site-packages/keras/engine/training.py", line 1284, in train_function  *
        return step_function(self, iterator)
    File "/home/u/proj/model.py", line 22, in call  *
        x = self.dense(inputs)
    File "/opt/py/lib/python3.10/site-packages/keras/utils/traceback_utils.py", line 70, in error_handler  **
        raise e.with_traceback(filtered_tb) from None

    ValueError: Exception encountered when calling layer "dense" (type Dense).
"""

CPP_TERMINATE = """\
[rank3]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 3] Process group watchdog thread terminated with exception
terminate called after throwing an instance of 'c10::DistBackendError'
  what():  [PG 0 Rank 3] Process group watchdog thread terminated with exception: [Rank 3] Watchdog caught \
collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, Timeout(ms)=600000) ran for \
600010 milliseconds
Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618 \
(most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f5e in /opt/torch/lib/libc10.so)
"""

DEVICE_ASSERT = """\
/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], \
thread: [3,0,0] Assertion `t >= 0 && t < n_classes` failed.
Traceback (most recent call last):
  File "train.py", line 88, in <module>
    loss.backward()
RuntimeError: CUDA error: device-side assert triggered
"""

TORCHRUN_RECORDED = """\
Traceback (most recent call last):
  File "/opt/conda/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/run.py", line 806, in main
    run(args)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-05-01_10:00:00
  host      : gpu01
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 1234)
  error_file: /tmp/torchelastic_x/attempt_0/1/error.json
  traceback : Traceback (most recent call last):
    File "/opt/c/lib/python3.10/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", \
line 346, in wrapper
      return f(*args, **kwargs)
    File "/home/u/proj/train.py", line 77, in main
      out = model(x).view(4, -1)
  RuntimeError: shape '[4, -1]' is invalid for input of size 10

============================================================
"""

WRAPPED_AND_LABELLED = """\
0: \x1b[31mTraceback (most recent call last):\x1b[0m
1: Traceback (most recent call last):
0:   File "/scratch/group/a/very/long/project/path/that/wraps/at/the/terminal/width/experiments/src/train
_model.py", line 118, in train_epoch
1:   File "/home/u/other.py", line 5, in <module>
0:     outputs = model(**batch)
1:     x = 1 / 0
0: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
1: ZeroDivisionError: division by zero
"""

TRUNCATED = """\
epoch 3 step 1200 loss 0.41
Traceback (most recent call last):
  File "/home/u/proj/train.py", line 200, in <module>
    main()
  File "/home/u/proj/train.py", line 180, in main
    trainer.fit(model)
  File "/home/u/.local/lib/python3.11/site-packages/lightning/pytorch/trainer/trainer.py", line 544, in fit
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (NONFATAL_FIRST, ("FileNotFoundError", "/home/u/proj/train.py", "17", "run", "open(cfg)")),
        (
            DIRECT_CAUSE,
            (
                "ValueError",
                "/home/u/proj/data.py",
                "10",
                "load",
                'raise ValueError(f"bad config {path}") from e',
            ),
        ),
        (KERAS, ("ValueError", "/home/u/proj/model.py", "22", "call", "x = self.dense(inputs)")),
        (CPP_TERMINATE, ("c10::DistBackendError", "", "", "", "")),
        (DEVICE_ASSERT, ("RuntimeError", "train.py", "88", "<module>", "loss.backward()")),
        (
            TORCHRUN_RECORDED,
            ("RuntimeError", "/home/u/proj/train.py", "77", "main", "out = model(x).view(4, -1)"),
        ),
        (
            WRAPPED_AND_LABELLED,
            (
                "torch.OutOfMemoryError",
                "/scratch/group/a/very/long/project/path/that/wraps/at/the/terminal/width/experiments/src/train_model.py",
                "118",
                "train_epoch",
                "outputs = model(**batch)",
            ),
        ),
        (TRUNCATED, ("", "/home/u/proj/train.py", "180", "main", "trainer.fit(model)")),
    ],
    ids=[
        "nonfatal",
        "direct_cause",
        "keras",
        "cpp_terminate",
        "device_assert",
        "torchrun_record",
        "srun_label",
        "cut",
    ],
)
def test_forms_the_real_set_lacks(text: str, expected: tuple[str, ...]) -> None:
    assert _got(text) == expected


def test_context_around_the_traceback() -> None:
    cpp = read_tracebacks(CPP_TERMINATE)
    assert cpp.cpp_exception is not None and cpp.cpp_exception[1].startswith(
        "[PG 0 Rank 3] Process group watchdog"
    )
    assert cpp.message == cpp.cpp_exception[1]
    kernel = read_tracebacks(DEVICE_ASSERT).device_assert
    assert kernel is not None and (kernel.file, kernel.line, kernel.condition) == (
        "/pytorch/aten/src/ATen/native/cuda/Loss.cu",
        250,
        "t >= 0 && t < n_classes",
    )
    recorded = read_tracebacks(TORCHRUN_RECORDED)
    assert recorded.launcher is not None and (recorded.launcher.rank, recorded.launcher.has_traceback) == (
        1,
        True,
    )
    assert read_tracebacks(WRAPPED_AND_LABELLED).stream == "task0"
    nothing = read_tracebacks("epoch 1 loss 0.3\nepoch 2 loss 0.2\n")
    assert (nothing.exc_type, nothing.code, nothing.exception_json()) == (None, None, None)
    assert read_tracebacks(None).tracebacks == 0


@pytest.mark.parametrize(
    ("path", "owner"),
    [
        ("train.py", "user"),
        ("./src/model.py", "user"),
        ("E:\\VC\\hubert\\train.py", "user"),
        ("/home/u/proj/runtime/engine.py", "user"),
        ("/home/u/my_torch_project/nn/layers.py", "user"),
        ("<frozen runpy>", "not a file"),
        ("/home/u/proj/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", "installed package"),
        ("/usr/lib/python3/dist-packages/numpy/core/fromnumeric.py", "installed package"),
        (
            "/cvmfs/soft.computecanada.ca/easybuild/software/2020/avx2/Core/python/3.10.2/lib/python3.10/threading.py",
            "standard library",
        ),
        (
            "C:\\Users\\me\\AppData\\Local\\Programs\\Python\\Python311\\Lib\\multiprocessing\\spawn.py",
            "standard library",
        ),
        ("/home/u/envs/x/bin/torchrun", "console script"),
        ("/home/u/proj/deepspeed/runtime/engine.py", "library deepspeed"),
        ("/home/u/proj/third_party/transformers/models/llama/modeling_llama.py", "library transformers"),
    ],
)
def test_whose_code_a_frame_is(path: str, owner: str) -> None:
    assert frame_owner(path) == owner
