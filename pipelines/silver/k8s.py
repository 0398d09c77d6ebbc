"""Kubernetes Pod objects into silver.jobs rows (pure Python: a pod is a small JSON object).

Mapping (documented in README): job_id = `namespace/name`, job_id_raw = metadata.uid, partition and account =
the namespace, job_name = the owning Job (label `job-name`, else the first ownerReference), user = label
`user` when present. Requests follow the scheduler's rule: max(sum over app and sidecar containers, each
regular init container plus the sidecars started before it), a missing request defaulting to the limit.
CPUs are rounded up to whole cores (`500m` -> 1); the exact request stays in bronze. Limits
(`limit_cpu_cores`, exact, and `limit_mem_bytes`) follow the same rule (the pod cgroup's limit), and are
null when an app or sidecar container leaves the resource unlimited (the pod may then use what its node
has). Pod-level `spec.resources` (Kubernetes 1.32+) wins for CPU and memory. GPUs have no separate limit
(Kubernetes requires request = limit for extended resources); they are `nvidia.com/gpu` plus MIG slices
(`nvidia.com/mig-1g.10gb`), whose profile becomes gpu_model. State:
Succeeded COMPLETED, Failed FAILED, Pending PENDING, Running RUNNING, Unknown UNKNOWN; a Failed pod with a
container terminated `OOMKilled` (any exit code) is OUT_OF_MEMORY, pod reason `DeadlineExceeded` is TIMEOUT
and `Evicted` is PREEMPTED. Exit 137 with reason `Error` is a kill, not an OOM. state_raw keeps
`phase[:reason[:exit]]`, with `last:` for a restarted container's last state."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pipelines.schemas import SILVER_JOBS
from pipelines.states import FINAL_STATES
from pipelines.units import MEM_FACTORS

_QUANTITY_RE = re.compile(
    r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$"
)
# Binary suffixes (Ki, Mi, Gi, ...) are Slurm's K, M, G, ... (pipelines.units); the rest are decimal.
_SUFFIX = {
    **{f"{letter}i": factor for letter, factor in MEM_FACTORS.items() if letter},
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}
GPU_RESOURCE = "nvidia.com/gpu"
# Resources a pod may set for itself in spec.resources (PodLevelResources; containers set the rest).
_POD_LEVEL_RESOURCES = ("cpu", "memory")
MIG_PREFIX = "nvidia.com/mig-"

PHASE_STATES = {
    "Pending": "PENDING",
    "Running": "RUNNING",
    "Succeeded": "COMPLETED",
    "Failed": "FAILED",
    "Unknown": "UNKNOWN",
}
POD_REASON_STATES = {"DeadlineExceeded": "TIMEOUT", "Evicted": "PREEMPTED", "Preempting": "PREEMPTED"}


def parse_quantity(value: str | int | float) -> float:
    """A Kubernetes quantity (`500m`, `1.5`, `4Gi`, `4G`, `4e9`, `128974848`, `1Ki`) as a plain number."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    m = _QUANTITY_RE.match(str(value).strip())
    if not m:
        raise ValueError(f"not a quantity: {value!r}")
    sign, number, exponent, suffix = m.groups()
    n = float(number) * (10 ** int(exponent[1:]) if exponent else _SUFFIX.get(suffix or "", 1))
    return -n if sign == "-" else n


def cpu_cores(value: str | int | float) -> float:
    """A CPU quantity in cores (`500m` -> 0.5)."""
    return parse_quantity(value)


def memory_bytes(value: str | int | float) -> int:
    """A memory quantity in bytes, rounded up as Kubernetes does (`4Gi` -> 4294967296, `4G` -> 4e9)."""
    return math.ceil(parse_quantity(value) - 1e-9)


def _ts(value: Any) -> datetime | None:
    """An RFC 3339 time (`2020-04-24T20:46:44Z`) as naive UTC; None when absent or not a time."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed


def _amount(resource: str, raw: str | int | float) -> float:
    """One quantity of a resource as a plain number: memory and storage in whole bytes."""
    return memory_bytes(raw) if resource in ("memory", "ephemeral-storage") else parse_quantity(raw)


def _resources(container: dict) -> dict[str, float]:
    """A container's effective requests by resource name (request, else limit), in plain numbers."""
    res = container.get("resources") or {}
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    return {name: _amount(name, requests.get(name, limits.get(name))) for name in set(limits) | set(requests)}


def _limits(container: dict) -> dict[str, float]:
    """A container's limits by resource name, in plain numbers (memory in bytes)."""
    limits = (container.get("resources") or {}).get("limits") or {}
    return {name: _amount(name, raw) for name, raw in limits.items()}


