"""What the simulated pods used, as the kubelet's `/metrics/resource` or cAdvisor's `/metrics/cadvisor` shows
it: one file per node (`k8s_metrics/<node>.prom`), scrapes in time order, per-sample millisecond timestamps.

Half the nodes (by a hash of the name) are scraped in cAdvisor form, which adds the pod cgroup series
(`container=""`, the containers plus the pause container) and the pause container (`container="POD"`):
summing every series of a pod would count it twice. Each container is sampled every INTERVAL_S from its
start and once more at its end (its final counter, as the last scrape before the cgroup goes reads it), so
the usage `jobfit ingest k8s-metrics` reads back is the truth's `total_cpu_s` and `peak_mem_bytes`."""

from __future__ import annotations

import zlib
from collections import defaultdict
from pathlib import Path

INTERVAL_S = 60
PAUSE_CPU_PER_S = 0.0002  # the pause container's CPU, core-seconds per second
PAUSE_MEM_BYTES = 716_800
HELP = {
    "container_cpu_usage_seconds_total": (
        "[ALPHA] Cumulative cpu time consumed by the container in core-seconds",
        "counter",
    ),
    "container_memory_working_set_bytes": ("[ALPHA] Current working set of the container in bytes", "gauge"),
}


def is_cadvisor(node: str) -> bool:
    """Whether a node's archive is in cAdvisor form (the same nodes on every run)."""
    return zlib.crc32(node.encode()) % 2 == 1


def sample_times(start: int, end: int, node: str) -> list[int]:
    """A container's sample times: every INTERVAL_S after its start (a per-node phase), and its end."""
    first = start + 1 + zlib.crc32(node.encode()) % (INTERVAL_S - 1)
    return [*range(first, end, INTERVAL_S), end]


def _working_set(peak: int, start: int, end: int, t: int) -> int:
    """Memory ramping from half the peak to the peak at 70 % of the run, then holding it."""
    ramp = max(1.0, 0.7 * (end - start))
    return int(peak * min(1.0, 0.5 + 0.5 * (t - start) / ramp))


def _lines(pod: dict, truth: dict, t: int, cadvisor: bool) -> list[tuple[str, str]]:
    """(metric, line) of one pod's sample at `t`."""
    meta, container = pod["metadata"], pod["spec"]["containers"][0]
    start, end = truth["start_ts"], truth["end_ts"]
    cpu = truth["cpus_used"] * (t - start)
    mem = _working_set(truth["peak_mem_bytes"], start, end, t)
    ts = t * 1000
    who = f'namespace="{meta["namespace"]}",pod="{meta["name"]}"'
    if not cadvisor:
        labels = f'container="{container["name"]}",{who}'
        return [
            (
                "container_cpu_usage_seconds_total",
                f"container_cpu_usage_seconds_total{{{labels}}} {cpu:.6f} {ts}",
            ),
            (
                "container_memory_working_set_bytes",
                f"container_memory_working_set_bytes{{{labels}}} {mem} {ts}",
            ),
        ]
    cgroup = f"/kubepods/burstable/pod{meta['uid']}"
    cid = pod["status"]["containerStatuses"][0].get("containerID", "").split("//")[-1][:64]
    pause_cpu = PAUSE_CPU_PER_S * (t - start)
    series = (
        (container["name"], f"{cgroup}/{cid}", container["image"], cid[:12], cpu, mem),
        ("", cgroup, "", "", cpu + pause_cpu, mem + PAUSE_MEM_BYTES),
        ("POD", f"{cgroup}/pause", "registry.k8s.io/pause:3.9", "pause", pause_cpu, PAUSE_MEM_BYTES),
    )
    out = []
    for name, cg, image, short, c, m in series:
        rest = f'id="{cg}",image="{image}",name="{short}",{who}'
        cpu_labels, mem_labels = f'container="{name}",cpu="total",{rest}', f'container="{name}",{rest}'
        out.append(
            (
                "container_cpu_usage_seconds_total",
                f"container_cpu_usage_seconds_total{{{cpu_labels}}} {c:.6f} {ts}",
            )
        )
        out.append(
            (
                "container_memory_working_set_bytes",
                f"container_memory_working_set_bytes{{{mem_labels}}} {m} {ts}",
            )
        )
    return out


def write_pod_metrics(out: Path, pods: list[tuple[dict, dict]]) -> tuple[int, int]:
    """Write every node's archive of its pods' usage under `out/k8s_metrics`; returns (files, lines)."""
    folder = out / "k8s_metrics"
    folder.mkdir(parents=True, exist_ok=True)
    by_node: dict[str, list[tuple[int, str, int, str]]] = defaultdict(list)
    for order, (pod, truth) in enumerate(pods):
        start, end = truth["start_ts"], truth["end_ts"]
        if end <= start or "containerID" not in pod["status"]["containerStatuses"][0]:
            continue  # never ran: no cgroup, no samples
        node = truth["node_list"]
        for t in sample_times(start, end, node):
            for metric, text in _lines(pod, truth, t, is_cadvisor(node)):
                by_node[node].append((t, metric, order, text))
    lines = 0
    for node, samples in sorted(by_node.items()):
        samples.sort()
        body: list[str] = []
        block: tuple[int, str] | None = None
        for t, metric, _, text in samples:
            if (t, metric) != block:  # each scrape gives each metric its HELP/TYPE, as a /metrics page does
                block = (t, metric)
                help_text, kind = HELP[metric]
                body += [f"# HELP {metric} {help_text}", f"# TYPE {metric} {kind}"]
            body.append(text)
        (folder / f"{node}.prom").write_text("\n".join(body) + "\n", encoding="utf-8", newline="\n")
        lines += len(body)
    return len(by_node), lines
