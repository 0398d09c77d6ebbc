"""The Kubernetes mutating admission webhook (pure): an AdmissionReview v1 for a Pod or a Job in, the
AdmissionReview response out. Always `allowed: true` (admission fails open); `advise` adds warnings and a
`jobfit.io/recommendation` annotation, `enforce` also lowers the main containers' requests (docs/serve.md).
The main containers' `command`/`args` are the job script of the code-aware VRAM estimate (docs/vram.md):
files they name cannot be read here, arguments can; a pod that will not fit its GPU is warned and
annotated (`jobfit.io/vram-estimate`)."""

from __future__ import annotations

import base64
import json
import math
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipelines.silver.k8s import cpu_cores, memory_bytes
from pipelines.units import MIB

MODES = ("advise", "enforce")
USER_LABEL = "jobfit.io/user"  # pod label naming whose history to use (else the namespace)
LIMITS_ANNOTATION = "jobfit.io/set-limits"  # "true": enforce also sets limits that exist
RECOMMENDATION_ANNOTATION = "jobfit.io/recommendation"
VRAM_ANNOTATION = "jobfit.io/vram-estimate"  # the code-aware estimate (docs/vram.md), when one was made
# Node labels that name the GPU a pod will get (NVIDIA GPU feature discovery; GKE), read from nodeSelector.
GPU_LABELS = ("nvidia.com/gpu.product", "cloud.google.com/gke-accelerator")
_SHELLS = ("sh", "bash", "dash", "zsh")
MAX_WARNING_CHARS = 119  # the API server truncates warnings at 120 characters


@dataclass(frozen=True)
class PodAsk:
    """What a pod's main containers ask for together: CPU in cores, memory in bytes, GPUs (None: unset)."""

    name: str
    user: str
    cpu_cores: float | None
    mem_bytes: int | None
    gpus: int
    script: str | None = None  # the main containers' command lines (the estimate's job script)
    gpu_model: str | None = None  # from the nodeSelector's GPU label, as the cluster names cards


Recommend = Callable[[PodAsk], dict[str, Any]]


def admission_response(review: dict[str, Any], mode: str, recommend: Recommend) -> dict[str, Any]:
    """The AdmissionReview answer for `review` (uid echoed, always allowed). `recommend` turns the pod's ask
    into a `/v1/recommend` answer; any error inside gives allowed with no patch and a warning."""
    uid = str(review["request"]["uid"])
    try:
        response = _mutation(review["request"], mode, recommend)
    except Exception as exc:  # fail open: a webhook error must never block a pod
        response = {"warnings": [_short(f"jobfit: no advice ({type(exc).__name__})")]}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": True, **response},
    }


def _mutation(request: dict[str, Any], mode: str, recommend: Recommend) -> dict[str, Any]:
    """Warnings and the JSONPatch for one Pod or Job (the Job's pod template)."""
    obj = request.get("object") or {}
    kind = (request.get("kind") or {}).get("kind") or obj.get("kind") or "Pod"
    if kind not in ("Pod", "Job"):
        return {"warnings": [_short(f"jobfit: {kind} is not a Pod or Job; nothing to advise")]}
    prefix = "/spec/template" if kind == "Job" else ""
    spec = obj["spec"]["template"]["spec"] if kind == "Job" else obj["spec"]
    meta = obj.get("metadata") or {}
    pod_meta = (obj["spec"]["template"].get("metadata") or {}) if kind == "Job" else meta
    containers = spec.get("containers") or []  # init and sidecar containers are left alone
    labels = pod_meta.get("labels") or {}
    ask = PodAsk(
        name=str(meta.get("name") or meta.get("generateName") or "pod"),
        user=str(labels.get(USER_LABEL) or request.get("namespace") or meta.get("namespace") or "default"),
        cpu_cores=_sum(containers, "cpu"),
        mem_bytes=_mem_sum(containers),
        gpus=int(sum(_gpus(c) for c in containers)),
        script=pod_script(containers),
        gpu_model=gpu_model(spec),
    )
    answer = recommend(ask)
    cpu_m, mem_mib = _recommended(answer)
    note = {"status": answer.get("status"), "cluster": answer.get("cluster"), "user": ask.user, "mode": mode}
    note |= {"cpu": f"{cpu_m}m" if cpu_m else None, "memory": f"{mem_mib}Mi" if mem_mib else None}
    if answer.get("status") != "ok":
        note["why"] = str(answer.get("why") or "")[:300]
    annotations = {RECOMMENDATION_ANNOTATION: json.dumps(note, separators=(",", ":"), sort_keys=True)}
    warnings = _warnings(ask, answer.get("status"), cpu_m, mem_mib, answer.get("why"))
    vram = _vram_note(answer.get("code_estimate")) if ask.script else None
    if vram is not None:
        annotations[VRAM_ANNOTATION] = json.dumps(vram, separators=(",", ":"), sort_keys=True)
        if vram.get("fits") is False:
            warnings.append(_fit_warning(vram))
    patch = _annotation_patch(meta, annotations)
    if mode == "enforce" and (cpu_m or mem_mib):
        set_limits = (pod_meta.get("annotations") or {}).get(LIMITS_ANNOTATION) == "true"
        shares = _shares(containers, cpu_m, mem_mib)
        for i, (container, share) in enumerate(zip(containers, shares, strict=True)):
            patch += _container_patch(f"{prefix}/spec/containers/{i}", container, share, set_limits)
        warnings.append(
            _short(f"jobfit: enforce mode applied to {len(containers)} container(s) (requests never raised)")
        )
    out: dict[str, Any] = {"warnings": warnings}
    if patch:
        out |= {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(patch).encode()).decode()}
    return out


