"""Kineto (torch.profiler) Chrome traces for a share of the simulated training jobs, from a workload model,
with the truth beside them (docs/simulator.md, "Profiler traces").

A job's `TraceModel` says what one training step does on each rank: the DataLoader wait, the input copy
(pageable or pinned), forward and backward ops (GEMMs with Tensor-Core names under AMP, `sgemm` in FP32,
elementwise and norm kernels, optionally many tiny unfused ops), `.item()` syncs at given lines, DDP's NCCL
all-reduce buckets (overlapped with backward or not), the optimizer, and, for multi-rank jobs, a slow GPU.
`_play` runs the host thread and the GPU streams of every rank against each other, step by step (a kernel
starts when it is launched and its stream is free; `.item()` and pageable copies block the host; a
collective ends when its slowest rank has arrived), and writes the events Kineto would.

The truth of each cause is what removing it saves: the same model (same random draws) is played again
without the cause and the mean step time compared. A cause is a bottleneck when its removal makes the
steps at least `BOTTLENECK_SAVING_PCT` % shorter; a milder one is labelled `healthy`. Nothing here reads
the detector's thresholds (conf `bottlenecks:`) or imports pipelines/gold/bottlenecks/.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jobs.simulator.model import Job

# The truth's definition of a bottleneck: removing the cause shortens the mean step by at least this much
# (a workload fact, the same for every cause; the detector's thresholds are not consulted).
BOTTLENECK_SAVING_PCT = 10.0
CAUSES = (
    "input_bound",
    "memcpy_bound",
    "sync_bound",
    "launch_bound",
    "communication_bound",
    "low_tensor_core",
    "straggler",
)
TRUTH_FILE = "profiler_truth.csv"
TRUTH_COLUMNS = (
    "cluster",
    "job_id",
    "ranks",
    "kind",
    "injected",
    "saving_pct",
    "label",
    "rank",
    "file",
    "line",
)
STEPS = 4  # recorded ProfilerStep iterations per trace (schedule wait=1, warmup=1, active=4)
SITE = "/opt/conda/lib/python3.11/site-packages"
LOADER_FRAME = f"{SITE}/torch/utils/data/dataloader.py(701): __next__"
MODULE_FRAME = f"{SITE}/torch/nn/modules/module.py(1751): _call_impl"
# GPU model prefix -> (compute capability major, minor); device names as deviceProperties writes them.
CAPABILITY = {"H100": (9, 0), "A100": (8, 0), "L40S": (8, 9), "A40": (8, 6), "V100": (7, 0), "T4": (7, 5)}


@dataclass(frozen=True)
class JobFacts:
    """What the job's script and allocation say (the simulator's job, or a drawn one for tests)."""

    job_id: str
    user: str
    project: str
    precision: str  # bf16 | fp16 | fp32
    batch_size: int
    workers: int
    ranks: int  # GPUs the code drives
    nodes: int
    gpu_model: str
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class Lines:
    """The user's lines the model's ops come from."""

    train: str
    model: str
    loader: int
    h2d: int
    forward: int
    backward: int
    optimizer: int
    sync: int
    log_item: int
    linear: int
    norm: int
    act: int
    small: int


@dataclass(frozen=True)
class TraceModel:
    """One profiled job's workload (times in µs; every cause's magnitude drawn with spread)."""

    facts: JobFacts
    seed: int
    injected: tuple[str, ...]
    compute_major: int
    compute_minor: int
    layers: int
    gemm_us: float  # one forward GEMM under AMP (backward GEMMs are two of these)
    elem_us: float  # an activation / norm kernel
    dispatch_us: float  # host time per op (Python + ATen), of which launch_us in cudaLaunchKernel
    launch_us: float
    fp32_slowdown: float  # GEMM time in FP32 over AMP (1 when AMP, or no Tensor Cores)
    small_ops: int  # tiny unfused elementwise ops per layer (launch-bound models)
    small_us: float
    loader_us: float  # DataLoader wait per step
    h2d_us: float  # input copy per step
    pinned: bool
    syncs: int  # .item() calls inside each step
    sync_host_us: float  # host work on each fetched scalar before the next op
    log_item_step: int | None  # the recorded step (0-based) that logs loss.item(), if any
    item_every_step: bool  # loss.item() logged after every step
    scaler_sync: bool  # fp16 GradScaler: found_inf.item() before each optimizer step
    buckets: int
    comm_us: float  # all-reduce time per step (all buckets, once every rank has arrived)
    overlapped: bool  # buckets launched during backward (DDP) or only after it
    slow_rank: int | None
    slow_factor: float  # kernel time on the slow rank over the others
    lines: Lines


def is_profiled(job: Job, share: float) -> bool:
    """Whether a job gets traces: a training job that drove a GPU and ran, chosen by a fixed hash of its raw
    id below `share` (independent of jobstats' choice)."""
    if share <= 0 or job.project.kind != "dl_train" or job.gpus_used < 1 or job.mig_profile:
        return False
    if job.end - job.start < 120:
        return False
    return (job.job_id_raw * 2246822519 % 2**32) / 2**32 < share


def facts_of(job: Job) -> JobFacts:
    """The facts of a simulated training job."""
    p = job.params
    hosts = tuple(job.hosts) or tuple(dict.fromkeys(u[0] for u in job.gpu_units)) or ("gpu-node",)
    return JobFacts(
        job_id=job.job_id,
        user=job.user.name,
        project=job.project.name,
        precision=str(p.get("precision", "bf16")),
        batch_size=int(p.get("batch_size", 32)),
        workers=int(p.get("workers", 4)),
        ranks=max(1, min(job.gpus_used, 16)),
        nodes=max(1, job.nodes),
        gpu_model=job.gpu_model or "A100-SXM4-80GB",
        hosts=hosts,
    )


def draw_facts(rng: random.Random, i: int) -> JobFacts:
    """A training job's facts drawn as the simulator's workload draws them (for tests and the bench)."""
    ranks = rng.choice((1, 1, 1, 2, 4, 8))
    nodes = 2 if ranks == 8 and rng.random() < 0.3 else 1
    return JobFacts(
        job_id=str(100000 + i),
        user=f"u{rng.randint(1, 40):03d}",
        project=rng.choice(("llm-ft", "vit", "resnet", "bert-cls", "diffusion")),
        precision=str(rng.choices(("bf16", "fp16", "fp32"), (0.6, 0.25, 0.15))[0]),
        batch_size=rng.choice((4, 8, 16, 32, 64, 128, 256)),
        workers=rng.choice((0, 2, 4, 4, 8, 8, 12)),
        ranks=ranks,
        nodes=nodes,
        gpu_model=rng.choice(("A100-SXM4-80GB", "H100-SXM5-80GB", "V100-SXM2-32GB", "L40S")),
        hosts=tuple(f"g{n + 1:03d}" for n in range(nodes)),
    )


def _lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return median * math.exp(rng.gauss(0.0, sigma))


def draw_model(facts: JobFacts, seed: int) -> TraceModel:
    """The job's workload model: its habits from the facts, its causes and their magnitudes drawn."""
    rng = random.Random(seed)
    major, minor = next((v for k, v in CAPABILITY.items() if facts.gpu_model.startswith(k)), (8, 0))
    multi = facts.ranks >= 2
    # Causes a job's code or setup has (the facts tilt them: few workers starve the GPU, FP32 is a choice).
    candidates = ["input_bound", "memcpy_bound", "sync_bound", "launch_bound"]
    if multi:
        candidates += ["communication_bound", "straggler"]
    injected: set[str] = set()
    if rng.random() < 0.6:
        for _ in range(1 if rng.random() < 0.75 else 2):
            injected.add(rng.choice(candidates))
    if facts.workers <= 1 and rng.random() < 0.7:
        injected.add("input_bound")
    if facts.precision == "fp32":
        injected.add("low_tensor_core")
    layers = rng.randint(3, 7)
    batch_scale = (facts.batch_size / 32) ** 0.8
    launch_bound = "launch_bound" in injected
    gemm_us = max(4.0, _lognormal(rng, 260.0, 0.6) * batch_scale * (0.06 if launch_bound else 1.0))
    elem_us = max(2.0, gemm_us * rng.uniform(0.04, 0.2))
    dispatch_us = rng.uniform(14.0, 32.0)
    launch_us = dispatch_us * rng.uniform(0.25, 0.4)
    fp32 = facts.precision == "fp32"
    # AMP's GEMM speed-up on Tensor Cores; FP32 work also has a share of GEMM that varies by model.
    slowdown = rng.uniform(1.6, 4.0) if fp32 and major >= 7 else 1.0
    if fp32 and rng.random() < 0.3:  # GEMM-light models (attention-free, elementwise heavy): a mild cost
        elem_us = max(elem_us, gemm_us * slowdown * rng.uniform(0.5, 2.0))
    small_ops = rng.randint(4, 10) if launch_bound else rng.choice((0, 0, 0, 1, 2))
    small_us = rng.uniform(1.5, 6.0)
    gpu_work = layers * (3 * gemm_us * slowdown + 3 * elem_us + small_ops * 2 * small_us)
    loader_ratio = (
        _lognormal(rng, 0.35, 0.8)
        if "input_bound" in injected
        else _lognormal(rng, 0.01 if facts.workers >= 4 else 0.04, 0.8)
    )
    pinned = not ("memcpy_bound" in injected and rng.random() < 0.75) and rng.random() < 0.8
    h2d_ratio = _lognormal(rng, 0.22, 0.8) if "memcpy_bound" in injected else _lognormal(rng, 0.012, 0.6)
    syncs = rng.randint(2, 24) if "sync_bound" in injected else 0
    sync_host_us = _lognormal(rng, gpu_work * 0.25 / max(syncs, 1), 0.8) if syncs else 0.0
    comm_ratio = _lognormal(rng, 0.3 if facts.nodes > 1 else 0.12, 0.6)
    overlapped = "communication_bound" not in injected
    slow = "straggler" in injected
    return TraceModel(
        facts=facts,
        seed=seed,
        injected=tuple(sorted(injected)),
        compute_major=major,
        compute_minor=minor,
        layers=layers,
        gemm_us=gemm_us,
        elem_us=elem_us,
        dispatch_us=dispatch_us,
        launch_us=launch_us,
        fp32_slowdown=slowdown,
        small_ops=small_ops,
        small_us=small_us,
        loader_us=gpu_work * loader_ratio,
        h2d_us=gpu_work * h2d_ratio,
        pinned=pinned,
        syncs=syncs,
        sync_host_us=sync_host_us,
        log_item_step=rng.randrange(STEPS) if rng.random() < 0.4 else None,
        item_every_step=rng.random() < 0.5,
        scaler_sync=facts.precision == "fp16",
        buckets=rng.randint(2, 4),
        comm_us=gpu_work * comm_ratio if multi else 0.0,
        overlapped=overlapped,
        slow_rank=rng.randrange(facts.ranks) if slow else None,
        slow_factor=1.0 + abs(rng.gauss(0.0, 0.3)) if slow else 1.0,
        lines=_draw_lines(rng, facts),
    )


def _draw_lines(rng: random.Random, facts: JobFacts) -> Lines:
    root = f"/home/{facts.user}/{facts.project}"
    loader = rng.randint(40, 140)
    return Lines(
        train=f"{root}/train.py",
        model=f"{root}/model.py",
        loader=loader,
        h2d=loader + rng.randint(1, 3),
        forward=loader + rng.randint(4, 6),
        backward=loader + rng.randint(7, 9),
        optimizer=loader + rng.randint(10, 12),
        sync=loader + rng.randint(13, 30),
        log_item=loader + rng.randint(31, 40),
        linear=rng.randint(20, 90),
        norm=rng.randint(91, 120),
        act=rng.randint(121, 150),
        small=rng.randint(151, 220),
    )


def without(model: TraceModel, cause: str) -> TraceModel:
    """The same model (same random draws) with one cause removed: what fixing it would look like."""
    if cause == "input_bound":
        return replace(model, loader_us=min(model.loader_us, 20.0))
    if cause == "memcpy_bound":
        return replace(model, h2d_us=0.0, pinned=True)
    if cause == "sync_bound":
        return replace(model, syncs=0, log_item_step=None, item_every_step=False, scaler_sync=False)
    if cause == "launch_bound":  # CUDA graphs / fused ops: the host no longer paces the GPU
        return replace(model, dispatch_us=1.0, launch_us=0.3)
    if cause == "communication_bound":
        return replace(model, comm_us=0.0)
    if cause == "low_tensor_core":
        return replace(model, fp32_slowdown=1.0)
    if cause == "straggler":
        return replace(model, slow_factor=1.0)
    raise ValueError(f"unknown cause {cause!r}")


# ---- the timeline ----------------------------------------------------------------------------------------


def _noise(seed: int, *keys: int) -> float:
    """A deterministic multiplicative noise in [0.85, 1.15] from the keys (the same in every replay; tuples
    of ints hash the same in every process)."""
    return 0.85 + 0.3 * ((hash((seed, *keys)) * 2654435761) % 1_000_003) / 1_000_003


@dataclass
class _Rank:
    """One rank's clocks and the events written so far."""

    rank: int
    pid: int
    t: float  # host clock
    stream: dict[int, float]  # stream -> when it is free
    events: list[dict[str, Any]]
    corr: int = 1
    ext: int = 1
    step_ends: list[float] = field(default_factory=list)
    step_starts: list[float] = field(default_factory=list)
    gpu_end: float = 0.0


COMPUTE, NCCL = 7, 20


class _Player:
    """Plays a model's steps on every rank; `emit=False` only keeps the clocks (for the counterfactuals)."""

    def __init__(self, m: TraceModel, emit: bool) -> None:
        self.m, self.emit = m, emit
        self.ln = m.lines
        self.ranks = [
            _Rank(r, 1000 + 37 * r, 1_000_000.0, {COMPUTE: 0.0, NCCL: 0.0}, []) for r in range(m.facts.ranks)
        ]
        major = m.compute_major
        dt = "bf16" if m.facts.precision == "bf16" else "fp16"
        if m.facts.precision != "fp32":
            self.gemm_names = {
                9: f"sm90_xmma_gemm_{dt}{dt}_{dt}f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute"
                "_segment_k_off_kernel__5x_cublas",
                8: f"ampere_{dt}_s16816gemm_{dt}_128x128_ldg8_f2f_stages_64x3_tn",
                7: "volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_tn",
            }.get(min(major, 9), f"ampere_{dt}_s16816gemm_{dt}_128x128_ldg8_f2f_stages_64x3_tn")
        else:
            self.gemm_names = {
                9: "cutlass_80_simt_sgemm_256x128_8x4_nn_align1",
                8: "ampere_sgemm_128x64_nn",
                7: "volta_sgemm_128x64_nn",
            }.get(min(major, 9), "maxwell_sgemm_128x64_nn")

    # -- stacks
    def _stack(self, *inner: str, fn: str = "train_step", line: int | None = None) -> str:
        ln = self.ln
        frames = [*inner, f"{ln.train}({line or ln.forward}): {fn}", f"{ln.train}(210): main"]
        return ";".join([*frames, "<frozen runpy>(88): _run_code"])

    def _model_stack(self, lib: str, line: int) -> str:
        return self._stack(
            lib, f"{self.ln.model}({line}): forward", MODULE_FRAME, fn="train_step", line=self.ln.forward
        )

    # -- events
    def _ev(
        self, r: _Rank, cat: str, name: str, ts: float, dur: float, args: dict, gpu: bool = False
    ) -> None:
        if not self.emit:
            return
        r.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": r.rank if gpu else r.pid,
                "tid": args.get("stream", COMPUTE) if gpu else r.pid,
                "ts": round(ts, 3),
                "dur": round(max(dur, 0.001), 3),
                "args": args,
            }
        )

    def op(
        self,
        r: _Rank,
        name: str,
        stack: str | None,
        kernel: str,
        kernel_us: float,
        key: tuple[int, ...],
        stream: int = COMPUTE,
        after: float = 0.0,
        occupancy: float | None = None,
    ) -> float:
        """One operator: host dispatch, its cudaLaunchKernel, its kernel; returns the kernel's end."""
        m = self.m
        d = m.dispatch_us * _noise(m.seed, *key, 1)
        launch = m.launch_us * _noise(m.seed, *key, 2)
        ts = r.t
        lts = ts + d - launch - 1.0
        start = max(lts + 3.0, r.stream[stream], after)
        dur = kernel_us * _noise(m.seed, *key, 3)
        end = start + dur
        r.stream[stream] = end
        r.gpu_end = max(r.gpu_end, end)
        ext, corr = r.ext, r.corr
        r.ext += 1
        r.corr += 1
        op_args: dict[str, Any] = {"External id": ext, "Sequence number": ext}
        if stack is not None:
            op_args["Call stack"] = stack
        self._ev(r, "cpu_op", name, ts, d, op_args)
        self._ev(
            r, "cuda_runtime", "cudaLaunchKernel", lts, launch, {"External id": ext, "correlation": corr}
        )
        kargs: dict[str, Any] = {
            "External id": ext,
            "correlation": corr,
            "device": r.rank % 8,
            "stream": stream,
            "grid": [max(1, int(dur)), 1, 1],
            "block": [256, 1, 1],
        }
        if occupancy is not None:
            kargs["est. achieved occupancy %"] = round(min(occupancy, 100.0), 0)
        self._ev(r, "kernel", kernel, start, dur, kargs, gpu=True)
        r.t = ts + d
        return end

    def loader(self, r: _Rank, step: int) -> None:
        m = self.m
        wait = m.loader_us * _noise(m.seed, r.rank, step, 11)
        kind = "Single" if m.facts.workers == 0 else "Multi"
        name = f"enumerate(DataLoader)#_{kind}ProcessingDataLoaderIter.__next__"
        stack = ";".join(
            [LOADER_FRAME, f"{self.ln.train}({self.ln.loader}): train", f"{self.ln.train}(210): main"]
        )
        self._ev(r, "user_annotation", name, r.t, wait, {"External id": r.ext, "Call stack": stack})
        r.ext += 1
        r.t += wait + 2.0

    def copy_in(self, r: _Rank, step: int) -> None:
        m = self.m
        dur = m.h2d_us * _noise(m.seed, r.rank, step, 12)
        ts = r.t
        stack = self._stack(f"{SITE}/torch/_tensor.py(1435): to", line=self.ln.h2d)
        lts = ts + 4.0
        start = max(lts + 2.0, r.stream[COMPUTE])
        end = start + max(dur, 1.0)
        r.stream[COMPUTE] = end
        r.gpu_end = max(r.gpu_end, end)
        host_end = (end + 3.0) if not m.pinned else (lts + 6.0)
        kind = "Pinned" if m.pinned else "Pageable"
        gbps = 20.0 if m.pinned else 6.0
        nbytes = int(max(dur, 1.0) * gbps * 1e3)
        ext, corr = r.ext, r.corr
        r.ext += 1
        r.corr += 1
        self._ev(r, "cpu_op", "aten::to", ts, host_end - ts + 1.0, {"External id": ext, "Call stack": stack})
        self._ev(r, "cpu_op", "aten::copy_", ts + 2.0, host_end - ts - 2.0, {"External id": ext + 10_000_000})
        self._ev(
            r,
            "cuda_runtime",
            "cudaMemcpyAsync",
            lts,
            host_end - lts,
            {"External id": ext, "correlation": corr},
        )
        self._ev(
            r,
            "gpu_memcpy",
            f"Memcpy HtoD ({kind} -> Device)",
            start,
            end - start,
            {
                "External id": ext,
                "correlation": corr,
                "device": r.rank % 8,
                "stream": COMPUTE,
                "bytes": nbytes,
                "memory bandwidth (GB/s)": gbps,
            },
            gpu=True,
        )
        r.t = host_end + 1.0

    def sync(
        self,
        r: _Rank,
        line: int,
        fn: str,
        key: tuple[int, ...],
        host_after: float,
        inner: tuple[str, ...] = (),
    ) -> None:
        """`.item()`: a 4-byte device-to-host copy and cudaStreamSynchronize; the host waits for the GPU."""
        ts = r.t
        stack = self._stack(*inner, line=line, fn=fn)
        start = max(ts + 6.0, r.stream[COMPUTE])
        end = start + 2.0
        r.stream[COMPUTE] = end
        r.gpu_end = max(r.gpu_end, end)
        host_end = end + 4.0
        ext, corr = r.ext, r.corr
        r.ext += 1
        r.corr += 1
        self._ev(
            r, "cpu_op", "aten::item", ts, host_end - ts + 1.0, {"External id": ext, "Call stack": stack}
        )
        self._ev(
            r, "cpu_op", "aten::_local_scalar_dense", ts + 1.0, host_end - ts - 1.0, {"External id": ext}
        )
        self._ev(
            r, "cuda_runtime", "cudaMemcpyAsync", ts + 3.0, 3.0, {"External id": ext, "correlation": corr}
        )
        self._ev(
            r, "cuda_runtime", "cudaStreamSynchronize", ts + 6.5, host_end - ts - 7.0, {"External id": ext}
        )
        self._ev(
            r,
            "gpu_memcpy",
            "Memcpy DtoH (Device -> Pageable)",
            start,
            2.0,
            {"External id": ext, "correlation": corr, "device": r.rank % 8, "stream": COMPUTE, "bytes": 4},
            gpu=True,
        )
        r.t = host_end + 1.0 + host_after * _noise(self.m.seed, *key, 21)

    def layer_ops(self, r: _Rank, step: int, layer: int, backward: bool) -> None:
        m, ln = self.m, self.ln
        slow = m.slow_factor if r.rank == m.slow_rank else 1.0
        phase = 2 if backward else 1
        gemm = m.gemm_us * m.fp32_slowdown * slow * (2.0 if backward else 1.0)
        key = (r.rank, step, layer, phase)
        occ = 40.0 + 100.0 * (_noise(m.seed, *key, 30) - 0.85)
        lin = self._model_stack(f"{SITE}/torch/nn/modules/linear.py(125): forward", ln.linear)
        name = "aten::mm" if backward else "aten::linear"
        if backward:  # autograd's engine thread runs the backward ops: no Python stack on them
            lin = None
        self.op(r, name, lin, self.gemm_names, gemm, (*key, 1), occupancy=occ + 20)
        norm = self._model_stack(f"{SITE}/torch/nn/modules/normalization.py(217): forward", ln.norm)
        self.op(
            r,
            "aten::native_layer_norm_backward" if backward else "aten::layer_norm",
            lin if backward else norm,
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>",
            m.elem_us * slow,
            (*key, 2),
            occupancy=occ + 35,
        )
        act = self._model_stack(f"{SITE}/torch/nn/functional.py(1704): gelu", ln.act)
        self.op(
            r,
            "aten::gelu_backward" if backward else "aten::gelu",
            lin if backward else act,
            "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
            m.elem_us * slow,
            (*key, 3),
            occupancy=occ + 40,
        )
        small = self._model_stack(f"{SITE}/torch/_tensor.py(41): wrapped", ln.small)
        for k in range(m.small_ops):
            self.op(
                r,
                "aten::mul" if k % 2 else "aten::add",
                lin if backward else small,
                "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, "
                "float, at::native::binary_internal::MulFunctor<float>>>",
                m.small_us * slow,
                (*key, 10 + k),
                occupancy=occ + 30,
            )

    def launch_bucket(self, r: _Rank, ready: list[float], launched: list[tuple[float, int]]) -> None:
        """DDP hands a gradient bucket to NCCL: `nccl:all_reduce` and its launch now; the NCCL stream waits
        for the compute stream's work queued so far. The kernel is written once every rank has arrived."""
        ts, corr = r.t, r.corr
        r.corr += 1
        stack = self._stack(
            f"{SITE}/torch/distributed/distributed_c10d.py(2501): all_reduce",
            line=self.ln.backward,
            fn="train_step",
        )
        self._ev(r, "cpu_op", "nccl:all_reduce", ts, 12.0, {"External id": r.ext, "Call stack": stack})
        self._ev(
            r, "cuda_runtime", "cudaLaunchKernel", ts + 4.0, 6.0, {"External id": r.ext, "correlation": corr}
        )
        r.ext += 1
        r.t = ts + 13.0
        ready.append(max(r.stream[COMPUTE], ts + 10.0))
        launched.append((ts + 10.0, corr))

    def collectives(
        self, ready: list[list[float]], launched: list[list[tuple[float, int]]], step: int
    ) -> float:
        """The all-reduce buckets of one step across ranks: each ends when its last rank has arrived (the NCCL
        kernels of the early ranks wait inside). Returns when the last bucket ends."""
        m = self.m
        done = 0.0
        for b in range(m.buckets):
            arrive = [max(ready[r.rank][b], r.stream[NCCL]) for r in self.ranks]
            end = max(arrive) + m.comm_us / m.buckets * _noise(m.seed, step, b, 40)
            for r in self.ranks:
                start = arrive[r.rank]
                r.stream[NCCL] = end
                r.gpu_end = max(r.gpu_end, end)
                self._ev(
                    r,
                    "kernel",
                    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                    start,
                    end - start,
                    {"correlation": launched[r.rank][b][1], "device": r.rank % 8, "stream": NCCL},
                    gpu=True,
                )
            done = end
        return done

    def forward_backward(
        self, r: _Rank, step: int, multi: bool
    ) -> tuple[list[float], list[tuple[float, int]]]:
        """One rank's forward (with its `.item()` syncs) and backward (handing buckets to NCCL)."""
        m = self.m
        syncs_after = [0] * m.layers
        for k in range(m.syncs):
            syncs_after[k * m.layers // m.syncs] += 1
        for layer in range(m.layers):
            self.layer_ops(r, step, layer, backward=False)
            for k in range(syncs_after[layer]):
                self.sync(r, self.ln.sync, "train_step", (r.rank, step, layer, k), m.sync_host_us)
        ready: list[float] = []
        launched: list[tuple[float, int]] = []
        for i, layer in enumerate(reversed(range(m.layers))):
            self.layer_ops(r, step, layer, backward=True)
            # Bucket k holds the gradients of the k-th share of the layers (backward order) and is handed to
            # NCCL once they are computed: the last one after the last layer, so every gradient is reduced.
            while multi and m.overlapped and len(ready) < (i + 1) * m.buckets // m.layers:
                self.launch_bucket(r, ready, launched)
        while multi and len(ready) < m.buckets:
            self.launch_bucket(r, ready, launched)
        return ready, launched

    def play(self) -> None:
        m = self.m
        multi = len(self.ranks) > 1
        for step in range(STEPS + 1):  # step 0 is the profiler's warm-up: played, not recorded
            ready, launched = [], []
            for r in self.ranks:
                r.step_starts.append(r.t)
                self.loader(r, step)
                self.copy_in(r, step)
                got = self.forward_backward(r, step, multi)
                ready.append(got[0])
                launched.append(got[1])
            comm_end = self.collectives(ready, launched, step) if multi else 0.0
            for r in self.ranks:
                if m.scaler_sync:
                    scaler = (f"{SITE}/torch/amp/grad_scaler.py(380): _maybe_opt_step",)
                    self.sync(r, self.ln.optimizer, "train_step", (r.rank, step, 997), 0.0, scaler)
                opt = self._stack(f"{SITE}/torch/optim/adamw.py(220): step", line=self.ln.optimizer)
                for k in range(2):
                    self.op(
                        r,
                        "Optimizer.step#AdamW.step" if k == 0 else "aten::_foreach_add_",
                        opt,
                        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
                        "(anonymous namespace)::TensorListMetadata<4>, AdamWFunctor<float>>",
                        m.elem_us * 2,
                        (r.rank, step, 999, k),
                        after=comm_end,
                        occupancy=70.0,
                    )
                if m.item_every_step or (m.log_item_step is not None and step - 1 == m.log_item_step):
                    self.sync(r, self.ln.log_item, "train_step", (r.rank, step, 998), 0.0)
                r.step_ends.append(max(r.t, r.gpu_end))
                if step > 0:
                    self._ev(
                        r,
                        "user_annotation",
                        f"ProfilerStep#{step + 1}",
                        r.step_starts[-1],
                        r.t - r.step_starts[-1],
                        {"External id": r.ext},
                    )
                    r.ext += 1

    def mean_step_us(self) -> float:
        """The steady-state step: from the end of the warm-up step's work (host and GPU) to the end of the
        last recorded step's, over the recorded steps, averaged over ranks (a host that runs ahead of its GPU
        does not shorten it)."""
        return sum((r.step_ends[-1] - r.step_ends[0]) / STEPS for r in self.ranks) / len(self.ranks)


def play(model: TraceModel, emit: bool = True) -> _Player:
    """The model's steps played on every rank."""
    p = _Player(model, emit)
    p.play()
    return p


def truth_rows(model: TraceModel, cluster: str) -> list[dict[str, Any]]:
    """One row per cause the model can have: what removing it saves, and the label that follows."""
    base = play(model, emit=False).mean_step_us()
    rows = []
    ln = model.lines
    where = {
        "input_bound": (ln.train, ln.loader),
        "memcpy_bound": (ln.train, ln.h2d),
        "sync_bound": (
            ln.train,
            ln.sync if model.syncs else (ln.optimizer if model.scaler_sync else ln.log_item),
        ),
        "launch_bound": (ln.model, ln.small if model.small_ops else ln.linear),
        "communication_bound": (ln.train, ln.backward),
        "low_tensor_core": (ln.model, ln.linear),
        "straggler": (None, None),
    }
    for cause in CAUSES:
        if cause in ("communication_bound", "straggler") and model.facts.ranks < 2:
            continue
        fixed = play(without(model, cause), emit=False).mean_step_us()
        saving = max(0.0, 100.0 * (base - fixed) / base) if base > 0 else 0.0
        file, line = where[cause]
        rows.append(
            {
                "cluster": cluster,
                "job_id": model.facts.job_id,
                "ranks": model.facts.ranks,
                "kind": cause,
                "injected": cause in model.injected,
                "saving_pct": round(saving, 2),
                "label": cause if saving >= BOTTLENECK_SAVING_PCT else "healthy",
                "rank": model.slow_rank if cause == "straggler" else None,
                "file": file,
                "line": line,
            }
        )
    return rows


def trace_of(player: _Player, rank: int) -> dict[str, Any]:
    """One rank's Chrome trace as Kineto writes it (current category names, relative ts)."""
    m = player.m
    r = player.ranks[rank]
    name = m.facts.gpu_model if m.facts.gpu_model.startswith("NVIDIA") else f"NVIDIA {m.facts.gpu_model}"
    recorded = [e for e in r.events if e["ts"] >= r.step_starts[1]]  # the warm-up step is not recorded
    meta = [
        {"ph": "M", "name": "process_name", "pid": r.pid, "tid": 0, "args": {"name": f"python {r.pid}"}},
        {"ph": "M", "name": "process_name", "pid": r.rank, "tid": 0, "args": {"name": f"GPU {r.rank % 8}"}},
    ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": r.rank % 8,
                "name": name,
                "totalGlobalMem": 85520809984,
                "computeMajor": m.compute_major,
                "computeMinor": m.compute_minor,
                "maxThreadsPerBlock": 1024,
                "numSms": 132 if m.compute_major >= 9 else 108,
            }
        ],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": m.facts.ranks},
        "record_shapes": 1,
        "with_stack": 1,
        "trace_id": f"{m.seed:016X}",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1_700_000_000_000_000_000 + m.seed % 10**15,
        "traceEvents": meta + sorted(recorded, key=lambda e: e["ts"]),
        "traceName": f"{m.facts.hosts[0]}_{r.pid}.pt.trace.json",
    }


