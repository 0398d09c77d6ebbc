"""Kubernetes pods: quantities in every form, real pod statuses (OOMKilled with exit 1, OOMKilled only in
lastState, exit 137 without OOMKilled), and the CLI path with a broken record."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from pipelines.silver.k8s import (
    cpu_cores,
    memory_bytes,
    parse_pod,
    parse_quantity,
    pod_limits,
    pod_requests,
    split_pod_records,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", 0.5),
        ("1.5", 1.5),
        ("4Gi", 4 * 2**30),
        ("4G", 4e9),
        ("4e9", 4e9),
        ("128974848", 128974848),
        (128974848, 128974848),
        ("1Ki", 1024),
        ("129M", 129e6),
        ("123Mi", 123 * 2**20),
        ("100u", 1e-4),
        ("2E3", 2000),
        ("1E", 1e18),
    ],
)
def test_quantities(text, value) -> None:
    assert parse_quantity(text) == pytest.approx(value)


def test_quantity_units_and_errors() -> None:
    assert cpu_cores("250m") == 0.25 and memory_bytes("1.5Gi") == 1610612736 and memory_bytes("100m") == 1
    for bad in ("4GB", "one", "", "1.5.2", "4 Gi"):
        with pytest.raises(ValueError, match="not a quantity"):
            parse_quantity(bad)


def _pod(status: dict, resources: dict | None = None, name: str = "train-0", **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": "uid-" + name,
            "creationTimestamp": "2020-04-24T20:46:40Z",
            "labels": {"job-name": "train"},
        },
        "spec": {
            "nodeName": "gpu-node-1",
            "containers": [{"name": "main", "resources": resources or {}}],
            **spec,
        },
        "status": status,
    }


@pytest.mark.parametrize(
    ("status", "resources"),
    [
        ({"phase": "Failed", "containerStatuses": 7}, None),  # a number where a list belongs
        ({"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": "1"}}}]}, None),
        ({"phase": ["Running"]}, None),
        ({"phase": "Running"}, {"limits": 2.5}),
        ({"phase": "Running"}, {"requests": {"memory": "1e30"}}),  # parses; no bigint holds it
        ({"phase": "Running"}, {"requests": {"cpu": "1e12"}}),
    ],
)
def test_wrong_typed_or_huge_fields_are_value_errors(status: dict, resources: dict | None) -> None:
    # Damaged or hand-made pod JSON must be quarantined with a reason, not crash the ingest.
    with pytest.raises(ValueError):
        parse_pod(_pod(status, resources))


def _real_oom_exit1_status(real_data: Path) -> dict:
    text = (real_data / "samples" / "k8s-pod-status-oomkilled-exit1.txt").read_text()
    return json.loads(next(line for line in text.splitlines() if line.startswith('{"conditions"')))


def test_real_oomkilled_exit1_is_oom(real_data: Path) -> None:
    status = _real_oom_exit1_status(real_data)
    row = parse_pod(_pod(status, {"requests": {"cpu": "500m", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}))
    # phase Failed, kaniko terminated OOMKilled exitCode 1, started 20:46:48, finished 20:50:21
    assert (row["state"], row["exit_code"], row["exit_signal"]) == ("OUT_OF_MEMORY", 1, 0)
    assert row["state_raw"] == "Failed:OOMKilled:exit 1" and row["is_final"] is True
    assert row["start_ts"] == datetime(2020, 4, 24, 20, 46, 44) and row["end_ts"] == datetime(
        2020, 4, 24, 20, 50, 21
    )
    assert row["elapsed_s"] == 3 * 60 + 37 and row["qos"] == "Burstable"
    assert (row["req_cpus"], row["req_mem_bytes"], row["alloc_cpus"]) == (1, 4 * 2**30, 1)
    # a memory limit of 8Gi and no CPU limit: the pod may burst to 8 GiB, and to any CPU its node has
    assert (row["limit_mem_bytes"], row["limit_cpu_cores"]) == (8 * 2**30, None)
    assert (row["job_id"], row["partition"], row["job_name"], row["source"]) == (
        "ml/train-0",
        "ml",
        "train",
        "k8s",
    )


def test_real_laststate_oomkilled_running(real_data: Path) -> None:
    text = (real_data / "samples" / "k8s-pod-laststate-oomkilled-restarted.txt").read_text()
    doc = yaml.safe_load("\n".join(line for line in text.splitlines() if not line.startswith("#")))
    pod = {"kind": "Pod", "metadata": {"name": "oomkilled", "namespace": "default"}, **doc}
    row = parse_pod(pod)
    # still Running: the OOM survives only in lastState (reason OOMKilled, exitCode 1)
    assert (row["state"], row["is_final"], row["exit_code"]) == ("RUNNING", False, None)
    assert row["state_raw"] == "Running:OOMKilled:last exit 1"
    # requests memory 100Mi (limit 200Mi); no cpu request
    assert (row["req_mem_bytes"], row["req_cpus"]) == (100 * 2**20, None)
    assert (row["limit_mem_bytes"], row["limit_cpu_cores"]) == (200 * 2**20, None)


def test_exit_137_without_oomkilled_is_not_oom() -> None:
    # kubernetes#53669: a node OOM shows as reason Error with exitCode 137 (values copied from the sample)
    status = {
        "phase": "Failed",
        "startTime": "2017-10-10T17:20:30Z",
        "containerStatuses": [
            {
                "name": "main",
                "state": {
                    "terminated": {
                        "exitCode": 137,
                        "finishedAt": "2017-10-10T17:41:58Z",
                        "reason": "Error",
                        "startedAt": "2017-10-10T17:20:37Z",
                    }
                },
            }
        ],
    }
    row = parse_pod(_pod(status))
    assert (row["state"], row["exit_code"], row["exit_signal"], row["state_raw"]) == (
        "FAILED",
        137,
        9,
        "Failed:Error:exit 137",
    )


def test_gpus_mig_init_containers_and_states() -> None:
    gpu = parse_pod(
        _pod(
            {"phase": "Succeeded"},
            {"limits": {"nvidia.com/gpu": "2", "cpu": "4", "memory": "16G"}},
            nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
            initContainers=[{"name": "fetch", "resources": {"requests": {"cpu": "8", "memory": "1Gi"}}}],
        )
    )
    # requests default to limits; an init container's 8 CPUs exceed the app container's 4
    assert (gpu["req_gpus"], gpu["gpu_model"], gpu["req_cpus"], gpu["req_mem_bytes"]) == (
        2,
        "NVIDIA-A100-SXM4-80GB",
        8,
        16_000_000_000,
    )
    assert gpu["state"] == "COMPLETED" and gpu["exit_code"] is None
    mig = parse_pod(_pod({"phase": "Pending"}, {"limits": {"nvidia.com/mig-1g.10gb": 1}}, nodeName=None))
    assert (mig["req_gpus"], mig["alloc_gpus"], mig["gpu_model"], mig["state"]) == (
        1,
        None,
        "mig-1g.10gb",
        "PENDING",
    )
    evicted = parse_pod(_pod({"phase": "Failed", "reason": "Evicted"}))
    assert (evicted["state"], evicted["state_raw"]) == ("PREEMPTED", "Failed:Evicted")
    deadline = parse_pod(_pod({"phase": "Failed", "reason": "DeadlineExceeded"}, activeDeadlineSeconds=3600))
    assert (deadline["state"], deadline["timelimit_s"]) == ("TIMEOUT", 3600)


def test_limits_in_every_quantity_form_and_unlimited_containers() -> None:
    def container(limits: dict, requests: dict | None = None) -> dict:
        return {"name": "c", "resources": {"limits": limits, "requests": requests or {}}}

    spec = {
        "containers": [
            container({"cpu": "500m", "memory": "4Gi", "nvidia.com/gpu": "1"}, {"cpu": "250m"}),
            container({"cpu": "1.5", "memory": "4G"}),
            container({"cpu": 2, "memory": "4e9"}),
        ],
        # an init container limited above the app containers' sum for CPU, below it for memory
        "initContainers": [container({"cpu": "6", "memory": "129M"})],
    }
    # cpu: 0.5 + 1.5 + 2 = 4 < 6 (init); memory: 4 GiB + 4e9 + 4e9 = 12294967296 > 129e6; the GPU limit
    # is one container's only, so the pod has none.
    assert pod_limits(spec) == {"cpu": 6.0, "memory": 4 * 2**30 + 8 * 10**9}
    row = parse_pod(_pod({"phase": "Running"}, name="multi", **spec))
    assert (row["limit_cpu_cores"], row["limit_mem_bytes"], row["req_cpus"]) == (
        6.0,
        4 * 2**30 + 8 * 10**9,
        6,
    )
    # one container without a memory limit: the pod may use its node's memory, no pod limit
    spec["containers"].append(container({"cpu": "100m"}))
    assert pod_limits(spec) == {"cpu": pytest.approx(6.0)}
    bare = parse_pod(_pod({"phase": "Running"}, {"requests": {"cpu": "1", "memory": "1Gi"}}))
    assert (bare["limit_cpu_cores"], bare["limit_mem_bytes"]) == (None, None)


def test_sidecars_count_beside_the_app_and_during_later_init_containers() -> None:
    def container(cpu: str, memory: str, **extra: str) -> dict:
        return {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}, **extra}

    spec = {
        "containers": [container("1", "1Gi")],
        "initContainers": [
            container("100m", "64Mi"),  # before the sidecar starts: runs alone
            container("500m", "256Mi", restartPolicy="Always"),  # a sidecar: runs to the pod's end
            container("2", "128Mi"),  # runs beside the sidecar
        ],
    }
    # running: 1 + 0.5 = 1.5 CPUs, 1Gi + 256Mi; the last init container with the sidecar: 2.5 CPUs, 384Mi.
    assert pod_requests(spec) == {"cpu": 2.5, "memory": 2**30 + 256 * 2**20}
    # Limits by the same rule; the sidecar has none, so the pod has none.
    spec["containers"][0]["resources"]["limits"] = {"cpu": "1", "memory": "2Gi"}
    assert pod_limits(spec) == {}
    # Pod-level resources (spec.resources) win for CPU and memory: the pod's cgroup gets them.
    spec["resources"] = {"requests": {"cpu": "3"}, "limits": {"cpu": "4", "memory": "3Gi"}}
    # a pod-level limit without a request is the request too, as for containers
    assert pod_requests(spec) == {"cpu": 3.0, "memory": 3 * 2**30}
    assert pod_limits(spec) == {"cpu": 4.0, "memory": 3 * 2**30}


def test_missing_fields_raise_with_reason() -> None:
    pod = _pod({"phase": "Running"})
    del pod["metadata"]["namespace"]
    with pytest.raises(ValueError, match=r"lacks metadata\.namespace"):
        parse_pod(pod)
    with pytest.raises(ValueError, match=r"lacks status\.phase"):
        parse_pod(_pod({}))
    with pytest.raises(ValueError, match="not a Pod"):
        parse_pod({"kind": "Service"})
    with pytest.raises(ValueError, match="not a quantity"):
        parse_pod(_pod({"phase": "Running"}, {"requests": {"cpu": "lots"}}))


def test_split_records_list_and_lines() -> None:
    listing = json.dumps({"kind": "List", "items": [{"a": 1}, {"b": 2}]}, indent=2).splitlines()
    assert [(n, o) for n, _, o, _ in split_pod_records(listing)] == [(1, {"a": 1}), (2, {"b": 2})]
    recs = split_pod_records(['{"a": 1}', "", "{broken", '{"b": 2}'])
    assert [(n, r) for n, _, _, r in recs] == [
        (1, None),
        (3, "not JSON: Expecting property name enclosed in double quotes at column 2"),
        (4, None),
    ]


@pytest.mark.slow
def test_cli_ingest_list_and_quarantine(jobfit, real_data: Path, tmp_path: Path) -> None:
    status = _real_oom_exit1_status(real_data)
    good = _pod(
        status, {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2500m", "memory": "1.5Gi"}}
    )
    nameless = _pod({"phase": "Running"}, name="x")
    del nameless["metadata"]["name"]
    listing = tmp_path / "pods.json"
    listing.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [good, nameless]}, indent=2))
    lines = tmp_path / "pods.jsonl"
    lines.write_text(json.dumps(_pod({"phase": "Running"}, name="later")) + "\n{not json\n")
    res = jobfit("ingest", "k8s", str(listing), str(lines), "--cluster", "demo", "--json")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert (out["read"], out["inserted"], out["quarantined"]) == (4, 2, 2)
    again = json.loads(jobfit("ingest", "k8s", str(listing), "--cluster", "demo", "--json").out)
    assert (again["inserted"], again["updated"], again["unchanged"]) == (0, 0, 1)
    q = json.loads(jobfit("sql", "SELECT line_no, reason FROM quarantine ORDER BY source_file", "--json").out)
    assert {r["reason"] for r in q["rows"]} == {
        "pod JSON lacks metadata.name",
        "not JSON: Expecting property name enclosed in double quotes at column 2",
    }
    jobs = json.loads(
        jobfit(
            "sql",
            "SELECT job_id, state, exit_code, limit_cpu_cores, limit_mem_bytes FROM silver.jobs "
            "ORDER BY job_id",
            "--json",
        ).out
    )
    assert jobs["rows"] == [
        {
            "job_id": "ml/later",
            "state": "RUNNING",
            "exit_code": None,
            "limit_cpu_cores": None,
            "limit_mem_bytes": None,
        },
        {
            "job_id": "ml/train-0",
            "state": "OUT_OF_MEMORY",
            "exit_code": 1,
            "limit_cpu_cores": 2.5,
            "limit_mem_bytes": 1610612736,  # 1.5 × 2^30
        },
    ]