def _requests(container: dict[str, Any]) -> dict[str, Any]:
    """A container's requests, each defaulting to its limit (as Kubernetes defaults them)."""
    res = container.get("resources") or {}
    return {**(res.get("limits") or {}), **(res.get("requests") or {})}


def _sum(containers: list[dict[str, Any]], resource: str) -> float | None:
    """Summed CPU request in cores over the containers (None when none asks)."""
    asks = [cpu_cores(_requests(c)[resource]) for c in containers if resource in _requests(c)]
    return sum(asks) if asks else None


def _mem_sum(containers: list[dict[str, Any]]) -> int | None:
    """Summed memory request in bytes over the containers (None when none asks)."""
    asks = [memory_bytes(_requests(c)["memory"]) for c in containers if "memory" in _requests(c)]
    return sum(asks) if asks else None


def _gpus(container: dict[str, Any]) -> float:
    res = container.get("resources") or {}
    return cpu_cores((res.get("limits") or {}).get("nvidia.com/gpu", 0))


def _recommended(answer: dict[str, Any]) -> tuple[int | None, int | None]:
    """The recommended pod CPU in millicores and memory in MiB (rounded up; None where not ok)."""
    targets = answer.get("targets") or {}
    cpus = (targets.get("cpus") or {}).get("recommended_cpus")
    mem = (targets.get("mem") or {}).get("recommended_bytes")
    cpu_m = max(math.ceil(float(cpus) * 1000), 1) if cpus else None
    mem_mib = max(math.ceil(float(mem) / MIB), 1) if mem else None
    return cpu_m, mem_mib


def _warnings(ask: PodAsk, status: object, cpu_m: int | None, mem_mib: int | None, why: object) -> list[str]:
    """One short line per finding, each under 120 characters."""
    if status != "ok":
        return [_short(f"jobfit: no advice for user {ask.user} ({status}): {why or ''}")]
    out = []
    if mem_mib:
        asked = f"{math.ceil(ask.mem_bytes / MIB)}Mi" if ask.mem_bytes else "no memory"
        out.append(_short(f"jobfit: pod asks {asked}; recommended memory request {mem_mib}Mi"))
    if cpu_m:
        asked = f"{math.ceil(ask.cpu_cores * 1000)}m" if ask.cpu_cores else "no cpu"
        out.append(_short(f"jobfit: pod asks {asked}; recommended cpu request {cpu_m}m"))
    return out or [_short("jobfit: no cpu or memory advice for this pod")]


def _short(text: str) -> str:
    """One line under 120 characters (the API server truncates longer warnings)."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_WARNING_CHARS else line[: MAX_WARNING_CHARS - 3] + "..."


def _annotation_patch(meta: dict[str, Any], annotations: dict[str, str]) -> list[dict[str, Any]]:
    """JSONPatch ops adding the annotations to the object's own metadata."""
    if "annotations" in meta and meta["annotations"] is not None:
        escaped = {key.replace("~", "~0").replace("/", "~1"): v for key, v in annotations.items()}
        return [{"op": "add", "path": f"/metadata/annotations/{k}", "value": v} for k, v in escaped.items()]
    if meta:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(annotations)}]
    return [{"op": "add", "path": "/metadata", "value": {"annotations": dict(annotations)}}]


def pod_script(containers: list[dict[str, Any]]) -> str | None:
    """The main containers' command lines as a job script (`command` + `args`, shell-quoted; the command of
    `sh -c CMD` / `bash -lc CMD` as written), None when no container states a command (the image's own
    entrypoint is not known here). Files the commands name are not readable from the webhook."""
    lines = []
    for container in containers:
        words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
        if not words:
            continue
        if len(words) >= 3 and words[0].rsplit("/", 1)[-1] in _SHELLS and re.fullmatch(r"-\w*c", words[1]):
            lines.append(words[2])
        else:
            lines.append(shlex.join(words))
    return "#!/bin/sh\n" + "\n".join(lines) + "\n" if lines else None


