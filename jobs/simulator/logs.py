"""stderr tails of jobs that did not complete, in the words Slurm, PyTorch, NCCL, CUDA and the kernel use."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from jobs.simulator import tracebacks
from jobs.simulator.catalog import MODEL_BY_NAME
from jobs.simulator.model import Job
from jobs.simulator.tracebacks import UserFrame
from pipelines.units import GIB

XID_TEXT = {
    79: "GPU has fallen off the bus.",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
    "subpartition 0.",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    63: "ECC page retirement or row remapping recording event",
}


ASYNC_NOTE = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
    "might be incorrect."
)
OOM_HINT = (
    "If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
    "See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def _stamp(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _progress(job: Job, rng: random.Random) -> list[str]:
    kind = job.project.kind
    if kind in ("dl_train",):
        steps = int(job.params.get("steps", 1000))
        done = max(1, int(steps * min(1.0, job.elapsed_s / max(1, job.runtime_need_s))))
        return [
            f"{{'loss': {rng.uniform(1.2, 3.5):.4f}, 'grad_norm': {rng.uniform(0.3, 4):.3f}, "
            f"'learning_rate': {rng.uniform(1e-5, 3e-4):.2e}, 'epoch': {done / steps:.2f}}}",
            f" {int(100 * done / steps)}%|{'#' * (10 * done // steps):<10}| {done}/{steps} "
            f"[{job.elapsed_s // 3600:02d}:{job.elapsed_s // 60 % 60:02d}:{job.elapsed_s % 60:02d}]",
        ]
    if kind == "mpi_md":
        return [
            f"Step {rng.randrange(1000, 90000)} Temp {rng.uniform(0.7, 1.6):.4f} E_pair "
            f"{rng.uniform(-7, -5):.4f} TotEng {rng.uniform(-5, -3):.4f}"
        ]
    return [f"INFO:root:processed {rng.randrange(1, 400)} items"]


def render(job: Job, rng: random.Random) -> tuple[str, UserFrame | None]:
    """The last lines of the job's stderr file for its failure cause, and the user's innermost frame in its
    traceback (None when it prints none)."""
    host = job.hosts[0] if job.hosts else "unknown"
    end = _stamp(job.end)
    jid = job.job_id_raw
    out = _progress(job, rng)
    script = (
        "train.py"
        if job.project.kind == "dl_train"
        else ("evaluate.py" if job.project.kind == "dl_infer" else "preprocess.py")
    )
    c, d = job.cause, job.detail
    frame: UserFrame | None = None

    def traceback(failure: str, exception: list[str]) -> list[str]:
        nonlocal frame
        lines, frame = tracebacks.render(
            rng,
            user=job.user.name,
            account=job.user.account,
            script=script,
            kind=job.project.kind,
            failure=failure,
            exception=exception,
            ranks=max(1, job.gpus_used if job.project.kind == "dl_train" else 1),
        )
        return lines

    if c == "time_limit":
        if job.uses_step0:
            out.append(
                f"slurmstepd: error: *** STEP {jid}.0 ON {host} CANCELLED AT {end} DUE TO TIME LIMIT ***"
            )
        out.append(f"slurmstepd: error: *** JOB {jid} ON {host} CANCELLED AT {end} DUE TO TIME LIMIT ***")
    elif c == "host_oom":
        step = f"{jid}.0" if job.uses_step0 else f"{jid}.batch"
        cmd = job.text.strip().splitlines()[-1][:120] if job.text else "python"
        if not job.uses_step0:
            out.append(
                f"/var/spool/slurmd/job{jid}/slurm_script: line {rng.randint(14, 40)}: "
                f"{rng.randint(2000, 90000)} Killed                  {cmd}"
            )
        out.append(
            f"slurmstepd: error: Detected {rng.choice((1, 1, 2))} oom-kill event(s) in StepId={step}. "
            "Some of your processes may have been killed by the cgroup out-of-memory handler."
        )
        if job.uses_step0:
            out.append(f"srun: error: {host}: task 0: Out Of Memory")
    elif c == "gpu_oom":
        card = job.vram_card_bytes / GIB
        alloc = rng.uniform(0.5, 2.5)
        used = card - rng.uniform(0.05, 0.4)
        out += traceback(
            rng.choice(("gpu_oom", "backward")),
            [
                f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {alloc:.2f} GiB. "
                f"GPU 0 has a total capacity of {card - 0.5:.2f} GiB of which {rng.uniform(0.01, 0.4):.2f} "
                f"GiB is free. Including non-PyTorch memory, this process has {used:.2f} GiB memory in use. "
                f"Of the allocated memory {used * 0.9:.2f} GiB is allocated by PyTorch, and "
                f"{used * 0.05:.2f} GiB is reserved by PyTorch but unallocated. {OOM_HINT}",
            ],
        )
    elif c == "software_error":
        if d == "import_error":
            mod = rng.choice(("transformers", "flash_attn", "mpi4py", "pyarrow", "wandb"))
            out = traceback("import", [f"ModuleNotFoundError: No module named '{mod}'"])
        elif d == "file_not_found":
            path = f"/scratch/{job.user.name}/data/{rng.choice(('train', 'val', 'shard_0007'))}.parquet"
            out = traceback(
                "file_not_found",
                [
                    f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'",
                ],
            )
        elif d == "assertion":
            out += traceback(
                rng.choice(("assertion", "worker_assertion")),
                [
                    f"AssertionError: torch.Size([{rng.choice((16, 32))}, 512, 1024])",
                ],
            )
        elif d == "illegal_memory_access":
            out += traceback(
                "cuda_error",
                [
                    "RuntimeError: CUDA error: an illegal memory access was encountered",
                    ASYNC_NOTE,
                    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
                    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
                ],
            )
        else:  # segfault
            exe = job.text.strip().splitlines()[-1][:100] if job.text else "./a.out"
            if job.uses_step0:
                out.append(
                    f"srun: error: {host}: task {rng.randrange(job.ntasks)}: Segmentation fault (core dumped)"
                )
            else:
                out.append(
                    f"/var/spool/slurmd/job{jid}/slurm_script: line {rng.randint(14, 40)}: "
                    f"{rng.randint(2000, 90000)} Segmentation fault      (core dumped) {exe}"
                )
    elif c in ("nccl_timeout", "nccl_error"):
        rank = rng.randrange(max(1, job.gpus_used))
        if c == "nccl_timeout":
            seq = rng.randint(100, 500000)
            numel = rng.randint(10**6, 10**9)
            when = datetime.fromtimestamp(job.end, UTC).strftime("%m%d %H:%M:%S")
            for r in sorted({rank, 0}):
                out.append(
                    f"[rank{r}]:[E{when}.{rng.randint(100000, 999999)} ProcessGroupNCCL.cpp:607] [Rank {r}] "
                    f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
                    f"NumelIn={numel}, NumelOut={numel}, Timeout(ms)=1800000) ran for "
                    f"{1800000 + rng.randint(10, 3000)} milliseconds before timing out."
                )
        else:
            peer = f"10.10.{rng.randint(0, 9)}.{rng.randint(1, 250)}"
            out += traceback(
                "nccl_error",
                [
                    "torch.distributed.DistBackendError: NCCL error in: "
                    "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or "
                    "there was a network error, NCCL version 2.21.5",
                    "ncclRemoteError: A call failed possibly due to a network error or a remote process "
                    "exiting prematurely.",
                    "Last error:",
                    f"NET/IB : Got completion from peer {peer}<{rng.randint(30000, 60000)}> with error 12, "
                    "opcode 0, len 0, vendor err 129",
                ],
            )
        out.append(f"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: {script} FAILED")
    elif c == "gpu_hardware":
        if job.xid and rng.random() < 0.6:
            secs = rng.uniform(10000, 900000)
            bus = 0x07 + (job.gpu_units[0][1] if job.gpu_units else 0) * 0x10
            out.append(
                f"[{secs:.6f}] NVRM: Xid (PCI:0000:{bus:02x}:00): {job.xid}, pid={rng.randint(2000, 90000)}, "
                f"name=python, {XID_TEXT[job.xid]}"
            )
        if job.xid in (48, 95) or job.xid is None:
            error = ["RuntimeError: CUDA error: uncorrectable ECC error encountered", ASYNC_NOTE]
            out += traceback("cuda_error", error) if rng.random() < 0.5 else error
        elif job.xid == 79:
            out += [
                "RuntimeError: CUDA error: unspecified launch failure",
                ASYNC_NOTE,
            ]
        else:
            out += [
                "RuntimeError: CUDA error: an uncorrectable ECC error was contained; the GPU should be reset"
            ]
    elif c == "node_failure":
        out.append(
            f"slurmstepd: error: *** JOB {jid} ON {host} CANCELLED AT {end} DUE TO NODE FAILURE, "
            "SEE SLURMCTLD LOG FOR DETAILS ***"
        )
    elif c == "preemption":
        out.append(f"slurmstepd: error: *** JOB {jid} ON {host} CANCELLED AT {end} DUE TO PREEMPTION ***")
    elif c == "cancelled":
        if job.uses_step0:
            out.append("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
        out.append(f"slurmstepd: error: *** JOB {jid} ON {host} CANCELLED AT {end} ***")
    if job.project.kind == "dl_train" and c == "gpu_oom":
        out.insert(
            0,
            f"Loading checkpoint shards: 100%|##########| 2/2 [00:{rng.randint(10, 59)}<00:00]  "
            f"model={MODEL_BY_NAME[str(job.params['model'])].hf_name}",
        )
    return "\n".join(out) + "\n", frame
