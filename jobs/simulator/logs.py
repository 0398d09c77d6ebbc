"""stderr tails of jobs that did not complete, in the many wordings Slurm, MPI, PyTorch, JAX, TensorFlow,
NCCL, CUDA, the shell and the kernel use across versions.

Written from what those tools print (several versions and launchers each, and forms seen in real logs), not
from the classifier's pattern table (nothing is imported from pipelines/gold/failures): some wordings here
are ones the table does not know, so a diagnosis measured on these logs can miss. Around the failure a log
carries ordinary noise (warnings, module loads, NCCL INFO lines, health checks, a resume script's stray `ls`
or `mkdir` errors) and sometimes ends early: a node that died or a process killed before its buffers were
flushed leaves a tail cut mid-line, or no failure message at all. Every draw comes from the `rng` passed in,
so the same seed writes the same bytes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
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
# Lines a job log carries whatever happened: warnings, module loads, launcher chatter, a prolog's health
# check, a resume script probing for a checkpoint. Some hold words a failure also uses.
NOISE = (
    "The following have been reloaded with a version change:\n  1) cuda/11.8 => cuda/12.1",
    "{site}/torch/utils/data/dataloader.py:557: UserWarning: This DataLoader will create 16 worker processes "
    "in total. Our suggested max number of worker in current system is 8, which is smaller than what this "
    "DataLoader is going to create.",
    "huggingface/tokenizers: The current process just got forked, after parallelism has already been used. "
    "Disabling parallelism to avoid deadlocks...",
    "{site}/torch/cuda/amp/grad_scaler.py:126: FutureWarning: `torch.cuda.amp.GradScaler(args...)` is "
    "deprecated. Please use `torch.amp.GradScaler('cuda', args...)` instead.",
    "[W socket.cpp:464] [c10d] The server socket cannot be initialized on [::]:29500 (errno: 97 - Address "
    "family not supported by protocol).",
    "{host}:{pid}:{pid} [0] NCCL INFO Bootstrap : Using ib0:10.10.{a}.{b}<0>",
    "{host}:{pid}:{pid} [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.10.{a}.{b}<0>",
    "wandb: Tracking run with wandb version 0.16.3",
    "wandb: WARNING Serializing object of type dict that is 589920 bytes",
    "prolog: GPU health check passed on {host}: 0 uncorrectable ECC errors, 0 retired pages",
    "ls: cannot access 'checkpoints/last.ckpt': No such file or directory",
    "mkdir: cannot create directory '/scratch/shared/hf_cache': Permission denied",
    "INFO:root:resuming from step 0 (no checkpoint found)",
    "[rank0]:[W Utils.hpp:164] Warning: Environment variable NCCL_ASYNC_ERROR_HANDLING is deprecated; use "
    "TORCH_NCCL_ASYNC_ERROR_HANDLING instead (function operator())",
)
NOISE_P = 0.5  # share of logs with noise lines (1-3 of them)
TRUNCATE_P = 0.12  # share of logs whose tail was cut (buffers not flushed, a line half written)


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


class _Log:
    """One job's failure tail being written: the job's facts and the draws every template shares."""

    def __init__(self, job: Job, rng: random.Random) -> None:
        self.job, self.rng = job, rng
        self.host = job.hosts[0] if job.hosts else "unknown"
        self.end = _stamp(job.end)
        self.jid = job.job_id_raw
        self.script = (
            "train.py"
            if job.project.kind == "dl_train"
            else ("evaluate.py" if job.project.kind == "dl_infer" else "preprocess.py")
        )
        self.cmd = job.text.strip().splitlines()[-1][:120] if job.text else "python"
        self.frame: UserFrame | None = None

    def traceback(self, failure: str, exception: list[str]) -> list[str]:
        """A Python traceback (jobs/simulator/tracebacks.py) ending in `exception`; keeps its user frame."""
        job = self.job
        lines, self.frame = tracebacks.render(
            self.rng,
            user=job.user.name,
            account=job.user.account,
            script=self.script,
            kind=job.project.kind,
            failure=failure,
            exception=exception,
            ranks=max(1, job.gpus_used if job.project.kind == "dl_train" else 1),
        )
        return lines

    def slurm(self, reason: str) -> list[str]:
        """slurmstepd's cancellation banner for the job (and its step .0 when the work ran in one)."""
        tail = f" DUE TO {reason}" if reason else ""
        out = []
        if self.job.uses_step0 and self.rng.random() < 0.7:
            out.append(
                f"slurmstepd: error: *** STEP {self.jid}.0 ON {self.host} CANCELLED AT {self.end}{tail} ***"
            )
        out.append(f"slurmstepd: error: *** JOB {self.jid} ON {self.host} CANCELLED AT {self.end}{tail} ***")
        return out

    def shell_killed(self, what: str) -> str:
        """The batch shell's report of a child that died of a signal."""
        pid = self.rng.randint(2000, 90000)
        line = self.rng.randint(14, 40)
        return f"/var/spool/slurmd/job{self.jid}/slurm_script: line {line}: {pid} {what:<24}{self.cmd}"

    def pick(self, *variants: Callable[[], list[str]], weights: tuple[float, ...] | None = None) -> list[str]:
        """One of the variants, drawn by weight."""
        return self.rng.choices(variants, weights=weights)[0]()


