"""`speedbench plan`: a recommendation without running a model; alpha fit and calibration from results."""
import json

from speedbench.cli import main

from tests.support.synthetic_results import shared_results


def test_plan_prints_a_recommendation(capsys):
    assert main(["plan", "--model-shape", "llama-3.1-8b", "--hardware", "h200", "--batch", "1,8,64", "--context", "1024",
                 "--alpha", "0.8", "--mechanisms", "ngram,eagle3,dflash"]) == 0
    out = capsys.readouterr().out
    assert "MODELLED" in out and "Recommendation" in out
    for b in (1, 8, 64):
        assert f"B={b}:" in out
    assert "D0 = 128/G - 1 = 31" in out


def test_plan_from_a_config_with_a_draft_model(tmp_path, capsys):
    from speedbench.modelling.shapes import SHAPE_PRESETS

    (tmp_path / "t.json").write_text(json.dumps(SHAPE_PRESETS["mixtral-8x7b"]))
    (tmp_path / "d.json").write_text(json.dumps(SHAPE_PRESETS["llama-3.2-1b"]))
    assert main(["plan", "--config", str(tmp_path / "t.json"), "--draft-config", str(tmp_path / "d.json"),
                 "--mechanisms", "draft_model,ngram", "--alpha", "draft_model=0.85,ngram=0.5", "--batch", "1,32",
                 "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["target"]["n_experts"] == 8
    best = {(r["batch"], r["mechanism"]): r for r in plan["best"]}
    assert set(best) == {(b, m) for b in (1, 32) for m in ("draft_model", "ngram")}
    assert all(r["speedup"] <= r["al"] + 1e-9 for r in plan["best"])
    assert main(["plan", "--config", str(tmp_path / "t.json"), "--mechanisms", "draft_model"]) == 2  # no draft shape


def test_plan_fits_alpha_and_calibrates_from_results(tmp_path_factory, capsys):
    run = shared_results(tmp_path_factory)
    assert main(["plan", "--results", str(run), "--hardware", "h200", "--batch", "1,4", "--calibrate", "always",
                 "--draft-config", "random:tiny-draft", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["target"]["name"] == "random:tiny-target"  # read from the results' provenance
    assert set(plan["alpha"]) == {"draft_model", "ngram"}
    assert all(src == "fitted from results" for src in plan["alpha_source"].values())
    assert plan["alpha"]["draft_model"] > plan["alpha"]["ngram"]  # the synthetic model scales ngram by 0.6
    cal = plan["calibration"]
    assert cal["applied"] and cal["n_points"] > 0 and cal["scale"] > 0
    assert main(["plan", "--results", str(run), "--hardware", "h200", "--batch", "1"]) == 0
    out = capsys.readouterr().out
    assert "NOT applied" in out  # measured on 'synthetic', planning h200
    assert "B=1:" in out


import pytest  # noqa: E402


@pytest.mark.parametrize("argv, named", [
    (["--alpha", "1.5"], "--alpha '1.5'"),
    (["--alpha", "nan"], "--alpha 'nan'"),
    (["--alpha", "1"], "[0, 1)"),
    (["--alpha", "ngram=0.5,eagel3=0.8"], "'eagel3' is not a mechanism being planned"),
    (["--batch", "-4"], "--batch '-4'"),
    (["--batch", "x"], "--batch 'x'"),
    (["--hardware", "nope"], "known: a100-80gb"),
    (["--context", "-5000"], "--context -5000"),
    (["--context", "nan"], "--context nan"),
    (["--d-max", "0"], "--d-max 0"),
])
def test_plan_refuses_impossible_inputs_in_one_line(argv, named, capsys):
    assert main(["plan", "--model-shape", "llama-3.1-8b", "--mechanisms", "ngram,eagle3", *argv]) == 2
    out = capsys.readouterr()
    assert out.out == "" and named in out.err and len(out.err.strip().splitlines()) == 1


def test_plan_from_cpu_results_models_what_was_measured_the_same_on_every_call(capsys):
    """Before: `plan --results` modelled 1,024 context tokens where the cells measured ~88 (T_verif(1)
    16-25 ms modelled against ~4 ms measured), and `--hardware cpu` re-measured this machine on every call
    (0.37 then 0.04 TFLOP/s, scale 9.5 then 1.87). Now: the measured context and batch sizes, the nominal
    CPU scaled to the measured T_verif, the same plan on every call."""
    from pathlib import Path

    from speedbench.results.load import load

    baseline = Path(__file__).resolve().parents[3] / "results" / "baselines" / "ci-default"
    ok = load([str(baseline)]).ok
    plans = []
    for _ in range(2):
        assert main(["plan", "--results", str(baseline), "--hardware", "cpu", "--json"]) == 0
        plans.append(json.loads(capsys.readouterr().out))
    first, second = plans
    assert first["hardware"] == second["hardware"] and first["calibration"] == second["calibration"]
    assert first["best"] == second["best"]
    assert first["calibration"]["applied"]
    assert {b["batch"] for b in first["best"]} == set(ok.batch_size)
    assert first["best"][0]["context"] == ok.context_tokens.median() < 200  # not 1,024
    modelled = first["best"][0]["t_verify_base_s"] * 1e3
    measured = float(ok.t_verify_ms_baseline.median())
    assert 0.5 < modelled / measured < 2, (modelled, measured)
    assert any("as measured in the results" in n for n in first["notes"])
    assert main(["plan", "--results", str(baseline), "--hardware", "cpu", "--context", "1024", "--batch", "1,8",
                 "--json"]) == 0
    given = json.loads(capsys.readouterr().out)
    assert {b["batch"] for b in given["best"]} == {1, 8} and given["best"][0]["context"] == 1024