def trace_path(out: Path, facts: JobFacts, rank: int, pid: int) -> Path:
    """Where a rank's trace lands: `profiler/job_<id>/<host>_<pid>.<ns>.pt.trace.json.gz` (the job id in the
    folder, as torch.profiler.tensorboard_trace_handler(f"traces/job_{SLURM_JOB_ID}") writes it)."""
    per_node = max(1, facts.ranks // facts.nodes)
    host = facts.hosts[min(rank // per_node, len(facts.hosts) - 1)]
    return out / "profiler" / f"job_{facts.job_id}" / f"{host}_{pid}.1700000000{rank:03d}.pt.trace.json.gz"


def write_job(out: Path, model: TraceModel, cluster: str) -> tuple[list[Path], list[dict[str, Any]]]:
    """Write every rank's trace of a job and return (paths, truth rows)."""
    player = play(model)
    paths = []
    for r in player.ranks:
        path = trace_path(out, model.facts, r.rank, r.pid)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(trace_of(player, r.rank), separators=(",", ":")).encode()
        path.write_bytes(gzip.compress(data, compresslevel=6, mtime=0))
        paths.append(path)
    return paths, truth_rows(model, cluster)


class TruthCsv:
    """Rows of profiler_truth.csv, written as they come."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh = path.open("w", encoding="utf-8", newline="")
        self.writer = csv.DictWriter(self.fh, fieldnames=list(TRUTH_COLUMNS), lineterminator="\n")
        self.writer.writeheader()
        self.rows = 0

    def add(self, rows: list[dict[str, Any]]) -> None:
        self.writer.writerows(rows)
        self.rows += len(rows)

    def close(self) -> None:
        self.fh.close()


def model_seed(seed: int, job_id_raw: int) -> int:
    """The seed of a job's trace model (stable per simulation seed and job)."""
    return (seed * 1_000_003 + job_id_raw * 7919 + 17) % 2**61
