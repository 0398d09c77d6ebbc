"""`sacct --parsable2` daily dumps: a header line, job and step rows, windows that overlap by 12 hours."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from jobs.simulator.catalog import GIB
from jobs.simulator.model import DAY, Job, hostlist
from jobs.simulator.scripts import fmt_time, gres_name

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
]
# The header the dumps carry: this site's --format puts NodeList last (sites order fields as they like;
# readers go by the header). NodeList is never empty ("None assigned" before a job starts).
FIELDS = [f for f in ROW_ORDER if f != "NodeList"] + ["NodeList"]
_REORDER = [ROW_ORDER.index(f) for f in FIELDS]
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
    """Final state and ExitCode of the job row and each step, as Slurm records each failure."""
    c = job.cause
    ok = ("COMPLETED", "0:0")
    if c == "none":
        return {"job": ok, "batch": ok, "extern": ok, "step0": ok, "derived": ("", "0:0")}
    if c == "time_limit":
        return {
            "job": ("TIMEOUT", "0:0"),
            "batch": ("CANCELLED", "0:15"),
            "extern": ok,
            "step0": ("CANCELLED", "0:15"),
            "derived": ("", "0:0"),
        }
    if c == "host_oom":
        if job.uses_step0:
            return {
                "job": ("OUT_OF_MEMORY", "0:125"),
                "batch": ("FAILED", "1:0"),
                "extern": ok,
                "step0": ("OUT_OF_MEMORY", "0:125"),
                "derived": ("", "0:125"),
            }
        return {
            "job": ("OUT_OF_MEMORY", "0:125"),
            "batch": ("OUT_OF_MEMORY", "0:125"),
            "extern": ok,
            "step0": ok,
            "derived": ("", "0:125"),
        }
    if c == "node_failure":
        return {
            "job": ("NODE_FAIL", "0:0"),
            "batch": ("CANCELLED", "0:9"),
            "extern": ("CANCELLED", "0:9"),
            "step0": ("CANCELLED", "0:9"),
            "derived": ("", "0:0"),
        }
    if c == "preemption":
        return {
            "job": ("PREEMPTED", "0:0"),
            "batch": ("CANCELLED", "0:15"),
            "extern": ok,
            "step0": ("CANCELLED", "0:15"),
            "derived": ("", "0:0"),
        }
    if c == "cancelled":
        return {
            "job": (f"CANCELLED by {job.cancelled_by}", "0:0"),
            "batch": ("CANCELLED", "0:15"),
            "extern": ok,
            "step0": ("CANCELLED", "0:15"),
            "derived": ("", "0:0"),
        }
    if job.detail == "segfault":
        if job.uses_step0:
            return {
                "job": ("FAILED", "139:0"),
                "batch": ("FAILED", "139:0"),
                "extern": ok,
                "step0": ("FAILED", "0:11"),
                "derived": ("", "0:11"),
            }
        return {
            "job": ("FAILED", "139:0"),
            "batch": ("FAILED", "139:0"),
            "extern": ok,
            "step0": ok,
            "derived": ("", "0:0"),
        }
    failed = ("FAILED", "1:0")
    return {"job": failed, "batch": failed, "extern": ok, "step0": failed, "derived": ("", "1:0")}


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
        [
            job.job_id,
            str(job.job_id_raw),
            job.name,
            job.user.name,
            job.user.account,
            job.partition,
            job.qos,
            job_state,
            job_exit,
            "0:0" if running else states["derived"][1],
            ts(job.submit),
            ts(job.start),
            "Unknown" if running else ts(job.end),
            fmt_time(elapsed),
            fmt_time(job.timelimit_s),
            str(job.req_cpus),
            str(job.alloc_cpus),
            mem(req_mem_total),
            _tres(job, job.req_cpus, req_mem_total, alloc=False),
            _tres(job, job.alloc_cpus, req_mem_total, alloc=True),
            str(job.nodes),
            nodes,
            "",
            "00:00:00" if running else cpu_time(total_cpu),
            "",
            "",
            "",
        ]
    ]

    def step(
        suffix: str,
        name: str,
        key: str,
        cpus: int,
        n_nodes: int,
        node_list: str,
        ntasks: int,
        cpu_s: float,
        rss_kib: int,
        main: bool,
        start: int,
    ) -> list[str]:
        st, ex = ("RUNNING", "0:0") if running else states[key]
        done = not running
        return [
            f"{job.job_id}.{suffix}",
            f"{job.job_id_raw}.{suffix}",
            name,
            "",
            job.user.account,
            "",
            "",
            st,
            ex,
            "",
            ts(start),
            ts(start),
            ts(job.end) if done else "Unknown",
            fmt_time(end - start),
            "",
            "",
            str(cpus),
            "",
            "",
            f"cpu={cpus},mem={mem(job.req_mem_node_bytes * n_nodes)},node={n_nodes}",
            str(n_nodes),
            node_list,
            str(ntasks),
            cpu_time(cpu_s) if done else "00:00:00",
            f"{rss_kib}K" if done else "",
            f"{int(rss_kib * 0.8)}K" if done else "",
            _usage(job, cpu_s, rss_kib, main) if done else "",
        ]

    per_node_cpus = job.alloc_cpus // job.nodes
    if job.uses_step0:
        out.append(
            step(
                "batch",
                "batch",
                "batch",
                per_node_cpus,
                1,
                job.hosts[0],
                1,
                launcher_cpu,
                _kib(12 * 1024**2 + job.job_id_raw % 40 * 1024**2),
                False,
                job.start,
            )
        )
    else:
        out.append(
            step(
                "batch",
                "batch",
                "batch",
                per_node_cpus,
                1,
                job.hosts[0],
                1,
                main_cpu,
                main_step_rss_kib(job),
                True,
                job.start,
            )
        )
    out.append(
        step(
            "extern",
            "extern",
            "extern",
            job.alloc_cpus,
            job.nodes,
            nodes,
            job.nodes,
            0.001,
            _kib((1024 + job.job_id_raw % 900) * 1024),
            False,
            job.start,
        )
    )
    if job.uses_step0 and elapsed >= 3:
        exe = {"mpi_md": "lmp" if job.params.get("code") == "lammps" else "gmx_mpi"}.get(
            job.project.kind, job.launcher
        )
        out.append(
            step(
                "0",
                exe,
                "step0",
                job.alloc_cpus,
                job.nodes,
                nodes,
                job.ntasks,
                main_cpu,
                main_step_rss_kib(job),
                True,
                job.start + 2,
            )
        )
    return ["|".join(r[k] for k in _REORDER) for r in out]


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
