"""Print the VRAM estimate's error on LitGPT's measurements (tests/data/real/vram/): per half, method and
GPU, the worst rows, the fit verdicts, beside weights-only arithmetic. `--fit` re-derives the constants
from the development half (they must equal features.vram.FITTED). Usage: python bench/vram.py [--fit]"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from models.vram_eval import fit, median_abs_error, read_rows, score, split, usable

ROOT = Path(__file__).resolve().parents[1] / "tests" / "data" / "real" / "vram"


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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
