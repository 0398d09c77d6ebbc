"""Kubernetes Pod objects of a GPU namespace, as `kubectl get pods -o json` lists its items (one a line)."""

from __future__ import annotations

import hashlib
import math
import random
from datetime import UTC, datetime

from jobs.simulator.catalog import USER_FIXABLE
from jobs.simulator.model import User
from pipelines.units import GIB

NAMESPACE = "ml-gpu"
IMAGES = (
    "nvcr.io/nvidia/pytorch:24.05-py3",
    "ghcr.io/example-lab/trainer:1.8.2",
    "vllm/vllm-openai:v0.5.4",
    "nvcr.io/nvidia/tritonserver:24.05-py3",
)


def _iso(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cpu_qty(millicores: int) -> str:
    return f"{millicores // 1000}" if millicores % 1000 == 0 else f"{millicores}m"


def _mem_qty(bytes_: int, rng: random.Random) -> str:
    gib = bytes_ / GIB
    if rng.random() < 0.15 and bytes_ % 10**9 == 0:
        return f"{bytes_ // 10**9}G"
    if gib >= 1 and bytes_ % GIB == 0:
        return f"{int(gib)}Gi"
    return f"{bytes_ // 1024**2}Mi"


def _uid(seed: str) -> str:
    h = hashlib.sha1(seed.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def make_pod(i: int, user: User, t: int, rng: random.Random, cluster: str) -> tuple[dict, dict]:
    """One pod and its ground truth row (times in epoch seconds, memory in bytes)."""
    kind = rng.choice(("train", "train", "infer", "batch"))
    gpus = rng.choice((1, 1, 1, 2, 4)) if kind != "batch" else rng.choice((0, 1))
    need_mem = int(rng.uniform(1.5, 24.0) * GIB)
    req_mem = int(min(256, max(1, math.ceil(need_mem / GIB * rng.uniform(1.2, 4.0)))) * GIB)
    lim_mem = req_mem * rng.choice((1, 1, 2))
    req_mc = rng.choice((500, 1000, 2000, 4000, 8000))
    lim_mc = req_mc * rng.choice((1, 2))
    cpus_used = req_mc / 1000 * rng.uniform(0.1, 0.9)
    runtime = int(math.exp(rng.gauss(math.log(1800), 1.1))) + 20
    r = rng.random()
    cause, detail = "none", None
    if r < 0.025:
        cause, detail = "k8s_oomkilled", "oomkilled_137" if rng.random() < 0.7 else "oomkilled_1"
    elif r < 0.04:
        cause, detail = "software_error", "nonzero_exit"
    elif r < 0.05:
        cause, detail = "k8s_exit137", "sigkill"
    elif r < 0.058:
        cause = "k8s_evicted"
    elif r < 0.065:
        cause = "k8s_image_pull"
    suffix = hashlib.sha1(f"{cluster}{i}".encode()).hexdigest()[:5]
    name = f"{kind}-{user.name}-{suffix}-{rng.choice('abcdefghjk')}{i % 997:03d}"
    node = f"gke-gpu-pool-{hashlib.sha1(f'{cluster}node{i % 12}'.encode()).hexdigest()[:4]}-{i % 12:02d}"
    start = t + rng.randint(2, 90)
    end = start + runtime
    if cause == "k8s_oomkilled":
        end = start + int(runtime * rng.uniform(0.05, 0.8))
        need_mem = max(need_mem, int(lim_mem * rng.uniform(1.1, 1.8)))
    elif cause in ("software_error", "k8s_exit137", "k8s_evicted"):
        end = start + int(runtime * rng.uniform(0.02, 0.8))
    elif cause != "k8s_image_pull" and need_mem > lim_mem * 0.95:
        need_mem = int(lim_mem * rng.uniform(0.3, 0.9))
    image = rng.choice(IMAGES) if cause != "k8s_image_pull" else "ghcr.io/example-lab/trainer:1.9.0-rc"
    cname = "trainer" if kind == "train" else ("server" if kind == "infer" else "worker")
    requests = {"cpu": _cpu_qty(req_mc), "memory": _mem_qty(req_mem, rng)}
    limits = {"cpu": _cpu_qty(lim_mc), "memory": _mem_qty(lim_mem, rng)}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
        limits["nvidia.com/gpu"] = str(gpus)
    cid = f"containerd://{hashlib.sha256(name.encode()).hexdigest()}"
    status: dict = {
        "hostIP": f"10.128.0.{i % 250 + 2}",
        "podIP": f"10.60.{i % 200}.{i % 250 + 2}",
        "qosClass": "Guaranteed" if requests == limits else "Burstable",
        "startTime": _iso(t + 1),
    }
    cs: dict = {
        "name": cname,
        "image": image,
        "ready": False,
        "restartCount": 0,
        "started": False,
        "lastState": {},
    }
    if cause == "k8s_image_pull":
        status["phase"] = "Pending"
        cs["state"] = {
            "waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
        }
        cs["imageID"] = ""
        start = end = t + 1
    else:
        cs["imageID"] = f"{image.split(':')[0]}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"
        cs["containerID"] = cid
        term = {"containerID": cid, "startedAt": _iso(start), "finishedAt": _iso(end)}
        if cause == "none":
            status["phase"] = "Succeeded"
            term.update(exitCode=0, reason="Completed")
        elif cause == "k8s_oomkilled":
            status["phase"] = "Failed"
            term.update(exitCode=137 if detail == "oomkilled_137" else 1, reason="OOMKilled")
        elif cause == "software_error":
            status["phase"] = "Failed"
            term.update(exitCode=1, reason="Error")
        elif cause == "k8s_exit137":
            status["phase"] = "Failed"
            term.update(exitCode=137, reason="Error")
        else:  # evicted
            status["phase"] = "Failed"
            status["reason"] = "Evicted"
            status["message"] = (
                f"The node was low on resource: memory. Threshold quantity: 100Mi, available: "
                f"{rng.randint(20000, 99000)}Ki. Container {cname} was using "
                f"{need_mem // 1024}Ki, request is {requests['memory']}, has larger consumption "
                "of memory. "
            )
            term.update(
                exitCode=137,
                reason="ContainerStatusUnknown",
                message="The container could not be located when the pod was terminated",
            )
        cs["state"] = {"terminated": term}
    status["containerStatuses"] = [cs]
    status["conditions"] = [
        {"lastProbeTime": None, "lastTransitionTime": _iso(t + 1), "status": "True", "type": "PodScheduled"},
        {"lastProbeTime": None, "lastTransitionTime": _iso(t + 1), "status": "True", "type": "Initialized"},
    ]
    uid = _uid(f"{cluster}/{name}")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": uid,
            "creationTimestamp": _iso(t),
            "labels": {"app": kind, "user": user.name, "team": user.account},
            "annotations": {"jobfit.io/submitted-by": user.name},
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "schedulerName": "default-scheduler",
            "containers": [
                {
                    "name": cname,
                    "image": image,
                    "command": ["python", f"{kind}.py"],
                    "resources": {"requests": requests, "limits": limits},
                }
            ],
        },
        "status": status,
    }
    elapsed = max(0, end - start)
    peak_mem = min(need_mem, lim_mem) if cause != "k8s_image_pull" else 0
    truth = {
        "source": "k8s",
        "job_id": f"{NAMESPACE}/{name}",
        "job_id_raw": uid,
        "user": user.name,
        "account": user.account,
        "partition": NAMESPACE,
        "workload": f"k8s_{kind}",
        "submit_ts": t,
        "start_ts": start,
        "end_ts": end,
        "runtime_s": elapsed,
        "timelimit_s": None,
        "req_cpus": math.ceil(req_mc / 1000),
        "alloc_cpus": math.ceil(req_mc / 1000),
        "cpus_used": cpus_used if elapsed else 0.0,
        "total_cpu_s": cpus_used * elapsed,
        "req_mem_bytes": req_mem,
        "limit_mem_bytes": lim_mem,
        "limit_cpu_cores": lim_mc / 1000,
        "peak_mem_bytes": peak_mem,
        "needed_mem_bytes": need_mem,
        "alloc_gpus": gpus,
        "failure_cause": cause,
        "failure_detail": detail,
        "is_failed": cause not in ("none", "cancelled"),
        "user_fixable": USER_FIXABLE[cause],
        "state": {"none": "COMPLETED", "k8s_image_pull": "PENDING", "k8s_oomkilled": "OUT_OF_MEMORY"}.get(
            cause, "FAILED"
        ),
        "node_list": node,
        "nodes": 1,
    }
    return pod, truth
