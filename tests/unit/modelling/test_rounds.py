"""`speedbench round`: the worked example of docs/guidelines.md section 3.3, and the bonus token."""
import pytest

from speedbench.cli import main
from speedbench.modelling.rounds import RoundInputs, account


def test_worked_example():
    r = account(RoundInputs(depth=4, t_draft_step_ms=5, t_verify_ms=45, t_target_step_ms=40, accepted=3))
    assert r.emitted == 4 and not r.bonus
    assert r.draft_cost_ms == 20 and r.round_cost_ms == 65 and r.comparison_cost_ms == 160
    assert round(r.speedup, 2) == 2.46


def test_all_accepted_emits_the_bonus_token():
    r = account(RoundInputs(depth=4, t_draft_step_ms=5, t_verify_ms=45, t_target_step_ms=40, accepted=4))
    assert r.emitted == 5 and r.bonus and r.comparison_cost_ms == 200


def test_no_acceptance_can_be_slower_than_plain_decoding():
    r = account(RoundInputs(depth=4, t_draft_step_ms=5, t_verify_ms=45, t_target_step_ms=40, accepted=0))
    assert r.emitted == 1 and r.speedup < 1


def test_parallel_drafter_pays_one_step():
    r = account(RoundInputs(depth=4, t_draft_step_ms=5, t_verify_ms=45, t_target_step_ms=40, accepted=3, parallel=True))
    assert r.draft_cost_ms == 5 and r.round_cost_ms == 50


def test_inputs_are_checked():
    with pytest.raises(ValueError, match="accepted"):
        RoundInputs(depth=2, t_draft_step_ms=1, t_verify_ms=1, t_target_step_ms=1, accepted=3)


def test_cli(capsys):
    assert main(["round", "-D", "4", "--draft-ms", "5", "--verify-ms", "45", "--target-ms", "40", "--accepted", "3"]) == 0
    out = capsys.readouterr().out
    assert "= 4" in out and "160 ms" in out and "65 ms" in out and "2.46x" in out
    assert main(["round", "-D", "4", "--accepted", "4"]) == 0
    assert "bonus" in capsys.readouterr().out
    assert main(["round", "-D", "2", "--accepted", "5"]) == 2


def test_help_lists_the_new_subcommands(capsys):
    main([])
    out = capsys.readouterr().out
    for name in ("report", "plan", "microbench", "round"):
        assert name in out


@pytest.mark.parametrize("argv, named", [
    (["--verify-ms", "0", "--draft-ms", "0"], "cannot be computed"),
    (["-D", "0", "--accepted", "0", "--verify-ms", "0"], "cannot be computed"),
    (["--target-ms", "nan"], "--target-ms nan"),
    (["--target-ms", "inf"], "--target-ms inf"),
    (["--verify-ms", "inf"], "--verify-ms inf"),
    (["--target-ms", "1e308"], "overflows"),  # 4 x 1e308 ms: was "inf / 65 = infx"
    (["--target-ms", "1e308", "--verify-ms", "1e308", "--draft-ms", "1e308"], "overflows"),  # was "nanx"
    (["--target-ms", "1e308", "--verify-ms", "1e-300", "--draft-ms", "0"], "overflows"),  # the division overflows
])
def test_impossible_rounds_are_refused_in_one_line(argv, named, capsys):
    assert main(["round", *argv]) == 2
    out = capsys.readouterr()
    assert out.out == ""  # never "nanx" or "infx -> speculation pays"
    assert named in out.err and len(out.err.strip().splitlines()) == 1
