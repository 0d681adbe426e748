"""``speedbench plan``: recommended draft length per batch size and mechanism, without a model.

The cost model (``costmodel``) gives T_verif and T_draft for the described target, hardware
and context; a geometric acceptance model AL(D) = (1 - alpha^(D+1)) / (1 - alpha) gives the
acceptance (alpha from the user, or fitted per mechanism from a results folder); the general
speedup formula picks the best D. With ``--results`` the model is also calibrated: one scale
factor fitted between modelled and measured T_verif (applied when the results were measured
on the hardware being planned, or always with ``--calibrate always``).
"""
from __future__ import annotations

import argparse
import sys
import json
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..drafters.registry import is_baseline, methods_where
from . import costmodel as cm
from .hardware import Hardware
from .shapes import ModelShape

DEFAULT_MECHANISMS = methods_where(lambda m: m.planned)  # drafters.registry's ``planned`` rows
TIE = 0.01  # relative speedup within which the smaller D is preferred
DEFAULT_BATCH = "1,8,64"
DEFAULT_CONTEXT = 1024.0


@dataclass(frozen=True)
class Workload:
    batches: tuple[int, ...]
    context: float
    mechanisms: tuple[str, ...]
    alpha: dict  # mechanism -> per-token acceptance
    d_max: int = 16


@dataclass(frozen=True)
class Calibration:
    scale: float
    spread: float  # max relative deviation of single cells from the fitted scale
    n_points: int
    applied: bool
    why: str


def sweep(target: ModelShape, hw: Hardware, work: Workload, drafts: dict, p: cm.CostParams) -> list[cm.Prediction]:
    """Every (B, mechanism, D) of the workload, D = 1..d_max."""
    out = []
    for batch in work.batches:
        for mech in work.mechanisms:
            alpha = work.alpha.get(mech, work.alpha.get("*", math.nan))
            for depth in range(1, work.d_max + 1):
                al = cm.al_geometric(alpha, depth) if not math.isnan(alpha) else math.nan
                out.append(cm.predict(target, drafts[mech], hw, batch, depth, work.context, al, p))
    return out


def best_per(preds: list[cm.Prediction]) -> list[cm.Prediction]:
    """The best D per (B, mechanism) by predicted speedup (the smallest D within 1% of the best),
    among points whose KV cache fits."""
    groups: dict[tuple[int, str], list[cm.Prediction]] = {}
    for pr in preds:
        groups.setdefault((pr.batch, pr.mechanism), []).append(pr)
    out = []
    for _, rows in sorted(groups.items()):
        fit = [r for r in rows if r.kv_fits and not math.isnan(r.speedup)] or rows
        top = max((r.speedup for r in fit if not math.isnan(r.speedup)), default=math.nan)
        if math.isnan(top):
            out.append(min(fit, key=lambda r: r.depth))
            continue
        # the smallest D within TIE of the best: a larger D that buys < 1% is not worth its risk
        out.append(min((r for r in fit if r.speedup >= top * (1 - TIE)), key=lambda r: r.depth))
    return out


def recommend(best: list[cm.Prediction]) -> dict[int, cm.Prediction | None]:
    """Per batch size the best mechanism and D; None when no speculation is predicted to pay."""
    out: dict[int, cm.Prediction | None] = {}
    for pr in best:
        cur = out.get(pr.batch)
        good = pr.kv_fits and pr.speedup > 1.0
        if good and (cur is None or pr.speedup > cur.speedup):
            out[pr.batch] = pr
        else:
            out.setdefault(pr.batch, None)
    return out


def alphas_from_results(ok_cells) -> dict[str, float]:
    """alpha per method fitted to the measured AL(D) (mean over categories, batch sizes).

    Cost-surface cells (``synthetic_al`` set) are left out: their AL was forced, not the method's.
    Their times still calibrate T_verif (``calibrate_from_results`` reads every cell).
    """
    out = {}
    real = ok_cells[ok_cells["synthetic_al"].isna()] if "synthetic_al" in ok_cells else ok_cells
    for method, grp in real[real["num_speculative_tokens"] > 0].groupby("method"):
        pts = grp.groupby("num_speculative_tokens")["al"].mean()
        out[str(method)] = cm.fit_alpha([(int(d), float(a)) for d, a in pts.items()])
    return out


