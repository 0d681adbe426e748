"""The Pareto plots against each cell's own paired baseline (issue 48 item 6): G5 draws paired speedups, so
a configuration whose paired speedup is above 1 never sits below plain decoding because another cell's
baseline ran faster; where baselines of the same slice disagree by more than the noise, the plot says so."""
import math

import pandas as pd
from PIL import Image

from speedbench.report import plots
from speedbench.report.common import Section, baseline_spread
from speedbench.report.mechanism import _pareto


def _cells():
    # the shape: ngram's cell ran while the machine was slow (baseline TPOT 14.8 ms), eagle's while it
    # was fast (4.9 ms); in absolute tokens/s per user ngram (1.2x its own baseline) sits below eagle's baseline
    rows = []
    for mech, tpot_base, speedup in (("ngram", 14.8, 1.20), ("eagle", 4.9, 1.05)):
        user_base = 1000 / tpot_base
        rows.append({"drafter": mech, "method": mech, "num_speculative_tokens": 4, "batch_size": 1, "category": "all",
                     "context_bucket": "", "speedup": speedup, "speedup_ci_low": speedup - 0.05,
                     "speedup_ci_high": speedup + 0.05, "speedup_noise": 0.02, "tpot_ms_baseline": tpot_base,
                     "tokens_per_s_user_baseline": user_base, "tokens_per_s_user_spec": user_base * speedup,
                     "tokens_per_s_per_gpu_baseline": user_base, "tokens_per_s_per_gpu_spec": user_base * speedup,
                     "concurrency": -1, "request_rate": math.inf, "stable": True})
    frame = pd.DataFrame(rows)
    return pd.concat([frame, frame.assign(num_speculative_tokens=2)], ignore_index=True)  # two points a series


def test_g5_pareto_uses_each_cells_own_baseline_and_says_when_absolutes_disagree(tmp_path):
    cells = _cells()
    assert cells.loc[0, "tokens_per_s_user_spec"] < cells.loc[1, "tokens_per_s_user_baseline"]  # the contradiction
    sec = Section("g5", "G5")
    fig = _pareto(cells, cells, tmp_path, sec)
    points = {r["mechanism"]: r for r in sec.values["pareto"] if r["point"] == "D4/B1"}
    assert points["ngram"]["per-user speedup"] == 1.20 and points["ngram"]["throughput speedup"] == 1.20
    assert points["eagle"]["per-user speedup"] == 1.05
    assert "baseline TPOT ranged 4.9-14.8 ms" in sec.values["pareto_baseline_spread"]
    assert "not comparable" in fig.caption and fig.path.exists()


def test_baseline_spread_is_silent_within_the_noise():
    cells = _cells().assign(tpot_ms_baseline=[5.0, 5.1, 5.0, 5.1])  # 2% apart, noise 2%: limit 4%
    assert baseline_spread(cells) == ""
    assert "ranged 5-5.5 ms" in baseline_spread(cells.assign(tpot_ms_baseline=[5.0, 5.5, 5.0, 5.5]))


def test_a_note_is_drawn_on_the_plot(tmp_path):
    groups = {"g": ([1.0, 2.0], [2.0, 1.0], "o")}
    bare = plots.pareto(tmp_path / "a.png", groups, plots.Axes("x", "y", "t"), "")
    noted = plots.pareto(tmp_path / "b.png", groups, plots.Axes("x", "y", "t", note="not comparable"), "")
    def red(path):  # the note is written in dark red; nothing else on these plots is
        px = Image.open(path).convert("RGB").tobytes()
        return sum(1 for i in range(0, len(px), 3) if px[i] > 120 and px[i + 1] < 60 and px[i + 2] < 60)
    assert red(bare.path) == 0 < red(noted.path)