def _time_limit(g: _Log) -> list[str]:
    r = g.rng
    return g.pick(
        lambda: g.slurm("TIME LIMIT"),
        # the step's tasks got SIGTERM first; the banner went to the other stream
        lambda: [
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
            f"srun: error: {g.host}: task {r.randrange(max(1, g.job.ntasks))}: Terminated",
        ],
        lambda: [
            "[rank: 0] Received SIGTERM: 15",
            "Bypassing SIGTERM: 15",
            *g.slurm("TIME LIMIT"),
        ],
        lambda: [],  # killed before anything was flushed
        weights=(0.6, 0.15, 0.15, 0.1),
    )


def _host_oom(g: _Log) -> list[str]:
    r, job = g.rng, g.job
    step = f"{g.jid}.0" if job.uses_step0 else f"{g.jid}.batch"
    return g.pick(
        lambda: [
            g.shell_killed("Killed"),
            f"slurmstepd: error: Detected {r.choice((1, 1, 2))} oom-kill event(s) in StepId={step}. "
            "Some of your processes may have been killed by the cgroup out-of-memory handler.",
        ],
        lambda: [
            f"slurmstepd: error: Detected 1 oom_kill event in StepId={step}. Some of the step tasks have "
            "been OOM Killed.",
            f"srun: error: {g.host}: task 0: Out Of Memory",
        ],
        # Slurm without cgroup enforcement (jobacct_gather polling): an older wording
        lambda: [
            f"slurmstepd: error: Step {step} exceeded memory limit ({r.randint(60, 90) * 1048576} > "
            f"{r.randint(40, 59) * 1048576}), being killed",
            "slurmstepd: error: Exceeded job memory limit",
        ],
        lambda: [
            "slurmstepd: error: Exceeded step memory limit at some point.",
            f"srun: error: {g.host}: task 0: Killed",
        ],
        # a DataLoader worker was the victim; the main process reports it
        lambda: g.traceback(
            "dataloader",
            [
                f"RuntimeError: DataLoader worker (pid {r.randint(2000, 90000)}) is killed by signal: "
                "Killed. ",
            ],
        ),
        lambda: [g.shell_killed("Killed")],
        weights=(0.45, 0.15, 0.1, 0.1, 0.1, 0.1),
    )


