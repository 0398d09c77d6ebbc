"""`sacct --parsable2` daily dumps: a header line, job and step rows, windows that overlap by 12 hours."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from jobs.simulator.model import DAY, Job, hostlist
from jobs.simulator.scripts import fmt_time, gres_name
from pipelines.units import GIB

ROW_ORDER = [
    "JobID",
    "JobIDRaw",
    "JobName",
    "User",
    "Account",
    "Partition",
    "QOS",
    "State",
    "ExitCode",
    "DerivedExitCode",
    "Submit",
    "Start",
    "End",
    "Elapsed",
    "Timelimit",
    "ReqCPUS",
    "AllocCPUS",
    "ReqMem",
    "ReqTRES",
    "AllocTRES",
    "NNodes",
    "NodeList",
    "NTasks",
    "TotalCPU",
    "MaxRSS",
    "AveRSS",
    "TRESUsageInMax",
    "AdminComment",
]
# The header the dumps carry: this site's --format puts NodeList last (sites order fields as they like;
# readers go by the header). NodeList is never empty ("None assigned" before a job starts).
FIELDS = [f for f in ROW_ORDER if f != "NodeList"] + ["NodeList"]
HEADER = "|".join(FIELDS)
DUMP_DELAY_S = 300  # the cron job runs `sacct -S <day-12h> -E <day+1>` five minutes after midnight
OVERLAP_S = 12 * 3600


def ts(t: int) -> str:
    """sacct's timestamp form (local time of the cluster, here UTC, no zone)."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def cpu_time(seconds: float) -> str:
    """TotalCPU form: MM:SS.mmm under an hour, else [D-]HH:MM:SS."""
    if seconds < 3600:
        m, s = divmod(seconds, 60)
        return f"{int(m):02d}:{s:06.3f}"
    return fmt_time(int(seconds))


def mem(bytes_: int) -> str:
    """A memory size the way sacct prints TRES: whole GiB as G, otherwise M."""
    if bytes_ % GIB == 0:
        return f"{bytes_ // GIB}G"
    return f"{bytes_ // 1024**2}M"


def _tres(job: Job, cpus: int, mem_bytes: int, alloc: bool) -> str:
    parts = [f"billing={cpus}", f"cpu={cpus}"]
    if job.is_gpu:
        g = job.alloc_gpus if not job.mig_profile else 1
        if alloc:
            parts.append(f"gres/gpu:{gres_name(job)}={g}")
        parts.append(f"gres/gpu={g}")
    parts += [f"mem={mem(mem_bytes)}", f"node={job.nodes}"]
    return ",".join(parts)


def _states(job: Job) -> dict[str, tuple[str, str]]:
    """Final state and ExitCode of the job row and each step, and the job's DerivedExitCode, as Slurm
    records each failure."""
    ok, term, kill = ("COMPLETED", "0:0"), ("CANCELLED", "0:15"), ("CANCELLED", "0:9")
    oom, segv = ("OUT_OF_MEMORY", "0:125"), ("FAILED", "139:0")
    c, in_step0 = job.cause, job.uses_step0
    # (job, batch, extern, step 0, derived exit code)
    if c == "none":
        row = (ok, ok, ok, ok, "0:0")
    elif c == "time_limit":
        row = (("TIMEOUT", "0:0"), term, ok, term, "0:0")
    elif c == "host_oom":
        row = (oom, ("FAILED", "1:0"), ok, oom, "0:125") if in_step0 else (oom, oom, ok, ok, "0:125")
    elif c == "node_failure":
        row = (("NODE_FAIL", "0:0"), kill, kill, kill, "0:0")
    elif c == "preemption":
        row = (("PREEMPTED", "0:0"), term, ok, term, "0:0")
    elif c == "cancelled":
        row = ((f"CANCELLED by {job.cancelled_by}", "0:0"), term, ok, term, "0:0")
    elif job.detail == "segfault":
        row = (segv, segv, ok, ("FAILED", "0:11"), "0:11") if in_step0 else (segv, segv, ok, ok, "0:0")
    else:
        failed = ("FAILED", "1:0")
        row = (failed, failed, ok, failed, "1:0")
    return {"job": row[0], "batch": row[1], "extern": row[2], "step0": row[3], "derived": ("", row[4])}


