"""The workload model: users with habits, projects whose scripts drive resource needs, and jobs with outcomes.

Jobs come out of `generate_jobs` in submit order, one at a time, so a month of a million jobs never sits
in memory. Every draw comes from generators seeded by the run's seed: the same seed gives the same month.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from conf import ClusterConfig
from jobs.simulator.alloc import Allocator
from jobs.simulator.catalog import (
    ACT_FACTOR,
    BASE_CAUSE_P,
    CUDA_CONTEXT_GIB,
    FIRST_NAMES,
    GPU_WORKLOADS,
    HW_DETAILS,
    INFER_BYTES_PER_PARAM,
    LABS,
    MODEL_BY_NAME,
    MODELS,
    SPEED_FACTOR,
    TRAIN_BYTES_PER_PARAM,
    USER_CODE_DETAILS,
    WORKLOADS,
)
from pipelines.units import GIB

HOUR = 3600
DAY = 86400
# Partition time limits the simulated site enforces (the scripts and sacct show them).
MAX_TIME_CPU_S = 7 * DAY
MAX_TIME_GPU_S = 2 * DAY


def month_bounds(month: str) -> tuple[int, int]:
    """First second of the month and of the next month, as UTC epoch seconds."""
    year, mon = (int(x) for x in month.split("-"))
    start = datetime(year, mon, 1, tzinfo=UTC)
    end = datetime(year + (mon == 12), mon % 12 + 1, 1, tzinfo=UTC)
    return int(start.timestamp()), int(end.timestamp())


@dataclass
class User:
    """A cluster user and their habits (some of which change at `drift_at`)."""

    name: str
    uid: int
    account: str
    weight: float  # relative activity
    kinds: list[tuple[str, float]]
    mem_factor: float  # median memory request / need
    time_habit: str  # day | max | round | tight
    exclusive: bool  # asks for whole GPU nodes
    gpu_overask: bool  # asks for more GPUs than the code uses
    cpus_per_gpu: int
    style: int  # how the user spells directives (0, 1, 2)
    bug_mult: float
    drift_at: int | None  # epoch second the habit changes
    drift_kind: str | None  # scale_up | right_size
    projects: list[Project] = field(default_factory=list)


@dataclass
class Project:
    """A script a user runs again and again; its parameters are what the script text says."""

    name: str
    kind: str
    params: dict[str, object]


@dataclass
class Job:
    """One simulated job allocation: request, true need, placement, outcome."""

    job_id: str
    job_id_raw: int
    array_job_id: int | None
    array_task_id: int | None
    user: User
    project: Project
    name: str
    partition: str
    qos: str
    params: dict[str, object]
    submit: int
    start: int = 0
    end: int = 0
    runtime_need_s: int = 0  # how long the work needs to finish
    timelimit_s: int = 0
    nodes: int = 1
    ntasks: int = 1  # tasks of the main step (ranks; one per node for srun torchrun)
    uses_step0: bool = False  # the work runs in step .0 (srun/mpirun) rather than .batch
    req_cpus: int = 1
    alloc_cpus: int = 1
    cpus_used: float = 1.0
    mem_need_node_bytes: int = 0  # true per-node peak the work needs
    req_mem_node_bytes: int = 0
    mem_per_cpu: bool = False  # requested as --mem-per-cpu
    exclusive: bool = False
    gpus_per_node: int = 0
    gpus_used: int = 0  # GPUs the code actually drives (per job)
    gpu_model: str | None = None
    mig_profile: str | None = None
    vram_need_bytes: int = 0  # per used GPU
    vram_card_bytes: int = 0
    gpu_util_mean: list[float] = field(default_factory=list)  # per allocated GPU, % (0 = idle)
    tensor_ratio: float = 0.0
    hosts: list[str] = field(default_factory=list)
    gpu_units: list[tuple[str, int, int | None]] = field(default_factory=list)  # (host, gpu, gi)
    cause: str = "none"
    detail: str | None = None
    xid: int | None = None
    failed_unit: int | None = None  # index into gpu_units of a faulty GPU
    cancelled_by: int | None = None
    has_log: bool = False
    peak_mem_node_bytes: int = 0  # what the job reached per node before it ended
    peak_vram_bytes: int = 0
    launcher: str = "python"
    array_size: int = 0
    text: str = ""  # the batch script (filled by scripts.render)
    admin_comment: str = ""  # a jobstats summary (`JS1:...`) written at job end, when simulated

    @property
    def is_gpu(self) -> bool:
        return self.gpus_per_node > 0

    @property
    def elapsed_s(self) -> int:
        return self.end - self.start

    @property
    def alloc_gpus(self) -> int:
        return self.gpus_per_node * self.nodes


def _lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return median * math.exp(rng.gauss(0.0, sigma))


def _weighted(rng: random.Random, items: list[tuple[object, float]]) -> object:
    total = sum(w for _, w in items)
    r = rng.random() * total
    for item, w in items:
        r -= w
        if r <= 0:
            return item
    return items[-1][0]


def _nice_mem_gib(gib: float) -> int:
    """Round a memory request up the way people type it: 1, 2, 4, 8, 12, 16, 24, 32, 48, 64, ... GiB."""
    steps = [1, 2, 4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 384, 512, 768, 1024]
    for s in steps:
        if s >= gib:
            return s
    return int(math.ceil(gib / 256) * 256)


def _nice_time_s(seconds: float, cap: int) -> int:
    """Round a time limit up to what people type: 15/30 min, whole hours, then whole days."""
    for s in (900, 1800, 3600, 2 * 3600, 3 * 3600, 4 * 3600, 6 * 3600, 8 * 3600, 12 * 3600, 16 * 3600, DAY):
        if s >= seconds:
            return min(s, cap)
    return min(math.ceil(seconds / DAY) * DAY, cap)


class Workload:
    """Draws users, projects and jobs for one cluster and month."""

    def __init__(self, cluster: ClusterConfig, month: str, n_jobs: int, seed: int) -> None:
        self.cluster = cluster
        self.month = month
        self.n_jobs = n_jobs
        self.t0, self.t1 = month_bounds(month)
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        self.cpu_parts = [n for n, p in cluster.partitions.items() if p.gpus_per_node == 0]
        self.gpu_parts = [n for n, p in cluster.partitions.items() if p.gpus_per_node > 0]
        if not self.cpu_parts and not self.gpu_parts:
            raise ValueError(f"cluster {cluster.name} declares no partitions")
        self.alloc = Allocator(cluster, self.rng)
        self.users = self._make_users()
        year, mon = (int(x) for x in month.split("-"))
        self.next_raw_id = ((year - 2000) * 12 + mon) * 2_000_000

    # ---- users and projects -------------------------------------------------------------------------
    def _make_users(self) -> list[User]:
        rng = self.rng
        n_users = max(8, min(600, round(math.sqrt(self.n_jobs) * 1.2)))
        kinds = [
            (k, w)
            for k, w in WORKLOADS.items()
            if (k in GPU_WORKLOADS and self.gpu_parts) or (k not in GPU_WORKLOADS and self.cpu_parts)
        ]
        users = []
        for i in range(n_users):
            name = FIRST_NAMES[i % len(FIRST_NAMES)] + (
                str(i // len(FIRST_NAMES)) if i >= len(FIRST_NAMES) else ""
            )
            n_kinds = rng.choice((1, 1, 2, 2, 3))
            mine: list[tuple[str, float]] = []
            for _ in range(n_kinds):
                k = _weighted(rng, kinds)
                if k not in [m for m, _ in mine]:
                    mine.append((k, rng.uniform(0.3, 1.0)))
            tight = rng.random() < 0.12
            drift = rng.random() < 0.3
            user = User(
                name=name,
                uid=100000 + i * 17 + rng.randrange(17),
                account=rng.choice(LABS),
                weight=1.0 / (i + 1) ** 0.8,
                kinds=mine,
                mem_factor=rng.uniform(1.15, 1.6) if tight else min(12.0, _lognormal(rng, 3.6, 0.55)),
                time_habit=str(
                    _weighted(rng, [("day", 0.35), ("max", 0.2), ("round", 0.3), ("tight", 0.15)])
                ),
                exclusive=rng.random() < 0.15,
                gpu_overask=rng.random() < 0.2,
                cpus_per_gpu=rng.choice((4, 8, 8, 16, 16, 32)),
                style=rng.randrange(3),
                bug_mult=_lognormal(rng, 1.0, 0.6),
                drift_at=self.t0 + int(rng.uniform(0.3, 0.7) * (self.t1 - self.t0)) if drift else None,
                drift_kind=rng.choice(("scale_up", "right_size")) if drift else None,
            )
            for kind, _ in mine:
                for j in range(rng.choice((1, 1, 2))):
                    user.projects.append(self._make_project(user, kind, j))
            users.append(user)
        return users

    def _make_project(self, user: User, kind: str, j: int) -> Project:
        rng = self.rng
        p: dict[str, object] = {}
        if kind == "dl_train":
            model = str(
                _weighted(
                    rng, [(m.name, w) for m, w in zip(MODELS, (3, 2, 3, 2, 1, 1.5, 1, 0.6), strict=True)]
                )
            )
            big = MODEL_BY_NAME[model].params_b >= 3
            p["model"] = model
            p["precision"] = str(
                _weighted(rng, [("bf16", 0.6), ("fp16", 0.25), ("fp32", 0.15 if not big else 0.0)])
            )
            p["gpus"] = rng.choice((4, 8) if big else (1, 1, 2, 4, 8))
            p["nodes"] = rng.choice((1, 1, 1, 2, 4)) if p["gpus"] == 8 else 1
            p["launcher"] = (
                "deepspeed"
                if big and rng.random() < 0.6
                else str(
                    _weighted(
                        rng, [("torchrun", 0.5), ("accelerate", 0.2), ("deepspeed", 0.15), ("python", 0.15)]
                    )
                )
            )
            if p["gpus"] == 1 or (user.gpu_overask and rng.random() < 0.5 and p["nodes"] == 1 and not big):
                p["launcher"] = "python"  # plain python drives one GPU whatever was requested
            p["zero"] = 3 if big else (2 if p["launcher"] == "deepspeed" else 0)
            p["workers"] = rng.choice((2, 4, 4, 8, 8, 12))
            p["steps"] = rng.choice((500, 1000, 2000, 5000, 10000, 20000))
            p["batch_size"] = self._fitting_batch(p, rng)
        elif kind == "dl_infer":
            p["model"] = str(_weighted(rng, [(m.name, 1.0) for m in MODELS]))
            p["precision"] = rng.choice(("bf16", "fp16", "int8"))
            p["gpus"] = 2 if user.gpu_overask and rng.random() < 0.5 else 1
            p["launcher"] = "python"
            p["batch_size"] = rng.choice((8, 16, 32, 64, 128))
            p["samples"] = rng.choice((20000, 50000, 100000, 500000))
            p["workers"] = rng.choice((2, 4, 8))
        elif kind == "notebook":
            p["gpus"] = 2 if user.gpu_overask else 1
            p["launcher"] = "jupyter"
            p["port"] = 8800 + rng.randrange(100)
        elif kind == "gmx_gpu":
            p["gpus"] = 1
            p["launcher"] = "gmx"
            p["ntomp"] = rng.choice((8, 12, 16))
            p["nsteps"] = rng.choice((500000, 1000000, 2500000, 5000000))
            p["system"] = rng.choice(("lysozyme", "membrane", "spike", "villin"))
            p["atoms_k"] = {"lysozyme": 33, "membrane": 120, "spike": 850, "villin": 9}[p["system"]]
        elif kind == "mpi_md":
            p["code"] = rng.choice(("lammps", "lammps", "gromacs"))
            p["launcher"] = rng.choice(("mpirun", "srun"))
            p["ranks_per_node"] = rng.choice((16, 32, 64, 128))
            p["nodes"] = rng.choice((1, 1, 2, 4))
            p["nx"] = rng.choice((40, 60, 80, 100, 120))
            p["run_steps"] = rng.choice((5000, 10000, 50000, 100000))
        elif kind == "preprocess":
            p["launcher"] = "python"
            p["shards"] = rng.choice((4, 8, 16, 32, 64))
            p["shard_gib"] = round(rng.uniform(0.2, 3.0), 2)  # hidden: what the data is like
            p["workers"] = rng.choice((4, 8, 16, 32))
            p["dataset"] = rng.choice(("commoncrawl", "genomes", "era5", "imagenet", "pubmed", "sensors"))
        else:  # array_sweep
            p["launcher"] = "python"
            p["tasks"] = rng.choice((5, 10, 20, 50))
            p["cpus"] = rng.choice((1, 2, 4))
            p["mem_gib"] = round(rng.uniform(0.3, 6.0), 2)
            p["minutes"] = rng.choice((5, 15, 30, 60, 120, 240))
            p["tool"] = rng.choice(("sweep", "bwa", "samtools", "fit"))
        slug = {
            "dl_train": "train",
            "dl_infer": "eval",
            "notebook": "jupyter",
            "gmx_gpu": "md",
            "mpi_md": str(p.get("code", "md")),
            "preprocess": "prep",
            "array_sweep": "sweep",
        }[kind]
        return Project(name=f"{slug}-{user.name}-{j}", kind=kind, params=p)

    def _card_gib(self, gpu_model: str) -> float:
        spec = self.cluster.gpu_models.get(gpu_model)
        return spec.memory_gib if spec else 80.0

    def _vram_gib(self, p: dict[str, object], batch: int) -> float:
        m = MODEL_BY_NAME[str(p["model"])]
        prec = str(p["precision"])
        if "steps" in p:  # training
            shard = int(p["gpus"]) * int(p.get("nodes", 1)) if int(p.get("zero", 0)) == 3 else 1
            states = m.params_b * TRAIN_BYTES_PER_PARAM[prec] / max(1, shard)
        else:
            states = m.params_b * INFER_BYTES_PER_PARAM[prec]
        return CUDA_CONTEXT_GIB + states + m.act_gib_per_sample * ACT_FACTOR[prec] * batch

    def _fitting_batch(self, p: dict[str, object], rng: random.Random) -> int:
        card = 80.0
        fits = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if self._vram_gib(p, b) <= 0.85 * card]
        return rng.choice(fits[-3:]) if fits else 1

    # ---- arrivals ---------------------------------------------------------------------------------------
    def _event_times(self, n_events: int) -> np.ndarray:
        """Sorted submit times: weekdays busier than weekends, afternoons busier than nights."""
        hours = np.arange(self.t0, self.t1, HOUR)
        dt = hours.astype("datetime64[s]")
        hod = (dt - dt.astype("datetime64[D]")).astype(int) // HOUR
        dow = (dt.astype("datetime64[D]").astype(int) + 3) % 7  # 0 = Monday
        w = (0.35 + np.exp(-((hod - 15) ** 2) / 30.0)) * np.where(dow >= 5, 0.5, 1.0)
        cdf = np.concatenate([[0.0], np.cumsum(w)])
        cdf /= cdf[-1]
        u = np.sort(self.np_rng.random(n_events))
        edges = np.concatenate([hours, [self.t1]]).astype(float)
        return np.interp(u, cdf, edges).astype(np.int64)

    def _event_sizes(self) -> list[tuple[int, str]]:
        """How many jobs each submission event carries, and its kind (single, burst, array)."""
        sizes: list[tuple[int, str]] = []
        left = self.n_jobs
        while left > 0:
            r = self.rng.random()
            if r < 0.75:
                k, kind = 1, "single"
            elif r < 0.9:
                k, kind = self.rng.randint(2, 6), "burst"
            else:
                k, kind = self.rng.choice((5, 10, 20, 50)), "array"
            k = min(k, left)
            sizes.append((k, kind if k > 1 else "single"))
            left -= k
        return sizes

    def generate_jobs(self) -> Iterator[Job]:
        """Every Slurm job of the month, in submit order (placement happens as they arrive)."""
        sizes = self._event_sizes()
        times = self._event_times(len(sizes))
        weights = [u.weight for u in self.users]
        for (k, kind), t in zip(sizes, times, strict=True):
            user = self.rng.choices(self.users, weights=weights)[0]
            project = self._pick_project(user, kind)
            if kind == "array" or project.kind == "array_sweep":
                yield from self._array(user, project, int(t), k)
            else:
                for i in range(k):
                    yield self._job(user, project, int(t) + i * self.rng.randint(1, 20), None, None)

    def _pick_project(self, user: User, kind: str) -> Project:
        if kind == "array":
            sweeps = [p for p in user.projects if p.kind in ("array_sweep", "preprocess")]
            if sweeps:
                return self.rng.choice(sweeps)
        return self.rng.choice(user.projects)

    def _array(self, user: User, project: Project, t: int, k: int) -> Iterator[Job]:
        array_id = self._raw_id()
        for i in range(k):
            raw = array_id if i == 0 else self._raw_id()
            job = self._job(user, project, t, (array_id, i + 1), raw)
            job.array_size = k
            yield job

    def _raw_id(self) -> int:
        self.next_raw_id += 1 if self.rng.random() < 0.7 else 2
        return self.next_raw_id

    # ---- one job -------------------------------------------------------------------------------------
    def _job(
        self, user: User, project: Project, submit: int, array: tuple[int, int] | None, raw: int | None
    ) -> Job:
        rng = self.rng
        raw = raw if raw is not None else self._raw_id()
        job_id = f"{array[0]}_{array[1]}" if array else str(raw)
        params = self._vary(user, project, submit)
        drifted = user.drift_at is not None and submit >= user.drift_at
        kind = project.kind
        partition = self._partition(kind, params)
        job = Job(
            job_id=job_id,
            job_id_raw=raw,
            array_job_id=array[0] if array else None,
            array_task_id=array[1] if array else None,
            user=user,
            project=project,
            name=self._job_name(project, params),
            partition=partition,
            qos=rng.choice(("normal", "normal", "normal", "high" if kind in GPU_WORKLOADS else "long")),
            params=params,
            submit=submit,
            launcher=str(params.get("launcher", "python")),
        )
        self._needs(job, kind, params)
        self._requests(job, user, drifted)
        self._outcome(job, user)
        self.alloc.place(job)
        return job

    def _vary(self, user: User, project: Project, submit: int) -> dict[str, object]:
        """This run's parameters: mostly the project's own, sometimes tweaked; after a drift, scaled up."""
        rng = self.rng
        p = dict(project.params)
        drifted = user.drift_at is not None and submit >= user.drift_at and user.drift_kind == "scale_up"
        if project.kind == "dl_train":
            if rng.random() < 0.25:
                p["lr"] = rng.choice(("1e-4", "2e-4", "3e-5", "5e-5"))
            if rng.random() < 0.15 or drifted:
                p["batch_size"] = int(p["batch_size"]) * 2
            if rng.random() < 0.2:
                p["steps"] = rng.choice((500, 1000, 2000, 5000, 10000, 20000))
        elif project.kind == "preprocess":
            if rng.random() < 0.3 or drifted:
                p["shards"] = int(p["shards"]) * (2 if drifted else rng.choice((1, 2)))
        elif project.kind == "mpi_md":
            if rng.random() < 0.25 or drifted:
                p["nx"] = int(p["nx"]) + (40 if drifted else rng.choice((-20, 20)))
                p["nx"] = max(20, int(p["nx"]))
        elif project.kind == "dl_infer" and rng.random() < 0.3:
            p["samples"] = rng.choice((20000, 50000, 100000, 500000))
        elif project.kind == "gmx_gpu" and rng.random() < 0.3:
            p["nsteps"] = rng.choice((500000, 1000000, 2500000, 5000000))
        elif project.kind == "array_sweep" and drifted:
            p["mem_gib"] = round(float(p["mem_gib"]) * 2, 2)
        return p

    def _partition(self, kind: str, p: dict[str, object]) -> str:
        if kind in GPU_WORKLOADS:
            if len(self.gpu_parts) > 1 and (
                kind == "dl_train" and MODEL_BY_NAME[str(p["model"])].params_b >= 3
            ):
                return self.gpu_parts[-1]
            return (
                self.gpu_parts[0]
                if self.rng.random() < 0.8 or len(self.gpu_parts) == 1
                else self.gpu_parts[-1]
            )
        return self.cpu_parts[0]

    def _job_name(self, project: Project, p: dict[str, object]) -> str:
        rng = self.rng
        r = rng.random()
        base = project.name.rsplit("-", 2)[0]
        if r < 0.004:
            return f"{base}|{p.get('model', 'run')}"  # a name containing sacct's delimiter
        if r < 0.02:
            return f"{base} run (v{rng.randint(1, 9)})"
        if r < 0.03:
            return f"étude_{base}"
        if r < 0.04:
            return f'{base}="{rng.randint(1, 99)}"'
        if "model" in p:
            return f"{base}-{p['model']}"
        return base

    def _needs(self, job: Job, kind: str, p: dict[str, object]) -> None:
        """True needs from what the script says (plus noise): memory, VRAM, CPUs, runtime, GPU use."""
        rng = self.rng
        part = self.cluster.partitions[job.partition]
        if kind in GPU_WORKLOADS:
            job.gpu_model = part.gpu_model
            job.vram_card_bytes = int(self._card_gib(part.gpu_model or "") * GIB)
            job.gpus_per_node = int(p.get("gpus", 1))
            job.nodes = int(p.get("nodes", 1))
        if kind == "dl_train":
            m = MODEL_BY_NAME[str(p["model"])]
            prec = str(p["precision"])
            batch = int(p["batch_size"])
            used = 1 if job.launcher == "python" else job.gpus_per_node
            job.gpus_used = used * job.nodes
            vram = self._vram_gib(p, batch) * rng.uniform(0.95, 1.05)
            job.vram_need_bytes = int(vram * GIB)
            workers = int(p["workers"])
            host_gib = used * (2.5 + workers * 1.1 + m.params_b * 2.2) * rng.uniform(0.9, 1.15)
            job.mem_need_node_bytes = int(host_gib * GIB)
            job.cpus_used = min(used * (1 + 0.75 * workers), 200.0) * rng.uniform(0.85, 1.0)
            step = m.step_s_per_sample * batch * SPEED_FACTOR[prec] / (1 + 0.85 * (job.gpus_used - 1) / 1.0)
            job.runtime_need_s = int(300 + int(p["steps"]) * step * _lognormal(rng, 1.0, 0.25))
            util = min(97.0, 55 + 12 * math.log2(batch + 1) * (0.6 if workers <= 2 else 1.0)) * rng.uniform(
                0.9, 1.0
            )
            job.gpu_util_mean = [
                util * rng.uniform(0.93, 1.0) if g < used else 0.0
                for _ in range(job.nodes)
                for g in range(job.gpus_per_node)
            ]
            job.tensor_ratio = 0.55 if prec != "fp32" else 0.05
            job.uses_step0 = job.nodes > 1
            job.ntasks = job.nodes if job.nodes > 1 else 1
        elif kind == "dl_infer":
            m = MODEL_BY_NAME[str(p["model"])]
            job.gpus_used = 1
            job.vram_need_bytes = int(self._vram_gib(p, int(p["batch_size"])) * rng.uniform(0.95, 1.05) * GIB)
            job.mem_need_node_bytes = int(
                (3 + m.params_b * 2.5 + int(p["workers"]) * 0.8) * rng.uniform(0.9, 1.1) * GIB
            )
            job.cpus_used = (1 + 0.6 * int(p["workers"])) * rng.uniform(0.8, 1.0)
            job.runtime_need_s = int(
                120 + int(p["samples"]) * m.step_s_per_sample * 0.3 * _lognormal(rng, 1.0, 0.3)
            )
            util = rng.uniform(18, 55)
            job.gpu_util_mean = [util if g == 0 else 0.0 for g in range(job.gpus_per_node)]
            job.tensor_ratio = 0.3
        elif kind == "notebook":
            active = rng.random() < 0.35
            job.gpus_used = 1 if active else 0
            job.vram_need_bytes = int(rng.uniform(2, 12) * GIB) if active else 0
            job.mem_need_node_bytes = int(rng.uniform(2, 10) * GIB)
            job.cpus_used = rng.uniform(0.05, 0.6)
            job.runtime_need_s = int(_lognormal(rng, 3.5 * HOUR, 0.7))
            job.gpu_util_mean = [
                rng.uniform(10, 20) if (g == 0 and active) else 0.0 for g in range(job.gpus_per_node)
            ]
            job.tensor_ratio = 0.1
        elif kind == "gmx_gpu":
            atoms = int(p["atoms_k"])
            job.gpus_used = 1
            job.vram_need_bytes = int((0.6 + atoms * 0.004) * rng.uniform(0.95, 1.05) * GIB)
            job.mem_need_node_bytes = int((0.8 + atoms * 0.006) * rng.uniform(0.9, 1.1) * GIB)
            job.cpus_used = int(p["ntomp"]) * rng.uniform(0.85, 0.98)
            job.runtime_need_s = int(int(p["nsteps"]) * atoms * 2.2e-6 * _lognormal(rng, 1.0, 0.2)) + 60
            job.gpu_util_mean = [rng.uniform(45, 85)]
            job.tensor_ratio = 0.0
        elif kind == "mpi_md":
            rpn = int(p["ranks_per_node"])
            job.nodes = int(p["nodes"])
            job.ntasks = rpn * job.nodes
            job.uses_step0 = True
            atoms = 4 * int(p["nx"]) ** 3
            per_rank_gib = 0.15 + atoms / job.ntasks * 1.6e-6 * rng.uniform(0.9, 1.1)
            job.mem_need_node_bytes = int(per_rank_gib * rpn * GIB)
            job.cpus_used = job.ntasks * rng.uniform(0.9, 0.99)
            job.runtime_need_s = int(
                60 + atoms * int(p["run_steps"]) * 1.1e-6 / job.ntasks * _lognormal(rng, 1.0, 0.3)
            )
        elif kind == "preprocess":
            gib = 0.5 + int(p["shards"]) * float(p["shard_gib"]) * 0.9
            job.mem_need_node_bytes = int(min(gib, 400) * rng.uniform(0.92, 1.08) * GIB)
            job.cpus_used = int(p["workers"]) * rng.uniform(0.5, 0.9)
            job.runtime_need_s = int(
                60
                + int(p["shards"])
                * float(p["shard_gib"])
                * 240
                / math.sqrt(int(p["workers"]))
                * _lognormal(rng, 1.0, 0.35)
            )
        else:
            job.mem_need_node_bytes = int(float(p["mem_gib"]) * rng.uniform(0.85, 1.1) * GIB)
            job.cpus_used = int(p["cpus"]) * rng.uniform(0.6, 0.98)
            job.runtime_need_s = int(int(p["minutes"]) * 60 * _lognormal(rng, 1.0, 0.45))
        if rng.random() < 0.03:  # the heavy tail: the odd run that takes far longer than its siblings
            job.runtime_need_s = int(job.runtime_need_s * rng.paretovariate(1.2))
        cap = MAX_TIME_GPU_S if job.is_gpu else MAX_TIME_CPU_S
        job.runtime_need_s = max(30, min(job.runtime_need_s, int(cap * 1.5)))
        node_mem = part.mem_gib_per_node * GIB
        job.mem_need_node_bytes = max(64 * 1024**2, min(job.mem_need_node_bytes, int(node_mem * 0.9)))

    def _requests(self, job: Job, user: User, drifted: bool) -> None:
        """What the user asks for, by habit: memory at 2-10x need, whole nodes, round time limits."""
        rng = self.rng
        part = self.cluster.partitions[job.partition]
        p = job.params
        kind = job.project.kind
        if kind in ("mpi_md",):
            job.req_cpus = job.ntasks
        elif job.is_gpu:
            job.req_cpus = (
                job.gpus_per_node * (int(p["ntomp"]) if kind == "gmx_gpu" else user.cpus_per_gpu) * job.nodes
            )
        elif kind == "preprocess":
            job.req_cpus = max(int(p["workers"]), rng.choice((8, 16, 32)))
        else:
            job.req_cpus = int(p.get("cpus", 1))
        job.req_cpus = min(job.req_cpus, part.cores_per_node * job.nodes)
        job.cpus_used = min(job.cpus_used, float(job.req_cpus))
        job.exclusive = job.is_gpu and user.exclusive and job.nodes == 1 and rng.random() < 0.8
        factor = user.mem_factor
        if drifted and user.drift_kind == "right_size":
            factor = min(factor, rng.uniform(1.25, 1.7))
        factor *= _lognormal(rng, 1.0, 0.12)
        want_gib = job.mem_need_node_bytes / GIB * max(1.05, factor)
        req_gib = min(_nice_mem_gib(want_gib), int(part.mem_gib_per_node))
        job.mem_per_cpu = kind in ("mpi_md", "array_sweep") and user.style != 0
        if job.mem_per_cpu:
            per_cpu_mb = int(math.ceil(req_gib * 1024 / max(1, job.req_cpus // job.nodes) / 500) * 500)
            job.req_mem_node_bytes = per_cpu_mb * 1024**2 * max(1, job.req_cpus // job.nodes)
        else:
            job.req_mem_node_bytes = req_gib * GIB
        if job.exclusive:
            job.alloc_cpus = part.cores_per_node
            job.req_mem_node_bytes = int(part.mem_gib_per_node * GIB)
        else:
            job.alloc_cpus = job.req_cpus
        cap = MAX_TIME_GPU_S if job.is_gpu else MAX_TIME_CPU_S
        need = job.runtime_need_s
        habit = user.time_habit
        if habit == "day":
            limit = DAY
        elif habit == "max":
            limit = cap
        elif habit == "round":
            limit = _nice_time_s(need * rng.uniform(2, 5), cap)
        else:
            limit = _nice_time_s(need * rng.uniform(1.15, 1.6), cap)
        if kind == "notebook":
            limit = rng.choice((8 * HOUR, 12 * HOUR, DAY))
        job.timelimit_s = limit

    def _cause(self, job: Job, user: User) -> str:
        rng = self.rng
        kind = job.project.kind
        p = dict(BASE_CAUSE_P)
        p["software_error"] *= user.bug_mult
        p["host_oom"] *= 3.0 if user.mem_factor < 1.7 else 0.6
        p["time_limit"] *= {"tight": 3.0, "round": 1.0, "day": 0.7, "max": 0.3}[user.time_habit]
        if kind not in ("dl_train", "dl_infer"):
            p["gpu_oom"] = 0.0
        if job.gpus_used < 2 or kind != "dl_train":
            p["nccl"] = 0.0
        if not job.is_gpu:
            p["gpu_hardware"] = 0.0
        else:
            p["gpu_hardware"] *= math.sqrt(job.alloc_gpus)
        p["node_failure"] *= job.nodes
        if job.exclusive:
            p["host_oom"] = 0.0  # the whole node's memory is hard to exhaust
        if kind == "notebook":
            p.update(cancelled=0.3, time_limit=0.1, software_error=0.01, host_oom=0.0)
        r = rng.random()
        for cause, prob in p.items():
            r -= prob
            if r < 0:
                return cause
        return "none"

    def _outcome(self, job: Job, user: User) -> None:
        """Pick how the job ends and make the request, need and elapsed time agree with it."""
        rng = self.rng
        cause = self._cause(job, user)
        job.cause = cause
        need = job.runtime_need_s
        part = self.cluster.partitions[job.partition]
        cap = MAX_TIME_GPU_S if job.is_gpu else MAX_TIME_CPU_S
        if cause == "time_limit":
            if need <= job.timelimit_s:
                job.runtime_need_s = need = int(job.timelimit_s * rng.uniform(1.1, 2.5))
        elif job.timelimit_s < need * 1.05:
            job.timelimit_s = _nice_time_s(need * 1.3, cap)
            if job.timelimit_s < need:  # longer than the partition allows: the work gets shorter
                job.runtime_need_s = need = int(job.timelimit_s * rng.uniform(0.6, 0.95))
        if cause == "host_oom":
            limit_gib = max(1, int(job.req_mem_node_bytes / GIB))
            if job.mem_need_node_bytes <= job.req_mem_node_bytes:
                job.mem_need_node_bytes = int(job.req_mem_node_bytes * rng.uniform(1.15, 2.0))
            job.req_mem_node_bytes = min(job.req_mem_node_bytes, limit_gib * GIB)
        elif job.req_mem_node_bytes < job.mem_need_node_bytes * 1.05:
            job.req_mem_node_bytes = min(
                int(part.mem_gib_per_node * GIB), _nice_mem_gib(job.mem_need_node_bytes * 1.1 / GIB) * GIB
            )
        if job.is_gpu and job.vram_need_bytes > job.vram_card_bytes * 0.97 and cause != "gpu_oom":
            job.vram_need_bytes = int(job.vram_card_bytes * rng.uniform(0.8, 0.95))
        fraction = {
            "none": 1.0,
            "time_limit": None,
            "host_oom": rng.uniform(0.05, 0.9),
            "gpu_oom": None,
            "software_error": None,
            "nccl": rng.uniform(0.1, 0.8),
            "gpu_hardware": rng.uniform(0.05, 0.95),
            "node_failure": rng.uniform(0.05, 0.95),
            "preemption": rng.uniform(0.05, 0.9),
            "cancelled": rng.uniform(0.02, 0.9),
        }[cause]
        if cause == "time_limit":
            elapsed = job.timelimit_s + rng.randint(5, 90)
        elif cause == "gpu_oom":
            elapsed = min(need, rng.randint(40, 900))
        elif cause == "software_error":
            job.detail = rng.choice(USER_CODE_DETAILS)
            if job.detail == "illegal_memory_access" and not job.is_gpu:
                job.detail = "segfault"
            elapsed = rng.randint(3, 240) if job.detail != "segfault" else int(need * rng.uniform(0.05, 0.9))
        else:
            elapsed = int(need * float(fraction))
        if cause == "nccl":
            job.cause = cause = rng.choice(("nccl_timeout", "nccl_timeout", "nccl_error"))
            job.detail = "watchdog_timeout" if cause == "nccl_timeout" else "remote_error"
            if cause == "nccl_timeout":
                elapsed += 1800  # the default 30 min watchdog before the job dies
        if cause == "gpu_hardware":
            job.xid, job.detail = HW_DETAILS[rng.randrange(len(HW_DETAILS))]
            job.xid = job.xid or None
            elapsed += rng.randint(40, 400)  # the crash reaches the job after the error is logged
        if cause == "gpu_oom":
            job.vram_need_bytes = max(job.vram_need_bytes, int(job.vram_card_bytes * rng.uniform(1.05, 1.6)))
        if cause == "cancelled":
            job.cancelled_by = job.user.uid if rng.random() < 0.92 else 0
        job.runtime_need_s = max(job.runtime_need_s, 1)
        job.end = max(1, int(elapsed))  # elapsed for now; placement turns it into start/end
        # What the job reached before it ended (memory and VRAM grow over the first part of a run).
        early = cause in ("software_error", "gpu_oom") or elapsed < 0.1 * need
        ramp = rng.uniform(0.25, 0.6) if early and cause != "gpu_oom" else 1.0
        if cause == "host_oom":
            job.peak_mem_node_bytes = int(job.req_mem_node_bytes * rng.uniform(0.985, 0.999))
        else:
            job.peak_mem_node_bytes = int(job.mem_need_node_bytes * ramp)
        if job.is_gpu:
            if cause == "gpu_oom":
                job.peak_vram_bytes = int(job.vram_card_bytes - rng.uniform(0.1, 0.6) * GIB)
            else:
                job.peak_vram_bytes = int(job.vram_need_bytes * ramp)
        if cause in ("software_error", "gpu_oom") and elapsed < 60:
            job.cpus_used *= 0.5
        job.has_log = cause != "none" and rng.random() < 0.9


def hostlist(hosts: list[str]) -> str:
    """Slurm's compressed host list: g001,g002,g004 -> g[001-002,004]."""
    if not hosts:
        return "None assigned"
    if len(hosts) == 1:
        return hosts[0]
    groups: dict[str, list[str]] = {}
    for h in hosts:
        i = len(h.rstrip("0123456789"))
        groups.setdefault(h[:i], []).append(h[i:])
    parts = []
    for prefix, nums in groups.items():
        nums = sorted(nums, key=int)
        ranges, run = [], [nums[0]]
        for n in nums[1:]:
            if int(n) == int(run[-1]) + 1:
                run.append(n)
            else:
                ranges.append(run)
                run = [n]
        ranges.append(run)
        spec = ",".join(r[0] if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in ranges)
        parts.append(f"{prefix}[{spec}]")
    return ",".join(parts)
