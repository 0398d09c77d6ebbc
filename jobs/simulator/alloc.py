"""Placement: which nodes and GPUs each job gets, and when it starts (FIFO with backfill onto free GPUs)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from conf import ClusterConfig
from pipelines.units import GIB

if TYPE_CHECKING:
    from jobs.simulator.model import Job

MAX_WAIT_S = 8 * 3600  # beyond this queue wait the simulator adds an overflow node instead of waiting
MIG_PROFILE = "3g.40gb"
MIG_GIB = 40


@dataclass
class Node:
    """A compute node and how its GPU exporter labels series."""

    name: str
    partition: str
    gpus: int
    hpc_job_label: bool  # dcgm-exporter runs with --hpc-job-mapping-dir here
    host_label: str  # "Hostname" (exporters before the 2026 rename) or "hostname"
    mig: bool  # GPUs split into two 3g.40gb instances each
    free_at: dict[tuple[int, int | None], int] = field(default_factory=dict)

    @property
    def whole_node(self) -> bool:
        """Nodes without job labels are scheduled one job at a time (so telemetry attributes by host)."""
        return not self.hpc_job_label


def node_prefix(partition: str) -> str:
    """c for cpu, g for gpu, gh for gpu-h100: the first letter of each dash-separated word."""
    return "".join(w[0] for w in partition.split("-") if w)


class Allocator:
    """Tracks when each GPU (or MIG instance) is free and places jobs as they arrive."""

    def __init__(self, cluster: ClusterConfig, rng: random.Random) -> None:
        self.rng = rng
        self.nodes: dict[str, list[Node]] = {}
        gpu_parts = [n for n, p in cluster.partitions.items() if p.gpus_per_node > 0]
        used_prefixes: set[str] = set()
        for name, part in cluster.partitions.items():
            prefix = node_prefix(name)
            while prefix in used_prefixes:
                prefix += "x"
            used_prefixes.add(prefix)
            model = cluster.gpu_models.get(part.gpu_model or "")
            mig_ok = (
                part.gpus_per_node > 0
                and len(gpu_parts) > 1
                and name == gpu_parts[-1]
                and part.nodes >= 2
                and model is not None
                and MIG_PROFILE in model.mig_profiles
            )
            nodes = []
            for i in range(1, part.nodes + 1):
                node = Node(
                    name=f"{prefix}{i:03d}",
                    partition=name,
                    gpus=part.gpus_per_node,
                    hpc_job_label=i % 4 != 0,
                    host_label="Hostname" if i % 2 == 1 else "hostname",
                    mig=mig_ok and i == 1,
                )
                self._init_units(node)
                nodes.append(node)
            self.nodes[name] = nodes
        self.prefix = {n: nodes[0].name[:-3] for n, nodes in self.nodes.items() if nodes}
        self.by_name = {node.name: node for nodes in self.nodes.values() for node in nodes}

    @staticmethod
    def _init_units(node: Node) -> None:
        for g in range(node.gpus):
            if node.mig:
                node.free_at[(g, 1)] = 0
                node.free_at[(g, 2)] = 0
            else:
                node.free_at[(g, None)] = 0

    def _overflow(self, partition: str) -> Node:
        nodes = self.nodes[partition]
        template = nodes[0]
        node = Node(
            name=f"{self.prefix[partition]}{len(nodes) + 1:03d}",
            partition=partition,
            gpus=template.gpus,
            hpc_job_label=True,
            host_label="hostname",
            mig=False,
        )
        self._init_units(node)
        nodes.append(node)
        self.by_name[node.name] = node
        return node

    def place(self, job: Job) -> None:
        """Set the job's start, end, hosts and GPU units (job.end holds its elapsed seconds on entry)."""
        elapsed = job.end
        if not job.is_gpu:
            wait = min(int(math.exp(self.rng.gauss(math.log(120), 1.4))), 2 * 86400)
            job.start = job.submit + wait
            pool = self.nodes[job.partition]
            picks = self.rng.sample(range(len(pool)), min(job.nodes, len(pool)))
            job.hosts = sorted(pool[i].name for i in picks)
            job.end = job.start + elapsed
            return
        ready = job.submit + min(int(math.exp(self.rng.gauss(math.log(60), 1.0))), 3600)
        if self._mig_eligible(job):
            mig = next((n for n in self.nodes[job.partition] if n.mig), None)
            if mig is not None and self.rng.random() < 0.6:
                unit = min(mig.free_at, key=lambda u: (mig.free_at[u], u))
                if mig.free_at[unit] <= ready:
                    job.start, job.end = ready, ready + elapsed
                    mig.free_at[unit] = job.end
                    job.hosts = [mig.name]
                    job.gpu_units = [(mig.name, unit[0], unit[1])]
                    job.mig_profile = MIG_PROFILE
                    job.vram_card_bytes = MIG_GIB * GIB
                    return
        candidates = []
        for node in self.nodes[job.partition]:
            if node.mig:
                continue
            times = sorted(node.free_at.values())
            whole = node.whole_node or job.exclusive
            t = times[-1] if whole else times[job.gpus_per_node - 1]
            candidates.append((max(t, ready), node.name, node))
        candidates.sort(key=lambda c: (c[0], c[1]))
        chosen = [c[2] for c in candidates[: job.nodes]]
        start = (
            max(c[0] for c in candidates[: job.nodes]) if len(chosen) == job.nodes else ready + MAX_WAIT_S + 1
        )
        if start - ready > MAX_WAIT_S:
            chosen = [self._overflow(job.partition) for _ in range(job.nodes)]
            start = ready
        job.start, job.end = start, start + elapsed
        job.hosts = [n.name for n in chosen]
        for node in chosen:
            whole = node.whole_node or job.exclusive
            free = sorted((u for u, t in node.free_at.items() if t <= start), key=lambda u: u[0])
            mine = free[: job.gpus_per_node]
            for u in node.free_at if whole else mine:
                node.free_at[u] = job.end
            job.gpu_units.extend((node.name, u[0], None) for u in mine)

    @staticmethod
    def _mig_eligible(job: Job) -> bool:
        return (
            job.gpus_per_node == 1
            and job.nodes == 1
            and not job.exclusive
            and job.cause != "gpu_oom"
            and job.vram_need_bytes <= 0.85 * MIG_GIB * GIB
        )
