"""Every gate verdict says what it could have caught: the loss its own noise lets it see."""
import math

import pytest

from speedbench.gate.core import DETECT_POWER, detectable_loss, judge


def test_detectable_loss_grows_with_the_interval_and_is_caught_at_that_loss():
    from statistics import NormalDist

    tight, wide = detectable_loss(0.99, 1.01, 0.03, 0.95), detectable_loss(0.95, 1.05, 0.03, 0.95)
    assert 0.03 < tight < wide < 0.25
    assert math.isnan(detectable_loss(math.nan, 1.0, 0.03, 0.95))
    # a run as noisy as this one, at a true loss of exactly `tight`: its upper bound sits at 1 - tol
    # in (1 - DETECT_POWER) of runs, i.e. the gate calls it a regression DETECT_POWER of the time
    z = NormalDist().inv_cdf(0.975)
    se = math.log(1.01 / 0.99) / (2 * z)
    high = (1 - tight) * math.exp((z + NormalDist().inv_cdf(DETECT_POWER)) * se)
    assert high == pytest.approx(1 - 0.03)
    r = (1 - tight) * math.exp(-0.001)  # a little worse than the detectable loss in a typical run: caught
    assert judge(r, r * math.exp(-z * se), r * math.exp(z * se), 0.03) == "regressed"


def test_the_gate_report_prints_what_it_could_detect(tmp_path):
    from speedbench import cli
    from tests.support.synthetic_results import make_results

    folder = make_results(tmp_path / "r", depths=(2,), batches=(1,))
    assert cli.main(["gate", "--baseline", str(folder), "--current", str(folder), "--json", str(tmp_path / "g.json")]) == 0
    import json

    body = json.loads((tmp_path / "g.json").read_text())
    assert body["could_detect"].startswith("could detect: a loss of ")
    assert all(c["detectable_loss"] is None or c["detectable_loss"] > c["tolerance"] for c in body["checks"])