def _is_sidecar(container: dict) -> bool:
    """A restartable init container (`restartPolicy: Always`): runs beside the app containers."""
    return container.get("restartPolicy") == "Always"


def _pod_effective(spec: dict, amounts: Callable[[dict], dict[str, float]], limits: bool) -> dict[str, float]:
    """Kubernetes' effective pod amount per resource: max(sum over app and sidecar containers, each regular
    init container plus the sidecars declared before it). For limits, only resources every app and sidecar
    container limits (one unlimited container leaves the pod unlimited)."""
    inits = spec.get("initContainers") or []
    running = [amounts(c) for c in [*(spec.get("containers") or []), *filter(_is_sidecar, inits)]]
    if limits:
        keys = set.intersection(*(set(r) for r in running)) if running else set()
    else:
        keys = set().union(*running, *(amounts(c) for c in inits))
    total = {k: sum(r.get(k, 0) for r in running) for k in keys}
    sidecars: dict[str, float] = {}
    for c in inits:
        own = amounts(c)
        if _is_sidecar(c):
            sidecars = {k: sidecars.get(k, 0) + own.get(k, 0) for k in set(sidecars) | set(own)}
            continue
        for k in keys & set(own):
            total[k] = max(total[k], own[k] + sidecars.get(k, 0))
    return total


def _pod_level(spec: dict, amounts: Callable[[dict], dict[str, float]]) -> dict[str, float]:
    """Pod-level CPU and memory (`spec.resources`, Kubernetes 1.32+): they win over the containers' sum."""
    return {k: v for k, v in amounts(spec).items() if k in _POD_LEVEL_RESOURCES}


def pod_limits(spec: dict) -> dict[str, float]:
    """The pod's effective limit per resource (memory in bytes); absent where a container is unlimited."""
    return _pod_effective(spec, _limits, limits=True) | _pod_level(spec, _limits)


def pod_requests(spec: dict) -> dict[str, float]:
    """The pod's effective request per resource (request, else limit, per container; memory in bytes)."""
    return _pod_effective(spec, _resources, limits=False) | _pod_level(spec, _resources)


def _terminations(status: dict) -> list[tuple[str, dict, bool]]:
    """(container name, terminated state, is_last_state) over containers, current states first."""
    out = []
    statuses = status.get("containerStatuses") or []
    for last in (False, True):
        for cs in statuses:
            term = ((cs.get("lastState" if last else "state") or {}).get("terminated")) or None
            if term:
                out.append((cs.get("name", ""), term, last))
    return out


def _require(obj: dict, path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict) or cur.get(part) in (None, "", []):
            raise ValueError(f"pod JSON lacks {path}")
        cur = cur[part]
    return cur


_INT_BITS = {
    f.name: {"int": 32, "bigint": 64}[f.dataType.simpleString()]
    for f in SILVER_JOBS.schema.fields
    if f.dataType.simpleString() in ("int", "bigint")
}


def parse_pod(pod: dict) -> dict[str, Any]:
    """One Pod object as a silver.jobs row (cluster, source_file, line_no, ingested_at None: the caller's).
    Raises ValueError naming the missing or malformed field."""
    try:
        row = _parse_pod(pod)
    except (TypeError, AttributeError, KeyError, IndexError, OverflowError) as exc:
        # A field of the wrong JSON type (a number where an object belongs, a list for a string...).
        raise ValueError(f"malformed pod: a field has the wrong type ({type(exc).__name__}: {exc})") from None
    for column, value in row.items():  # `memory: 1e30` or `cpu: 1e12` parse; their column cannot hold them
        bits = _INT_BITS.get(column)
        if bits and isinstance(value, int) and not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise ValueError(f"{column} {value} is out of range")
    return row