def _gpu_oom(g: _Log) -> list[str]:
    r, job = g.rng, g.job
    card = job.vram_card_bytes / GIB
    alloc = r.uniform(0.5, 2.5)
    used = card - r.uniform(0.05, 0.4)
    where = r.choice(("gpu_oom", "backward"))
    torch2 = (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {alloc:.2f} GiB. GPU 0 has a "
        f"total capacity of {card - 0.5:.2f} GiB of which {r.uniform(0.01, 0.4):.2f} GiB is free. Including "
        f"non-PyTorch memory, this process has {used:.2f} GiB memory in use. Of the allocated memory "
        f"{used * 0.9:.2f} GiB is allocated by PyTorch, and {used * 0.05:.2f} GiB is reserved by PyTorch but "
        f"unallocated. {OOM_HINT}"
    )
    torch1 = (
        f"RuntimeError: CUDA out of memory. Tried to allocate {alloc * 1024:.2f} MiB (GPU 0; "
        f"{card - 0.5:.2f} GiB total capacity; {used * 0.9:.2f} GiB already allocated; "
        f"{r.uniform(0.01, 0.4) * 1024:.2f} MiB free; {used * 0.95:.2f} GiB reserved in total by PyTorch)"
    )
    shape = f"[{r.choice((16, 32, 64))},{r.choice((2048, 4096))},{r.choice((4096, 11008))}]"
    return g.pick(
        lambda: g.traceback(where, [torch2]),
        lambda: g.traceback(where, [torch1]),
        lambda: g.traceback(
            "cuda_error",
            [
                "RuntimeError: CUDA error: out of memory",
                ASYNC_NOTE,
                "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
            ],
        ),
        lambda: g.traceback(
            where,
            [
                "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
            ],
        ),
        # JAX / XLA and TensorFlow say it their own way
        lambda: g.traceback(
            where,
            [
                f"jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
                f"allocate {int(alloc * GIB)} bytes.",
            ],
        ),
        lambda: g.traceback(
            where,
            [
                "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor "
                f"with shape{shape} and type float on /job:localhost/replica:0/task:0/device:GPU:0 by "
                "allocator GPU_0_bfc",
            ],
        ),
        # the exception line itself was lost: only torch's hint survives the cut
        lambda: [OOM_HINT],
        weights=(0.45, 0.15, 0.1, 0.05, 0.1, 0.05, 0.1),
    )


