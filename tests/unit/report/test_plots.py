"""What the report's plots draw: speedup intervals as error bars, Pareto points labelled, long legends
off the lines; wide tables set to fit the page; "per device" unless every cell ran on a GPU."""
import pandas as pd
from PIL import Image

from speedbench.report import plots
from speedbench.report.common import Table, device_unit
from speedbench.report.render import WIDE_TABLE, html_table

AXES = plots.Axes("D", "speedup (measured)", "t")


def _png(path) -> tuple[tuple[int, int], bytes]:
    im = Image.open(path).convert("RGB")
    return im.size, im.tobytes()


def test_a_series_with_an_interval_draws_error_bars(tmp_path):
    x, y = [1, 2, 4], [1.2, 1.4, 1.3]
    plain = plots.lines(tmp_path / "plain.png", [plots.Series("s", x, y)], AXES, "")
    bars = plots.lines(tmp_path / "bars.png", [plots.Series("s", x, y, low=[1.0, 1.1, 0.9], high=[1.4, 1.7, 1.6])], AXES, "")
    assert _png(plain.path)[1] != _png(bars.path)[1]
    # the bars' ends are inside the axes: the y range grew to hold them (0.9 and 1.7 are drawn)
    assert plots._errors(plots.Series("s", x, y, low=[1.0, float("nan"), 0.9], high=[1.4, 1.7, 1.6])) == (
        [1.0, 4.0], [1.2, 1.3], [1.2 - 1.0, 1.3 - 0.9], [1.4 - 1.2, 1.6 - 1.3])


def _ink_right_of_the_axes(path) -> int:
    """Dark pixels right of the axes' right spine (the column with the longest dark run)."""
    im = Image.open(path).convert("L")
    w, h = im.size
    px = im.load()
    dark = [sum(px[x, y] < 100 for y in range(h)) for x in range(w)]
    spine = max(range(w // 2, w), key=lambda x: dark[x])
    return sum(dark[spine + 3:])


def test_a_long_legend_goes_beside_the_axes(tmp_path):
    few = [plots.Series(f"s{i}", [1, 2], [i, i + 1]) for i in range(plots.LEGEND_INSIDE)]
    many = [plots.Series(f"a long series label {i}", [1, 2], [i, i + 1]) for i in range(12)]
    inside = _ink_right_of_the_axes(plots.lines(tmp_path / "few.png", few, AXES, "").path)
    beside = _ink_right_of_the_axes(plots.lines(tmp_path / "many.png", many, AXES, "").path)
    assert inside < 50 < beside  # twelve labels right of the axes, off the lines


def test_pareto_points_carry_their_labels(tmp_path):
    xs, ys = [1.0, 2.0, 3.0], [3.0, 2.0, 1.0]
    bare = plots.pareto(tmp_path / "bare.png", {"g": (xs, ys, "o")}, AXES, "")
    named = plots.pareto(tmp_path / "named.png", {"g": (xs, ys, "o", ["D1/B1", "D2/B1", "D4/B4"])}, AXES, "")
    assert _png(bare.path)[1] != _png(named.path)[1]


def test_a_wide_table_is_set_to_fit_the_page():
    narrow = Table(pd.DataFrame({"a": [1], "b": [2]}), "")
    wide = Table(pd.DataFrame({f"c{i}": [i] for i in range(WIDE_TABLE + 7)}), "")
    assert html_table(narrow).startswith("<div class='table'>")
    assert html_table(wide).startswith("<div class='table wide'>")


def test_rates_are_per_gpu_only_when_every_cell_ran_on_one():
    assert device_unit(pd.DataFrame({"device": ["cuda:0", "cuda"], "n_gpus": [1, 2]})) == "GPU"
    assert device_unit(pd.DataFrame({"device": ["cpu"], "n_gpus": [0]})) == "device"
    assert device_unit(pd.DataFrame({"device": ["cuda", "cpu"], "n_gpus": [1, 0]})) == "device"
    assert device_unit(pd.DataFrame({"device": ["synthetic"], "n_gpus": [1]})) == "device"
