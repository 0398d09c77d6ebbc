"""Spark's read of input lines (`lines_frame`, used by the sacct and DCGM ingests) against the driver's
(`read_source_file`, str.splitlines): the same lines, numbered the same, for the line breaks input files
end and separate lines with; a path given twice is read once; a file read in splits keeps its numbers."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.context import Context
from jobs.stages.ingest.common import lines_frame, read_source_file, scan_input, scan_inputs

CONTENTS = {
    "plain.txt": b"a|1\nb|2\n",
    "no_final_break.txt": b"a|1\nb|2",
    "trailing_blank.txt": b"a|1\n\n",  # str.splitlines keeps the blank line; `$` in Java dropped it
    "two_trailing_blanks.txt": b"a|1\n\n\n",
    "crlf.txt": b"a|1\r\nb|2\r\n\r\n",
    "cr.txt": b"a|1\rb|2\r",
    "mixed.txt": b"\n# comment\r\nh|x\n\r\nx|y",
    "empty.txt": b"",
    "only_break.txt": b"\n",
    "bad_utf8.txt": b"ok\n\x00\xff\xfe\x89PNG\r\n\x1a\x00|\xff\n",
}


def _lines(ctx: Context, paths: list[str]) -> dict[str, list[tuple[int, str]]]:
    rows = lines_frame(ctx, scan_inputs(paths), "c").collect()
    by_file: dict[str, list[tuple[int, str]]] = {}
    for r in rows:
        by_file.setdefault(r["source_file"], []).append((r["line_no"], r["raw"]))
    return {name: sorted(lines) for name, lines in by_file.items()}


@pytest.fixture
def ctx(spark: SparkSession) -> Context:
    context = Context(environ={}, quiet=True)
    context.use_spark(spark)
    return context


def _expected(path: Path) -> list[tuple[int, str]]:
    return list(enumerate(read_source_file(str(path)).lines, start=1))


def test_spark_reads_the_lines_the_driver_reads(ctx: Context, tmp_path: Path) -> None:
    paths = []
    for name, data in CONTENTS.items():
        (tmp_path / name).write_bytes(data)
        paths.append(tmp_path / name)
    gz = tmp_path / "trailing_blank.txt.gz"
    gz.write_bytes(gzip.compress(CONTENTS["trailing_blank.txt"]))
    paths.append(gz)
    assert all(scan_input(str(p)).spark_readable for p in paths)
    got = _lines(ctx, [str(p) for p in paths])
    for p in paths:
        assert got.get(str(p), []) == _expected(p), p.name


def test_a_path_given_twice_is_read_once(ctx: Context, tmp_path: Path) -> None:
    one = tmp_path / "one.txt"
    one.write_bytes(b"a\nb\n")
    copy = tmp_path / "copy.txt"
    copy.write_bytes(b"a\nb\n")  # the same content under another name is another input
    got = _lines(ctx, [str(one), str(one), str(copy)])
    assert got == {str(one): [(1, "a"), (2, "b")], str(copy): [(1, "a"), (2, "b")]}


def test_a_file_read_in_many_splits_keeps_its_line_numbers(ctx: Context, tmp_path: Path) -> None:
    """Splits of 4 KiB: each split's lines are numbered after the earlier splits' (a line crossing a split
    boundary belongs to the split it starts in), beside a small file packed into the same partitions."""
    big = tmp_path / "big.txt"
    big.write_text("".join(f"{i}|{'x' * (i % 97)}\r\n" if i % 5 else f"{i}|\n\n" for i in range(1, 3001)))
    small = tmp_path / "small.txt"
    small.write_text("a\nb")
    spark = ctx.spark
    saved = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "4096")
    try:
        frame = lines_frame(ctx, scan_inputs([str(big), str(small)]), "c")
        assert frame.rdd.getNumPartitions() > 10
        got = {(r["source_file"], r["line_no"], r["raw"]) for r in frame.collect()}
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", saved)
    expected = {(str(p), n, line) for p in (big, small) for n, line in _expected(p)}
    assert got == expected


def test_first_content_line_past_a_long_comment_block(tmp_path: Path) -> None:
    """The header a sacct ingest reads its field order from may follow more comment than one read chunk;
    a head cut inside the header line does not take the cut part for the line."""
    dump = tmp_path / "dump.txt"
    dump.write_text("# note\n" * 300_000 + "JobID|State\n1|COMPLETED\n")
    assert scan_input(str(dump)).first_line == "JobID|State"
    last = tmp_path / "last.txt"
    last.write_text("# only comments\n" + "JobID|State")  # no final line break
    assert scan_input(str(last)).first_line == "JobID|State"
    assert scan_input(str(tmp_path / "last.txt")).size == len("# only comments\nJobID|State")