def _software_error(g: _Log) -> list[str]:
    r, job, d = g.rng, g.job, g.job.detail
    if d == "import_error":
        mod = r.choice(("transformers", "flash_attn", "mpi4py", "pyarrow", "wandb"))
        return g.pick(
            lambda: g.traceback("import", [f"ModuleNotFoundError: No module named '{mod}'"]),
            lambda: g.traceback(
                "import",
                [f"ImportError: cannot import name 'LlamaForCausalLM' from '{mod}' (unknown location)"],
            ),
            lambda: g.traceback(
                "import",
                [f"ImportError: lib{mod}.so.1: cannot open shared object file: No such file or directory"],
            ),
            lambda: [
                f"/var/spool/slurmd/job{g.jid}/slurm_script: line 9: module: command not found",
                f"/var/spool/slurmd/job{g.jid}/slurm_script: line 12: torchrun: command not found",
            ],
            weights=(0.55, 0.15, 0.15, 0.15),
        )
    if d == "file_not_found":
        path = f"/scratch/{job.user.name}/data/{r.choice(('train', 'val', 'shard_0007'))}.parquet"
        return g.pick(
            lambda: g.traceback(
                "file_not_found", [f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'"]
            ),
            lambda: [
                f"python: can't open file '/home/{job.user.name}/{g.script}': [Errno 2] No such file or "
                "directory"
            ],
            lambda: g.traceback(
                "file_not_found",
                [
                    f"OSError: Unable to open file (unable to open file: name = '{path[:-8]}.h5', errno = 2, "
                    "error message = 'No such file or directory', flags = 0, o_flags = 0)"
                ],
            ),
            weights=(0.6, 0.2, 0.2),
        )
    if d == "assertion":
        return g.traceback(
            r.choice(("assertion", "worker_assertion")),
            [f"AssertionError: torch.Size([{r.choice((16, 32))}, 512, 1024])"],
        )
    if d == "illegal_memory_access":
        return g.pick(
            lambda: g.traceback(
                "cuda_error",
                [
                    "RuntimeError: CUDA error: an illegal memory access was encountered",
                    ASYNC_NOTE,
                    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
                    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
                ],
            ),
            lambda: g.traceback("cuda_error", ["RuntimeError: CUDA error: misaligned address", ASYNC_NOTE]),
            lambda: [
                "terminate called after throwing an instance of 'c10::Error'",
                "  what():  CUDA error: an illegal memory access was encountered",
                "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 "
                "(most recent call first):",
            ],
            weights=(0.6, 0.2, 0.2),
        )
    # a crash in compiled code: the shell, srun or Open MPI says so
    exe = job.text.strip().splitlines()[-1][:100] if job.text else "./a.out"
    pid, rank = r.randint(2000, 90000), r.randrange(max(1, job.ntasks))
    return g.pick(
        lambda: (
            [f"srun: error: {g.host}: task {rank}: Segmentation fault (core dumped)"]
            if job.uses_step0
            else [g.shell_killed("Segmentation fault      (core dumped)")]
        ),
        lambda: [
            f"[{g.host}:{pid}] *** Process received signal ***",
            f"[{g.host}:{pid}] Signal: Segmentation fault (11)",
            f"[{g.host}:{pid}] Signal code: Address not mapped (1)",
            f"[{g.host}:{pid}] Failing at address: 0x{r.randrange(16, 4096):x}",
            f"[{g.host}:{pid}] *** End of error message ***",
        ],
        lambda: [
            f"mpirun noticed that process rank {rank} with PID {pid} on node {g.host} exited on signal 11 "
            "(Segmentation fault).",
        ],
        lambda: [f"{exe}: line 1: {pid} Segmentation fault      {exe}"],
        weights=(0.4, 0.25, 0.2, 0.15),
    )


def _nccl_timeout(g: _Log) -> list[str]:
    r, job = g.rng, g.job
    rank = r.randrange(max(1, job.gpus_used))
    seq, numel = r.randint(100, 500000), r.randint(10**6, 10**9)
    when = datetime.fromtimestamp(job.end, UTC).strftime("%m%d %H:%M:%S")
    ran = 1800000 + r.randint(10, 3000)
    work = (
        f"WorkNCCL(SeqNum={seq}, OpType={r.choice(('ALLREDUCE', 'ALLGATHER', '_REDUCE_SCATTER_BASE'))}, "
        f"NumelIn={numel}, NumelOut={numel}, Timeout(ms)=1800000)"
    )

    def new_torch() -> list[str]:
        return [
            f"[rank{x}]:[E{when}.{r.randint(100000, 999999)} ProcessGroupNCCL.cpp:607] [Rank {x}] Watchdog "
            f"caught collective operation timeout: {work} ran for {ran} milliseconds before timing out."
            for x in sorted({rank, 0})
        ]

    def old_torch() -> list[str]:
        return [
            f"[E ProcessGroupNCCL.cpp:821] [Rank {rank}] Watchdog caught collective operation timeout: "
            f"{work} ran for {ran} milliseconds before timing out.",
            "[E ProcessGroupNCCL.cpp:456] Some NCCL operations have failed or timed out. Due to the "
            "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
            "corrupted/incomplete data.",
            "[E ProcessGroupNCCL.cpp:461] To avoid data inconsistency, we are taking the entire process "
            "down.",
        ]

    def heartbeat() -> list[str]:  # torch 2.3+: the heartbeat monitor kills the process first
        return [
            f"[rank{rank}]:[E{when}.{r.randint(100000, 999999)} ProcessGroupNCCL.cpp:1316] "
            f"[PG 0 Rank {rank}] Heartbeat monitor timed out! Process will be terminated after dumping "
            "debug info. workMetaList_.size()=1",
        ]

    def aborted() -> list[str]:
        return [
            f"RuntimeError: NCCL communicator was aborted on rank {rank}.  Original reason for failure was: "
            f"[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds "
            "before timing out.",
        ]

    return g.pick(new_torch, old_torch, heartbeat, aborted, weights=(0.45, 0.25, 0.15, 0.15))


def _nccl_error(g: _Log) -> list[str]:
    r = g.rng
    peer = f"10.10.{r.randint(0, 9)}.{r.randint(1, 250)}<{r.randint(30000, 60000)}>"
    pid = r.randint(2000, 90000)
    warn = (
        f"{g.host}:{pid}:{pid + 7} [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
        f"{peer} with error 12, opcode 0, len 0, vendor err 129"
    )
    return g.pick(
        lambda: g.traceback(
            "nccl_error",
            [
                "torch.distributed.DistBackendError: NCCL error in: "
                "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or "
                "there was a network error, NCCL version 2.21.5",
                "ncclRemoteError: A call failed possibly due to a network error or a remote process "
                "exiting prematurely.",
                "Last error:",
                f"NET/IB : Got completion from peer {peer} with error 12, opcode 0, len 0, vendor err 129",
            ],
        ),
        lambda: g.traceback(
            "nccl_error",
            [
                "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, "
                "unhandled system error, NCCL version 2.14.3",
                "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
                "device error. ",
            ],
        ),
        # NCCL_DEBUG=WARN shows the network's own words; the Python side was cut off
        lambda: [warn, f"{g.host}:{pid}:{pid + 7} [0] NCCL WARN Net : Connection closed by remote peer"],
        lambda: [
            warn,
            f"{g.host}:{pid}:{pid + 7} [0] proxy.cc:1495 NCCL WARN [Proxy Service 1] Failed to execute "
            "operation Connect from rank 1, retcode 6",
        ],
        weights=(0.5, 0.2, 0.15, 0.15),
    ) + (
        [f"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: {g.script} FAILED"]
        if r.random() < 0.6
        else []
    )


def _gpu_hardware(g: _Log) -> list[str]:
    r, job = g.rng, g.job
    out: list[str] = []
    if job.xid and r.random() < 0.6:  # the node forwards its kernel log into the job's
        bus = 0x07 + (job.gpu_units[0][1] if job.gpu_units else 0) * 0x10
        secs = r.uniform(10000, 900000)
        xid = f"NVRM: Xid (PCI:0000:{bus:02x}:00): {job.xid}, pid={r.randint(2000, 90000)}, name=python, "
        out.append(
            r.choice(
                (
                    f"[{secs:.6f}] {xid}{XID_TEXT[job.xid]}",
                    f"{datetime.fromtimestamp(job.end, UTC):%b %d %H:%M:%S} {g.host} kernel: {xid}"
                    f"{XID_TEXT[job.xid]}",
                )
            )
        )
    if job.xid != 79:  # ECC: 48, 94, 95, a row-remap event (63) after one, or no Xid forwarded
        error = ["RuntimeError: CUDA error: uncorrectable ECC error encountered", ASYNC_NOTE]
        return out + g.pick(
            lambda: g.traceback("cuda_error", error),
            lambda: error,
            lambda: [
                "terminate called after throwing an instance of 'c10::Error'",
                "  what():  CUDA error: uncorrectable ECC error encountered",
            ],
            weights=(0.45, 0.35, 0.2),
        )
    # Xid 79: the GPU fell off the bus
    return out + g.pick(
        lambda: ["RuntimeError: CUDA error: unspecified launch failure", ASYNC_NOTE],
        lambda: ["RuntimeError: CUDA error: unknown error", ASYNC_NOTE],
        # the epilog's nvidia-smi
        lambda: [
            f"Unable to determine the device handle for GPU0000:{r.randrange(16, 200):02X}:00.0: GPU "
            "is lost.  Reboot the system to recover this GPU"
        ],
        weights=(0.5, 0.25, 0.25),
    )


def _node_failure(g: _Log) -> list[str]:
    return g.pick(
        lambda: [
            f"slurmstepd: error: *** JOB {g.jid} ON {g.host} CANCELLED AT {g.end} DUE TO NODE FAILURE, "
            "SEE SLURMCTLD LOG FOR DETAILS ***"
        ],
        lambda: [
            f"srun: error: Node failure on {g.host}",
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
        ],
        lambda: [],  # the node died with the log's last buffer
        weights=(0.5, 0.2, 0.3),
    )


def _preemption(g: _Log) -> list[str]:
    return g.pick(
        lambda: g.slurm("PREEMPTION"),
        lambda: ["[rank: 0] Received SIGTERM: 15", *g.slurm("PREEMPTION")],
        lambda: [
            f"slurmstepd: error: *** JOB {g.jid} ON {g.host} CANCELLED AT {g.end} DUE TO JOB REQUEUE ***"
        ],
        lambda: [],
        weights=(0.6, 0.15, 0.1, 0.15),
    )


def _cancelled(g: _Log) -> list[str]:
    return g.pick(
        lambda: (
            (
                ["srun: Job step aborted: Waiting up to 32 seconds for job step to finish."]
                if g.job.uses_step0
                else []
            )
            + g.slurm("")
        ),
        lambda: ["srun: forcing job termination", f"srun: error: {g.host}: task 0: Terminated"],
        lambda: [],
        weights=(0.75, 0.1, 0.15),
    )


FAILURE_TAILS: dict[str, Callable[[_Log], list[str]]] = {
    "time_limit": _time_limit,
    "host_oom": _host_oom,
    "gpu_oom": _gpu_oom,
    "software_error": _software_error,
    "nccl_timeout": _nccl_timeout,
    "nccl_error": _nccl_error,
    "gpu_hardware": _gpu_hardware,
    "node_failure": _node_failure,
    "preemption": _preemption,
    "cancelled": _cancelled,
}


def _noise(g: _Log) -> str:
    """One noise line (or two) filled with the job's host and paths."""
    r = g.rng
    return r.choice(NOISE).format(
        site=f"/home/{g.job.user.name}/.conda/envs/ml/lib/python3.10/site-packages",
        host=g.host,
        pid=r.randint(2000, 90000),
        a=r.randint(0, 9),
        b=r.randint(1, 250),
    )


def _truncate(lines: list[str], rng: random.Random) -> list[str]:
    """The tail cut short: the last line or two lost, the new last line half written. Never a traceback's
    frames (the truth keeps the user's frame it printed)."""
    last_frame = max((i for i, line in enumerate(lines) if 'File "' in line), default=-1)
    keep_from = last_frame + 2  # the frame and its source line stay
    drop = rng.choice((0, 1, 2))
    cut = max(keep_from, len(lines) - drop)
    out = lines[:cut]
    if out and len(out) - 1 >= keep_from and len(out[-1]) > 20:
        out[-1] = out[-1][: rng.randint(len(out[-1]) // 3, len(out[-1]) - 1)]
    return out


def render(job: Job, rng: random.Random) -> tuple[str, UserFrame | None]:
    """The last lines of the job's stderr file for its failure cause, and the user's innermost frame in its
    traceback (None when it prints none)."""
    g = _Log(job, rng)
    out = _progress(job, rng)
    tail = FAILURE_TAILS.get(job.cause, lambda _: [])(g)
    if job.cause == "software_error" and job.detail == "import_error" and tail and "Traceback" in tail[0]:
        out = []  # an import fails at start-up: nothing ran before it
    if rng.random() < NOISE_P:
        for _ in range(rng.randint(1, 3)):
            out.insert(rng.randint(0, len(out)), _noise(g))
    if tail and not any('File "' in line for line in tail) and len(tail) > 1 and rng.random() < 0.3:
        tail.insert(rng.randint(1, len(tail) - 1), _noise(g))  # another process wrote between the lines
    out += tail
    if job.project.kind == "dl_train" and job.cause == "gpu_oom":
        out.insert(
            0,
            f"Loading checkpoint shards: 100%|##########| 2/2 [00:{rng.randint(10, 59)}<00:00]  "
            f"model={MODEL_BY_NAME[str(job.params['model'])].hf_name}",
        )
    if rng.random() < TRUNCATE_P:
        out = _truncate(out, rng)
    return "\n".join(out) + "\n", g.frame
