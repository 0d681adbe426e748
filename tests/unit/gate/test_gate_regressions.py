"""The gate on real runs of the embedded default: identical repeats pass; a drafter slowed
by a fixed delay and a drafter whose weights were replaced by random ones fail; a run with
other settings fails cleanly as a mismatch. Gated with conf/gate/ci.yaml, whose speedup
tolerance comes from the measured run-to-run noise of the CI benchmark (see
scripts/gate_false_alarms.py): the speedup tests measure that benchmark itself (12 prompts x 48
tokens x >= 6 repeats, about 30 s a run), because a smaller run is noisier than the tolerance
allows (2 prompts a category x 24 tokens raised a false alarm on identical runs in CI)."""
import copy
import re
from pathlib import Path

import pytest
import torch

from speedbench import models

from speedbench.pipeline import runner
from speedbench.config import FaultConfig
from speedbench.drafters.registry import make_drafter
from speedbench.gate import load_config, run_gate
from tests.support.sweep_helpers import ci_benchmark_run, make_run

pytestmark = pytest.mark.alone  # its verdicts are measured from wall-clock timings

CATEGORIES = ("coding", "math", "writing")
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return tmp_path_factory.mktemp("gate-runs")


def measure(root, run_id, **kw):
    run = make_run(root, run_id, categories=CATEGORIES, max_new_tokens=24, **kw)
    cells = runner.run_cells(run, progress=False)
    assert cells and all(c.status == "ok" for c in cells)
    return root / run_id


def measure_ci(root, run_id, repeats=None, **kw):
    run = ci_benchmark_run(root, run_id, **kw)
    if repeats:  # fewer paired repeats (the protocol is not in the cell id): for a loss far beyond the noise
        run.protocol.min_repeats = run.protocol.max_repeats = repeats
    cells = runner.run_cells(run, progress=False)
    assert cells and all(c.status == "ok" for c in cells)
    return root / run_id


@pytest.fixture(scope="module")
def baseline(results):
    return measure_ci(results, "baseline")


def verdicts(report, metric):
    return {c.verdict for c in report.checks if c.metric == metric}


def test_two_identical_runs_pass(results, baseline):
    """An identical run passes (or is inconclusive, never regressed: issue 48 item 1); where it raises a false
    alarm, a second identical run must pass. The
    tolerance was calibrated in fresh processes (0 false alarms in 30 pairs, scripts/gate_false_alarms.py);
    inside the full suite, in a process that has run every test before it, one identical run in a few
    was flagged on one cell (a 2-2.5% speedup drop, 2026-12-04), so one alarm is allowed and two in a
    row fail the test."""
    report = run_gate(baseline, measure_ci(results, "repeat"), load_config("ci"))
    if report.exit_code == 1:  # an alarm; inconclusive (exit 5: the machine's speed moved) is no alarm
        first = [c for c in report.checks if c.verdict != "pass"]
        report = run_gate(baseline, measure_ci(results, "repeat-2"), load_config("ci"))
        assert report.exit_code in (0, 5), (first, [c for c in report.checks if c.verdict != "pass"])
    assert report.exit_code in (0, 5) and "regressed" not in {c.verdict for c in report.checks}
    assert all(c.ratio == 1.0 for c in report.checks if c.metric == "al")  # greedy AL is deterministic


@pytest.fixture(scope="module")
def slowed(results, baseline):
    """A delay sized from the baseline's own step time to cost ~20% of the speedup (speedup' = 0.8 x
    speedup needs every speculative step to take T_step / 4 longer), gated against the baseline. Two
    paired repeats suffice for a loss far beyond the noise (the protocol is not in the cell id, nor is
    ``faults``). (A 10% loss was caught in 36 of 36 pairs of CI-benchmark runs on this kind of machine,
    measured by scripts/gate_false_alarms.py; a test that fails one run in twenty would only teach
    people to rerun CI.)"""
    from speedbench.results import ResultsStore

    t_step_ms = float(ResultsStore(baseline).cells()["t_step_ms_spec"].mean())
    current = measure_ci(results, "slowed", repeats=2, faults=FaultConfig(delay_ms=t_step_ms / 4))
    report = run_gate(baseline, current, load_config("ci"))
    if report.exit_code == 5:  # INCONCLUSIVE: this 2-core VM's speed moved past max_step_ratio since the
        # baseline ran (minutes earlier, other tests between): a baseline and a slowed run back to back
        again = measure_ci(results, "baseline-again")
        current = measure_ci(results, "slowed-again", repeats=2, faults=FaultConfig(delay_ms=t_step_ms / 4))
        report = run_gate(again, current, load_config("ci"))
    return report


