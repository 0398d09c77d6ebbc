"""Log-text classification (pure Python, no Spark) on every real error log, the Xid catalogue, log names."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.gold.failures.logs import parse_log_file_name
from pipelines.gold.failures.patterns import LOG_PATTERNS, classify_text, log_facts
from pipelines.gold.failures.scoring import confusion_table, expected_cause
from pipelines.gold.failures.taxonomy import CAUSES
from pipelines.gold.failures.xid import APPLICATION, HARDWARE, INFORMATIONAL, XID_CATALOGUE, describe
from tests.failures_helpers import real_error_logs


def test_every_real_error_log_gets_the_cause_a_person_assigned(real_data: Path) -> None:
    logs = real_error_logs(real_data)
    assert len(logs) >= 31, "the real errorlogs folder shrank"
    pairs = []
    for name, _, text in logs:
        diagnosis = classify_text(text)
        pairs.append((expected_cause(name), diagnosis.cause if diagnosis else "none"))
    table = confusion_table(pairs)
    print("\nreal error logs: expected (rows) vs classified (columns)\n" + table)
    wrong = [(name, e, p) for (name, _, _), (e, p) in zip(logs, pairs, strict=True) if e != p]
    assert not wrong, f"misclassified {wrong}\n{table}"


def test_quoted_numbers_come_from_the_log_text(real_data: Path) -> None:
    logs = {name: text for name, _, text in real_error_logs(real_data)}
    # "Tried to allocate 22.78 GiB. GPU 0 has a total capacity of 31.47 GiB"
    cads = log_facts(logs["cuda_oom__murong-xu_CADS_4.txt"])
    assert (cads["gpu_total_gib"], cads["gpu_tried_gib"]) == ("31.47", "22.78")
    # "(GPU 0; 6.00 GiB total capacity ...)" and "a total capacty of 4.00 GiB" (PyTorch's own typo)
    assert log_facts(logs["cuda_oom__pytorch_pytorch_59778.txt"])["gpu_total_gib"] == "6.00"
    assert log_facts(logs["cuda_oom__Synthintel0_MyGirlGPT_11.txt"])["gpu_total_gib"] == "4.00"
    # "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds"
    ofa = log_facts(logs["nccl_timeout__OFA-Sys_OFA_271.txt"])
    assert (ofa["nccl_op"], ofa["nccl_timeout_ms"], ofa["nccl_ran_ms"]) == ("ALLREDUCE", "1800000", "1802212")
    # "NVRM: Xid (PCI:0000:01:00): 32, Channel ID ..." comes before the Xid 31 lines
    bumblebee = classify_text(logs["gpu_xid__Bumblebee-Project_Bumblebee_677.txt"])
    assert bumblebee is not None and bumblebee.facts["xid"] == "32" and bumblebee.detail == "xid"
    ecc = classify_text(logs["gpu_ecc__vllm-project_vllm_5222.txt"])
    assert ecc is not None and ecc.evidence == "RuntimeError: CUDA error: uncorrectable ECC error encountered"


@pytest.mark.parametrize(
    ("text", "cause", "detail"),
    [
        ("ModuleNotFoundError: No module named 'deepspeed'", "software_error", "import_error"),
        (
            "FileNotFoundError: [Errno 2] No such file or directory: '/scratch/x.pt'",
            "software_error",
            "file_not_found",
        ),
        (
            "/var/spool/slurmd/job1/slurm_script: line 9: 4242 Segmentation fault (core dumped) ./a.out",
            "software_error",
            "segfault",
        ),
        ("AssertionError: world size must divide batch", "software_error", "assertion"),
        (
            "/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: "
            "[0,0,0], thread: [3,0,0] Assertion `t >= 0 && t < n_classes` failed.",
            "software_error",
            "device_assert",
        ),
        (
            "slurmstepd: error: *** JOB 77 ON g012 CANCELLED AT 2026-11-02T10:00:00 DUE TO PREEMPTION ***",
            "preemption",
            "preempted",
        ),
        ("slurmstepd: error: *** JOB 77 ON c1 CANCELLED AT 2026-11-02T10:00:00 ***", "cancelled", "scancel"),
        ('Warning: Failed to pull image "ghcr.io/x/y:v9": ErrImagePull', "k8s_image_pull", "image_pull"),
        (
            "Status: Failed\nReason: Evicted\nMessage: The node was low on resource: memory.",
            "k8s_evicted",
            "evicted",
        ),
        ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", "gpu_hardware", "xid"),
        ("NVRM: Xid (PCI:0000:3b:00): 31, pid=88, Ch 0000001a, MMU Fault", "software_error", "gpu_app_fault"),
        (
            "Exception in thread main java.lang.OutOfMemoryError: Java heap space",
            "software_error",
            "jvm_heap",
        ),
        # a real root cause beats the NCCL errors it leaves behind on other ranks
        (
            "ImportError: cannot import name 'x'\nncclRemoteError: remote process exited",
            "software_error",
            "import_error",
        ),
        (
            "Traceback (most recent call last):\n  File \"t.py\", line 1\nKeyError: 'lr'",
            "software_error",
            "python_exception",
        ),
    ],
)
def test_patterns_on_typical_lines(text: str, cause: str, detail: str) -> None:
    diagnosis = classify_text(text)
    assert diagnosis is not None and (diagnosis.cause, diagnosis.detail) == (cause, detail)


def test_no_pattern_means_no_diagnosis() -> None:
    assert classify_text("epoch 3 loss 0.12\nsaving checkpoint") is None
    assert classify_text("") is None and classify_text(None) is None


def test_pattern_table_uses_declared_causes_only() -> None:
    assert {p.cause for p in LOG_PATTERNS} <= set(CAUSES)
    assert len({p.pattern_id for p in LOG_PATTERNS}) == len(LOG_PATTERNS)
    assert not CAUSES["gpu_hardware"].user_fixable and not CAUSES["node_failure"].user_fixable
    assert CAUSES["host_oom"].user_fixable and CAUSES["time_limit"].user_fixable


def test_xid_catalogue_covers_the_documented_codes() -> None:
    wanted = (13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120)
    assert set(wanted) <= set(XID_CATALOGUE)
    assert describe(79).name == "GPU has fallen off the bus" and describe(79).fault == HARDWARE
    assert describe(48).name == "Double Bit ECC Error" and describe(48).is_system_fault
    assert describe(31).fault == APPLICATION and not describe(31).is_system_fault
    assert describe(45).fault == INFORMATIONAL and not describe(45).is_system_fault
    assert describe(94).name == "Contained ECC error" and describe(94).is_system_fault
    assert describe(9999).name == "not in the catalogue" and not describe(9999).is_system_fault


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("12345.err", ("12345", "stderr")),
        ("slurm-12345.out", ("12345", "stdout")),
        ("/logs/12345_7.err", ("12345_7", "stderr")),
        ("train-run-99_3.out.gz", ("99_3", "stdout")),
        ("42.log", ("42", "log")),
    ],
)
def test_log_file_names(name: str, expected: tuple[str, str]) -> None:
    assert parse_log_file_name(name) == expected


@pytest.mark.parametrize("name", ["notes.txt", "slurm-abc.out", "12345.err.bak", "<stdin>"])
def test_log_file_names_without_a_job_id(name: str) -> None:
    with pytest.raises(ValueError, match="does not name a job id"):
        parse_log_file_name(name)