def measured_workload(data) -> dict:
    """What the results measured: their batch sizes ("1,4") and median context tokens (the planner's
    defaults with ``--results``, so it models what was measured, not 1,024 tokens); {} without results."""
    if data is None or data.ok.empty:
        return {}
    out = {"batch": ",".join(str(int(b)) for b in sorted(set(data.ok["batch_size"])))}
    ctx = data.ok["context_tokens"].dropna() if "context_tokens" in data.ok else []
    if len(ctx):
        out["context"] = float(ctx.median())
    return out


def measured_on(data) -> set[str]:
    from .hardware import match_device_name

    return {(match_device_name(d).name if match_device_name(d) else d) for d in data.device_names}


def planned_hardware(name: str, data) -> Hardware:
    """``--hardware NAME``; ``cpu`` with results measured on a CPU is the nominal CPU entry, which the
    results' measured T_verif then scales (the same plan on every call), not a new microbenchmark of
    this machine (whose FLOP/s moved by 8x between two calls on a shared machine)."""
    from . import hardware

    key = name.strip().lower()
    if key == "cpu" and data is not None and not data.ok.empty and "cpu" in measured_on(data):
        return replace(hardware.HARDWARE["cpu-nominal"], name="cpu",
                       source="nominal, scaled to the results' measured T_verif")
    return hardware.get(name)


def calibrate_from_results(data, target: ModelShape, hw: Hardware, context: float, mode: str,
                           p: cm.CostParams) -> Calibration:
    ok = data.ok
    points = []
    for _, c in ok.iterrows():
        ctx = c.get("context_tokens", math.nan)
        ctx = context if ctx is None or math.isnan(ctx) else float(ctx)
        points.append((int(c.batch_size), int(c.num_speculative_tokens), ctx, float(c.t_verify_ms)))
        points.append((int(c.batch_size), 0, ctx, float(c.t_verify_ms_baseline)))
    scale, spread = cm.calibrate(target, hw, points, p)
    devices = measured_on(data)
    same = hw.name in devices or (hw.name == "cpu" and "cpu" in devices)
    if mode == "never" or not points:
        return Calibration(scale, spread, len(points), False, "calibration off" if points else "no measured cells")
    if mode == "auto" and not same:
        return Calibration(scale, spread, len(points), False,
                           f"results measured on {sorted(devices) or ['?']}, planning {hw.name}; use --calibrate always to apply")
    return Calibration(scale, spread, len(points), True, f"fitted on {len(points)} measured T_verif points")


def _parse_alpha(text: str | None, mechanisms: tuple[str, ...]) -> dict[str, float]:
    """``--alpha 0.8`` (every mechanism) or ``ngram=0.5,eagle3=0.8``; each alpha in [0, 1), each
    mechanism one being planned. Raises ``ValueError`` naming the bad part."""
    if not text:
        return {}
    if "=" not in text:
        return {"*": _alpha_value(text, text)}
    out = {}
    for part in text.split(","):
        k, _, v = part.partition("=")
        k = k.strip()
        if k not in mechanisms:
            raise ValueError(f"--alpha {part.strip()!r}: {k!r} is not a mechanism being planned "
                             f"(planned: {', '.join(mechanisms)}; --mechanisms chooses them)")
        out[k] = _alpha_value(v, part.strip())
    return out


def _alpha_value(text: str, part: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"--alpha {part!r}: not a number") from None
    if not 0.0 <= value < 1.0:  # NaN fails too; alpha = 1 would make AL = D + 1 at every D
        raise ValueError(f"--alpha {part!r}: alpha is a per-token acceptance probability, it must be in [0, 1)")
    return value


