"""pipelines.units: scalar parsers and their Spark Column twins, on values copied from real sacct output."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from pipelines import units as U

KIB, MIB, GIB = 1024, 1024**2, 1024**3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4224K", 4224 * KIB),
        ("3501608K", 3501608 * KIB),
        ("2200M", 2200 * MIB),
        ("312.50G", int(312.5 * GIB)),
        ("1T", 1024**4),
        ("0", 0),
        ("10621726720", 10621726720),  # --noconvert bytes
        ("", None),
    ],
)
def test_parse_mem_bytes(text: str, expected: int | None) -> None:
    assert U.parse_mem_bytes(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4000Mc", (4000 * MIB, "cpu")),
        ("16000Mn", (16000 * MIB, "node")),
        ("191846Mn", (191846 * MIB, "node")),
        ("1Gn", (GIB, "node")),
        ("16G", (16 * GIB, "job")),
        ("112000M", (112000 * MIB, "job")),
        ("0n", (0, "node")),
        ("4000", (4000 * MIB, "job")),
        ("", None),
    ],
)
def test_parse_req_mem(text: str, expected: tuple[int, str] | None) -> None:
    assert U.parse_req_mem(text) == expected


def test_req_mem_total_multiplies_per_unit_requests() -> None:
    assert U.req_mem_total_bytes("4000Mc", alloc_cpus=16, nodes=1) == 16 * 4000 * MIB
    assert U.req_mem_total_bytes("191846Mn", alloc_cpus=720, nodes=20) == 20 * 191846 * MIB
    assert U.req_mem_total_bytes("32G", alloc_cpus=16, nodes=2) == 32 * GIB
    assert U.req_mem_total_bytes("0n", alloc_cpus=4, nodes=1) is None
    assert U.req_mem_total_bytes("4000Mc", alloc_cpus=None, nodes=1) is None


def test_parse_directive_mem_bare_number_is_mib() -> None:
    assert U.parse_directive_mem_bytes("16000") == 16000 * MIB
    assert U.parse_directive_mem_bytes("16G") == 16 * GIB
    assert U.parse_directive_mem_bytes("16GB") == 16 * GIB
    assert U.parse_directive_mem_bytes("512k") == 512 * KIB


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("INVALID", None),
        ("", None),
        ("1-02:03:04", 86400 + 2 * 3600 + 3 * 60 + 4),
        ("02:03:04", 2 * 3600 + 3 * 60 + 4),
        ("05:06.789", 5 * 60 + 6.789),
        ("00:00.081", 0.081),
        ("30", 30 * 60),
        ("1-02", 86400 + 2 * 3600),
        ("1-02:03", 86400 + 2 * 3600 + 3 * 60),
        ("451-06:00:24", 451 * 86400 + 6 * 3600 + 24),
        ("6-23:59:00", 6 * 86400 + 23 * 3600 + 59 * 60),
    ],
)
def test_parse_duration_s(text: str, expected: float | None) -> None:
    got = U.parse_duration_s(text)
    assert got == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        (U.parse_duration_s, "1:2:3:4"),
        (U.parse_duration_s, "ten"),
        (U.parse_duration_s, "-5"),
        (U.parse_mem_bytes, "12Q"),
        (U.parse_mem_bytes, "K"),
        (U.parse_req_mem, "4000Mx"),
        (U.parse_exit_code, "0"),
        (U.parse_exit_code, "a:b"),
        (U.parse_tres, "cpu=4,mem"),
        (U.expand_hostlist, "g[001-003"),
        (U.expand_hostlist, "g[5-1]"),
        (U.parse_directive_mem_bytes, "lots"),
    ],
)
def test_bad_text_raises_value_error_naming_it(parser, text: str) -> None:
    with pytest.raises(ValueError, match=repr(text).replace("[", r"\[")):
        parser(text)


def test_exit_code() -> None:
    assert U.parse_exit_code("0:0") == (0, 0)
    assert U.parse_exit_code("1:0") == (1, 0)
    assert U.parse_exit_code("0:15") == (0, 15)
    assert U.parse_exit_code("") is None


def test_tres_strings() -> None:
    alloc = U.parse_tres("cpu=4,mem=16G,node=1,billing=4,gres/gpu=2,gres/gpu:a100=2")
    assert alloc == {"cpu": 4, "mem": 16 * GIB, "node": 1, "billing": 4, "gres/gpu": 2, "gres/gpu:a100": 2}
    assert U.tres_gpu_model(alloc) == "a100"
    # CURC's real TRESUsageInMax: 38888M of GPU memory equals the --noconvert average 40777023488 bytes.
    usage = U.parse_tres(
        "cpu=00:56:24,energy=0,fs/disk=350130624578,gres/gpumem=38888M,gres/gpuutil=100,"
        "mem=10372780K,pages=3465,vmem=10194376K"
    )
    assert usage["cpu"] == 56 * 60 + 24
    assert usage["gres/gpumem"] == 40777023488
    assert usage["gres/gpuutil"] == 100
    assert usage["mem"] == 10372780 * KIB
    assert U.parse_tres("") == {}
    assert U.parse_tres("gres/gpumem=INFINITE")["gres/gpumem"] is None


def test_expand_hostlist() -> None:
    assert U.expand_hostlist("g[001-003,007],cpu12") == ["g001", "g002", "g003", "g007", "cpu12"]
    assert U.expand_hostlist("della-r4c[1-2]n[13-14]") == [
        "della-r4c1n13",
        "della-r4c1n14",
        "della-r4c2n13",
        "della-r4c2n14",
    ]
    assert U.expand_hostlist("node-l1g2") == ["node-l1g2"]
    assert U.expand_hostlist("None assigned") == []
    assert U.expand_hostlist("") == []


def test_column_parsers_agree_with_scalar_parsers(spark) -> None:
    rows = [
        ("4224K", "4000Mc", "1-02:03:04", "0:15", "cpu=4,mem=16G,gres/gpu:a100=2,gres/gpu=2", "g[1-2],c3"),
        ("2200M", "16G", "05:06.789", "1:0", "gres/gpumem=38888M,gres/gpuutil=100", "n01"),
        ("", "", "UNLIMITED", "", "", ""),
        ("12Q", "4000Mx", "1:2:3:4", "x", "cpu", "g[1-"),
        ("0", "0n", "30", "0:0", "mem=10621726720", None),
    ]
    df = spark.createDataFrame(
        rows, "mem string, req string, dur string, ec string, tres string, hosts string"
    )
    req_value, req_kind = U.req_mem_cols(F.col("req"))
    ec, sig = U.exit_code_cols(F.col("ec"))
    tres = U.tres_map_col(F.col("tres"))
    out = df.select(
        U.mem_bytes_col(F.col("mem")).alias("mem_b"),
        U.mem_ok_col(F.col("mem")).alias("mem_ok"),
        req_value.alias("req_b"),
        req_kind.alias("req_kind"),
        U.req_mem_ok_col(F.col("req")).alias("req_ok"),
        U.duration_s_col(F.col("dur")).alias("dur_s"),
        U.duration_ok_col(F.col("dur")).alias("dur_ok"),
        ec.alias("ec"),
        sig.alias("sig"),
        U.exit_code_ok_col(F.col("ec")).alias("ec_ok"),
        U.tres_ok_col(F.col("tres")).alias("tres_ok"),
        U.tres_count_col(tres, "gres/gpu").alias("gpus"),
        U.tres_mem_col(tres, "mem").alias("tres_mem"),
        U.tres_mem_col(tres, "gres/gpumem").alias("gpumem"),
        U.tres_number_col(tres, "gres/gpuutil").alias("gpuutil"),
        U.tres_gpu_model_col(F.col("tres")).alias("model"),
        U.expand_hostlist_col(F.col("hosts")).alias("hosts"),
    ).collect()
    first, second, empty, bad, zero = (r.asDict() for r in out)
    assert first == {
        "mem_b": 4224 * KIB,
        "mem_ok": True,
        "req_b": 4000 * MIB,
        "req_kind": "cpu",
        "req_ok": True,
        "dur_s": 93784.0,
        "dur_ok": True,
        "ec": 0,
        "sig": 15,
        "ec_ok": True,
        "tres_ok": True,
        "gpus": 2,
        "tres_mem": 16 * GIB,
        "gpumem": None,
        "gpuutil": None,
        "model": "a100",
        "hosts": ["g1", "g2", "c3"],
    }
    assert (second["mem_b"], second["req_b"], second["req_kind"]) == (2200 * MIB, 16 * GIB, "job")
    assert second["dur_s"] == pytest.approx(306.789)
    assert (second["gpumem"], second["gpuutil"], second["ec"]) == (40777023488, 100.0, 1)
    assert empty["mem_b"] is None and empty["dur_s"] is None and empty["req_b"] is None
    assert all(empty[k] for k in ("mem_ok", "req_ok", "dur_ok", "ec_ok", "tres_ok"))
    assert empty["hosts"] == []
    assert not any(bad[k] for k in ("mem_ok", "req_ok", "dur_ok", "ec_ok", "tres_ok"))
    assert bad["mem_b"] is None and bad["dur_s"] is None and bad["hosts"] is None
    assert (zero["mem_b"], zero["req_b"], zero["req_kind"], zero["dur_s"]) == (0, 0, "node", 1800.0)
    assert zero["tres_mem"] == 10621726720 and zero["hosts"] is None
