"""A roofline cost model of verification and drafting, and the speedup formulas (docs/guidelines.md sections 3 and 6).

Every kernel costs ``max(flops / achievable FLOP/s, bytes / achievable bandwidth) + launch``:

* GEMMs (QKV, O, MLP, LM head): M = tokens in flight = B(1+D), weights read once per forward;
* decode attention, per sequence and KV head: the G(1+D) queries that share one KV head form
  the GEMM-M, rounded UP to tiles of 128 rows (a partly filled tile costs a full one), the
  K/V cache of ``context`` tokens is read once (speculated tokens reuse it);
* MoE experts: B(1+D) tokens x k routed experts of E; the expected number of distinct experts
  touched is E(1 - (1 - k/E)^tokens), and each touched expert's weights are read once.

All numbers out of this module are *modelled*. ``scale`` multiplies every time: it is the
calibration factor fitted between modelled and measured T_verif (``calibrate``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .. import metrics
from ..drafters.registry import method as drafter_method, methods_where
from .hardware import Hardware
from .shapes import ModelShape

MECHANISMS = methods_where(lambda m: m.cost is not None)  # the methods the cost model models (drafters.registry)
NEEDS_SHAPE = methods_where(lambda m: m.cost == "own_model")  # a draft model of its own: shape from --draft-config


@dataclass(frozen=True)
class CostParams:
    gemm_flop_eff: float = 0.7  # achievable fraction of peak FLOP/s in GEMMs
    attn_flop_eff: float = 0.5  # attention (softmax, masking) reaches less
    bw_eff: float = 0.8  # achievable fraction of peak bandwidth
    tile_m: int = 128  # attention kernels' M tile (queries per KV head)
    small_kernels_per_layer: int = 4  # norms, rotary, activation, residual: launch cost only
    scale: float = 1.0  # calibration: measured / modelled T_verif


@dataclass(frozen=True)
class VerifyCost:
    """One target forward over ``tokens`` = B(1+D) tokens, split by layer kind (seconds, modelled)."""

    tokens: int
    attn_core_s: float  # QK^T, softmax, PV over the KV cache
    attn_proj_s: float  # QKV and output projections
    ffn_s: float  # dense MLP or MoE experts (router included)
    lm_head_s: float
    overhead_s: float  # small kernels' fixed costs
    scale: float = 1.0

    @property
    def total_s(self) -> float:
        return self.scale * (self.attn_core_s + self.attn_proj_s + self.ffn_s + self.lm_head_s + self.overhead_s)

    @property
    def attention_share(self) -> float:
        raw = self.total_s / self.scale
        return self.attn_core_s / raw if raw > 0 else math.nan

    @property
    def ffn_share(self) -> float:
        raw = self.total_s / self.scale
        return self.ffn_s / raw if raw > 0 else math.nan


def roofline(flops: float, bytes_: float, hw: Hardware, flop_eff: float, p: CostParams) -> float:
    return max(flops / (hw.peak_flops * flop_eff), bytes_ / (hw.mem_bw * p.bw_eff)) + hw.launch_s


def gemm_time(m: int, n: int, k: int, hw: Hardware, p: CostParams = CostParams(), dtype_bytes: int = 2) -> float:
    """[m, k] x [k, n]: 2mnk FLOPs; reads A and B, writes C."""
    return roofline(2.0 * m * n * k, float(m * k + k * n + m * n) * dtype_bytes, hw, p.gemm_flop_eff, p)


def attention_m(group: int, depth: int, tile: int = 128) -> int:
    """Effective attention GEMM-M: G(1+D) queries per KV head, rounded up to whole tiles."""
    return math.ceil(group * (1 + depth) / tile) * tile


def attention_time(shape: ModelShape, batch: int, depth: int, context: float, hw: Hardware, p: CostParams = CostParams()) -> float:
    """One layer's decode attention for B sequences verifying 1+D tokens each against ``context`` cached tokens."""
    rows = shape.group * (1 + depth)
    m_eff = attention_m(shape.group, depth, p.tile_m)
    kv_len = context + 1 + depth
    flops = batch * shape.n_kv_heads * 4.0 * m_eff * kv_len * shape.head_dim
    bytes_ = batch * shape.n_kv_heads * (2.0 * kv_len + 2.0 * rows) * shape.head_dim * shape.dtype_bytes
    return roofline(flops, bytes_, hw, p.attn_flop_eff, p)