def _check_inputs(args: argparse.Namespace) -> tuple[int, ...]:
    """The batch sizes; every numeric option in range. Raises ``ValueError`` naming the option."""
    try:
        batches = tuple(int(b) for b in str(args.batch).split(",") if b.strip())
    except ValueError:
        raise ValueError(f"--batch {args.batch!r}: comma-separated positive integers, e.g. 1,8,64") from None
    if not batches or min(batches) < 1:
        raise ValueError(f"--batch {args.batch!r}: every batch size must be >= 1")
    if not math.isfinite(args.context) or args.context < 0:
        raise ValueError(f"--context {args.context:g}: context tokens must be a finite number >= 0")
    if args.d_max < 1:
        raise ValueError(f"--d-max {args.d_max}: the largest D must be >= 1")
    if args.layer_skip_layers is not None and args.layer_skip_layers < 1:
        raise ValueError(f"--layer-skip-layers {args.layer_skip_layers}: must be >= 1")
    return batches


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    src = parser.add_argument_group("target")
    src.add_argument("--config", help="the target's config.json (or model folder, builtin:NAME, random:PRESET)")
    src.add_argument("--model-shape", help="a shape preset (see speedbench.modelling.shapes.SHAPE_PRESETS), e.g. llama-3.1-8b")
    src.add_argument("--dtype", default=None, help="weights/KV dtype (default: the config's, else bfloat16)")
    parser.add_argument("--hardware", default="h200", help="h100-sxm, h200, b200, a100-80gb, l40s, or cpu (calibrated here)")
    parser.add_argument("--batch", default=None,
                        help=f"comma-separated batch sizes (default: the measured ones with --results, else {DEFAULT_BATCH})")
    parser.add_argument("--context", type=float, default=None,
                        help=f"context tokens per sequence while decoding (default: the measured median with --results, "
                             f"else {DEFAULT_CONTEXT:g})")
    parser.add_argument("--mechanisms", default=None, help=f"comma-separated (default {','.join(DEFAULT_MECHANISMS)}"
                        " plus draft_model with --draft-config; with --results: the measured methods)")
    parser.add_argument("--alpha", default=None, help="per-token acceptance: 0.8, or per mechanism ngram=0.5,eagle3=0.8")
    parser.add_argument("--results", action="append", default=[], help="results folder: fit alpha and calibrate")
    parser.add_argument("--calibrate", choices=("auto", "always", "never"), default="auto")
    parser.add_argument("--draft-config", help="draft_model: the draft's config.json / preset / random:PRESET")
    parser.add_argument("--layer-skip-layers", type=int, default=None, help="layer_skip: target layers drafting (default L/4)")
    parser.add_argument("--d-max", type=int, default=16, help="largest D considered (default 16)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def _check_shape_name(name: str) -> None:
    """``--model-shape`` names a preset (or ``random:``/``builtin:``): refused at once, never looked up on the hub."""
    from ..console import UsageError, did_you_mean
    from ..models import RANDOM_PRESETS, random_preset
    from .shapes import SHAPE_PRESETS

    if name in SHAPE_PRESETS:
        return
    try:
        if random_preset(name) is not None:
            return
    except ValueError:
        raise UsageError(f"--model-shape {name!r}: unknown random preset (known: {', '.join('random:' + p for p in sorted(RANDOM_PRESETS))})") from None
    if name.startswith("builtin:"):
        return  # resolved (or refused with the shipped names) by load_shape
    close = did_you_mean(name, SHAPE_PRESETS)
    hint = f"; did you mean {close!r}?" if close else ""
    raise UsageError(f"--model-shape {name!r} is not a shape preset (known: {', '.join(sorted(SHAPE_PRESETS))}){hint}; "
                     "for a config.json, model folder or hub id use --config")


def _check_config_name(spec: str) -> None:
    """A ``--config`` that is no file, no ``builtin:``/``random:`` name and no ``owner/name`` hub id
    but looks like a misspelt preset is refused with the preset's name, before any hub lookup."""
    import difflib
    from pathlib import Path

    from ..console import UsageError
    from .shapes import SHAPE_PRESETS

    if spec in SHAPE_PRESETS or "/" in spec or ":" in spec or Path(spec).expanduser().exists():
        return
    close = difflib.get_close_matches(spec, list(SHAPE_PRESETS), n=1, cutoff=0.8)
    if close:
        raise UsageError(f"--config {spec!r} is no file or folder; did you mean --model-shape {close[0]}?")


def _spec(args: argparse.Namespace, data) -> str:
    """The target to plan: --config, --model-shape, or the results' own target (its dtype too)."""
    if args.model_shape:
        _check_shape_name(args.model_shape)
    if args.config:
        _check_config_name(args.config)
    spec = args.config or args.model_shape
    if not spec and data is not None:
        spec = next((t.path for t in data.targets.values() if t.path), None)
        args.dtype = args.dtype or next((t.dtype for t in data.targets.values() if t.dtype), None)
    if not spec:
        raise ValueError("give --config or --model-shape (or --results with a resolvable target)")
    return spec


def _mechanisms(args: argparse.Namespace, data, load_shape) -> tuple[tuple[str, ...], Any, list[str]]:
    """The mechanisms to plan (--mechanisms, else the results', else the defaults), the draft model's
    shape where one needs it, and a note for each left out."""
    if args.mechanisms:
        mechs = tuple(m.strip() for m in args.mechanisms.split(",") if m.strip())
    elif data is not None and not data.ok.empty:
        mechs = tuple(sorted(m for m in set(data.ok["method"]) if not is_baseline(m)))
    else:
        mechs = DEFAULT_MECHANISMS + (("draft_model",) if args.draft_config else ())
    draft_shape = load_shape(args.draft_config, args.dtype) if args.draft_config else None
    if set(cm.NEEDS_SHAPE) & set(mechs) and draft_shape is None and data is not None:
        paths = [(p.get("config") or {}).get("drafter", {}).get("model") for p in data.provenance]
        path = next((x for x in paths if x), None)
        draft_shape = load_shape(path, args.dtype) if path else None
    notes = []
    for m in cm.NEEDS_SHAPE:
        if m in mechs and draft_shape is None and not args.mechanisms:
            mechs = tuple(x for x in mechs if x != m)
            notes.append(f"{m} left out: its config is not in the results' provenance; pass --draft-config")
    return mechs, draft_shape, notes


def _alphas(args: argparse.Namespace, data, mechs, alpha: dict, target, hw):
    """Each mechanism's acceptance rate and where it came from (--alpha, fitted from the results, the
    default), and the cost model's parameters with the results' calibration applied."""
    source = {m: "user" for m in mechs if m in alpha}
    p = cm.CostParams()
    calib = None
    if data is not None and not data.ok.empty:
        for m, a in alphas_from_results(data.ok).items():
            if m in mechs and m not in alpha and not math.isnan(a):
                alpha[m], source[m] = a, "fitted from results"
        calib = calibrate_from_results(data, target, hw, args.context, args.calibrate, p)
        if calib.applied:
            p = replace(p, scale=calib.scale)
    for m in mechs:
        if m not in alpha:
            alpha[m] = alpha.get("*", 0.7)
            source[m] = "user" if "*" in alpha and args.alpha else "default 0.7 (no --alpha given)"
    return alpha, source, calib, p


def _plan(args: argparse.Namespace) -> tuple[str, list[str]]:
    """Everything ``main`` prints (the JSON or the table, and the notes); ValueError / UsageError for bad input."""
    from .shapes import load_shape

    data = None
    if args.results:
        from ..results.load import load

        data = load(args.results)
    spec = _spec(args, data)
    measured = measured_workload(data)
    given = {"batch": args.batch is not None, "context": args.context is not None}
    args.batch = args.batch if given["batch"] else measured.get("batch", DEFAULT_BATCH)
    args.context = args.context if given["context"] else measured.get("context", DEFAULT_CONTEXT)
    batches = _check_inputs(args)
    target = load_shape(spec, args.dtype)
    mechs, draft_shape, notes = _mechanisms(args, data, load_shape)
    k = args.layer_skip_layers or max(1, target.n_layers // 4)
    drafts = {m: cm.DraftSpec(m, draft_shape if m in cm.NEEDS_SHAPE else None, k) for m in mechs}
    alpha = _parse_alpha(args.alpha, mechs)
    hw = planned_hardware(args.hardware, data)  # an unknown name: one line naming the known ones
    alpha, source, calib, p = _alphas(args, data, mechs, alpha, target, hw)
    work = Workload(batches, args.context, mechs, alpha, args.d_max)
    taken = [f"{what} {args.batch if what == 'batch' else format(args.context, '.4g')}"
             for what in ("batch", "context") if not given[what] and what in measured]
    if taken:
        notes.append(f"{' and '.join(taken)}: as measured in the results (--batch / --context to plan others)")
    best = best_per(sweep(target, hw, work, drafts, p))
    rec = recommend(best)
    if args.json:
        return json.dumps({"target": asdict(target), "hardware": asdict(hw), "alpha": alpha, "alpha_source": source,
                           "calibration": asdict(calib) if calib else None, "best": [asdict(b) for b in best],
                           "recommendation": {b: (asdict(r) if r else None) for b, r in rec.items()},
                           "notes": notes}, indent=2, default=str), []
    return render(target, hw, work, source, calib, best, rec), notes


def main(args: argparse.Namespace) -> int:
    from ..console import UsageError

    try:
        text, notes = _plan(args)
    except (ValueError, UsageError) as exc:
        print(f"speedbench plan: {exc}", file=sys.stderr)
        return 2
    print("\n".join([text, *notes]))
    return 0


def render(target, hw, work, source, calib, best, rec) -> str:
    kind = f"MoE {target.n_experts}x top-{target.experts_per_tok}" if target.is_moe else "dense"
    lines = [
        "speedbench plan -- every number below is MODELLED (roofline cost model + geometric acceptance), not measured; "
        "the formulas: docs/guidelines.md sections 3 and 6",
        f"target {target.name}: {target.n_layers} layers, hidden {target.hidden}, G = {target.group} ({kind}); "
        f"hardware {hw.name} ({hw.source}: {hw.peak_flops / 1e12:.3g} TFLOP/s, {hw.mem_bw / 1e9:.4g} GB/s); "
        f"context {work.context:g} tokens",
        "acceptance alpha: " + ", ".join(f"{m}={work.alpha[m]:.3f} ({source[m]})" for m in work.mechanisms),
    ]
    if calib is not None:
        state = "applied" if calib.applied else "NOT applied"
        lines.append(f"calibration: scale {calib.scale:.3g} (spread {calib.spread:.0%}) {state}: {calib.why}")
    lines.append("")
    head = f"{'B':>5} {'mechanism':<12} {'D*':>3} {'AL':>5} {'speedup':>8} {'AL/(1+rhoD)':>11} {'Tver(B)ms':>10} " \
           f"{'Tver(B(1+D))ms':>14} {'Tdraft ms':>9} {'rho':>6} {'attn%':>6} fits"
    lines += [head, "-" * len(head)]
    for b in best:
        lines.append(
            f"{b.batch:>5} {b.mechanism:<12} {b.depth:>3} {b.al:>5.2f} {b.speedup:>7.2f}x {b.speedup_low_latency:>10.2f}x "
            f"{b.t_verify_base_s * 1e3:>10.3g} {b.t_verify_s * 1e3:>14.3g} {b.t_draft_s * 1e3:>9.3g} {b.rho:>6.3f} "
            f"{b.attention_share * 100:>5.0f}% {'yes' if b.kv_fits else 'NO'}"
        )
    lines += ["", "Recommendation (modelled):"]
    for batch, r in rec.items():
        if r is None:
            lines.append(f"  B={batch}: no speculation -- no mechanism is predicted to beat plain decoding")
        else:
            lines.append(f"  B={batch}: {r.mechanism} with D={r.depth} (predicted {r.speedup:.2f}x, AL {r.al:.2f})")
    g = target.group
    d0 = cm.d0(g)
    lines.append(
        f"G2/G3: G = {g}: D0 = 128/G - 1 = {d0 if d0 is not None else 'n/a (< 1)'}; above it prefer D in "
        f"{cm.tile_aligned_depths(g, 3)} (G(1+D) a multiple of 128) when attention dominates."
    )
    lines.append("Measure before you trust this: `speedbench run` on your workload, then `speedbench report`.")
    return "\n".join(lines)
