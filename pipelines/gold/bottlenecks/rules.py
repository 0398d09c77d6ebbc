"""The bottleneck vocabulary: each finding's kind, what it means and the fix in the user's words.

Thresholds are settings (`bottlenecks:` in conf/base.yaml, `conf.BottleneckSettings`); their sources are in
docs/bottlenecks.md. `{...}` fields are filled from the finding's own figures."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """One kind of finding: a title and the fix text (a format string over the finding's figures)."""

    kind: str
    title: str
    fix: str


RULES: dict[str, Rule] = {
    r.kind: r
    for r in (
        Rule(
            "input_bound",
            "the GPU waits for the next batch",
            "Load batches in the background: DataLoader(..., num_workers={workers}, pin_memory=True, "
            "persistent_workers=True) at {where}; the loop spent {share:.0f} % of each step waiting for "
            "data.",
        ),
        Rule(
            "launch_bound",
            "many short kernels: the CPU cannot launch them fast enough",
            "Launch fewer, larger kernels: wrap the model in torch.compile(model) (or capture the step in a "
            "CUDA graph) and raise the batch size; {short_pct:.0f} % of kernels ran under {short_us:.0f} µs, "
            "launched from {where}.",
        ),
        Rule(
            "sync_bound",
            "the CPU waits for the GPU",
            "Remove the host-device synchronisation at {where} ({op}): keep the value on the GPU, or read it "
            "every N steps instead of every step (for logging, accumulate a tensor and call .item() once).",
        ),
        Rule(
            "memcpy_bound",
            "host-device copies take the step",
            "Copy from pinned memory without blocking: DataLoader(..., pin_memory=True) and "
            ".to(device, non_blocking=True) at {where}; {pageable_pct:.0f} % of the copied bytes came from "
            "pageable memory.",
        ),
        Rule(
            "communication_bound",
            "collectives are not overlapped with compute",
            "Overlap communication with the backward pass: use DistributedDataParallel (bucket_cap_mb, "
            "gradient_as_bucket_view=True), accumulate gradients over several steps (no_sync()), or raise "
            "the batch size; {exposed_pct:.0f} % of the step waits on NCCL, launched from {where}.",
        ),
        Rule(
            "low_tensor_core",
            "matrix math runs in FP32 on a Tensor-Core GPU",
            "Use mixed precision: with torch.autocast('cuda', dtype=torch.bfloat16): around the forward "
            "pass at {where} (or torch.backends.cuda.matmul.allow_tf32 = True); {fp32_pct:.0f} % of "
            "GEMM/conv kernel time ran without Tensor Cores.",
        ),
        Rule(
            "low_occupancy",
            "kernels keep few warps resident",
            "Give the GPU more parallel work: raise the batch size or fuse small operations (torch.compile); "
            "kernels from {where} reached {occupancy:.0f} % achieved occupancy.",
        ),
        Rule(
            "straggler",
            "one rank is slower than the others",
            "Rank {rank} takes {ratio:.2f}× the median rank's step: check its node ({host}) and its share of "
            "the data (uneven shards, a slow disk); every other rank waits for it at each collective.",
        ),
        Rule(
            "idle_gpu",
            "the GPU is idle and nothing above explains it",
            "The GPU sat idle {idle_pct:.0f} % of the time: profile with stacks (see docs/bottlenecks.md) "
            "and look at what the CPU does between steps (logging, checkpointing, evaluation on the CPU).",
        ),
        Rule(
            "memory_bound",
            "kernels wait on GPU memory bandwidth",
            "Move fewer bytes per result: fuse element-wise operations (torch.compile), keep activations in "
            "bf16/fp16, and raise the batch size so weights are read once for more samples; the memory "
            "interface was busy {dram_pct:.0f} % of the time.",
        ),
    )
}
FINDING_KINDS = tuple(RULES)

# DCGM profiling counters say what kind of bottleneck a job has but never where: their fix texts (a format
# string over the counters' figures, pipelines/gold/bottlenecks/counters.py) point at the trace for the line.
NO_LINE = (
    " DCGM counters cannot name the line of code: record a profiler trace with stacks (docs/bottlenecks.md, "
    "'Record a trace jobfit can name lines from') and run jobfit bottlenecks --job on it to find it."
)
COUNTER_FIXES: dict[str, str] = {
    "idle_gpu": "The GPU's engine was busy {gr_pct:.0f} % of the time: release GPUs you are not computing "
    "on (run interactive work on a CPU node, or with a shorter time limit), or find what the program does "
    "between GPU calls.",
    "input_bound": "The GPU's engine was busy {gr_pct:.0f} % of the time with little PCIe traffic: it waits "
    "for the host, most often for the next batch. Load batches in the background (DataLoader(..., "
    "num_workers=4 or more, pin_memory=True, persistent_workers=True)) and take logging, .item() and "
    "checkpointing out of the step.",
    "memcpy_bound": "The GPU's engine was busy {gr_pct:.0f} % of the time while PCIe carried "
    "{pcie_gbps:.1f} GB/s: it waits on host-device copies. Copy from pinned memory without blocking "
    "(DataLoader(..., pin_memory=True), .to(device, non_blocking=True)) and keep tensors on the GPU between "
    "steps.",
    "communication_bound": "The SMs were active {sm_pct:.0f} % of the time while the engine was busy "
    "{gr_pct:.0f} % and NVLink/PCIe carried {link_gbps:.1f} GB/s: the GPUs wait on collectives. Overlap "
    "them with the backward pass (DistributedDataParallel, gradient_as_bucket_view=True), accumulate "
    "gradients over several steps (no_sync()), or raise the batch size.",
    "low_tensor_core": "The SMs were active {sm_pct:.0f} % of the time but the tensor pipe only "
    "{tensor_pct:.1f} % (FP32 pipe {fp32_pct:.0f} %) on a Tensor-Core GPU: matrix math runs in FP32. Use "
    "mixed precision (with torch.autocast('cuda', dtype=torch.bfloat16):) or "
    "torch.backends.cuda.matmul.allow_tf32 = True.",
    "memory_bound": RULES["memory_bound"].fix,
}

# What to add to a training loop to record a trace jobfit can name lines from (with_stack=True).
RECORD_TRACE_HINT = (
    "from torch.profiler import profile, schedule, tensorboard_trace_handler, ProfilerActivity\n"
    "with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],\n"
    "             schedule=schedule(wait=1, warmup=1, active=5, repeat=1),\n"
    "             on_trace_ready=tensorboard_trace_handler(f\"traces/job_{os.environ['SLURM_JOB_ID']}\"),\n"
    "             with_stack=True, record_shapes=True) as prof:\n"
    "    for batch in loader:\n"
    "        train_step(batch)\n"
    "        prof.step()"
)