def distinct_experts(n_experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts hit by ``tokens`` tokens routing to k of E each: E(1 - (1 - k/E)^tokens)."""
    if n_experts <= 0:
        return 0.0
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** tokens)


def moe_time(shape: ModelShape, tokens: int, hw: Hardware, p: CostParams = CostParams()) -> float:
    """Router + routed experts (grouped GEMM: weights of each touched expert read once) + shared expert."""
    b = shape.dtype_bytes
    router = gemm_time(tokens, shape.n_experts, shape.hidden, hw, p, b)
    active = distinct_experts(shape.n_experts, shape.experts_per_tok, tokens)
    w_bytes = active * 3.0 * shape.hidden * shape.moe_intermediate * b
    act_bytes = tokens * shape.experts_per_tok * (2.0 * shape.hidden + 2.0 * shape.moe_intermediate) * b
    flops = 2.0 * tokens * shape.experts_per_tok * 3.0 * shape.hidden * shape.moe_intermediate
    experts = roofline(flops, w_bytes + act_bytes, hw, p.gemm_flop_eff, p) + hw.launch_s  # up/gate and down kernels
    shared = 0.0
    if shape.shared_intermediate:
        shared = gemm_time(tokens, 2 * shape.shared_intermediate, shape.hidden, hw, p, b)
        shared += gemm_time(tokens, shape.hidden, shape.shared_intermediate, hw, p, b)
    return router + experts + shared


def verify_cost(shape: ModelShape, hw: Hardware, batch: int, depth: int, context: float, p: CostParams = CostParams()) -> VerifyCost:
    """T_verif(B(1+D)) at ``context`` cached tokens per sequence, by layer kind."""
    tokens = batch * (1 + depth)
    b = shape.dtype_bytes
    q, kv = shape.n_heads * shape.head_dim, shape.n_kv_heads * shape.head_dim
    proj = gemm_time(tokens, q + 2 * kv, shape.hidden, hw, p, b) + gemm_time(tokens, shape.hidden, q, hw, p, b)
    core = attention_time(shape, batch, depth, context, hw, p)
    dense = gemm_time(tokens, 2 * shape.intermediate, shape.hidden, hw, p, b) + gemm_time(tokens, shape.hidden, shape.intermediate, hw, p, b)
    ffn = (shape.n_layers - shape.moe_layers) * dense
    if shape.moe_layers:
        ffn += shape.moe_layers * moe_time(shape, tokens, hw, p)
    return VerifyCost(
        tokens=tokens,
        attn_core_s=shape.n_layers * core,
        attn_proj_s=shape.n_layers * proj,
        ffn_s=ffn,
        lm_head_s=gemm_time(tokens, shape.vocab, shape.hidden, hw, p, b),
        overhead_s=shape.n_layers * p.small_kernels_per_layer * hw.launch_s,
        scale=p.scale,
    )


@dataclass(frozen=True)
class DraftSpec:
    """A draft mechanism for the cost model. ``shape``: the external draft model (draft_model);
    ``layers``: how many of the target's layers draft (layer_skip)."""

    mechanism: str
    shape: ModelShape | None = None
    layers: int = 1

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"unknown mechanism {self.mechanism!r}; known: {list(MECHANISMS)}")
        if self.mechanism in NEEDS_SHAPE and self.shape is None:
            raise ValueError(f"mechanism {self.mechanism} needs the draft model's shape (--draft-config)")


def draft_time(spec: DraftSpec, target: ModelShape, hw: Hardware, batch: int, depth: int, context: float,
               p: CostParams = CostParams()) -> float:
    """T_draft(B, D), seconds (modelled).

    none/ngram ~0 (a host-side lookup, not modelled); draft_model: D sequential steps of the
    draft model over B tokens; layer_skip: D steps of the target's first k layers (rho = k/L);
    eagle/eagle3/mtp: D steps of one layer (dense for EAGLE heads, the target's layer for MTP);
    dflash/dspark/medusa: one parallel pass of one layer over B*D tokens; pard: one pass of the
    draft model over B*D tokens (the newest token and D-1 masks per sequence).
    """
    row = drafter_method(spec.mechanism)
    drafter = DRAFTING_MODEL[row.cost](spec, target)
    if depth == 0 or drafter is None:
        return 0.0
    if row.draft_cost_grows_with_d:  # serial: D steps of one token per sequence
        return depth * verify_cost(drafter, hw, batch, 0, context, p).total_s
    return verify_cost(drafter, hw, batch, depth - 1, context, p).total_s  # parallel: one pass over D tokens


