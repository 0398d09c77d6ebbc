"""Damaged inputs real archives contain: a gzip corrupt inside (not only truncated), DCGM values NaN/±Inf
(dcgm-exporter writes them for blank fields and failed reads), and a write slipped into `jobfit sql`.
No command prints a traceback (Python or Java); what can be kept is kept, the rest is quarantined."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pytest

# Label sets of the four V100s of the real scrape tests/data/real/telemetry/*V100*250.prom.
V100 = [
    f'gpu="{i}",UUID="{uuid}",device="nvidia{i}",modelName="Tesla V100-SXM2-32GB",Hostname="r6i3n0"'
    for i, uuid in enumerate(
        (
            "GPU-a6158b59-2c1e-1e63-0068-9178c4298abd",
            "GPU-8d5053b3-9280-7d1a-751b-4fd2fdd547c5",
            "GPU-a9079f15-493e-6c1c-c78c-73ec2b840cba",
            "GPU-bd94f0f5-8c2f-bc95-74ad-5f99fdc33d01",
        )
    )
]


def _no_trace(err: str) -> None:
    assert "Traceback" not in err and "\tat org.apache" not in err and "Py4JJavaError" not in err, err


def _damaged_inside(data: bytes) -> bytes:
    """A gzip of `data` with one byte of its deflate stream flipped so that zlib itself fails (not only
    the CRC check at the end): the "invalid distance too far back" kind of damage."""
    packed = gzip.compress(data, mtime=0)
    for pos in range(20, len(packed) - 8):
        broken = packed[:pos] + bytes([packed[pos] ^ 0xFF]) + packed[pos + 1 :]
        try:
            gzip.decompress(broken)
        except zlib.error:
            return broken
        except (OSError, EOFError):
            continue
    raise AssertionError("no single-byte flip made zlib fail")


@pytest.mark.parametrize("source", ["sacct", "dcgm"])
def test_gzip_damaged_inside_is_one_line_exit_2(jobfit, tmp_path: Path, real_data: Path, source: str) -> None:
    real = {
        "sacct": real_data / "sacct" / "reportseff_tests_sacct_lines.txt",
        "dcgm": real_data / "telemetry" / "dcgm-exporter_scrape_V100__NVIDIA_dcgm-exporter_250.prom",
    }[source]
    bad = tmp_path / f"{real.name}.gz"
    bad.write_bytes(_damaged_inside(real.read_bytes()))
    result = jobfit("ingest", source, str(bad), "--cluster", "demo")
    assert result.code == 2
    _no_trace(result.err)
    lines = [ln for ln in result.err.splitlines() if ln.startswith("jobfit:")]
    assert lines == [f"jobfit: error: {bad}: not a readable gzip file ({lines[0].split('(', 1)[1]}"], lines
    truncated = tmp_path / f"cut-{real.name}.gz"
    truncated.write_bytes(gzip.compress(real.read_bytes())[:-30])
    result = jobfit("ingest", source, str(truncated), "--cluster", "demo")
    assert result.code == 2 and str(truncated) in result.err
    _no_trace(result.err)


def test_dcgm_non_finite_values_quarantined_per_record(jobfit, tmp_path: Path) -> None:
    util = ["37", "NaN", "12", "99", "0"]
    used = ["1024", "2048", "+Inf", "-Inf", "nan"]
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    lines += [f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {v}" for labels, v in zip(V100, util, strict=False)]
    lines += ["# TYPE DCGM_FI_DEV_FB_USED gauge"]
    lines += [f"DCGM_FI_DEV_FB_USED{{{labels}}} {v}" for labels, v in zip(V100, used, strict=False)]
    scrape = tmp_path / "r6i3n0-1700000000.prom"
    scrape.write_text("\n".join(lines) + "\n")
    result = jobfit("ingest", "dcgm", str(scrape), "--cluster", "demo", "--json")
    assert result.code == 0, result.err
    _no_trace(result.err)
    report = json.loads(result.out)
    # 8 sample lines: GPU 1's utilisation and GPUs 2 and 3's memory are not finite; the rest is kept.
    assert (report["read"], report["quarantined"]) == (8, 3)
    rows = json.loads(
        jobfit(
            "sql",
            "SELECT device, gpu_util_pct, fb_used_bytes FROM silver.gpu_samples ORDER BY device",
            "--json",
        ).out
    )["rows"]
    by_gpu = {r["device"]: (r["gpu_util_pct"], r["fb_used_bytes"]) for r in rows}
    assert by_gpu == {
        "GPU-a6158b59-2c1e-1e63-0068-9178c4298abd": (37.0, 1024 * 2**20),
        "GPU-8d5053b3-9280-7d1a-751b-4fd2fdd547c5": (None, 2048 * 2**20),
        "GPU-a9079f15-493e-6c1c-c78c-73ec2b840cba": (12.0, None),
        "GPU-bd94f0f5-8c2f-bc95-74ad-5f99fdc33d01": (99.0, None),
    }
    reasons = json.loads(
        jobfit("sql", "SELECT line_no, reason FROM quarantine ORDER BY line_no", "--json").out
    )["rows"]
    assert reasons == [
        {"line_no": 3, "reason": "value NaN is not a finite number"},
        {"line_no": 9, "reason": "value +Inf is not a finite number"},
        {"line_no": 10, "reason": "value -Inf is not a finite number"},
    ]


def test_sql_is_read_only_unless_allowed(jobfit, tmp_path: Path, real_data: Path) -> None:
    lines = real_data / "telemetry" / "dcgm-exporter_scrape_V100__NVIDIA_dcgm-exporter_250.prom"
    assert jobfit("ingest", "dcgm", str(lines), "--cluster", "demo").code == 0
    count = "SELECT count(*) AS n FROM silver.gpu_samples"
    before = json.loads(jobfit("sql", count, "--json").out)["rows"]
    for statement in (
        "DELETE FROM silver.gpu_samples WHERE true",
        "DROP TABLE silver.gpu_samples",
        "INSERT INTO silver.gpu_samples SELECT * FROM silver.gpu_samples",
        "WITH x AS (SELECT * FROM silver.gpu_samples) INSERT INTO silver.gpu_samples SELECT * FROM x",
        "UPDATE silver.gpu_samples SET host = 'x'",
        "MERGE INTO silver.gpu_samples t USING silver.gpu_samples s ON t.ts = s.ts WHEN MATCHED THEN DELETE",
        "TRUNCATE TABLE silver.gpu_samples",
        "CREATE TABLE t AS SELECT 1",
        "ALTER TABLE silver.gpu_samples ADD COLUMN x INT",
        "SET spark.sql.shuffle.partitions = 7",
    ):
        result = jobfit("sql", statement)
        assert result.code == 2, statement
        assert "is not a query (jobfit sql is read-only; --allow-writes runs it)" in result.err, result.err
        assert result.err.count("\n") == 1, result.err
    assert json.loads(jobfit("sql", count, "--json").out)["rows"] == before
    for query in ("DESCRIBE silver.gpu_samples", "SHOW TABLES", "EXPLAIN SELECT 1"):
        assert jobfit("sql", query).code == 0, query
    bad = jobfit("sql", "SELECT nope FROM silver.gpu_samples")
    assert bad.code == 2 and bad.err.count("\n") == 1
    _no_trace(bad.err)
    allowed = jobfit("sql", "DELETE FROM silver.gpu_samples WHERE true", "--allow-writes")
    assert allowed.code == 0, allowed.err
    assert json.loads(jobfit("sql", count, "--json").out)["rows"] == [{"n": 0}]


def _variants(text: str) -> dict[str, bytes]:
    """The same records as Windows tools and exports write them: UTF-16 with a byte-order mark, UTF-8 with
    one and CRLF line ends."""
    return {
        "utf16": text.encode("utf-16"),
        "bom_crlf": b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode("utf-8"),
    }


@pytest.mark.slow
@pytest.mark.parametrize("source", ["sacct", "swf", "dcgm"])
def test_encodings_and_line_ends_read_the_same_records(
    jobfit, tmp_path: Path, real_data: Path, source: str
) -> None:
    if source == "sacct":
        text = (real_data / "samples" / "jobstats_testfixture_sacct_admincomment.txt").read_text()
        table, key = "silver.jobs", "job_id, state, elapsed_s, req_mem_bytes, max_rss_bytes"
    elif source == "swf":
        head = gzip.decompress((real_data / "swf" / "SDSC-SP2-1998-4.2-cln.swf.gz").read_bytes())
        text = "\n".join(head.decode().splitlines()[:400]) + "\n"
        table, key = "silver.jobs", "job_id, state, submit_ts, elapsed_s, req_cpus"
    else:
        text = (
            real_data / "telemetry" / "dcgm-exporter_scrape_V100__NVIDIA_dcgm-exporter_250.prom"
        ).read_text()
        table, key = "silver.gpu_samples", "host, device, ts, gpu_util_pct"
    name = {"sacct": "dump.txt", "swf": "log.swf", "dcgm": "r6i3n0-1700000000.prom"}[source]
    files = {"clean": text.encode("utf-8"), **_variants(text)}
    reports, rows = {}, {}
    for variant, data in files.items():
        folder = tmp_path / variant
        folder.mkdir()
        (folder / name).write_bytes(data)
        result = jobfit("ingest", source, str(folder / name), "--cluster", variant, "--json")
        assert result.code == 0, (variant, result.err)
        _no_trace(result.err)
        reports[variant] = json.loads(result.out)
        query = f"SELECT {key} FROM {table} WHERE cluster = '{variant}' ORDER BY {key}"
        rows[variant] = json.loads(jobfit("sql", query, "--json", "--limit", "100000").out)["rows"]
    assert rows["clean"], "the clean file gave no rows"
    counts = ("read", "inserted", "quarantined", "superseded")
    for variant in files:
        assert rows[variant] == rows["clean"], variant
        assert [reports[variant][c] for c in counts] == [reports["clean"][c] for c in counts], variant


def _pod_line(name: str, phase: str = "Succeeded") -> str:
    pod = {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "main"}]},
        "status": {"phase": phase},
    }
    return json.dumps(pod)


@pytest.mark.slow
def test_k8s_damaged_lines_quarantined_and_the_rest_kept(jobfit, tmp_path: Path) -> None:
    # A BOM before the first pod, NUL bytes inside a record, a byte that is not UTF-8 (kept: it becomes
    # U+FFFD inside a string), and a last line cut short.
    cut = _pod_line("cut")
    data = (
        b"\xef\xbb\xbf"
        + _pod_line("bom").encode()
        + b"\r\n"
        + _pod_line("nul").replace('"ml"', '"m\x00l"').encode().replace(b"\\u0000", b"\x00")
        + b"\r\n"
        + _pod_line("latin1").replace("gpu-node-1", "gpu-n\xf6de").encode("latin-1")
        + b"\n"
        + cut[: len(cut) // 2].encode()
    )
    pods = tmp_path / "in" / "pods.jsonl"
    pods.parent.mkdir()
    pods.write_bytes(data)
    utf16 = tmp_path / "in16" / "pods.jsonl"
    utf16.parent.mkdir()
    utf16.write_bytes((_pod_line("wide") + "\n").encode("utf-16"))
    result = jobfit("ingest", "k8s", str(pods), str(utf16), "--cluster", "demo", "--json")
    assert result.code == 0, result.err
    _no_trace(result.err)
    report = json.loads(result.out)
    assert (report["read"], report["inserted"], report["quarantined"]) == (5, 3, 2), report
    jobs = json.loads(jobfit("sql", "SELECT job_id FROM silver.jobs ORDER BY job_id", "--json").out)
    assert [r["job_id"] for r in jobs["rows"]] == ["ml/bom", "ml/latin1", "ml/wide"]
    reasons = json.loads(
        jobfit("sql", "SELECT line_no, reason FROM quarantine ORDER BY line_no", "--json").out
    )
    assert [r["line_no"] for r in reasons["rows"]] == [2, 4]
    assert all(r["reason"].startswith("not JSON") for r in reasons["rows"]), reasons


@pytest.mark.slow
def test_scripts_damaged_files_read_as_text(jobfit, tmp_path: Path) -> None:
    rule = "-" * 80
    batch = (
        f"Batch Script for 301\r\n{rule}\r\n#!/bin/bash\r\n#SBATCH -n 4\r\nsrun a\x00b\r\n\r\n"
        f"Batch Script for 302\r\n{rule}\r\n#!/bin/bash\r\n#SBATCH -n 2\r\nsrun hostn"  # cut short
    )
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "sacct.txt").write_bytes(b"\xef\xbb\xbf" + batch.encode())
    (folder / "303.sh").write_bytes("#!/bin/bash\n#SBATCH -n 8\n# caf\xe9\nsrun x\n".encode("latin-1"))
    (folder / "304.sh").write_bytes("#!/bin/bash\n#SBATCH -n 16\nsrun y\n".encode("utf-16"))
    (folder / "305.sh").write_bytes(b"\x00" * 64)  # a file preallocated and never written
    result = jobfit("ingest", "scripts", str(folder), "--cluster", "demo", "--json")
    assert result.code == 0, result.err
    _no_trace(result.err)
    report = json.loads(result.out)
    assert report["read"] == 5, report
    accounted = sum(report[k] for k in ("inserted", "updated", "unchanged", "superseded", "quarantined"))
    assert accounted == report["read"], report
    rows = json.loads(
        jobfit(
            "sql",
            "SELECT l.job_id, s.req_ntasks AS n FROM silver.job_scripts l "
            "JOIN silver.scripts s USING (cluster, script_hash) ORDER BY l.job_id",
            "--json",
        ).out
    )["rows"]
    assert {r["job_id"]: r["n"] for r in rows if r["job_id"] != "305"} == {
        "301": 4,
        "302": 2,
        "303": 8,
        "304": 16,
    }


@pytest.mark.slow
def test_logs_damaged_files_keep_their_tails(jobfit, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    files = {
        "401.err": b"step 1\nstep 2\x00\x00\x00\nRuntimeError: CUDA out of mem",  # NULs, cut short
        "402.out": b"\xef\xbb\xbfepoch 1\r\nepoch 2\r\nloss \xff\xfe nan\r\n",  # BOM, CRLF, not UTF-8
        "403.log": "Traceback (most recent call last):\nValueError: bad\n".encode("utf-16"),
        "404.err": b"\x00" * 4096,  # a log preallocated and never written (a node that died)
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    result = jobfit("ingest", "logs", str(folder), "--cluster", "demo", "--json")
    assert result.code == 0, result.err
    _no_trace(result.err)
    report = json.loads(result.out)
    assert (report["read"], report["inserted"], report["quarantined"]) == (4, 4, 0), report
    tails = json.loads(
        jobfit("sql", "SELECT job_id, tail_text FROM silver.job_logs ORDER BY job_id", "--json").out
    )["rows"]
    by_job = {r["job_id"]: r["tail_text"] for r in tails}
    assert by_job["401"].endswith("RuntimeError: CUDA out of mem")
    assert by_job["402"].startswith("epoch 1\nepoch 2\nloss ")
    assert by_job["403"] == "Traceback (most recent call last):\nValueError: bad"


def _parquet_archive(path: Path, host: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    labels = pa.array(
        [[("gpu", "0"), ("UUID", f"GPU-{host}"), ("Hostname", host)]] * 3,
        type=pa.map_(pa.string(), pa.string()),
    )
    table = pa.table(
        {
            "timestamp": pa.array(
                [1_700_000_000_000_000 + i * 10**7 for i in range(3)], type=pa.timestamp("us")
            ),
            "metric": ["DCGM_FI_DEV_GPU_UTIL"] * 3,
            "labels": labels,
            "value": [10.0, 20.0, 30.0],
        }
    )
    pq.write_table(table, path)


@pytest.mark.parametrize("damage", ["truncated", "footer", "page", "not parquet after the magic"])
def test_corrupt_parquet_archive_is_one_line_exit_2(jobfit, tmp_path: Path, damage: str) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    _parquet_archive(folder / "a-good.parquet", "g001")
    _parquet_archive(tmp_path / "whole.parquet", "g002")
    data = (tmp_path / "whole.parquet").read_bytes()
    bad = folder / "b-bad.parquet"
    if damage == "truncated":  # a copy cut short: no footer
        bad.write_bytes(data[: len(data) // 2])
    elif damage == "footer":  # the footer's metadata overwritten
        bad.write_bytes(data[:-60] + b"\xff" * 52 + data[-8:])
    elif damage == "page":  # footer intact, the first page header damaged: only reading the data tells
        bad.write_bytes(data[:4] + bytes(b ^ 0x5A for b in data[4:40]) + data[40:])
    else:
        bad.write_bytes(b"PAR1" + b"\x00garbage" * 40 + b"PAR1")
    for source in ("dcgm", "k8s-metrics"):
        result = jobfit("ingest", source, str(folder), "--cluster", "demo", "--json")
        _no_trace(result.err)
        assert result.code == 2, (source, result.err)
        errors = [ln for ln in result.err.splitlines() if ln.startswith("jobfit:")]
        assert len(errors) == 1 and str(bad) in errors[0] and "Parquet" in errors[0], errors
    # Nothing of the run landed: the good archive is read in full once the bad one is left out.
    bad.unlink()
    again = jobfit("ingest", "dcgm", str(folder), "--cluster", "demo", "--json")
    assert again.code == 0, again.err
    assert json.loads(again.out)["inserted"] == 3
