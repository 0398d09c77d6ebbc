"""The Kubernetes mutating webhook: AdmissionReview v1 round trips on the real pod object, the JSONPatch
applied with `jsonpatch`, fail-open answers, and the manifests under deploy/k8s/."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import pytest
import yaml
from fastapi.testclient import TestClient

from models.serving.app import create_app
from models.serving.k8s import (
    RECOMMENDATION_ANNOTATION,
    VRAM_ANNOTATION,
    PodAsk,
    admission_response,
    gpu_model,
    pod_script,
)
from models.serving.state import ServingState, StateHolder, cluster_state
from tests.servers import jobfit_serve

ROOT = Path(__file__).resolve().parents[1]
GIB = 1024**3
MIB = 1024**2


def _real_pod(real_data: Path) -> dict[str, Any]:
    """The real GKE pod (one container: request 100Mi, limit 200Mi memory), named as a pod object."""
    text = (real_data / "samples" / "k8s-pod-laststate-oomkilled-restarted.txt").read_text()
    doc = yaml.safe_load("\n".join(line for line in text.splitlines() if not line.startswith("#")))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "oomkilled"}, "spec": doc["spec"]}


def _review(pod: dict[str, Any], uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": pod["kind"]},
            "namespace": "team-a",
            "operation": "CREATE",
            "object": pod,
        },
    }


def _ok(mem_bytes: float | None, cpus: float | None = None) -> Any:
    """A recommend stub answering `ok` with the given memory (bytes) and CPUs; records the asks."""
    asks: list[PodAsk] = []

    def recommend(ask: PodAsk) -> dict[str, Any]:
        asks.append(ask)
        targets: dict[str, Any] = {}
        if mem_bytes is not None:
            targets["mem"] = {"status": "ok", "recommended_bytes": mem_bytes}
        if cpus is not None:
            targets["cpus"] = {"status": "ok", "recommended_cpus": cpus}
        return {"cluster": "demo", "status": "ok", "why": None, "targets": targets}

    recommend.asks = asks  # type: ignore[attr-defined]
    return recommend


def _applied(pod: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    response = answer["response"]
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(pod, patch)


def test_response_envelope_matches_the_kubernetes_docs(real_data: Path) -> None:
    text = (real_data / "samples" / "k8s-admissionreview-response-examples.txt").read_text()
    lines = text.splitlines()
    allow = json.loads(
        "\n".join(lines[lines.index("# allow:") + 1 : lines.index("# deny with custom code/message:")])
    )
    doc_patch, doc_b64 = lines[-2], lines[-1]
    # our base64 of a JSON array is the docs' own encoding
    assert base64.b64encode(json.dumps(json.loads(doc_patch)).encode()).decode() == doc_b64

    pod = _real_pod(real_data)
    answer = admission_response(_review(pod, uid="abc"), "advise", _ok(80 * MIB))
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == allow["kind"]
    assert set(allow["response"]) <= set(answer["response"])
    assert answer["response"]["uid"] == "abc" and answer["response"]["allowed"] is True


def test_advise_warns_briefly_and_only_annotates(real_data: Path) -> None:
    pod = _real_pod(real_data)
    recommend = _ok(80 * MIB, cpus=0.25)
    answer = admission_response(_review(pod), "advise", recommend)
    warnings = answer["response"]["warnings"]
    assert warnings and all(len(w) < 120 and "\n" not in w for w in warnings)
    assert any("80Mi" in w and "100Mi" in w for w in warnings)
    script = "#!/bin/sh\nstress --vm 1 --vm-bytes 250M --vm-hang 1\n"  # its command, for the code estimate
    assert recommend.asks[0] == PodAsk("oomkilled", "team-a", None, 100 * MIB, 0, script)
    patched = _applied(pod, answer)
    assert patched["spec"] == pod["spec"]  # advise changes no resources
    note = json.loads(patched["metadata"]["annotations"][RECOMMENDATION_ANNOTATION])
    assert note == {
        "cluster": "demo",
        "cpu": "250m",
        "memory": "80Mi",
        "mode": "advise",
        "status": "ok",
        "user": "team-a",
    }


def test_long_reasons_are_cut_under_120_characters(real_data: Path) -> None:
    def recommend(ask: PodAsk) -> dict[str, Any]:
        return {"cluster": "demo", "status": "no_champion", "why": "x " * 400}

    answer = admission_response(_review(_real_pod(real_data)), "advise", recommend)
    assert all(len(w) < 120 for w in answer["response"]["warnings"])
    assert "no_champion" in answer["response"]["warnings"][0]


def test_enforce_lowers_requests_and_keeps_existing_limits(real_data: Path) -> None:
    pod = _real_pod(real_data)
    before = copy.deepcopy(pod)
    answer = admission_response(_review(pod), "enforce", _ok(80 * MIB, cpus=0.5))
    assert len(answer["response"]["warnings"]) == 3
    assert all(len(w) < 120 for w in answer["response"]["warnings"])
    patched = _applied(pod, answer)
    assert pod == before  # the request object itself is not changed
    resources = patched["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"memory": "80Mi", "cpu": "500m"}
    # memory had a limit: untouched; cpu had none: set to the request
    assert resources["limits"] == {"memory": "200Mi", "cpu": "500m"}


def test_enforce_never_raises_a_request(real_data: Path) -> None:
    pod = _real_pod(real_data)
    patched = _applied(pod, admission_response(_review(pod), "enforce", _ok(2 * GIB)))
    resources = patched["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"memory": "100Mi"}
    assert resources["limits"] == {"memory": "200Mi"}


def test_enforce_sets_limits_the_pod_asks_for(real_data: Path) -> None:
    pod = _real_pod(real_data)
    pod["metadata"]["annotations"] = {"jobfit.io/set-limits": "true"}
    patched = _applied(pod, admission_response(_review(pod), "enforce", _ok(80 * MIB)))
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {"memory": "80Mi"}
    assert RECOMMENDATION_ANNOTATION in patched["metadata"]["annotations"]
    assert patched["metadata"]["annotations"]["jobfit.io/set-limits"] == "true"


def test_enforce_leaves_init_and_sidecar_containers_and_splits_by_ask() -> None:
    sidecar = {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"memory": "1Gi"}}}
    init = {"name": "setup", "resources": {"requests": {"memory": "4Gi"}}}
    app = {"name": "app", "resources": {"requests": {"memory": "3Gi"}}}
    helper = {"name": "helper", "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {"template": {"spec": {"initContainers": [init, sidecar], "containers": [app, helper]}}},
    }
    recommend = _ok(2 * GIB)
    patched = _applied(job, admission_response(_review(job), "enforce", recommend))
    spec = patched["spec"]["template"]["spec"]
    assert spec["initContainers"] == [init, sidecar]
    assert recommend.asks[0].mem_bytes == 4 * GIB  # main containers only
    assert spec["containers"][0]["resources"] == {
        "requests": {"memory": "1536Mi"},
        "limits": {"memory": "1536Mi"},
    }
    assert spec["containers"][1]["resources"] == {
        "requests": {"memory": "512Mi"},
        "limits": {"memory": "1Gi"},
    }
    assert RECOMMENDATION_ANNOTATION in patched["metadata"]["annotations"]


def test_an_internal_failure_is_allowed_without_patch(real_data: Path) -> None:
    def broken(ask: PodAsk) -> dict[str, Any]:
        raise RuntimeError("model exploded")

    answer = admission_response(_review(_real_pod(real_data), uid="u-1"), "enforce", broken)
    response = answer["response"]
    assert response["uid"] == "u-1" and response["allowed"] is True
    assert "patch" not in response and response["warnings"] == ["jobfit: no advice (RuntimeError)"]
    weird = _review(
        {"kind": "Pod", "spec": {"containers": [{"resources": {"requests": {"memory": "lots"}}}]}}
    )
    assert admission_response(weird, "advise", _ok(GIB))["response"]["allowed"] is True


@pytest.fixture(scope="module")
def client() -> TestClient:
    """The app with one served cluster that has no champion (no store trained for this)."""
    cluster = cluster_state("demo", None, {"mem": None, "cpus": None}, None, None, {})
    state = ServingState(clusters={"demo": cluster}, loaded_at="2026-12-04 00:00:00")
    return TestClient(create_app(StateHolder(loader=lambda: state, state=state)))


def test_http_round_trip_without_champion_is_allowed_with_status(client: TestClient, real_data: Path) -> None:
    pod = _real_pod(real_data)
    for path in ("/v1/k8s/mutate", "/v1/k8s/mutate/enforce"):
        reply = client.post(path, content=json.dumps(_review(pod, uid="u-9")))
        assert reply.status_code == 200
        response = reply.json()["response"]
        assert response["uid"] == "u-9" and response["allowed"] is True
        assert all(len(w) < 120 for w in response["warnings"]) and "no_champion" in response["warnings"][0]
        patched = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
        assert patched["spec"] == pod["spec"]
        assert (
            json.loads(patched["metadata"]["annotations"][RECOMMENDATION_ANNOTATION])["status"]
            == "no_champion"
        )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("{not json", "body is not valid JSON"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request: Field required"),
        (
            {"apiVersion": "v1", "kind": "AdmissionReview", "request": {"uid": "x"}},
            "apiVersion: String should",
        ),
        (
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}},
            "request.uid: Field",
        ),
    ],
)
def test_malformed_admission_reviews_get_422(client: TestClient, body: object, expected: str) -> None:
    content = body if isinstance(body, str) else json.dumps(body)
    reply = client.post("/v1/k8s/mutate", content=content)
    assert reply.status_code == 422
    assert reply.json()["error"].startswith(expected) and "\n" not in reply.json()["error"]


def test_manifests_parse_and_configure_the_webhook_safely() -> None:
    docs = [
        d for f in sorted((ROOT / "deploy" / "k8s").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())
    ]
    kinds = {d["kind"] for d in docs if d}
    assert {"Deployment", "Service", "MutatingWebhookConfiguration"} <= kinds
    config = next(d for d in docs if d and d["kind"] == "MutatingWebhookConfiguration")
    assert "cert-manager.io/inject-ca-from" in config["metadata"]["annotations"]
    paths = set()
    for hook in config["webhooks"]:
        assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 2
        assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
        assert hook["namespaceSelector"]["matchExpressions"]
        paths.add(hook["clientConfig"]["service"]["path"])
    assert paths == {"/v1/k8s/mutate", "/v1/k8s/mutate/enforce"}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`jobfit serve --cluster edge,other` on a free port over an empty MLflow store (no champions)."""
    store = tmp_path_factory.mktemp("empty-mlflow")
    env = {"JOBFIT_MLFLOW__TRACKING_URI": f"sqlite:///{store / 'mlflow.db'}"}
    with jobfit_serve("edge,other", env, store, store / "stderr.txt") as (url, _):
        yield url