# A method's ``cost`` (drafters.registry) -> the model whose forward drafts (None: a host-side lookup, free).
DRAFTING_MODEL = {
    "free": lambda spec, target: None,
    "own_model": lambda spec, target: spec.shape,
    "target_layers": lambda spec, target: target.with_layers(spec.layers),
    "head": lambda spec, target: target.with_layers(1, dense=True),
    "target_head": lambda spec, target: target.with_layers(1, dense=False),  # MTP: the target's own layer
}


def al_geometric(alpha: float, depth: int) -> float:
    """Expected AL with per-token acceptance alpha: (1 - alpha^(D+1)) / (1 - alpha), bonus token included."""
    if depth <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(depth + 1)
    return (1.0 - alpha ** (depth + 1)) / (1.0 - alpha)


def fit_alpha(points: list[tuple[int, float]]) -> float:
    """Least-squares alpha in [0, 0.999] for measured (D, AL) pairs; NaN without points."""
    pts = [(d, al) for d, al in points if d > 0 and not math.isnan(al)]
    if not pts:
        return math.nan

    def sse(a: float) -> float:
        return sum((al_geometric(a, d) - al) ** 2 for d, al in pts)

    lo, hi = 0.0, 0.999
    grid = [lo + (hi - lo) * i / 200 for i in range(201)]
    best = min(grid, key=sse)
    lo, hi = max(0.0, best - 0.005), min(0.999, best + 0.005)
    for _ in range(60):  # golden-section refinement around the best grid point
        m1, m2 = lo + (hi - lo) * 0.382, lo + (hi - lo) * 0.618
        if sse(m1) <= sse(m2):
            hi = m2
        else:
            lo = m1
    return (lo + hi) / 2


@dataclass(frozen=True)
class Prediction:
    mechanism: str
    batch: int
    depth: int
    context: float
    al: float
    t_verify_base_s: float  # T_verif(B)
    t_verify_s: float  # T_verif(B(1+D))
    t_draft_s: float
    rho: float  # per-draft-token time / target step time
    attention_share: float  # of T_verif(B(1+D)), modelled
    speedup: float  # general formula
    speedup_low_latency: float  # AL / (1 + rho D)
    kv_fits: bool


def predict(target: ModelShape, spec: DraftSpec, hw: Hardware, batch: int, depth: int, context: float, al: float,
            p: CostParams = CostParams()) -> Prediction:
    base = verify_cost(target, hw, batch, 0, context, p)
    ver = verify_cost(target, hw, batch, depth, context, p)
    draft = draft_time(spec, target, hw, batch, depth, context, p)
    rho = draft / depth / base.total_s if depth else 0.0
    mem = target.weight_bytes() + (spec.shape.weight_bytes() if spec.shape else 0.0)
    mem += target.kv_bytes_per_token() * batch * (context + depth + 1)
    return Prediction(
        mechanism=spec.mechanism, batch=batch, depth=depth, context=context, al=al,
        t_verify_base_s=base.total_s, t_verify_s=ver.total_s, t_draft_s=draft, rho=rho,
        attention_share=ver.attention_share,
        speedup=metrics.predicted_speedup(base.total_s, ver.total_s, draft, al),
        speedup_low_latency=metrics.low_latency_speedup(al, rho, depth),
        kv_fits=mem <= 0.9 * hw.mem_bytes,
    )


def calibrate(target: ModelShape, hw: Hardware, points: list[tuple[int, int, float, float]],
              p: CostParams = CostParams()) -> tuple[float, float]:
    """Scale factor measured/modelled T_verif over (B, D, context, measured_ms) points.

    Returns (geometric-mean scale, max relative spread of the individual ratios around it).
    """
    ratios = []
    raw = replace(p, scale=1.0)
    for batch, depth, context, ms in points:
        if ms is None or math.isnan(ms) or ms <= 0:
            continue
        ratios.append(ms / 1e3 / verify_cost(target, hw, batch, depth, context, raw).total_s)
    if not ratios:
        return 1.0, math.nan
    scale = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    return scale, max(abs(r / scale - 1.0) for r in ratios)


def d0(group: int, tile: int = 128) -> int | None:
    """G2's starting draft length 128/G - 1 (floored when G does not divide 128); None when < 1."""
    d = tile // max(1, group) - 1
    return d if d >= 1 else None


def tile_aligned_depths(group: int, count: int = 4, tile: int = 128) -> list[int]:
    """G3: the first ``count`` draft lengths above D0 with G(1+D) a multiple of ``tile``."""
    step = tile // math.gcd(max(1, group), tile)  # 1+D must be a multiple of this
    start = d0(group, tile) or 0
    out, k = [], 1
    while len(out) < count:
        d = k * step - 1
        if d > start:
            out.append(d)
        k += 1
    return out
