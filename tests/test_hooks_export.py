"""`jobfit hooks export`: the Slurm job_submit cache from a small trained store, and its line format."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from jobs.context import Context
from models.hooks import ANY_SCRIPT, CacheEntry, format_cache, parse_cache
from tests.conftest import CliResult
from tests.predict_data import synthetic_cluster
from tests.test_recommend import _write_silver


def test_cache_format_round_trip() -> None:
    entries = [
        CacheEntry("u1", ANY_SCRIPT, 2048, 61, 4, None),
        CacheEntry("u1", "ab" * 32, 1280, 5, None, "gpu:1g.10gb"),
        CacheEntry("u\t2", "train job", None, None, 1, None),
    ]
    text = format_cache(entries, {"cluster": "demo", "models": "mem=3,runtime=1"})
    lines = text.splitlines()
    assert lines[0] == "jobfit-hooks-cache\t1" and lines[1] == "#cluster\tdemo"
    assert lines[3] == "#columns\tuser\tscript_key\tmem_mb\ttime_min\tcpus\tgres"
    assert lines[5] == f"u1\t{'ab' * 32}\t1280\t5\t-\tgpu:1g.10gb"
    meta, back = parse_cache(text)
    assert meta["models"] == "mem=3,runtime=1"
    # A tab inside a value cannot split a line: it becomes a space.
    assert back[:2] == entries[:2] and back[2] == CacheEntry("u 2", "train job", None, None, 1, None)
    with pytest.raises(ValueError, match="not a jobfit-hooks-cache"):
        parse_cache("user\tkey\n")


@pytest.mark.slow
def test_export_writes_cache_from_champions(
    make_ctx: Callable[..., Context], jobfit: Callable[..., CliResult], tmp_path: Path
) -> None:
    out = tmp_path / "slurm" / "jobfit-cache.tsv"
    # No champions yet: one line, exit 2, no file.
    none = jobfit("hooks", "export", "--cluster", "demo", "--out", str(out))
    assert none.code == 2 and "no champion models" in none.err and not out.exists()

    jobs, scripts = synthetic_cluster(900, n_users=6, seed=7)
    _write_silver(make_ctx(), jobs, scripts)
    trained = jobfit("train", "--cluster", "demo", "--rounds", "2", "--targets", "mem,runtime,cpus,vram")
    assert trained.code == 0, trained.err

    result = jobfit("hooks", "export", "--cluster", "demo", "--out", str(out), "--json")
    assert result.code == 0, result.err
    summary = json.loads(result.out)
    meta, entries = parse_cache(out.read_text())
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # the temporary file was renamed
    assert meta["cluster"] == "demo" and meta["made_at"].endswith("Z")
    assert meta["models"] == ",".join(f"{t}={v}" for t, v in summary["model_versions"].items())
    assert set(summary["model_versions"]) == {"mem", "runtime", "cpus", "vram"}
    assert meta["history_run_id"] == summary["history_source"]["run_id"]
    assert summary["entries"] == len(entries) and summary["users"] == len({e.user for e in entries})

    # Every user with enough history: one entry for any script, one per script key of theirs.
    finished = jobs[jobs["end_ts"].notna()]
    users = {u for u, n in finished.groupby("user").size().items() if n >= 3}
    assert {e.user for e in entries} <= users and len({e.user for e in entries}) >= 3
    for user in {e.user for e in entries}:
        assert sum(e.user == user and e.script_key == ANY_SCRIPT for e in entries) == 1
    hashes = set(scripts["script_hash"])
    assert summary["script_entries"] > 0
    assert any(e.script_key in hashes for e in entries if e.script_key != ANY_SCRIPT)
    for e in entries:
        assert e.mem_mb is not None and e.mem_mb >= 1
        assert e.time_min is not None and e.time_min >= 1
        assert e.cpus is not None and e.cpus >= 1
        assert e.gres is None or e.gres.startswith("gpu:")
    assert any(e.gres for e in entries)  # the synthetic cluster has GPU jobs

    # Exporting again rewrites the file in place; the text output says what was written.
    again = jobfit("hooks", "export", "--cluster", "demo", "--out", str(out))
    assert again.code == 0 and f"to {out}" in again.out
    assert len(parse_cache(out.read_text())[1]) == len(entries)