def test_a_delay_costing_20_percent_of_speedup_fails_on_speedup(slowed):
    report = slowed
    assert report.exit_code == 1
    (pooled,) = [c for c in report.checks if c.metric == "speedup" and c.cell_id == "ALL"]
    assert pooled.verdict == "regressed"  # ci.yaml gates speedup on the mean over cells
    assert 0.65 < pooled.ratio < 0.92, pooled  # the injected loss, measured
    assert all(c.ratio < 0.95 for c in report.checks if c.metric == "speedup")  # and every cell shows it
    assert verdicts(report, "al") == {"pass"}  # same tokens, same acceptance: only time moved


def test_the_slowed_gate_prints_what_docs_ci_gate_md_says(slowed):
    """docs/ci-gate.md's "What it prints" for its slowed-run recipe, checked against the gate's own table."""
    from speedbench.gate.output import format_report

    doc = (REPO / "docs" / "ci-gate.md").read_text()
    said = re.search(r"What it prints \(tested[^)]*\):(.*?)exit (\d)\.", doc, re.S)
    assert said, "docs/ci-gate.md lost its 'What it prints' paragraph"
    quoted = re.findall(r"`([^`]+)`", said.group(1))
    text = format_report(slowed)
    verdict: dict[tuple[bool, str], set[str]] = {}
    for c in slowed.checks:  # each as the table prints it (a bad verdict in capitals)
        line = text.splitlines()[3 + slowed.checks.index(c)]
        shown = line.rsplit(f" {c.n_requests:>4}  ", 1)[1].split()[0]  # the word after the n column (a note may follow)
        verdict.setdefault((c.cell_id == "ALL", c.metric), set()).add(shown)
    assert verdict[(False, "speedup")] == {"info"} and "info" in quoted
    assert verdict[(True, "speedup")] == {"REGRESSED"} and "REGRESSED" in quoted
    assert {v for (_, metric), vs in verdict.items() if metric == "al" for v in vs} == {"pass"} and "pass" in quoted
    tail = next(q for q in quoted if q.startswith("FAIL"))
    assert text.splitlines()[-1] == tail, (text.splitlines()[-1], tail)
    assert slowed.exit_code == int(said.group(2))


def test_a_draft_model_replaced_by_a_random_one_fails_on_al(results, tmp_path):
    """The same cell (same drafter path) before and after its weights were swapped for random ones."""
    target = models.load_model("random:tiny-target")
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = 1
    good = type(target)(config)
    good.load_state_dict(target.state_dict(), strict=False)  # the target's first layer: a strong drafter
    path = tmp_path / "drafter"
    good.save_pretrained(path)
    drafter = make_drafter("draft_model", 4, name="mini", model=str(path))
    before = measure(results, "drafter-before", drafter=drafter)

    # same path, random weights. (Untied: a random model whose LM head is its input embedding
    # predicts "repeat the last token", as the random target does, and would still agree.)
    config.tie_word_embeddings = False
    torch.manual_seed(1)
    type(target)(config).save_pretrained(path)
    models.load_model.cache_clear()  # a new process would load the new weights
    after = measure(results, "drafter-after", drafter=copy.deepcopy(drafter))
    report = run_gate(before, after, load_config("ci"))
    assert report.exit_code == 1
    assert verdicts(report, "al") == {"regressed"}
    assert all(c.high < 0.99 for c in report.checks if c.metric == "al")


def test_a_run_with_other_settings_is_a_mismatch(results, baseline):
    other = make_run(results, "other", categories=("coding",), max_new_tokens=8, warmup_batches=0)
    runner.run_cells(other, progress=False)
    report = run_gate(baseline, results / "other", load_config("ci"))
    assert report.exit_code == 3
    assert len(report.missing) == 3 and len(report.new) == 1
