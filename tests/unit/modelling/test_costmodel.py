"""Cost model limits, model shapes, acceptance fit, calibration, hardware table."""
import itertools
import json
import math

import pytest

from speedbench.modelling import costmodel as cm
from speedbench.modelling import hardware
from speedbench.modelling.shapes import SHAPE_PRESETS, from_config, load_shape

SHAPES = ["llama-3.2-1b", "llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b", "random:tiny-target"]
HW = ["h100-sxm", "h200", "b200", "a100-80gb", "l40s"]


@pytest.mark.parametrize("g,d0", [(1, 127), (2, 63), (4, 31), (8, 15), (16, 7), (32, 3), (64, 1), (128, None)])
def test_d0(g, d0):
    assert cm.d0(g) == d0


@pytest.mark.parametrize("g", [1, 2, 4, 8, 16, 6])
def test_tile_aligned_depths_are_multiples_of_128_above_d0(g):
    ds = cm.tile_aligned_depths(g, 5)
    assert ds == sorted(ds) and len(ds) == 5
    assert all(g * (1 + d) % 128 == 0 and d > (cm.d0(g) or 0) for d in ds)
    between = range((cm.d0(g) or 0) + 1, ds[0])  # nothing aligned was skipped
    assert not any(g * (1 + d) % 128 == 0 for d in between)


def test_hardware_table_has_the_spec_sheet_parts():
    for name in HW:
        h = hardware.get(name)
        assert h.peak_flops > 1e14 and h.mem_bw > 5e11 and h.mem_bytes >= 48e9
    assert hardware.get("H100").name == "h100-sxm"
    assert hardware.get("h200").mem_bw > hardware.get("h100-sxm").mem_bw
    assert hardware.match_device_name("NVIDIA H200").name == "h200"
    assert hardware.match_device_name("cpu") is None
    with pytest.raises(KeyError, match="known"):
        hardware.get("tpu-v9")


def test_cpu_calibration_is_quick_and_positive():
    import time

    t0 = time.perf_counter()
    h = hardware.calibrate_cpu(seconds=0.6)
    assert time.perf_counter() - t0 < 4.0  # < 2 s on an idle machine; slack for a shared one
    assert h.peak_flops > 1e8 and h.mem_bw > 1e8 and h.launch_s > 0 and h.source == "calibrated"


@pytest.mark.parametrize("shape,hw", itertools.product(SHAPES, ["h200", "l40s"]))
def test_t_verif_never_decreases_with_tokens_and_speedup_never_exceeds_al(shape, hw):
    s, h = load_shape(shape), hardware.get(hw)
    for batch in (1, 4, 32, 256):
        times = [cm.verify_cost(s, h, batch, d, 2048).total_s for d in range(0, 40)]
        assert all(b >= a * (1 - 1e-12) for a, b in zip(times, times[1:])), (batch, times)
    for batch, d, alpha, mech in itertools.product((1, 16, 256), (1, 3, 8), (0.3, 0.9), ("ngram", "eagle3", "dflash")):
        al = cm.al_geometric(alpha, d)
        pr = cm.predict(s, cm.DraftSpec(mech), h, batch, d, 2048, al)
        assert pr.speedup <= al + 1e-12
        assert pr.speedup_low_latency <= al + 1e-12
    more_batch = [cm.verify_cost(s, h, b, 2, 2048).total_s for b in (1, 2, 8, 64, 512)]
    assert more_batch == sorted(more_batch)


def test_attention_staircase_and_tiles():
    assert cm.attention_m(8, 15) == 128 and cm.attention_m(8, 16) == 256 and cm.attention_m(2, 0) == 128
    s = load_shape("qwen3-8b")  # G = 4
    h = hardware.get("h100")
    t = {d: cm.attention_time(s, 1, d, 32768, h) for d in (0, 16, 31, 32, 33, 63, 64)}
    # long context: compute-bound once the query rows pass a tile; a partial tile costs a full one
    assert t[32] == pytest.approx(t[33], rel=0.01) == pytest.approx(t[63], rel=0.01)
    assert t[32] > 1.3 * t[31] and t[64] > 1.4 * t[63]
    assert t[0] == pytest.approx(t[31], rel=0.01)  # within the first tile verification is free


