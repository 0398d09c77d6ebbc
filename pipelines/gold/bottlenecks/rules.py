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
    )
}
FINDING_KINDS = tuple(RULES)

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
