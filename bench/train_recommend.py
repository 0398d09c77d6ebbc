"""Training time per cluster at 100k and 1M jobs, and `jobfit recommend` latency in-process; prints figures.

    .venv/bin/python bench/train_recommend.py                    # 100k and 1M jobs, 1 and 2 threads
    .venv/bin/python bench/train_recommend.py --sizes 20000 --quick
    .venv/bin/python bench/train_recommend.py --skip-recommend
    .venv/bin/python bench/train_recommend.py --swf ../shared/data/real/swf/*.swf.gz --rounds 100

`--swf`: the held-out measurement on real Parallel Workloads Archive logs instead (docs/prediction.md,
"Results on real workloads"): per log and target, the model and the best baseline within the rate on net
waste reclaimed (gross minus what the under-provisioned runs lost), the rates by jobs and resource-weighted,
the same on COMPLETED jobs alone, and the goal (net >= 1.34 x the best baseline's) reached or not, by how
much. A log is marked `design` when the frozen constants were chosen on it (CTC-SP2, SDSC-SP2, LPC-EGEE),
`held out` otherwise: only held-out logs measure the design out of sample (leave-one-log-out).

Jobs come from tests/predict_data.synthetic_cluster (a seeded cluster with per-script needs, user
over-request factors, OOM and TIMEOUT). Training = feature table (pandas) + the four targets, each: the
LightGBM quantile fits and the request-fraction classifier, the choice among them on the calibration slice,
conformal calibration and every baseline. Recommend latency: the full in-process
`recommend()` warm (champions cached; user history from the snapshot `jobfit train` logged, or with
--fresh-history from silver.jobs through the running SparkSession), and a cold `jobfit recommend`
process per call (imports, MLflow look-ups, Spark start for --fresh-history)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from features.table import TARGETS, build_training_table  # noqa: E402
from models.metrics import compare_to_baselines, states_requests  # noqa: E402
from models.train import TrainParams, train_target  # noqa: E402
from tests.predict_data import GIB, synthetic_cluster  # noqa: E402

GPU_MEM = {"A100-SXM4-80GB": 80 * GIB}
# The logs the frozen constants (blocks, risk floor, fractions, the selection rule) were chosen on.
DESIGN_LOGS = ("CTC-SP2", "SDSC-SP2", "LPC-EGEE")
GOAL = 1.34  # net reclaimed >= 1.34 x the best baseline's (issue 15)
CLI_ARGS = ("--cluster", "demo", "--user", "u1", "--json")


def bench_training(
    n_jobs: int, threads: int, rounds: int, quantile: float | None
) -> dict[str, dict[str, float]]:
    """Seconds for the feature table and each target's training at one size, per mode: "selection" (train's
    default: three quantiles x two scales and the request-fraction classifier, chosen on the calibration
    slice) and, in the same run on the same table, "q0.9 only" (`--quantile 0.9 --spread none`) as its
    baseline; with `quantile` set, only that quantile."""
    jobs, scripts = synthetic_cluster(n_jobs, n_users=max(40, n_jobs // 2500), seed=1)
    t = time.perf_counter()
    table = build_training_table(jobs, scripts, GPU_MEM)
    features = time.perf_counter() - t
    modes = {"selection": None, "q0.9 only": 0.9} if quantile is None else {f"q{quantile} only": quantile}
    out: dict[str, dict[str, float]] = {}
    for mode, q in modes.items():
        params = TrainParams(
            num_boost_round=rounds, num_threads=threads, quantile=q, spread=None if q is None else "none"
        )
        times = {"features": features}
        for name, spec in TARGETS.items():
            t = time.perf_counter()
            train_target(table, spec, params, 0.02)
            times[name] = time.perf_counter() - t
        times["total"] = sum(times.values())
        out[mode] = times
    return out


def bench_predict_one(jobs: pd.DataFrame, scripts: pd.DataFrame, rounds: int, calls: int) -> dict[str, float]:
    """p50 milliseconds of one job's runtime prediction by a calibrated q0.9 predictor and by a `levels` one
    (its multiclass classifier: one tree per class and round) fitted to the same synthetic cluster: what a
    `levels` champion adds to a `recommend` call, whichever variant the bench's own training kept."""
    from models.train import _fit_predictor, calibrate, target_rows, time_split

    spec = TARGETS["runtime"]
    split = time_split(target_rows(build_training_table(jobs, scripts, GPU_MEM), spec), 0.6, 0.2)
    params = TrainParams(num_boost_round=rounds, quantile=0.9, spread="none")
    quantile = _fit_predictor(split.train, spec, params, 0.02)
    levels = _fit_predictor(split.train, spec, params, 0.02, levels=True)
    levels.companion = quantile
    out = {}
    for name, predictor in (("q0.9", quantile), ("levels", levels)):
        calibrate(predictor, split.cal, spec, 0.02, params.confidence)
        row = split.test.iloc[:1]
        predictor.predict(row)  # one unmeasured call: lazy set-up inside LightGBM and pandas
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            predictor.predict(row)
            times.append((time.perf_counter() - t) * 1000)
        out[name] = statistics.median(times)
    return out