def _kib(bytes_: int) -> int:
    return max(0, bytes_ // 1024)


def main_step_rss_kib(job: Job) -> int:
    """MaxRSS of the step that does the work: the largest task's RSS (tasks on a node share its peak)."""
    per_node_tasks = max(1, job.ntasks // job.nodes) if job.uses_step0 else 1
    return _kib(job.peak_mem_node_bytes // per_node_tasks)


def main_step_tasks(job: Job) -> int:
    return job.ntasks if job.uses_step0 else 1


def _usage(job: Job, cpu_s: float, rss_kib: int, main: bool) -> str:
    parts = [f"cpu={fmt_time(int(cpu_s))}", "energy=0", f"fs/disk={int(rss_kib * 3.7) + 5273}"]
    if job.is_gpu and main:
        if job.mig_profile:  # Slurm cannot read usage of MIG instances: it records zeros
            parts += ["gres/gpumem=0", "gres/gpuutil=0"]
        else:
            util = round(max(job.gpu_util_mean or [0.0]))
            parts += [f"gres/gpumem={job.peak_vram_bytes // 1024**2}M", f"gres/gpuutil={util}"]
    elif job.is_gpu:
        parts += ["gres/gpumem=0", "gres/gpuutil=0"]
    parts += [f"mem={rss_kib}K", f"pages={rss_kib // 3000}", f"vmem={int(rss_kib * 1.08)}K"]
    return ",".join(parts)


def _line(**fields: str) -> str:
    """One dump line: the given fields (by their sacct names), empty for the rest, in the header's order."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise KeyError(f"not a dump field: {sorted(unknown)}")
    return "|".join(fields.get(name, "") for name in FIELDS)


def rows(job: Job, at: int) -> list[str]:
    """The job's sacct rows as a dump taken at epoch second `at` shows them (RUNNING until it ends)."""
    running = at < job.end
    end = min(at, job.end)
    elapsed = end - job.start
    states = _states(job)
    nodes = hostlist(job.hosts)
    req_mem_total = job.req_mem_node_bytes * job.nodes
    total_cpu = job.cpus_used * elapsed
    launcher_cpu = min(total_cpu, 2.0 + elapsed * 0.002)
    main_cpu = total_cpu - launcher_cpu if job.uses_step0 else total_cpu
    job_state, job_exit = ("RUNNING", "0:0") if running else states["job"]
    out = [
        _line(
            JobID=job.job_id,
            JobIDRaw=str(job.job_id_raw),
            JobName=job.name,
            User=job.user.name,
            Account=job.user.account,
            Partition=job.partition,
            QOS=job.qos,
            State=job_state,
            ExitCode=job_exit,
            DerivedExitCode="0:0" if running else states["derived"][1],
            Submit=ts(job.submit),
            Start=ts(job.start),
            End="Unknown" if running else ts(job.end),
            Elapsed=fmt_time(elapsed),
            Timelimit=fmt_time(job.timelimit_s),
            ReqCPUS=str(job.req_cpus),
            AllocCPUS=str(job.alloc_cpus),
            ReqMem=mem(req_mem_total),
            ReqTRES=_tres(job, job.req_cpus, req_mem_total, alloc=False),
            AllocTRES=_tres(job, job.alloc_cpus, req_mem_total, alloc=True),
            NNodes=str(job.nodes),
            NodeList=nodes,
            TotalCPU="00:00:00" if running else cpu_time(total_cpu),
            AdminComment="" if running else job.admin_comment,  # jobstats writes at job end
        )
    ]

    def step(suffix: str, name: str, ntasks: int, cpu_s: float, rss_kib: int, main: bool, start: int) -> str:
        """A step row; the batch step runs on the first node only, with that node's CPUs."""
        batch = suffix == "batch"
        n_nodes = 1 if batch else job.nodes
        cpus = job.alloc_cpus // job.nodes if batch else job.alloc_cpus
        st, ex = ("RUNNING", "0:0") if running else states["step0" if suffix == "0" else suffix]
        done = not running
        return _line(
            JobID=f"{job.job_id}.{suffix}",
            JobIDRaw=f"{job.job_id_raw}.{suffix}",
            JobName=name,
            Account=job.user.account,
            State=st,
            ExitCode=ex,
            Submit=ts(start),
            Start=ts(start),
            End=ts(job.end) if done else "Unknown",
            Elapsed=fmt_time(end - start),
            AllocCPUS=str(cpus),
            AllocTRES=f"cpu={cpus},mem={mem(job.req_mem_node_bytes * n_nodes)},node={n_nodes}",
            NNodes=str(n_nodes),
            NodeList=job.hosts[0] if batch else nodes,
            NTasks=str(ntasks),
            TotalCPU=cpu_time(cpu_s) if done else "00:00:00",
            MaxRSS=f"{rss_kib}K" if done else "",
            AveRSS=f"{int(rss_kib * 0.8)}K" if done else "",
            TRESUsageInMax=_usage(job, cpu_s, rss_kib, main) if done else "",
        )

    # The batch step does the work itself, or only launches step 0 (then it holds little CPU and memory).
    launcher_rss_kib = _kib((12 + job.job_id_raw % 40) * 1024**2)
    extern_rss_kib = _kib((1024 + job.job_id_raw % 900) * 1024)
    if job.uses_step0:
        out.append(step("batch", "batch", 1, launcher_cpu, launcher_rss_kib, False, job.start))
    else:
        out.append(step("batch", "batch", 1, main_cpu, main_step_rss_kib(job), True, job.start))
    out.append(step("extern", "extern", job.nodes, 0.001, extern_rss_kib, False, job.start))
    if job.uses_step0 and elapsed >= 3:
        exe = {"mpi_md": "lmp" if job.params.get("code") == "lammps" else "gmx_mpi"}.get(
            job.project.kind, job.launcher
        )
        out.append(step("0", exe, job.ntasks, main_cpu, main_step_rss_kib(job), True, job.start + 2))
    return out


class SacctDumper:
    """Writes one dump per day as jobs stream in; keeps only jobs a later dump can still show."""

    def __init__(self, out: Path, t0: int) -> None:
        self.dir = out / "sacct"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.t0 = t0
        self.day = 0  # index of the next dump
        self.active: dict[int, Job] = {}
        self.files: list[Path] = []
        self.lines = 0

    def _dump_time(self, day: int) -> int:
        return self.t0 + (day + 1) * DAY + DUMP_DELAY_S

    def add(self, job: Job) -> None:
        """Take the next job in submit order; write every dump that was due before it was submitted."""
        while job.submit >= self._dump_time(self.day):
            self._dump()
        self.active[job.job_id_raw] = job

    def finish(self, t1: int) -> None:
        """Write the month's remaining dumps, then further days until every job is final."""
        while self._dump_time(self.day) <= t1 + DUMP_DELAY_S or self.active:
            self._dump()

    def _dump(self) -> None:
        at = self._dump_time(self.day)
        window_end = at - DUMP_DELAY_S
        window_start = window_end - DAY - OVERLAP_S
        day = datetime.fromtimestamp(window_end - DAY, UTC).strftime("%Y-%m-%d")
        path = self.dir / f"sacct_{day}.txt"
        shown = sorted(
            (j for j in self.active.values() if j.start <= at and j.end >= window_start),
            key=lambda j: j.job_id_raw,
        )
        with path.open("w", encoding="utf-8", newline="\n") as fh:
            fh.write(HEADER + "\n")
            for job in shown:
                for line in rows(job, at):
                    fh.write(line + "\n")
                    self.lines += 1
            self.lines += 1
        self.files.append(path)
        next_start = window_start + DAY
        for key in [k for k, j in self.active.items() if j.end < next_start and j.start <= at]:
            del self.active[key]
        self.day += 1