def test_real_server_answers_for_the_first_cluster(live: str, real_data: Path) -> None:
    pod = _real_pod(real_data)
    reply = httpx.post(
        f"{live}/v1/k8s/mutate/enforce", content=json.dumps(_review(pod, uid="live-1")), timeout=10
    )
    assert reply.status_code == 200
    response = reply.json()["response"]
    assert response["uid"] == "live-1" and response["allowed"] is True
    patched = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    note = json.loads(patched["metadata"]["annotations"][RECOMMENDATION_ANNOTATION])
    assert (note["cluster"], note["status"], note["user"]) == ("edge", "no_champion", "team-a")
    assert patched["spec"] == pod["spec"]
    bad = httpx.post(f"{live}/v1/k8s/mutate", content="{", timeout=10)
    assert bad.status_code == 422 and bad.json()["error"].startswith("body is not valid JSON")


# --- the code-aware VRAM estimate from the containers' command lines (issue 25) -----------------------

FULL = (
    ["litgpt", "finetune_full", "checkpoints/meta-llama/Llama-2-7b-hf"],
    [
        "--devices",
        "1",
        "--train.micro_batch_size",
        "4",
        "--train.max_seq_length",
        "512",
        "--precision",
        "bf16-true",
    ],
)


def _gpu_pod(command: list[str], args: list[str], product: str = "NVIDIA-A100-SXM4-40GB") -> dict[str, Any]:
    """A one-GPU pod whose nodeSelector names the card (NVIDIA GPU feature discovery's label)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "ft", "annotations": {"team": "nlp"}},
        "spec": {
            "nodeSelector": {"nvidia.com/gpu.product": product},
            "initContainers": [{"name": "fetch", "image": "busybox", "command": ["python", "x.py"]}],
            "containers": [
                {
                    "name": "main",
                    "image": "litgpt",
                    "command": command,
                    "args": args,
                    "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "64Gi"}},
                }
            ],
        },
    }


def _vram_note(pod: dict[str, Any], response: dict[str, Any]) -> dict[str, Any] | None:
    patched = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    assert patched["spec"] == pod["spec"] and patched["metadata"]["annotations"]["team"] == "nlp"
    text = patched["metadata"]["annotations"].get(VRAM_ANNOTATION)
    return json.loads(text) if text is not None else None


def test_command_and_node_selector_become_the_script_and_card() -> None:
    recommend = _ok(GIB)
    pod = _gpu_pod(
        ["/bin/bash", "-lc"], ["python train.py --config /etc/jobfit/lora.yaml"], "nvidia-tesla-a100"
    )
    pod["spec"]["containers"].append({"name": "side", "image": "x", "command": ["torchrun", "a b.py"]})
    admission_response(_review(pod), "advise", recommend)
    ask = recommend.asks[0]
    # The main containers' commands only (not the init container's), a shell's -c command as written.
    assert ask.script == "#!/bin/sh\npython train.py --config /etc/jobfit/lora.yaml\ntorchrun 'a b.py'\n"
    assert (ask.gpu_model, ask.gpus) == ("a100", 1)
    assert pod_script([{"name": "main", "image": "trainer"}]) is None  # the image's entrypoint: unknown
    assert gpu_model({"nodeSelector": {"nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB"}}) == "V100-SXM2-32GB"
    assert gpu_model({"nodeSelector": {"nvidia.com/gpu.product": "bad value!"}}) is None


def test_a_pod_that_will_not_fit_its_gpu_is_warned_and_annotated(client: TestClient) -> None:
    pod = _gpu_pod(*FULL)
    reply = client.post("/v1/k8s/mutate", content=json.dumps(_review(pod, uid="fit-1")))
    assert reply.status_code == 200
    response = reply.json()["response"]
    assert response["allowed"] is True and all(len(w) < 120 for w in response["warnings"])
    fit = [w for w in response["warnings"] if "will not fit" in w]
    note = _vram_note(pod, response)
    assert note is not None and note["status"] == "ok" and note["fits"] is False
    assert note["gpu_model"] == "A100-SXM4-40GB" and note["peak_vram_gib"] > note["gpu_mem_gib"] == 40.0
    expected = (
        f"jobfit: will not fit one A100-SXM4-40GB: ~{note['peak_vram_gib']} GiB/GPU from its command, "
        f"card 40.0 GiB; try: {note['changes_that_fit'][0]}"
    )
    assert fit == [expected if len(expected) < 120 else expected[:116] + "..."]
    # The same estimate /v1/recommend gives for the same command line as a script and the same card.
    script = pod_script(pod["spec"]["containers"])
    direct = client.post(
        "/v1/recommend",
        json={"cluster": "demo", "user": "team-a", "gres": "gpu:A100-SXM4-40GB:1", "script": script},
    ).json()["code_estimate"]
    assert round(direct["peak_vram_bytes"] / GIB, 1) == note["peak_vram_gib"]
    assert note["changes_that_fit"] == [c["what"] for c in direct["changes_that_fit"]][:3]
    # Settings given inline as arguments count: 4-bit LoRA of the same model fits, so no warning.
    lora = _gpu_pod(["litgpt", "finetune_lora", FULL[0][2]], [*FULL[1], "--quantize", "bnb.nf4"])
    response = client.post("/v1/k8s/mutate", content=json.dumps(_review(lora))).json()["response"]
    note = _vram_note(lora, response)
    assert (
        note is not None
        and note["fits"] is True
        and not any("will not fit" in w for w in response["warnings"])
    )


def test_files_a_command_names_are_not_read_and_the_annotation_says_so(client: TestClient) -> None:
    pod = _gpu_pod(["/bin/sh", "-c"], ["python train.py --config /etc/jobfit/lora.yaml"])
    response = client.post("/v1/k8s/mutate", content=json.dumps(_review(pod))).json()["response"]
    note = _vram_note(pod, response)
    assert note is not None and note["status"] == "unknown_model"
    assert (
        note["files_not_read"] == ["train.py", "/etc/jobfit/lora.yaml"]
        and "named but not read" in note["why"]
    )
    assert not any("will not fit" in w for w in response["warnings"])
    # No command (the image's entrypoint): no estimate, no annotation for it.
    bare = _gpu_pod([], [])
    response = client.post("/v1/k8s/mutate", content=json.dumps(_review(bare))).json()["response"]
    assert _vram_note(bare, response) is None
