"""DCGM ingest: real dcgm-exporter excerpts (Hostname label, MIG instance, framebuffer MiB, broken lines,
template values), synthetic scrapes with timestamps (hostname label, hpc_job copies, out-of-order time),
a CSV archive, and the CLI path with attribution against pods in silver.jobs."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.context import Context
from jobs.stages.ingest.common import lines_frame, scan_inputs
from jobs.stages.ingest.dcgm import scrape_time
from pipelines.silver.dcgm import CSV_HEADER, parse_dcgm_lines, pivot_samples

MIB = 1024**2
T0 = datetime(2026, 11, 3, 10, 0, 0)
T0_MS = 1793700000000  # 2026-11-03T10:00:00Z in ms

SYNTHETIC = f"""# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-b",modelName="A100",hostname="g001",hpc_job="201"}} 60 {T0_MS}
DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-b",hostname="g001",hpc_job="202"}} 60 {T0_MS}
DCGM_FI_DEV_FB_USED{{gpu="1",UUID="GPU-b",hostname="g001",hpc_job="201"}} 2048 {T0_MS}
DCGM_FI_DEV_FB_FREE{{gpu="1",UUID="GPU-b",hostname="g001",hpc_job="201"}} 79872 {T0_MS}
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-a",hostname="g001"}} 5 {T0_MS}
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-a",hostname="g001"}} 7 {T0_MS + 30000}
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-a",hostname="g001"}} 9 {T0_MS + 15000}
DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="GPU-a",Hostname="g001"}} 61.5 {T0_MS}
DCGM_FI_DEV_GPU_UTIL{{gpu="2",UUID="GPU-c",modelName="NVIDIA A100-SXM4-80GB"}} 1 {T0_MS}
DCGM_FI_DEV_GPU_UTIL{{gpu="3",UUID="GPU-d",hostname="g001"}} NaNish {T0_MS}
DCGM_FI_DEV_GPU_UTIL{{gpu="3",UUID="GPU-d",hostname="g001" 5 {T0_MS}
DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-a",hostname="g001"}} 40 {T0_MS}
"""

CSV = "\n".join(
    [
        "timestamp,metric,labels,value",
        '2026-11-03T10:00:00Z,DCGM_FI_DEV_GPU_UTIL,"gpu=""0"",UUID=""GPU-a"",hostname=""g002""",42',
        '1793700030,DCGM_FI_DEV_GPU_UTIL,"{gpu=""0"",UUID=""GPU-a"",hostname=""g002""}",44',
        'yesterday,DCGM_FI_DEV_GPU_UTIL,"gpu=""0"",UUID=""GPU-a"",hostname=""g002""",44',
    ]
)


def _parse(spark: SparkSession, paths: list[Path]):
    ctx = Context(environ={}, quiet=True)
    ctx.use_spark(spark)
    refs = scan_inputs([str(p) for p in paths])
    csv = [r.name for r in refs if r.first_line.lower() == CSV_HEADER]
    scrape = {r.name: scrape_time(r.name, T0) for r in refs if r.name not in csv}
    samples, rejects, unkept = parse_dcgm_lines(lines_frame(ctx, refs, "demo"), scrape, csv)
    return samples, rejects, unkept