def gpu_model(spec: dict[str, Any]) -> str | None:
    """The GPU model a pod's nodeSelector asks for, as clusters name cards (`NVIDIA-A100-SXM4-40GB` ->
    `A100-SXM4-40GB`, GKE's `nvidia-tesla-a100` -> `a100`); None without such a label."""
    selector = spec.get("nodeSelector") or {}
    for label in GPU_LABELS:
        value = str(selector.get(label) or "")
        name = re.sub(r"^(?:nvidia[-_])?(?:tesla[-_])?", "", value, flags=re.IGNORECASE)
        if name and re.fullmatch(r"[A-Za-z0-9_.\-]{1,100}", name):
            return name
    return None


def _vram_note(code: object) -> dict[str, Any] | None:
    """The `jobfit.io/vram-estimate` annotation from the answer's code_estimate: the verdict, the estimate
    and the card in GiB, up to 3 changes that fit, the files named but not readable here; None when the
    command names no workload."""
    if not isinstance(code, dict) or code.get("status") in (None, "no_script", "no_entry_point"):
        return None
    capture = code.get("capture") or {}
    unread = [f for f in capture.get("files_named") or [] if f not in (capture.get("files_read") or [])]
    note: dict[str, Any] = {"status": code["status"]}
    if unread:
        note["files_not_read"] = unread[:8]
    if code["status"] != "ok":
        return note | {"why": str(code.get("why") or "")[:300]}
    gib = 1024**3
    note |= {
        "fits": code.get("fits"),
        "gpu_model": code.get("gpu_model"),
        "peak_vram_gib": round(float(code["peak_vram_bytes"]) / gib, 1),
        "gpu_mem_gib": round(float(code["gpu_mem_bytes"]) / gib, 1) if code.get("gpu_mem_bytes") else None,
    }
    changes = [str(c.get("what")) for c in code.get("changes_that_fit") or [] if isinstance(c, dict)]
    return note | {"changes_that_fit": changes[:3]}


def _fit_warning(vram: dict[str, Any]) -> str:
    """The will-not-fit warning, under 120 characters."""
    first = (vram.get("changes_that_fit") or ["none found"])[0]
    return _short(
        f"jobfit: will not fit one {vram['gpu_model']}: ~{vram['peak_vram_gib']} GiB/GPU from its command, "
        f"card {vram['gpu_mem_gib']} GiB; try: {first}"
    )


def _shares(containers: list[dict[str, Any]], cpu_m: int | None, mem_mib: int | None) -> list[dict[str, str]]:
    """The pod recommendation split over the main containers in proportion to what each asks (evenly
    when none asks), as Kubernetes quantities (`cpu` in millicores, `memory` in MiB)."""
    shares: list[dict[str, str]] = [{} for _ in containers]
    for resource, total, unit, parse in (
        ("cpu", cpu_m, "m", lambda q: cpu_cores(q) * 1000),
        ("memory", mem_mib, "Mi", lambda q: memory_bytes(q) / MIB),
    ):
        if not total:
            continue
        asks = [parse(_requests(c)[resource]) if resource in _requests(c) else 0.0 for c in containers]
        weights = asks if sum(asks) > 0 else [1.0] * len(containers)
        for share, weight in zip(shares, weights, strict=True):
            share[resource] = f"{max(math.ceil(total * weight / sum(weights)), 1)}{unit}"
    return shares


def _container_patch(
    path: str, container: dict[str, Any], share: dict[str, str], set_limits: bool
) -> list[dict[str, Any]]:
    """Ops that set a container's requests to its share, never above what it asked; limits only where it
    has none for that resource, or where the pod asked for them (then never above the old limit)."""
    res = container.get("resources") or {}
    asked = _requests(container)
    old_limits = res.get("limits") or {}
    requests = dict(res.get("requests") or {})
    limits = dict(old_limits)
    for resource, value in share.items():
        amount = memory_bytes if resource == "memory" else cpu_cores
        if resource in asked and amount(asked[resource]) < amount(value):
            value = str(asked[resource])  # never raise a request
        requests[resource] = value
        lowers_limit = set_limits and resource in old_limits and amount(value) < amount(old_limits[resource])
        if resource not in old_limits or lowers_limit:
            limits[resource] = value
    new = {**res, "requests": requests, "limits": limits}
    op = "replace" if "resources" in container else "add"
    return [{"op": op, "path": f"{path}/resources", "value": new}] if new != res else []
