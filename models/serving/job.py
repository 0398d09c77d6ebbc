"""A submit hook's job description → the ScriptInfo the recommendation reads (pure).

The request's fields become `#SBATCH` directives read by the same parser as job scripts (one rule table),
then override the script's own: a submit hook sees the final request, command-line options included."""

from __future__ import annotations

import json
from dataclasses import replace

from models.serving.schemas import RecommendRequest
from pipelines.silver.scripts import ScriptInfo, parse_script

# ScriptInfo fields a job description may override (the script keeps its hash, body and framework).
_OVERRIDABLE = (
    "req_cpus_per_task",
    "req_ntasks",
    "req_nodes",
    "req_mem_bytes",
    "req_gpus",
    "gpu_type",
    "timelimit_s",
    "partition",
    "array_spec",
)
MAX_MEM_BYTES = 64 * 2**40  # 64 TiB: more than any node has; beyond it a value is a typo
MAX_TIME_S = 366 * 86400


def job_info(request: RecommendRequest) -> ScriptInfo:
    """The script's parsed request with the job description's fields applied; ValueError (one line,
    naming the field) for a value that parses to nothing or is absurd."""
    base = parse_script(request.script or "")
    options: dict[str, object] = {
        "partition": request.partition,
        "account": request.account,
        "job-name": request.job_name,
        "nodes": request.nodes,
        "ntasks": request.ntasks or base.req_ntasks,
        "cpus-per-task": request.cpus_per_task or base.req_cpus_per_task,
        "mem": request.mem_per_node,
        "mem-per-cpu": request.mem_per_cpu,
        "time": request.time_limit,
        "gres": request.gres,
        "array": f"0-{request.array_size - 1}" if request.array_size else None,
    }
    given = {k: v for k, v in options.items() if v is not None}
    if not given:
        return base
    if request.mem_per_node and request.mem_per_cpu:
        raise ValueError("give mem_per_node or mem_per_cpu, not both")
    override = parse_script("#!/bin/bash\n" + "".join(f"#SBATCH --{k}={v}\n" for k, v in given.items()))
    _check(request, override)
    changes = {f: getattr(override, f) for f in _OVERRIDABLE if getattr(override, f) is not None}
    directives = json.loads(base.directives_json or "{}") | json.loads(override.directives_json or "{}")
    return replace(base, **changes, directives_json=json.dumps(directives, sort_keys=True))


def _check(request: RecommendRequest, override: ScriptInfo) -> None:
    memory = request.mem_per_node or request.mem_per_cpu
    field = "mem_per_node" if request.mem_per_node else "mem_per_cpu"
    if memory and not (override.req_mem_bytes and 0 < override.req_mem_bytes <= MAX_MEM_BYTES):
        raise ValueError(f"{field}: {memory!r} is not a memory size between 1M and 64T in total")
    if request.time_limit and not (override.timelimit_s and 0 < override.timelimit_s <= MAX_TIME_S):
        raise ValueError(
            f"time_limit: {request.time_limit!r} is not a time limit between 1 minute and 366 days"
        )
    if request.gres and "gpu" in request.gres and not override.req_gpus:
        raise ValueError(f"gres: cannot read a GPU count from {request.gres!r} (e.g. gpu:a100:2)")
    if override.req_gpus and override.req_gpus > 64:
        raise ValueError(f"gres: {override.req_gpus} GPUs per node is more than any node has")
