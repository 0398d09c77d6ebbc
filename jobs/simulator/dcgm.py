"""dcgm-exporter scrapes: Prometheus text exposition with millisecond timestamps, one file per host and day.

Only GPUs allocated to a job emit series (an unallocated GPU's idle series would multiply the data without
telling anyone anything). Each scrape repeats `# HELP`/`# TYPE` for each metric, as an exporter's /metrics
page does, and scrapes are concatenated in time order.
"""

from __future__ import annotations

import hashlib
import random
import zlib
from datetime import UTC, datetime
from pathlib import Path

from jobs.simulator import counters
from jobs.simulator.alloc import Allocator
from jobs.simulator.catalog import DCGM_MODEL_NAMES, TDP_W
from jobs.simulator.model import DAY, Job
from pipelines.units import MIB

DEFAULT_INTERVAL_S = 600
DRIVER = "550.54.15"
RESERVED_MIB = 512  # framebuffer the driver keeps: FB_USED + FB_FREE is this much below the card size
METRICS = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."),
    ("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active."),
)

# (time, gpu, MIG instance, job id, the METRICS' values, the DCP fields' values: counters.PROF_METRICS)
Sample = tuple[int, int, int | None, str, tuple[int, int, int, float, int, float, float], tuple]


def gpu_uuid(cluster: str, host: str, gpu: int) -> str:
    """A stable GPU UUID for a host's GPU (the same on every run)."""
    h = hashlib.sha1(f"{cluster}/{host}/{gpu}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class DcgmWriter:
    """Buffers each host-day's samples and writes the day once no later job can add to it."""

    def __init__(
        self,
        out: Path,
        cluster: str,
        alloc: Allocator,
        interval_s: int,
        seed: int,
        models: dict[str, str],
        prof_share: float = 0.0,
    ) -> None:
        self.dir = out / "dcgm"
        self.models = models  # partition -> GPU model (config names), for the modelName label
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cluster = cluster
        self.alloc = alloc
        self.interval = interval_s
        self.rng = random.Random(seed * 7919 + 17)
        self.buffers: dict[tuple[str, int], list[Sample]] = {}
        self.files: list[Path] = []
        self.seed = seed
        self.prof_share = prof_share  # hosts whose exporter exports the DCP fields (counters.exports_prof)
        self.lines = 0
        self.samples = 0

    def offset(self, host: str) -> int:
        """Each host's exporter is scraped a few seconds off the grid, always by the same amount."""
        return zlib.crc32(host.encode()) % 7

    def sample_times(self, job: Job, host: str) -> list[int]:
        """Scrape times on a host that fall inside the job's run, [start, end)."""
        off = self.offset(host)
        first = -(-(job.start - off) // self.interval) * self.interval + off
        return list(range(first, job.end, self.interval))

    def add(self, job: Job) -> dict[str, object]:
        """Generate the job's samples; returns what the truth table needs (per-GPU means, peaks, counts)."""
        rng = self.rng
        card_mib = job.vram_card_bytes // MIB
        total_mib = card_mib - (0 if job.mig_profile else RESERVED_MIB)
        tdp = TDP_W.get(job.gpu_model or "", 400.0)
        peak_mib = min(job.peak_vram_bytes // MIB, total_mib)
        means: list[float] = []
        peaks: list[int] = []
        n_samples = 0
        xid_ts = None
        # The DCP counters draw from the job's own generator: the other metrics' values stay as they were.
        crng = counters.job_rng(self.seed, job)
        bottleneck = counters.true_bottleneck(job, crng)
        dcp_means = counters.job_means(job, bottleneck, crng)
        prof_samples = 0
        for i, (host, gpu, gi) in enumerate(job.gpu_units):
            times = self.sample_times(job, host)
            util_mean = job.gpu_util_mean[i] if i < len(job.gpu_util_mean) else 0.0
            active = util_mean > 0
            my_peak = peak_mib if i == 0 else int(peak_mib * rng.uniform(0.96, 1.0))
            peak_at = (
                (len(times) - 1 if job.cause == "gpu_oom" else rng.randrange(len(times))) if times else -1
            )
            utils = []
            prof = counters.exports_prof(host, self.prof_share)
            gpu_factor = crng.uniform(0.93, 1.05)
            for k, t in enumerate(times):
                # The Xid shows on the faulty GPU's last scrape; utilisation is left as it was so that the
                # truth's idle and under-use hours follow from the samples alone.
                faulted = job.cause == "gpu_hardware" and k == len(times) - 1
                if active:
                    util = max(10, min(100, round(util_mean + rng.gauss(0, 6))))
                    fb = my_peak if k == peak_at else int(my_peak * rng.uniform(0.85, 1.0))
                    sm = util / 100 * rng.uniform(0.55, 0.9)
                    tensor = min(1.0, sm * job.tensor_ratio * rng.uniform(0.8, 1.2))
                    power = 60 + (tdp - 60) * util / 100 * rng.uniform(0.7, 1.0)
                else:
                    util, fb, sm, tensor = 0, 0, 0.0, 0.0
                    power = rng.uniform(55, 65)
                dcp = counters.IDLE_SAMPLE
                if prof and active:
                    dcp, sm, tensor = counters.sample(dcp_means, gpu_factor, job.gpu_model, crng)
                prof_samples += prof
                xid = 0
                if faulted and i == (job.failed_unit or 0) and job.xid:
                    xid = job.xid
                    xid_ts = t
                utils.append(util)
                self.buffers.setdefault((host, t // DAY), []).append(
                    (
                        t,
                        gpu,
                        gi,
                        str(job.job_id_raw),
                        (util, total_mib - fb, fb, power, xid, sm, tensor),
                        dcp if prof else (),
                    )
                )
            n_samples += len(times)
            means.append(sum(utils) / len(utils) if utils else util_mean)
            peaks.append(my_peak if times and active else (job.peak_vram_bytes // MIB if active else 0))
        self.samples += n_samples
        return {
            "util_means": means,
            "peak_mib": max(peaks) if peaks else 0,
            "samples": n_samples,
            "xid_ts": xid_ts,
            "bottleneck": bottleneck,
            "prof_samples": prof_samples,
        }

    def flush(self, before: int) -> None:
        """Write every host-day that ends at or before `before` (no job submitted later can reach it)."""
        for key in sorted(k for k in self.buffers if (k[1] + 1) * DAY <= before):
            self._write(key)

    def finish(self) -> None:
        for key in sorted(self.buffers):
            self._write(key)

    def _labels(self, host: str, gpu: int, gi: int | None, job_raw: str) -> str:
        node = self.alloc.by_name[host]
        model = DCGM_MODEL_NAMES.get(self._model(host), self._model(host))
        parts = [
            f'gpu="{gpu}"',
            f'UUID="{gpu_uuid(self.cluster, host, gpu)}"',
            f'pci_bus_id="00000000:{0x07 + gpu * 0x10:02X}:00.0"',
            f'device="nvidia{gpu}"',
            f'modelName="{model}"',
        ]
        if gi is not None:
            parts += ['GPU_I_PROFILE="3g.40gb"', f'GPU_I_ID="{gi}"']
        parts.append(f'{node.host_label}="{host}"')
        parts.append(f'DCGM_FI_DRIVER_VERSION="{DRIVER}"')
        if node.hpc_job_label:
            parts.append(f'hpc_job="{job_raw}"')
        return "{" + ",".join(parts) + "}"

    def _model(self, host: str) -> str:
        return self.models.get(self.alloc.by_name[host].partition, "")

    def _write(self, key: tuple[str, int]) -> None:
        host, day = key
        samples = sorted(self.buffers.pop(key), key=lambda s: (s[0], s[1], s[2] or 0))
        date = datetime.fromtimestamp(day * DAY, UTC).strftime("%Y%m%d")
        path = self.dir / f"{host}-{date}.prom"
        with path.open("a", encoding="utf-8", newline="\n") as fh:
            i = 0
            while i < len(samples):
                t = samples[i][0]
                j = i
                while j < len(samples) and samples[j][0] == t:
                    j += 1
                scrape = samples[i:j]
                labels = [self._labels(host, s[1], s[2], s[3]) for s in scrape]
                ms = t * 1000 + zlib.crc32(f"{host}{t}".encode()) % 1000
                metrics = [(4, m, name, help_) for m, (name, help_) in enumerate(METRICS)]
                if counters.exports_prof(host, self.prof_share):
                    metrics += [(5, m, name, help_) for m, (name, help_) in enumerate(counters.PROF_METRICS)]
                for part, m, name, help_ in metrics:
                    fh.write(f"# HELP {name} {help_}\n# TYPE {name} gauge\n")
                    for s, lab in zip(scrape, labels, strict=True):
                        v = s[part][m]
                        text = f"{v:.6f}" if isinstance(v, float) else str(v)
                        fh.write(f"{name}{lab} {text} {ms}\n")
                    self.lines += 2 + len(scrape)
                i = j
        if path not in self.files:
            self.files.append(path)