def _parse_pod(pod: dict) -> dict[str, Any]:
    if not isinstance(pod, dict):
        raise ValueError("not a JSON object")
    kind = pod.get("kind")
    if kind not in (None, "Pod"):
        raise ValueError(f"not a Pod: kind {kind!r}")
    name = _require(pod, "metadata.name")
    namespace = _require(pod, "metadata.namespace")
    phase = _require(pod, "status.phase")
    containers = _require(pod, "spec.containers")
    if phase not in PHASE_STATES:
        raise ValueError(f"unknown status.phase {phase!r}")
    meta, spec, status = pod["metadata"], pod["spec"], pod["status"]
    try:
        req, lim = pod_requests(spec), pod_limits(spec)
    except ValueError as exc:
        raise ValueError(f"bad resource quantity: {exc}") from None
    terms = _terminations(status)
    current = [t for t in terms if not t[2]]
    oom = any(t[1].get("reason") == "OOMKilled" for t in current)
    state = PHASE_STATES[phase]
    pod_reason = status.get("reason")
    if phase == "Failed" and oom:
        state = "OUT_OF_MEMORY"
    elif phase == "Failed" and pod_reason in POD_REASON_STATES:
        state = POD_REASON_STATES[pod_reason]
    # The container that ended the pod: a failing current termination, else any current, else the last one.
    main = next((t for t in current if t[1].get("exitCode") not in (0, None)), None) or (
        current[0] if current else (terms[0] if terms else None)
    )
    exit_code = main[1].get("exitCode") if main and not main[2] else None
    reason = pod_reason or (main[1].get("reason") if main else None)
    state_raw = ":".join(
        [phase]
        + ([reason] if reason else [])
        + ([("last " if main[2] else "") + f"exit {main[1].get('exitCode')}"] if main else [])
    )
    mig = {k[len(MIG_PREFIX) :]: v for k, v in req.items() if k.startswith(MIG_PREFIX)}
    gpus = req.get(GPU_RESOURCE, 0) + sum(mig.values())
    selector = spec.get("nodeSelector") or {}
    gpu_model = ("mig-" + sorted(mig)[0]) if mig else selector.get("nvidia.com/gpu.product") if gpus else None
    start = _ts(status.get("startTime"))
    finished = [f for f in (_ts(t[1].get("finishedAt")) for t in current) if f is not None]
    end = max(finished) if finished and phase in ("Succeeded", "Failed") else None
    labels = meta.get("labels") or {}
    owners = meta.get("ownerReferences") or []
    cpus = math.ceil(req["cpu"] - 1e-9) if "cpu" in req else None
    # What a pod records; every other silver.jobs column is None.
    return {
        **dict.fromkeys(SILVER_JOBS.columns),
        "job_id": f"{namespace}/{name}",
        "source": "k8s",
        "job_id_raw": meta.get("uid"),
        "job_name": labels.get("job-name") or (owners[0].get("name") if owners else None) or name,
        "user": labels.get("user"),
        "account": namespace,
        "partition": namespace,
        "qos": status.get("qosClass"),
        "state": state,
        "state_raw": state_raw,
        "exit_code": exit_code,
        # A container's exit status 128+N means it was killed by signal N (137 = SIGKILL).
        "exit_signal": None if exit_code is None else (exit_code - 128 if exit_code > 128 else 0),
        "submit_ts": _ts(meta.get("creationTimestamp")),
        "start_ts": start,
        "end_ts": end,
        "elapsed_s": int((end - start).total_seconds()) if start and end else None,
        "timelimit_s": spec.get("activeDeadlineSeconds"),
        "req_cpus": cpus,
        "alloc_cpus": cpus if spec.get("nodeName") else None,
        "req_mem_bytes": int(req["memory"]) if "memory" in req else None,
        "alloc_mem_bytes": int(req["memory"]) if "memory" in req and spec.get("nodeName") else None,
        "limit_cpu_cores": lim.get("cpu"),
        "limit_mem_bytes": int(lim["memory"]) if "memory" in lim else None,
        "req_gpus": int(gpus) if gpus else None,
        "alloc_gpus": int(gpus) if gpus and spec.get("nodeName") else None,
        "gpu_model": gpu_model,
        "nodes": 1 if spec.get("nodeName") else None,
        "node_list": spec.get("nodeName"),
        "ntasks": len(containers),
        "is_final": state in FINAL_STATES,
    }


def pod_objects(doc: Any) -> list[Any]:
    """The pods in one JSON document: a Pod, or the items of a `List`/`PodList`."""
    if isinstance(doc, dict) and isinstance(doc.get("items"), list):
        return list(doc["items"])
    return [doc]


def split_pod_records(lines: list[str]) -> list[tuple[int, str, Any, str | None]]:
    """(record no., raw text, parsed object or None, reason or None) for one file's text.

    A file that is one JSON document (a Pod, or a `kubectl get pods -o json` List) gives its pods numbered
    1, 2, ... in order; otherwise each non-blank line is one JSON object, numbered by its line."""
    text = "\n".join(lines)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    else:
        return [(i, json.dumps(p, sort_keys=True), p, None) for i, p in enumerate(pod_objects(doc), start=1)]
    out: list[tuple[int, str, Any, str | None]] = []
    for no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            out.append((no, line, None, f"not JSON: {exc.msg} at column {exc.colno}"))
            continue
        if isinstance(obj, dict) and isinstance(obj.get("items"), list):
            out.append((no, line, None, "a List on one line of a JSON-lines file: write one pod per line"))
            continue
        out.append((no, line, obj, None))
    return out
