"""`jobfit bottlenecks --cluster C [--job ID | --month YYYY-MM] [--json]`: why profiled jobs' GPUs sat idle or
slow, and the line to change (from the traces `jobfit ingest profiler` landed)."""

from __future__ import annotations

import argparse

from jobs.commands import add_common, require
from jobs.context import Context


def register(sub: argparse._SubParsersAction) -> None:
    """Add `jobfit bottlenecks` to the command parser."""
    p = sub.add_parser(
        "bottlenecks",
        help="why profiled jobs' GPUs sit idle or slow: step breakdown, findings, the line to change",
        description="Analyse the PyTorch profiler traces of a cluster's jobs (`jobfit ingest profiler`): per "
        "rank, the step breakdown torch-tb-profiler's Overview shows and HTA's GPU temporal breakdown; per "
        "job, findings (input_bound, launch_bound, sync_bound, memcpy_bound, communication_bound, "
        "low_tensor_core, "
        "low_occupancy, straggler, idle_gpu) with evidence, the fix, the user's file and line, and the "
        "GPU-hours and dollars recoverable. Jobs with DCGM profiling counters (jobfit ingest dcgm) are "
        "classified from them too (idle_gpu, input_bound, memcpy_bound, communication_bound, memory_bound, "
        "low_tensor_core; source dcgm, no line). Writes gold.profiler_ranks and gold.job_bottlenecks. "
        "Without --job or --month, every trace and profiled job of the cluster.",
    )
    add_common(p, month=True, cluster_required=True)
    p.add_argument("--job", metavar="ID", help="one job (as the scheduler shows its id)")
    p.set_defaults(func=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    from jobs.stages.bottlenecks import build_bottlenecks

    require(not (args.job and args.month), "bottlenecks: give --job or --month, not both")
    require(args.job is None or args.job.strip() != "", "bottlenecks: --job must not be empty")
    config, sheet = ctx.cluster_config(args.cluster)
    result = build_bottlenecks(ctx, args.cluster, config, job_id=args.job, month=args.month)
    if args.job:
        require(
            bool(result["jobs"]),
            f"bottlenecks: no profiler trace or DCGM profiling counters of job {args.job} on {args.cluster}",
        )
        payload = {**result["jobs"][0], "price_sheet": sheet}
        ctx.emit(payload, as_json=args.json, text=_job_text(payload))
        return 0
    payload = {**result, "month": args.month, "price_sheet": sheet}
    ctx.emit(payload, as_json=args.json, text=_summary_text(payload))
    return 0


def _job_text(d: dict) -> str:
    lines = [f"job {d['job_id'] or '(unattributed)'} on {d['cluster']}: {len(d['ranks'])} rank trace(s)"]
    for r in d["ranks"]:
        b = r["breakdown_pct"]
        parts = ", ".join(f"{k} {v:.1f}" for k, v in b.items())
        gpu = r["gpu_pct"]
        lines.append(
            f"  rank {r['rank'] if r['rank'] is not None else '?'}: {r['steps']} step(s) "
            f"({r['step_source']}); "
            f"% of step: {parts}"
            + (f"; GPU idle {gpu['idle']:.1f} %, compute {gpu['compute']:.1f} %" if gpu else "")
        )
        lines += [f"    note: {n}" for n in r["notes"]]
    if d.get("counters"):
        c = d["counters"]
        lines.append(
            f"  DCGM counters ({c['samples']} samples, {c['used_gpus']} GPU(s) used): {c['class']}; "
            f"GR_ENGINE_ACTIVE {c['gr'] or 0:.2f}, SM_ACTIVE {c['sm'] or 0:.2f}, "
            f"PIPE_TENSOR_ACTIVE {c['tensor'] or 0:.3f}, DRAM_ACTIVE {c['dram'] or 0:.2f}"
        )
    if not d["findings"]:
        lines.append("  no bottleneck found")
    for f in d["findings"]:
        where = (
            f"{f['file']}:{f['line']}"
            if f["file"]
            else ("no line from DCGM counters" if f["source"] == "dcgm" else "no stack in the trace")
        )
        cost = (
            f"; recoverable {f['gpu_hours_recoverable']:.2f} GPU-h, ${f['usd_recoverable']:,.2f}"
            if f["gpu_hours_recoverable"] is not None
            else ""
        )
        lines.append(f"  {f['kind']} ({_scope(f)}, {f['share_pct']:.1f} % of {_of(f)}) at {where}{cost}")
        lines.append(f"    evidence: {f['evidence']}")
        lines.append(f"    fix: {f['fix']}")
    return "\n".join(lines)


def _summary_text(d: dict) -> str:
    scope = f" {d['month']}" if d["month"] else ""
    found = [(j, f) for j in d["jobs"] for f in j["findings"]]
    lines = [f"{d['cluster']}{scope}: {len(d['jobs'])} profiled job(s), {len(found)} finding(s)"]
    lines[0] += f" ({sum(1 for _, f in found if f['source'] == 'dcgm')} from DCGM counters)"
    found.sort(key=lambda p: -(p[1]["gpu_hours_recoverable"] or 0))
    for j, f in found:
        where = f" at {f['file']}:{f['line']}" if f["file"] else ""
        cost = f", {f['gpu_hours_recoverable']:.2f} GPU-h" if f["gpu_hours_recoverable"] is not None else ""
        job = j["job_id"] or "(unattributed)"
        lines.append(f"  {job}: {f['kind']} [{f['source']}] {f['share_pct']:.1f} %{cost}{where}")
    return "\n".join(lines)


def _scope(f: dict) -> str:
    return "DCGM counters" if f["source"] == "dcgm" else f"rank {f['rank']}"


def _of(f: dict) -> str:
    return "the used GPUs' time" if f["source"] == "dcgm" else "step time"
