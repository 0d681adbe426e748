"""One method table (drafters/registry.py): the cost model, the planner, the synthetic engine's
options and the baseline test all read its rows, so they cannot disagree."""
import pytest

from speedbench.backends.synthetic import SyntheticModel
from speedbench.config.engine_options import SyntheticOptions
from speedbench.drafters.registry import (BASELINE, METHODS, MODEL_FREE, PARALLEL, SERIAL, is_baseline,
                                          methods_where)
from speedbench.modelling import costmodel as cm
from speedbench.modelling import hardware, plan
from speedbench.modelling.shapes import load_shape

PARALLEL_METHODS = {"dflash", "dspark", "medusa", "pard"}


def test_every_row_says_its_kind_and_a_known_cost():
    assert all(m.kind in (MODEL_FREE, SERIAL, PARALLEL) for m in METHODS.values())
    assert all(m.cost is None or m.cost in cm.DRAFTING_MODEL for m in METHODS.values())
    assert set(methods_where(lambda m: m.kind == PARALLEL)) == PARALLEL_METHODS


def test_readers_take_the_table():
    assert set(cm.MECHANISMS) == {n for n, m in METHODS.items() if m.cost is not None}
    assert set(plan.DEFAULT_MECHANISMS) == {"ngram", "eagle3", "layer_skip", "dflash"}
    # the synthetic engine's default parallel set was [dflash, medusa]: it now is the table's
    assert set(SyntheticModel.from_options(SyntheticOptions()).parallel_methods) == PARALLEL_METHODS
    assert SyntheticModel.from_options(SyntheticOptions(parallel_methods=["ngram"])).parallel_methods == ("ngram",)


@pytest.mark.parametrize("name", sorted(cm.MECHANISMS))
def test_the_cost_model_grows_with_d_exactly_for_serial_rows(name):
    target, hw = load_shape("llama-3.1-8b"), hardware.get("h200")
    spec = cm.DraftSpec(name, load_shape("llama-3.2-1b") if name in cm.NEEDS_SHAPE else None, layers=8)
    t1, t8 = (cm.draft_time(spec, target, hw, 1, d, 1024) for d in (1, 8))
    if METHODS[name].cost == "free":
        assert t1 == t8 == 0.0
    elif METHODS[name].draft_cost_grows_with_d:
        assert t8 == pytest.approx(8 * t1)
    else:
        assert t8 < 2 * t1  # one pass over D tokens, not D passes
    synthetic = SyntheticModel.from_options(SyntheticOptions())
    assert (synthetic.t_draft_ms(name, 8) == 8 * synthetic.t_draft_ms(name, 1)) == METHODS[name].draft_cost_grows_with_d


def test_one_baseline_question():
    assert is_baseline(BASELINE) and is_baseline("none")
    assert not any(is_baseline(n) for n in METHODS if n != BASELINE)


def _runs_here(m) -> bool:
    """Some engine here runs it: the reference engine, or a build whose refusal (if any) lifts once a module is installed."""
    return m.reference is not None or any(e not in m.refusals or m.refusals[e].unless_module is not None
                                          for e in m.engines)


def test_a_method_nothing_here_runs_says_why_in_one_line_and_only_such_a_method():
    silent = [n for n, m in METHODS.items() if not _runs_here(m) and not m.unmeasured]
    assert not silent, f"methods nothing here runs, with no unmeasured line: {silent}"
    assert not [n for n, m in METHODS.items() if _runs_here(m) and m.unmeasured]
    assert all("\n" not in m.unmeasured and not m.unmeasured.startswith("not measured")
               for m in METHODS.values() if m.unmeasured)  # the table prefixes "not measured: "
    assert {n for n, m in METHODS.items() if m.unmeasured} == {"dspark", "mlp_speculator"}
    dspark = METHODS["dspark"].unmeasured
    assert "refuses" in dspark and "DFlash block" in dspark and "Markov head" in dspark and "missing here" in dspark
