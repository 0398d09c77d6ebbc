"""Print the VRAM estimate's error on LitGPT's measurements (tests/data/real/vram/): per half, method and
GPU, the worst rows, the fit verdicts, beside weights-only arithmetic. `--fit` re-derives the constants
from the development half (they must equal features.vram.FITTED).

`--models [SEEDS]`: the per-cluster VRAM model trained with and without the code-aware inputs
(features.code) on the same split of a cluster whose jobs are the held-out rows (models.vram_eval.
litgpt_cluster: simulated users and reruns, measured needs), beside the code estimate as a baseline and the
history baselines; net GPU-GiB-hours reclaimed (misses charged), the under-provision rates, and the same
on the test jobs that are a user's first run of a script (no history of it) and on reruns.

Usage: python bench/vram.py [--fit] [--models [SEEDS]]"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from models.vram_eval import fit, median_abs_error, read_rows, score, split, usable  # noqa: E402

ROOT = REPO / "tests" / "data" / "real" / "vram"
RATE = 0.02  # conf/base.yaml predict.underprovision_rate


def bench_models(held: list, configs: dict[str, str], seeds: int) -> None:
    """Print the with/without comparison per seed (see the module docstring)."""
    import numpy as np

    from features.code import CODE_NUMERIC
    from features.table import TARGETS, build_training_table
    from models.metrics import compare_to_baselines, evaluate_predictions
    from models.train import TrainParams, target_rows, time_split, train_target
    from models.vram_eval import litgpt_cluster

    spec = TARGETS["vram"]
    print(
        f"\nper-cluster VRAM model with and without the code-aware inputs, held-out rows as jobs "
        f"(rate {RATE:.0%}; GPU-GiB-h; first = a user's first run of the script in the test slice)"
    )
    head = (
        f"{'seed':>4} {'predictor':>24} {'variant':>16} {'under':>6} {'w.under':>7} {'net':>8} "
        f"{'miss':>7} {'first.under':>11} {'first.net':>9} {'rerun.under':>11} {'rerun.net':>9}"
    )
    print(head)
    totals: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for seed in range(seeds):
        cluster = litgpt_cluster(held, configs, seed=seed)
        table = build_training_table(
            cluster.jobs, cluster.scripts, cluster.gpu_mem_bytes, cluster.job_sources
        )
        without = table.copy()
        without[list(CODE_NUMERIC)] = np.nan
        test = time_split(target_rows(table, spec), 0.6, 0.2).test
        first = test["us_n"].to_numpy() == 0
        for name, frame in (("model with code", table), ("model without code", without)):
            result = train_target(frame, spec, TrainParams(), RATE)
            predicted = {name: result.predictor.predict(frame.loc[test.index])}
            variant = result.predictor.variant
            if frame is table:
                by_name = {b.name: b for b in result.baselines}
                cmp = compare_to_baselines(result.metrics, RATE)
                # The strongest history rule on the real logs (docs/prediction.md), fixed before scoring.
                for base in ("code_estimate", "code_estimate_tuned", "user_script_p95_tuned"):
                    predicted[base] = by_name[base].predict(test, spec.request)
                print(f"{seed:>4} best baseline with code: {cmp['best_baseline']}")
            for label, pred in predicted.items():
                whole = evaluate_predictions(test, spec, pred)
                parts = [
                    evaluate_predictions(test[mask], spec, pred[mask]) if mask.any() else None
                    for mask in (first, ~first)
                ]
                cells = " ".join(
                    f"{p['under_rate']:11.2%} {p['net_reclaimed_h']:9.4g}" if p else f"{'-':>11} {'-':>9}"
                    for p in parts
                )
                totals[label].append(
                    (
                        whole["net_reclaimed_h"],
                        parts[0]["net_reclaimed_h"] if parts[0] else 0.0,
                        whole["under_rate"],
                    )
                )
                print(
                    f"{seed:>4} {label:>24} {variant if label == name else 'rule':>16} "
                    f"{whole['under_rate']:6.2%} {whole['under_rate_weighted']:7.2%} "
                    f"{whole['net_reclaimed_h']:8.4g} {whole['miss_cost_h']:7.4g} {cells}",
                    flush=True,
                )
        print(f"{seed:>4} test jobs {len(test)}, first runs {int(first.sum())}")
    base = totals["model without code"]
    print(
        f"\nover {seeds} seeds, against the model without code on the same split (sum of net; worst under):"
    )
    for label, runs in totals.items():
        net, first_net = sum(r[0] for r in runs), sum(r[1] for r in runs)
        print(
            f"  {label:>22}: net {net:9.4g} ({net / sum(r[0] for r in base):5.2f}x), first runs "
            f"{first_net:8.4g} ({first_net / sum(r[1] for r in base):5.2f}x), under-rate up to "
            f"{max(r[2] for r in runs):.2%}"
        )


def main(argv: list[str]) -> int:
    rows = read_rows((ROOT / "rows.tsv").read_text(encoding="utf-8"))
    configs = {r["config_path"]: (ROOT / r["config_path"]).read_text() for r in rows if r["config_path"]}
    dev, held = split(usable(rows))
    if "--fit" in argv:
        print(f"fitted on the development half ({len(dev)} rows): {fit(dev, configs)}")
    for name, part in (("development", dev), ("held-out", held)):
        scored = score(part, configs)
        measured = [s for s in scored if s.error is not None]
        rule = statistics.median(abs(s.weights_only - s.measured) / s.measured for s in measured)  # type: ignore[operator]
        print(
            f"\n{name}: {len(scored)} rows, {len(measured)} measured; median |error| "
            f"{median_abs_error(scored):.1%} (weights-only x 2 bytes: {rule:.1%})"
        )
        groups: dict[str, list] = defaultdict(list)
        for s in measured:
            groups[f"{s.method} on {s.gpu.split('x', 1)[1]}"].append(abs(s.error))  # type: ignore[arg-type]
        for key, errs in sorted(groups.items()):
            print(
                f"  {key:32} n={len(errs):2}  median |error| {statistics.median(errs):6.1%}"
                f"  max {max(errs):6.1%}"
            )
        worst = sorted(measured, key=lambda s: -abs(s.error))[:5]  # type: ignore[arg-type]
        print("  worst: " + "; ".join(f"{s.row_id} {s.model} {s.method} {s.error:+.0%}" for s in worst))
        ooms = [s for s in scored if s.oom and s.fits is not None]
        missed = [s.row_id for s in ooms if s.fits]
        false_alarm = [s.row_id for s in measured if s.fits is False]
        print(
            f"  OOM rows predicted not to fit: {len(ooms) - len(missed)}/{len(ooms)}"
            f" (missed: {missed or 'none'});"
            f" rows that ran predicted not to fit: {false_alarm or 'none'}"
        )
    if "--models" in argv:
        after = argv[argv.index("--models") + 1 :]
        bench_models(held, configs, int(after[0]) if after and after[0].isdigit() else 3)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