@pytest.fixture(scope="module")
def parsed(spark: SparkSession, real_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Real excerpts (copied under a name that carries the scrape time) and synthetic files, parsed once."""
    d = tmp_path_factory.mktemp("dcgm")
    paths = []
    for src, name in [
        (real_data / "samples" / "hpc_dcgm_exporter_real_metric_lines.txt", "real-2026-11-03T10:00:00Z.prom"),
        (
            real_data / "telemetry" / "dcgm-exporter_scrape_V100__NVIDIA_dcgm-exporter_250.prom",
            "v100.1793700000.prom",
        ),
        (real_data / "samples" / "dcgm-exporter-k8s-pod-labels-gke.txt", "gke-2026-11-03T10:00:00Z.prom"),
        (
            real_data / "telemetry" / "dcgm-exporter_scrape_H100_MIG_k8s__NVIDIA_dcgm-exporter_512.prom",
            "mig.prom",
        ),
    ]:
        shutil.copy(src, d / name)
        paths.append(d / name)
    (d / "synthetic.prom").write_text(SYNTHETIC)
    (d / "archive.csv").write_text(CSV)
    paths += [d / "synthetic.prom", d / "archive.csv"]
    samples, rejects, unkept = _parse(spark, paths)
    wide = pivot_samples(samples)
    return {
        "rows": {(r["host"], r["device"], r["ts"], r["label_job"]): r.asDict() for r in wide.collect()},
        "rejects": sorted(
            (Path(r["source_file"]).name, r["line_no"], r["reason"]) for r in rejects.collect()
        ),
        "unkept": {r["metric"]: r["count"] for r in unkept.collect()},
        "lines": samples.count(),
    }


def test_real_framebuffer_and_xid(parsed: dict) -> None:
    # Block 1 (gpu-operator #467): FB_FREE 80328, FB_USED 741 (MiB), XID 0; pod="" means no job label
    r = parsed["rows"][("nvidia-dcgm-exporter-d2khm", "GPU-c89b14a3-ce7c-6725-8424-b55d37d9c332", T0, "")]
    assert (r["fb_used_bytes"], r["fb_total_bytes"], r["xid"]) == (741 * MIB, (741 + 80328) * MIB, 0)
    assert (r["gpu"], r["model_name"], r["mig_gi_id"], r["gpu_util_pct"]) == (
        0,
        "NVIDIA A100 80GB PCIe",
        None,
        None,
    )


def test_real_mig_instance_later_line_wins(parsed: dict) -> None:
    # Block 2 (dcgm-exporter #68): A30 MIG 2g.12gb GPU_I_ID 1, tensor 0.000000 then 0.022137, no timestamps
    r = parsed["rows"][("dcgm-exporter-sn5rp", "GPU-603a8873-0edd-c157-ce48-2078e8b1a935/gi1", T0, "")]
    assert (r["mig_gi_id"], r["mig_profile"], r["tensor_active_frac"]) == (1, "2g.12gb", 0.022137)
    # its profiling fields (dcgm-exporter #68): GR_ENGINE_ACTIVE 0.381124, DRAM_ACTIVE 0
    assert (r["gr_engine_active_frac"], r["dram_active_frac"]) == (0.381124, 0.0)
    assert r["sm_occupancy_frac"] is None  # not in the excerpt: null, never 0


def test_real_v100_scrape_time_from_epoch_name(parsed: dict) -> None:
    r = parsed["rows"][("r6i3n0", "GPU-a6158b59-2c1e-1e63-0068-9178c4298abd", T0, "")]
    assert (r["gpu_util_pct"], r["model_name"]) == (0.0, "Tesla V100-SXM2-32GB")


def test_hpc_job_copies_and_hostname_spellings(parsed: dict) -> None:
    rows = parsed["rows"]
    a, b = rows[("g001", "GPU-b", T0, "201")], rows[("g001", "GPU-b", T0, "202")]
    assert a["gpu_util_pct"] == b["gpu_util_pct"] == 60.0  # one row per copy, never summed
    assert a["fb_used_bytes"] == 2048 * MIB and b["fb_used_bytes"] is None
    # hostname and Hostname series of the same GPU land in one sample
    r = rows[("g001", "GPU-a", T0, "")]
    assert (r["gpu_util_pct"], r["power_w"]) == (5.0, 61.5)
    assert rows[("g002", "GPU-a", T0, "")]["gpu_util_pct"] == 42.0  # CSV, ISO time
    assert rows[("g002", "GPU-a", datetime(2026, 11, 3, 10, 0, 30), "")]["gpu_util_pct"] == 44.0  # epoch s
    assert len(rows) == 12  # with the three H100 MIG instances, whose only lines are GR_ENGINE_ACTIVE


def test_rejects_with_reasons(parsed: dict) -> None:
    rejects = parsed["rejects"]
    reasons = [
        (f, n, r)
        for f, n, r in rejects
        if f in ("synthetic.prom", "archive.csv", "real-2026-11-03T10:00:00Z.prom")
    ]
    assert reasons == [
        ("archive.csv", 4, "timestamp is neither ISO-8601 nor epoch seconds"),
        ("real-2026-11-03T10:00:00Z.prom", 30, "not a Prometheus sample line"),  # $ cat .../job-mapping/0
        ("real-2026-11-03T10:00:00Z.prom", 31, "not a Prometheus sample line"),  # 5
        ("synthetic.prom", 9, "timestamp out of order: earlier than an earlier line's 2026-11-03 10:00:30"),
        ("synthetic.prom", 11, "no hostname/Hostname label"),
        ("synthetic.prom", 12, "value NaNish is not a number"),
        ("synthetic.prom", 13, "not a Prometheus sample line"),
    ]
    # the GKE fixture's doubled braces and {placeholder} values are not samples
    assert [r for f, _, r in rejects if f.startswith("gke")] == ["malformed or repeated labels"] * 6


def test_metrics_not_kept_are_counted(parsed: dict) -> None:
    unkept = parsed["unkept"]
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in unkept and "DCGM_FI_PROF_DRAM_ACTIVE" not in unkept
    assert unkept["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == 4 and unkept["DCGM_FI_DEV_POWER_MGMT_LIMIT"] == 2
    assert unkept["DCGM_FI_DEV_GPU_TEMP"] == 1 and unkept["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == 1


@pytest.mark.slow
def test_cli_ingest_attributes_and_reingests(jobfit, tmp_path: Path) -> None:
    pod = {
        "kind": "Pod",
        "metadata": {"name": "p1", "namespace": "ml", "creationTimestamp": "2026-11-03T09:00:00Z"},
        "spec": {
            "nodeName": "g001",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        },
        "status": {"phase": "Running", "startTime": "2026-11-03T09:00:00Z"},
    }
    (tmp_path / "pods.jsonl").write_text(json.dumps(pod) + "\n")
    assert jobfit("ingest", "k8s", str(tmp_path / "pods.jsonl"), "--cluster", "demo").code == 0
    scrape = tmp_path / "g001-2026-11-03T10:00:00Z.prom"
    scrape.write_text(
        '# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",hostname="g001"} 5\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",hostname="g001",hpc_job="77"} 9\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-z",hostname="g009"} 1\nbroken line\n'
    )
    first = json.loads(jobfit("ingest", "dcgm", str(scrape), "--cluster", "demo", "--json").out)
    assert (first["read"], first["inserted"], first["quarantined"]) == (4, 3, 1)
    assert first["tables"]["attribution (samples)"] == {"overlap": 1, "label": 1, "unattributed": 1}
    again = json.loads(jobfit("ingest", "dcgm", str(scrape), "--cluster", "demo", "--json").out)
    assert (again["read"], again["inserted"], again["updated"], again["unchanged"]) == (0, 0, 0, 0)
    assert again["tables"] == {"files already ingested": {"files": 1}}
    rows = json.loads(
        jobfit(
            "sql",
            "SELECT host, device, ts, job_id, attribution FROM silver.gpu_samples ORDER BY host, device",
            "--json",
        ).out
    )["rows"]
    assert rows == [
        {
            "host": "g001",
            "device": "GPU-a",
            "ts": "2026-11-03 10:00:00",
            "job_id": "ml/p1",
            "attribution": "overlap",
        },
        {
            "host": "g001",
            "device": "GPU-b",
            "ts": "2026-11-03 10:00:00",
            "job_id": "77",
            "attribution": "label",
        },
        {
            "host": "g009",
            "device": "GPU-z",
            "ts": "2026-11-03 10:00:00",
            "job_id": None,
            "attribution": "unattributed",
        },
    ]


@pytest.mark.slow
def test_cli_parquet_archive_gzip_and_duplicate_content(jobfit, tmp_path: Path) -> None:
    """A Parquet archive (timestamp type, labels as a map), a gzip scrape not named .gz (read by the driver),
    and one content under two names (ingested once)."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    labels = pa.array(
        [
            [("gpu", "0"), ("UUID", "GPU-p"), ("hostname", "g010")],
            [("gpu", "0"), ("UUID", "GPU-p"), ("hostname", "g010"), ("hpc_job", '9"x')],
            [("gpu", "0"), ("UUID", "GPU-p")],
        ],
        type=pa.map_(pa.string(), pa.string()),
    )
    table = pa.table(
        {
            "timestamp": pa.array([T0, T0, T0], type=pa.timestamp("us")),
            "metric": ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL"],
            "labels": labels,
            "value": [1024.0, 33.0, 1.0],
        }
    )
    pq.write_table(table, tmp_path / "archive.parquet")
    scrape = f'DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-q",hostname="g011"}} 12 {T0_MS}\n'
    (tmp_path / "g011.prom").write_bytes(gzip.compress(scrape.encode()))
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "g011-again.prom").write_bytes(gzip.compress(scrape.encode()))
    out = jobfit("ingest", "dcgm", str(tmp_path), "--cluster", "pq", "--json")
    assert out.code == 0, out.err
    report = json.loads(out.out)
    assert (report["files"], report["read"], report["inserted"], report["quarantined"]) == (3, 4, 3, 1)
    assert report["tables"]["files already ingested"] == {"files": 1}
    rows = json.loads(
        jobfit(
            "sql",
            "SELECT host, device, label_job, gpu_util_pct, fb_used_bytes, line_no FROM silver.gpu_samples "
            "WHERE cluster = 'pq' ORDER BY host, label_job",
            "--json",
        ).out
    )["rows"]
    assert rows == [
        {
            "host": "g010",
            "device": "GPU-p",
            "label_job": "",
            "gpu_util_pct": None,
            "fb_used_bytes": 1024 * MIB,
            "line_no": 1,
        },
        {
            "host": "g010",
            "device": "GPU-p",
            "label_job": '9"x',
            "gpu_util_pct": 33.0,
            "fb_used_bytes": None,
            "line_no": 2,
        },
        {
            "host": "g011",
            "device": "GPU-q",
            "label_job": "",
            "gpu_util_pct": 12.0,
            "fb_used_bytes": None,
            "line_no": 1,
        },
    ]
    quarantined = json.loads(
        jobfit("sql", "SELECT line_no, raw, reason FROM quarantine WHERE cluster = 'pq'", "--json").out
    )["rows"]
    assert quarantined == [
        {
            "line_no": 3,
            "raw": '2026-11-03T10:00:00.000000,DCGM_FI_DEV_GPU_UTIL,"gpu=""0"",UUID=""GPU-p""",1.0',
            "reason": "no hostname/Hostname label",
        }
    ]