def bench_recommend(jobs: pd.DataFrame, scripts: pd.DataFrame, calls: int) -> dict[str, object]:
    """p50/p95 milliseconds of warm in-process recommend calls (history snapshot, fresh history), seconds
    of cold CLI calls, and the kept variant of each champion (a `levels` one adds a multiclass predict)."""
    from jobs.commands.recommend import recommend
    from jobs.context import Context
    from jobs.io.tables import table_path
    from pipelines.schemas import SILVER_JOBS, SILVER_SCRIPTS
    from tests.test_recommend import NEW_SCRIPT

    tmp = Path(tempfile.mkdtemp(prefix="jobfit-bench-"))
    ctx = Context(
        environ={
            "JOBFIT_WAREHOUSE": str(tmp / "warehouse"),
            "JOBFIT_MLFLOW__TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}",
            "JOBFIT_SPARK__MASTER": "local[2]",
            "JOBFIT_SPARK__SHUFFLE_PARTITIONS": "2",
        },
        quiet=True,
    )
    for spec, frame in ((SILVER_JOBS, jobs.copy()), (SILVER_SCRIPTS, scripts.copy())):
        frame["ingested_at"] = pd.Timestamp("2026-04-01")
        frame["is_final"] = True
        for field in spec.schema.fields:
            if field.name not in frame:
                frame[field.name] = None
        frame = frame[[f.name for f in spec.schema.fields]].astype(object).where(frame.notna(), None)
        ctx.spark.createDataFrame(frame, schema=spec.schema).write.format("delta").save(
            table_path(ctx.settings, spec.name)
        )
    from jobs.stages.train import train
    from models.train import TrainParams

    trained = train(ctx, "demo", list(TARGETS), TrainParams(num_boost_round=100))["targets"]
    recommend(ctx, NEW_SCRIPT, "demo", "u1")  # warm: loads and caches the champions and the snapshot
    recommend(ctx, NEW_SCRIPT, "demo", "u1", fresh_history=True)  # warm: Spark up, Delta log cached
    out: dict[str, object] = {"variants": {t: info["variant"]["name"] for t, info in trained.items()}}
    for name, fresh in (("snapshot", False), ("fresh", True)):
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            recommend(ctx, NEW_SCRIPT, "demo", "u1", fresh_history=fresh)
            times.append((time.perf_counter() - t) * 1000)
        out[f"{name}_p50_ms"] = statistics.median(times)
        out[f"{name}_p95_ms"] = statistics.quantiles(times, n=20)[-1] if len(times) >= 2 else times[0]
    # Cold: a new `jobfit recommend` process per call (Python imports, MLflow, and Spark for --fresh).
    script = tmp / "new.sbatch"
    script.write_text(NEW_SCRIPT)
    # Bytecode cached as an installed package would have it (this machine sets PYTHONDONTWRITEBYTECODE,
    # which makes every start recompile MLflow and Great Expectations); one unmeasured call fills it.
    env = {**os.environ, **ctx.environ, "PYTHONPYCACHEPREFIX": str(tmp / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for name, extra in (("cold_snapshot", []), ("cold_fresh", ["--fresh-history"])):
        times = []
        for i in range(4 if name == "cold_snapshot" else 3):
            t = time.perf_counter()
            subprocess.run(
                [str(REPO / ".venv/bin/jobfit"), "recommend", str(script), *CLI_ARGS, *extra],
                cwd=REPO,
                env=env,
                check=True,
                capture_output=True,
            )
            if name == "cold_fresh" or i > 0:
                times.append(time.perf_counter() - t)
        out[f"{name}_s"] = statistics.median(times)
    return out


def swf_jobs(path: str) -> pd.DataFrame:
    """One SWF log's silver.jobs rows as pandas, parsed by the product's parser on a local Spark."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from jobs.stages.ingest.common import read_source_file
    from pipelines.silver.swf import parse_swf, parse_swf_header

    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    bronze = spark.read.text(path).select(
        F.lit("pwa").alias("cluster"),
        F.lit(path).alias("source_file"),
        F.lit("").alias("file_sha256"),
        F.monotonically_increasing_id().alias("line_no"),
        F.col("value").alias("raw"),
        F.current_timestamp().alias("ingested_at"),
    )
    header = parse_swf_header(read_source_file(path).lines[:200])
    rows, _ = parse_swf(bronze, {path: header})
    jobs = rows.toPandas()
    jobs["script_hash"] = None
    return jobs


def bench_swf(paths: list[str], rounds: int, threads: int, rate: float = 0.02) -> None:
    """Print the held-out table per log and target (see the module docstring)."""
    from pipelines.schemas import SILVER_SCRIPTS

    scripts = pd.DataFrame(columns=[f.name for f in SILVER_SCRIPTS.schema.fields])  # SWF has no scripts
    print(f"real SWF logs, {rounds} rounds, rate {rate:.0%}; core-h (runtime, cpus) or GiB-h (mem)")
    head = (
        f"{'log':>18s} {'set':>8s} {'target':>7s} {'test':>6s} {'variant':>14s} {'under':>6s} "
        f"{'w.under':>7s} {'net':>10s} {'gross':>10s} {'miss':>9s} {'best baseline':>22s} {'b.net':>10s} "
        f"{'x':>6s} "
        f"{'compl.under':>11s} {'compl.net':>10s} goal"
    )
    print(head)
    for path in paths:
        name = Path(path).name.split("-19")[0].split("-20")[0]
        kind = "design" if name in DESIGN_LOGS else "held out"
        t = time.perf_counter()
        table = build_training_table(swf_jobs(path), scripts, {})
        for target in ("runtime", "cpus", "mem"):
            params = TrainParams(num_boost_round=rounds, num_threads=threads)
            try:
                result = train_target(table, TARGETS[target], params, rate)
            except ValueError as exc:
                print(f"{name:>18s} {kind:>8s} {target:>7s} skipped: {exc}", flush=True)
                continue
            cmp = compare_to_baselines(result.metrics, rate)
            m, best = result.metrics["model"], cmp["best_baseline"]
            b = result.metrics[best] if best else None
            b_net = float(b["net_reclaimed_h"]) if b else float("nan")
            ratio = m["net_reclaimed_h"] / b_net if b and b_net > 0 else float("nan")
            if not states_requests(m):
                gain = cmp["gain_pct"]
                goal = "n/a: jobs state no request; less over-provision + miss cost left than the best: " + (
                    f"{gain:+.1f} %" if gain is not None else str(cmp["gain_why"])
                )
            elif not cmp["model_within_rate"]:
                goal = "not reached: model over the rate"
            elif ratio == ratio and ratio >= GOAL:
                goal = "reached"
            elif ratio == ratio:
                goal = f"not reached by {(GOAL - ratio) * b_net:.4g} ({GOAL - ratio:.2f}x)"
            else:
                goal = f"n/a ({cmp['gain_why']})"
            done = m["completed"]
            print(
                f"{name:>18s} {kind:>8s} {target:>7s} {result.rows['test']:6d} "
                f"{result.predictor.variant:>14s} {m['under_rate']:6.2%} {m['under_rate_weighted']:7.2%} "
                f"{m['net_reclaimed_h']:10.4g} {m['reclaimed_h']:10.4g} {m['miss_cost_h']:9.4g} "
                f"{best or '-':>22s} {b_net:10.4g} {ratio:6.2f} {done['under_rate']:11.2%} "
                f"{done['net_reclaimed_h']:10.4g} {goal}",
                flush=True,
            )
        print(f"{'':18s} ({time.perf_counter() - t:.0f} s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated job counts")
    parser.add_argument("--threads", default="1,2", help="LightGBM threads to compare (comma-separated)")
    parser.add_argument("--rounds", type=int, default=300, help="boosting rounds (jobfit train's default)")
    parser.add_argument("--quick", action="store_true", help="20k jobs, 1 thread, 50 rounds, 10 calls")
    parser.add_argument("--calls", type=int, default=30, help="recommend calls to time")
    parser.add_argument("--recommend-jobs", type=int, default=20000, help="jobs in the recommend warehouse")
    parser.add_argument("--skip-recommend", action="store_true")
    parser.add_argument(
        "--quantile",
        type=float,
        default=None,
        help="train one quantile, unscaled (jobfit train --quantile Q --spread none); default: "
        "train's selection (3 quantiles x 2 scales and the request-fraction classifier) beside q0.9 alone",
    )
    parser.add_argument("--swf", nargs="+", metavar="LOG", help="measure on real SWF logs instead")
    args = parser.parse_args()
    if args.swf:
        bench_swf(args.swf, args.rounds, 1)
        return
    sizes = [20000] if args.quick else [int(s) for s in args.sizes.split(",") if s]
    threads = [1] if args.quick else [int(t) for t in args.threads.split(",")]
    rounds = 50 if args.quick else args.rounds
    calls = 10 if args.quick else args.calls
    print(f"training ({rounds} rounds; seconds; features = pandas feature table incl. history, shared)")
    print(
        f"{'jobs':>9s} {'threads':>7s} {'mode':>10s} {'features':>9s} "
        + " ".join(f"{t:>8s}" for t in TARGETS)
        + "    total"
    )
    for n in sizes:
        for th in threads:
            runs = bench_training(n, th, rounds, args.quantile)
            for mode, r in runs.items():
                cells = " ".join(f"{r[t]:8.1f}" for t in TARGETS)
                print(
                    f"{n:9d} {th:7d} {mode:>10s} {r['features']:9.1f} {cells} {r['total']:8.1f}", flush=True
                )
            if "selection" in runs:
                ratio = runs["selection"]["total"] / runs["q0.9 only"]["total"]
                print(f"{'':17s} selection / q0.9 only: {ratio:.1f}x", flush=True)
    if not args.skip_recommend:
        jobs, scripts = synthetic_cluster(args.recommend_jobs, n_users=40, seed=2)
        lat = bench_recommend(jobs, scripts, calls)
        variants = ", ".join(f"{t} {v}" for t, v in lat["variants"].items())  # type: ignore[union-attr]
        print(f"recommend ({args.recommend_jobs} jobs in silver.jobs; champions: {variants})")
        print(
            f"  warm in-process, history snapshot ({calls} calls): p50 {lat['snapshot_p50_ms']:.0f} ms, "
            f"p95 {lat['snapshot_p95_ms']:.0f} ms"
        )
        print(
            "  warm in-process, --fresh-history (Spark read of silver.jobs): "
            f"p50 {lat['fresh_p50_ms']:.0f} ms, p95 {lat['fresh_p95_ms']:.0f} ms"
        )
        print(
            "  cold CLI (new process, bytecode cached, median of 3): "
            f"snapshot {lat['cold_snapshot_s']:.1f} s, "
            f"--fresh-history {lat['cold_fresh_s']:.1f} s"
        )
        one = bench_predict_one(jobs, scripts, 100, calls)
        print(
            f"  one job's runtime prediction, model only (100 rounds, median of {calls}): "
            f"q0.9 {one['q0.9']:.1f} ms, levels {one['levels']:.1f} ms"
        )


if __name__ == "__main__":
    main()