def test_moe_expected_experts_and_growth():
    assert cm.distinct_experts(8, 2, 1) == pytest.approx(2.0)
    assert cm.distinct_experts(128, 8, 1) == pytest.approx(8.0)
    assert cm.distinct_experts(128, 8, 10_000) == pytest.approx(128.0)
    e = 64
    assert cm.distinct_experts(e, 4, 3) == pytest.approx(e * (1 - (1 - 4 / e) ** 3))
    moe = load_shape("qwen3-30b-a3b")
    h = hardware.get("h200")
    # at B=1 a dense model verifies 1+D tokens nearly free; the MoE pays for more experts
    dense = load_shape("llama-3.1-8b")
    r_moe = cm.verify_cost(moe, h, 1, 4, 1024).total_s / cm.verify_cost(moe, h, 1, 0, 1024).total_s
    r_dense = cm.verify_cost(dense, h, 1, 4, 1024).total_s / cm.verify_cost(dense, h, 1, 0, 1024).total_s
    assert r_moe > r_dense and r_dense < 1.05


def test_shapes_from_hf_configs():
    mixtral = from_config(SHAPE_PRESETS["mixtral-8x7b"], "m")
    assert (mixtral.n_experts, mixtral.experts_per_tok, mixtral.moe_intermediate, mixtral.group) == (8, 2, 14336, 4)
    qwen = from_config({"hidden_size": 2048, "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 4,
                        "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                        "shared_expert_intermediate_size": 5632, "vocab_size": 100, "torch_dtype": "float32"})
    assert qwen.is_moe and qwen.shared_intermediate == 5632 and qwen.dtype_bytes == 4 and qwen.head_dim == 128
    vl = from_config({"text_config": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}}, "vl")
    assert vl.n_kv_heads == 4 and vl.group == 1
    tiny = load_shape("random:tiny-target")
    assert (tiny.n_heads, tiny.n_kv_heads, tiny.group, tiny.head_dim) == (4, 2, 2, 64)
    with pytest.raises(ValueError, match="hidden_size"):
        from_config({"num_hidden_layers": 2}, "broken")


def test_shape_from_a_config_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SHAPE_PRESETS["llama-3.1-8b"]))
    assert load_shape(str(tmp_path)).group == 4 and load_shape(str(tmp_path / "config.json")).n_layers == 32


def test_draft_costs_by_mechanism():
    s, h = load_shape("llama-3.1-8b"), hardware.get("h200")
    step = cm.verify_cost(s, h, 1, 0, 1024).total_s
    t = {m: cm.draft_time(cm.DraftSpec(m, load_shape("llama-3.2-1b") if m in cm.NEEDS_SHAPE else None,
                                        layers=8), s, h, 1, 4, 1024) for m in cm.MECHANISMS}
    assert t["none"] == t["ngram"] == 0.0
    assert t["dflash"] < t["eagle3"] < t["layer_skip"] < t["draft_model"] + 4 * step
    assert t["pard"] < t["draft_model"] / 2  # one pass of the draft over D tokens, not D sequential steps
    rho_skip = t["layer_skip"] / 4 / step
    assert 0.15 < rho_skip < 0.35  # ~ k/L = 8/32 plus the LM head
    with pytest.raises(ValueError, match="draft_model needs"):
        cm.DraftSpec("draft_model")
    with pytest.raises(ValueError, match="pard needs"):
        cm.DraftSpec("pard")
    with pytest.raises(ValueError, match="unknown mechanism"):
        cm.DraftSpec("telepathy")


def test_geometric_al_and_fit():
    assert cm.al_geometric(0.0, 5) == 1.0 and cm.al_geometric(1.0, 5) == 6.0
    assert cm.al_geometric(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    pts = [(d, cm.al_geometric(0.73, d)) for d in (1, 2, 4, 8)]
    assert cm.fit_alpha(pts) == pytest.approx(0.73, abs=1e-3)
    assert math.isnan(cm.fit_alpha([]))


def test_calibration_recovers_a_known_scale():
    s, h = load_shape("llama-3.1-8b"), hardware.get("h100")
    pts = [(b, d, 1024, 2.5 * cm.verify_cost(s, h, b, d, 1024).total_s * 1e3) for b in (1, 8) for d in (0, 2, 4)]
    scale, spread = cm.calibrate(s, h, pts)
    assert scale == pytest.approx(2.5) and spread == pytest.approx(0.0, abs=1e-9)
    p = cm.CostParams(scale=scale)
    assert cm.verify_cost(s, h, 8, 2, 1024, p).total_s * 1e3 == pytest.approx(pts[4][3])
