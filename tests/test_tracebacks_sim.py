"""The traceback reader on a simulated month: failure logs whose tracebacks the simulator writes from its
own templates (jobs/simulator/tracebacks.py, independent of the reader), scored against truth.parquet.
No Spark."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from conf import load_cluster
from jobs.simulator import simulate
from pipelines.gold.failures.tracebacks import read_tracebacks

MONTH = "2026-11"
MIN_FRAME_SHARE = 0.95  # issue 23: the user's frame right on at least 95 % of the simulated tracebacks


def test_user_frame_on_a_simulated_month(tmp_path: Path) -> None:
    simulate(load_cluster("demo"), MONTH, 5000, seed=11, out=tmp_path, inject_bad=0)
    columns = ["job_id", "has_log", "failure_cause", "tb_user_file", "tb_user_line"]
    truth = pq.read_table(tmp_path / "truth.parquet", columns=columns).to_pylist()
    framed, misses, false_frames, plain = 0, [], [], 0
    for row in truth:
        if not row["has_log"]:
            continue
        code = read_tracebacks((tmp_path / "logs" / f"{row['job_id']}.err").read_text(encoding="utf-8")).code
        got = (code.file, code.line) if code else None
        if row["tb_user_file"] is None:
            plain += 1
            if got is not None:
                false_frames.append((row["job_id"], row["failure_cause"], got))
            continue
        framed += 1
        if got != (row["tb_user_file"], row["tb_user_line"]):
            misses.append(
                (row["job_id"], row["failure_cause"], got, (row["tb_user_file"], row["tb_user_line"]))
            )
    share = (framed - len(misses)) / framed
    print(
        f"\nsimulated month: user frame right on {framed - len(misses)}/{framed} tracebacks ({share:.1%}); "
        f"{len(false_frames)}/{plain} logs without a traceback given a frame; misses: {misses}"
    )
    assert framed >= 80, "too few simulated tracebacks to measure"
    assert share >= MIN_FRAME_SHARE, misses
    assert not false_frames
