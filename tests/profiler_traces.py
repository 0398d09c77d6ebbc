"""A small Kineto trace written for tests: a training loop whose input pipeline stalls at a known user line,
with `Call stack` args (with_stack=True), so that a finding's file and line can be checked."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

USER_FILE = "/home/alice/proj/train.py"
LOADER_LINE = 42
STACK = (
    "/opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py(631): __next__;"
    f"{USER_FILE}({LOADER_LINE}): train_epoch;{USER_FILE}(88): main;<frozen runpy>(88): _run_code"
)


def input_bound_trace(
    steps: int = 4, t0_us: float = 1_700_000_000_000_000.0, load_us: float = 60_000.0
) -> dict:
    """A trace of `steps` ProfilerStep iterations, each waiting `load_us` in DataLoader.__next__ (called from
    train.py:42) and then running 20 ms of kernels."""
    ev: list[dict[str, Any]] = []
    t = t0_us
    corr = 1
    for i in range(steps):
        step_len = load_us + 25_000
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{i}",
                "pid": 7,
                "tid": 7,
                "ts": t,
                "dur": step_len,
                "args": {"External id": 1000 + i},
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                "pid": 7,
                "tid": 7,
                "ts": t + 10,
                "dur": load_us,
                "args": {"External id": 2000 + i, "Call stack": STACK},
            }
        )
        k = t + load_us + 100
        for _ in range(4):
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 7,
                    "tid": 7,
                    "ts": k,
                    "dur": 8,
                    "args": {"correlation": corr, "External id": 3000 + corr},
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_nn",
                    "pid": 0,
                    "tid": 7,
                    "ts": k + 20,
                    "dur": 5_000,
                    "args": {"device": 0, "stream": 7, "correlation": corr},
                }
            )
            corr += 1
            k += 5_050
        t += step_len
    ev.append({"ph": "f", "id": 1, "pid": 7, "tid": 7, "ts": t0_us, "cat": "ac2g", "name": "ac2g"})
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": 0,
                "name": "NVIDIA A100-SXM4-80GB",
                "computeMajor": 8,
                "computeMinor": 0,
                "totalGlobalMem": 85899345920,
            }
        ],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "traceEvents": ev,
        "traceName": "synthetic",
    }


def write_trace(path: Path, trace: dict, gz: bool = True) -> Path:
    """Write a trace as JSON (gzip when `gz`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(trace).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path
