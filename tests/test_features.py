"""Submit-time features: history sees only jobs that ended before submission; targets and censoring."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from features.history import with_history
from features.scripts import fit_text_embedder, parse_model_params, with_script_features
from features.table import build_training_table, history_features, history_snapshot_columns, with_targets
from tests.predict_data import GIB, synthetic_cluster

T0 = pd.Timestamp("2026-03-01 00:00:00")


def _h(hours: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(hours=hours)


def test_history_sees_only_jobs_ended_before_submit() -> None:
    # Job c is submitted at 3h. Job a ended at 1h (visible); job b was submitted earlier (2h) but ends
    # at 5h (NOT visible); job d ends exactly at 3h (not visible: it ended at the very second).
    # A feature built from submit order (b before c) or including d would show 3 jobs / a later value.
    jobs = pd.DataFrame(
        {
            "user": ["x", "x", "x", "x", "y"],
            "job": ["a", "b", "c", "d", "e"],
            "submit_ts": [_h(0), _h(2), _h(3), _h(0.5), _h(0)],
            "end_ts": [_h(1), _h(5), _h(4), _h(3), _h(0.2)],
            "v": [2.0, 1000.0, 8.0, 500.0, 64.0],
        }
    )
    out = with_history(jobs, jobs, ["user"], ["v"], "u").set_index("job")
    assert out.loc["c", "u_n"] == 1
    assert np.exp(out.loc["c", "u_v_last"]) == pytest.approx(2.0)
    assert np.exp(out.loc["c", "u_v_max"]) == pytest.approx(2.0)
    assert out.loc["c", "u_since_s"] == pytest.approx(2 * 3600)
    # Job b (submitted 2h) sees a (ended 1h) only; d ended at 3h, after b's submission.
    assert out.loc["b", "u_n"] == 1
    # Nothing of user x had ended at 0h or 0.5h; user y's job is not user x's history.
    assert out.loc["a", "u_n"] == 0 and np.isnan(out.loc["a", "u_v_last"])
    assert out.loc["d", "u_n"] == 0
    assert out.loc["e", "u_n"] == 0


def test_history_statistics_by_hand() -> None:
    # Three ended jobs of one user (values 1, 4, 16 in end order), queried after all of them ended.
    hist = pd.DataFrame(
        {
            "user": ["x"] * 3,
            "submit_ts": [_h(0), _h(0), _h(0)],
            "end_ts": [_h(1), _h(3), _h(2)],
            "v": [1.0, 16.0, 4.0],
        }
    )
    query = pd.DataFrame({"user": ["x", "z"], "submit_ts": [_h(10), _h(10)]})
    out = with_history(hist, query, ["user"], ["v"], "u")
    row = out.iloc[0]
    assert row["u_n"] == 3
    assert np.exp(row["u_v_last"]) == pytest.approx(16.0)  # the latest END, not the latest row
    assert np.exp(row["u_v_last2"]) == pytest.approx((16.0 + 4.0) / 2)  # Tsafrir: mean of the last two
    assert np.exp(row["u_v_p50"]) == pytest.approx(4.0)
    assert np.exp(row["u_v_max"]) == pytest.approx(16.0)
    # log-mean of (1, 4, 16) is log 4: trend = log 16 - log 4.
    assert row["u_v_trend"] == pytest.approx(np.log(4.0))
    assert out.iloc[1]["u_n"] == 0


def test_training_table_has_no_feature_from_the_future() -> None:
    jobs, scripts = synthetic_cluster(600, n_users=5, seed=3)
    table = build_training_table(jobs, scripts, {"A100-SXM4-80GB": 80 * GIB})
    # Recompute the (user) count for every job by brute force from raw end/submit times.
    ends = table.groupby("user")["end_ts"].apply(lambda s: np.sort(s.to_numpy()))
    expected = [int((ends[u] < s).sum()) for u, s in zip(table["user"], table["submit_ts"], strict=True)]
    assert table["u_n"].tolist() == expected
    # Perturbing a job's outcome must not change features of any job submitted before it ended.
    target = table.iloc[300]
    changed = jobs.copy()
    changed.loc[changed["job_id"] == target["job_id"], "max_rss_bytes"] *= 50
    table2 = build_training_table(changed, scripts, {"A100-SXM4-80GB": 80 * GIB})
    before = table["submit_ts"] <= target["end_ts"]
    cols = [c for c in table.columns if c.startswith(("u_", "us_"))]
    pd.testing.assert_frame_equal(table.loc[before, cols], table2.loc[before, cols])
    after = (table["submit_ts"] > target["end_ts"]) & (table["user"] == target["user"])
    assert not np.allclose(table.loc[after, "u_mem_hist_max"], table2.loc[after, "u_mem_hist_max"])


def test_targets_and_censoring() -> None:
    jobs = pd.DataFrame(
        {
            "state": ["COMPLETED", "OUT_OF_MEMORY", "TIMEOUT"],
            "elapsed_s": [100, 50, 3600],
            "timelimit_s": [600, 600, 3600],
            "req_cpus": [4, 4, 2],
            "alloc_cpus": [4, 4, 2],
            "req_mem_bytes": [8 * GIB, 8 * GIB, 4 * GIB],
            "alloc_mem_bytes": [8 * GIB, 8 * GIB, 4 * GIB],
            "max_rss_bytes": [2 * GIB, 7 * GIB, 1 * GIB],
            "total_cpu_s": [200.0, 200.0, 7200.0],
            "req_gpus": [None, None, None],
            "alloc_gpus": [None, None, None],
            "gpu_model": [None, None, None],
            "gpu_mem_peak_bytes": [None, None, None],
        }
    )
    t = with_targets(jobs, {})
    assert t["mem_peak_bytes"].tolist() == [2 * GIB, 8 * GIB, 1 * GIB]  # OOM: at least the 8 GiB it had
    assert t["mem_censored"].tolist() == [False, True, False]
    assert t["mem_required"].tolist() == pytest.approx([2 * GIB, 9.6 * GIB, 1 * GIB])  # x1.2 VPA bump
    assert t["cpus_used"].tolist() == pytest.approx([2.0, 4.0, 2.0])
    assert t["cpus_censored"].tolist() == [False, True, True]  # saturated CPUs are a lower bound
    assert t["runtime_censored"].tolist() == [False, False, True]
    assert t["runtime_required"].tolist() == pytest.approx([100, 50, 3600 * 1.2])
    assert t["vram_peak_bytes"].isna().all()


def test_script_features_and_embedding() -> None:
    assert parse_model_params("meta-llama/Llama-2-7b-hf") == 7e9
    assert parse_model_params("facebook/opt-350m") == 350e6
    assert parse_model_params("resnet50") is None
    jobs, scripts = synthetic_cluster(200, n_users=6, seed=1)
    out = with_script_features(jobs, scripts)
    assert out["script_batch_size"].notna().all()
    assert out["script_model_params"].isin([1e9, 7e9, 13e9]).all()
    assert out["script_text"].str.contains("#SBATCH").all()
    emb = fit_text_embedder(out["script_text"], dims=4)
    vectors = emb.transform(out["script_text"])
    assert list(vectors.columns) == ["emb_0", "emb_1", "emb_2", "emb_3"]
    # The same text embeds to the same vector; a never-seen text still gets one.
    same = out["script_text"] == out["script_text"].iloc[0]
    assert np.allclose(vectors[same].to_numpy(), vectors[same].to_numpy()[0])
    unseen = emb.transform(pd.Series(["#!/bin/bash\nsrun ./never_seen_binary --flag"]))
    assert unseen.shape == (1, 4) and np.isfinite(unseen.to_numpy()).all()


def test_single_query_history_equals_the_running_statistics() -> None:
    # `jobfit recommend` asks for one job: the direct final-state path must give what the running
    # statistics over every prefix give for the same query (compared with a two-query call).
    jobs, scripts = synthetic_cluster(400, n_users=4, seed=3)
    table = build_training_table(jobs, scripts, {"A100-SXM4-80GB": 80 * GIB})
    history = table[history_snapshot_columns()]
    for user in ("u0", "u3"):
        query = table[table["user"] == user].iloc[[-1]][["user", "script_key", "submit_ts"]]
        single = history_features(history, query)
        both = history_features(history, pd.concat([query, query.assign(user="nobody")])).iloc[[0]]
        cols = [c for c in single.columns if c.startswith(("u_", "us_"))]
        assert single["u_n"].iloc[0] > 50
        np.testing.assert_allclose(
            single[cols].to_numpy(dtype=float), both[cols].to_numpy(dtype=float), rtol=1e-12, atol=1e-12
        )


def test_training_table_does_not_depend_on_the_order_rows_were_read_in() -> None:
    # Spark returns silver.jobs in no fixed order; jobs of a user ending in the same second (hourly ends
    # here) must still fold into the history the same way.
    jobs, scripts = synthetic_cluster(400, n_users=3, seed=5)
    jobs["end_ts"] = jobs["end_ts"].dt.ceil("h")
    gpu = {"A100-SXM4-80GB": 80 * GIB}
    table = build_training_table(jobs, scripts, gpu)
    shuffled = build_training_table(jobs.sample(frac=1.0, random_state=2), scripts, gpu)
    pd.testing.assert_frame_equal(table, shuffled)


def test_a_gres_type_or_a_measured_card_gives_the_vram_request() -> None:
    """sacct names GPUs by gres type (`a100`), the conf by full model: the family resolves to the size the
    cluster's partitions have (the demo lists a 40 GB A100 no partition uses); a model the conf lacks (a MIG
    slice) takes the card size telemetry measured; neither leaves the request unknown."""
    from conf import load_cluster
    from features.vram import distinct_cards
    from jobs.io.prediction import gpu_memory_bytes

    cards = gpu_memory_bytes(load_cluster("demo"))
    assert cards["a100"] == 80 * GIB and cards["h100"] == 80 * GIB and cards["v100"] == 32 * GIB
    assert cards["A100-SXM4-40GB"] == cards["a100-sxm4-40gb"] == 40 * GIB
    assert list(distinct_cards(cards)) == [
        "A100-SXM4-80GB",
        "A100-SXM4-40GB",
        "H100-SXM5-80GB",
        "V100-SXM2-32GB",
        "L40S",
    ]
    n = 4
    jobs = pd.DataFrame(
        {
            "state": ["COMPLETED"] * n,
            "elapsed_s": [3600] * n,
            "timelimit_s": [7200] * n,
            "req_cpus": [8] * n,
            "alloc_cpus": [8] * n,
            "req_mem_bytes": [64 * GIB] * n,
            "alloc_mem_bytes": [64 * GIB] * n,
            "max_rss_bytes": [8 * GIB] * n,
            "total_cpu_s": [3600.0] * n,
            "req_gpus": [2, 1, 1, 1],
            "alloc_gpus": [2, 1, 1, 1],
            "gpu_model": ["a100", "nvidia_h100_80gb_hbm3_3g.40gb", "nvidia_h100_80gb_hbm3_3g.40gb", "mi250"],
            "gpu_mem_peak_bytes": [30 * GIB, 39.5 * GIB, 20 * GIB, 10 * GIB],
            "gpu_card_bytes": [80 * GIB, 40 * GIB, None, None],
        }
    )
    t = with_targets(jobs, cards)
    assert t["vram_req_bytes"].tolist()[:2] == [80 * GIB, 40 * GIB]
    assert t["vram_req_bytes"].iloc[2:].isna().all()
    assert t["vram_censored"].tolist()[:2] == [False, True]  # 39.5 of a 40 GiB slice: at its limit
    assert t["gpu_elapsed_s"].iloc[0] == 7200
