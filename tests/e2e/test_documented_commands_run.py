"""Every documented command line, run in a small form (test_documented_commands only composes or
parses them).

* ``speedbench run`` lines: each passes ``speedbench run --check`` as written (every job of a
  ``-m`` sweep, prompts, model configs and engine settings; nothing loads), and each one that
  needs only this machine runs for real on one prompt and a few tokens (the first value of
  each sweep), every cell ``ok``. Lines naming cluster paths or launchers are composed only.
* the other subcommands run against a small results folder made once, with the docs'
  placeholders filled in; only what needs a GPU, hours or files that are not here is skipped,
  each with its reason.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from speedbench.cli import main
from speedbench.results import ResultsStore

from .test_documented_commands import COMMANDS, EXPECTED_TO_FAIL, REPO, _first_of_sweep, to_argv

ELSEWHERE = ("/models/", "/shared/", "hydra/launcher=slurm", "--config-dir")  # not on this machine (composed only)
SMALL = ["dataset=smoke", "dataset.categories=[coding]", "dataset.n_requests=1", "max_new_tokens=4", "warmup_batches=0",
         "protocol.min_repeats=1", "protocol.max_repeats=1", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]
# run lines that pass --check here but are run elsewhere in the suite (or cannot run here), with the reason
NOT_RUN_HERE = {
    "backend=vllm": "vLLM starts an engine per configuration (minutes): tests/engine/test_vllm_cli.py and the vLLM engine tests run it",
    "backend=openai": "needs a server: tests/engine/test_vllm_serve.py runs two real ones",
    "hydra/launcher=local": "submitit job processes: tests/e2e/test_submitit_local.py",
    "logger.mode=online": "needs the W&B service",
}
# run lines whose target `speedbench fixtures finetune` builds first (two minutes): a 3-step fine-tune stands in
NEEDS_FINETUNE = "+experiment=finetune_robustness"
# run lines for a CUDA vLLM only: on this CPU build the check refuses every job before anything loads, naming why
CUDA_ONLY = {"+experiment=cost_surface backend=vllm": "is not supported by vLLM on CPU"}
# other subcommands that cannot run here, with the reason
NOT_RUN_OTHER = {
    "microbench": "the documented lines time CUDA kernels (--device cuda)",
    "fixtures train": "a full rebuild takes about 28 minutes, the long family 42 (tests/unit/fixtures/test_fixtures.py "
                      "and test_long_family.py train quick ones)",
    "--preset full": "builds 32k-token prompts by the thousand",
    "--sizes 8k": "96 prompts of 8k tokens",
    "/shared/": "a cluster path",
    "/tmp/gate/": "the folders its same-machine recipe's runs make (tests/unit/gate/test_gate_regressions.py gates such runs)",
    "/tmp/slowed": "the folder its recipe's previous step makes (tests/unit/gate/test_gate_regressions.py gates a slowed run against the baseline)",
    "my.jsonl": "the user's own file",
    "results/runs/sched ": "the folder its recipe's sweep makes (tests/unit/schedule/test_schedule_pick.py checks the verification)",
    "results/runs/load-": "the folders its recipe's load sweeps make (tests/unit/report/test_under_load.py renders the section)",
    "results/runs/draft-cost": "the folder its recipe's 120-cell sweep makes (tests/unit/report/test_sections.py renders the draft-cost section)",
    "results/runs/synthetic-vs-real": "the folder its recipe's script makes (tests/unit/metrics/test_synthetic_vs_real.py "
                                      "renders the section on a real and a synthetic run)",
    "speedbench capacity": "needs an open-loop sweep with an SLO set (minutes): tests/unit/capacity/test_capacity.py "
                           "searches a sweep's folder and checks the command's refusals",
    "question.jsonl": "Spec-Bench's question file (tests/unit/data/test_loaders.py reads the real format)",
}


def _key(arg: str) -> str:
    return arg.partition("=")[0].lstrip("+~")


def small_form(args: list[str], extra: list[str]) -> list[str]:
    """The line's overrides with ``extra`` replacing the same keys (Hydra refuses a key given twice)."""
    keys = {_key(a) for a in extra}
    return [a for a in args if _key(a) not in keys] + extra


def _run_args(line: str) -> list[str]:
    args = to_argv(line)[1:]
    if "--json" in args:
        i = args.index("--json")
        del args[i:i + 2]
    return args


RUN_LINES = [(d, ln) for d, ln in COMMANDS if to_argv(ln)[:1] == ["run"] and not any(e in ln for e in ELSEWHERE)]


@pytest.fixture(scope="module")
def finetune_cache(tmp_path_factory):
    """A speedbench cache holding the fine-tuned target the fine-tune recipe runs on (3 steps, not 200)."""
    from dataclasses import replace

    from speedbench.fixtures.finetune import FinetuneConfig, build

    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPEEDBENCH_CACHE", str(cache))
        build(replace(FinetuneConfig(), steps=3), log=lambda _: None)
    return cache


def _prerequisites(line: str, request, monkeypatch) -> None:
    """What the docs say to build before the line (its recipe's earlier step), built here."""
    if NEEDS_FINETUNE in line:
        monkeypatch.setenv("SPEEDBENCH_CACHE", str(request.getfixturevalue("finetune_cache")))


@pytest.mark.parametrize("doc,line", RUN_LINES, ids=[f"{d}:{c[:60]}" for d, c in RUN_LINES])
def test_documented_run_line_passes_every_check(doc, line, tmp_path, capsys, request, monkeypatch):
    _prerequisites(line, request, monkeypatch)
    args = small_form(_run_args(line), [f"results_dir={tmp_path / 'results'}", "hydra/job_logging=disabled",
                                        "hydra/hydra_logging=disabled"])
    code = main(["run", "--check", *args])
    out, err = capsys.readouterr()
    if any(bad in line for bad in EXPECTED_TO_FAIL):
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        return
    cuda_only = [why for marker, why in CUDA_ONLY.items() if marker in line]
    if cuda_only and not _cuda():
        assert code == 2 and cuda_only[0] in err, err[-3000:]
        return
    assert code == 0, err[-3000:]
    assert "speedbench run --check: ok" in out
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*"))  # nothing written


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


RUNNABLE = [(d, ln) for d, ln in RUN_LINES if not any(m in ln for m in NOT_RUN_HERE)
            and not any(bad in ln for bad in EXPECTED_TO_FAIL) and "--check" not in ln]


@pytest.mark.slow
@pytest.mark.parametrize("doc,line", RUNNABLE, ids=[f"{d}:{c[:60]}" for d, c in RUNNABLE])
def test_documented_run_line_runs_in_a_small_form(doc, line, tmp_path, monkeypatch, capsys, request):
    _prerequisites(line, request, monkeypatch)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    args = [_first_of_sweep(a) for a in _run_args(line) if a not in ("-m", "--multirun")]
    args = small_form(args, [*SMALL, f"results_dir={tmp_path / 'results'}", "run_id=doc"])
    code = main(["run", *args])
    assert code == 0, capsys.readouterr().err[-3000:]
    cells = ResultsStore(tmp_path / "results" / "doc").cells()
    assert len(cells) and (cells.status == "ok").all(), cells.error.tolist()


# ---- the other subcommands --------------------------------------------------------------------------------------
OTHER = [(d, ln) for d, ln in COMMANDS if to_argv(ln)[:1] != ["run"]]
FILL = {"path/to/config.json": "builtin:tiny-target", "path/to/draft/config.json": "builtin:tiny-draft-small",
        "path/to/tokenizer": "builtin:tiny-target", "--tokenizer T": "--tokenizer builtin:tiny-target",
        "RESULTS_DIR": "results/runs/some-run", "--dir DIR": "--dir " + str(REPO / "speedbench" / "fixtures" / "models"),
        "--out-dir datasets/throughput": "--out-dir built",
        # docs/ci-gate.md's history lines read a series kept between CI runs: the committed real one stands in
        "history gate-history": f"history {REPO / 'tests' / 'data' / 'history' / 'flat'}",
        "history DIR": f"history {REPO / 'tests' / 'data' / 'history' / 'flat'}",
        "tests/data/interop/": str(REPO / "tests" / "data" / "interop") + "/"}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A folder laid out as the docs assume: a small run under results/runs (also as latest, a, b,
    sweep-a, sweep-b, candidate, ci-default: the CI benchmark's run id), the committed CI baseline,
    and results/all."""
    root = tmp_path_factory.mktemp("docs")
    runs = root / "results" / "runs"
    two = small_form(SMALL, ["protocol.min_repeats=2", "protocol.max_repeats=2"])  # a measured interval per cell
    assert main(["run", *two, "dataset.categories=[coding,math]", f"results_dir={runs}", "run_id=some-run"]) == 0
    for name in ("a", "b", "sweep-a", "sweep-b", "candidate"):
        shutil.copytree(runs / "some-run", runs / name, symlinks=True)
    shutil.copytree(REPO / "results" / "baselines" / "ci-default", root / "results" / "baselines" / "ci-default")
    shutil.copytree(runs / "some-run", runs / "ci-default", symlinks=True)  # where `run +experiment=ci_gate` writes
    shutil.copytree(runs / "some-run", root / "results" / "baselines" / "baseline", symlinks=True)
    shutil.copytree(runs / "some-run", root / "results" / "all", symlinks=True)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("doc,line", OTHER, ids=[f"{d}:{c[:60]}" for d, c in OTHER])
def test_documented_command_runs(doc, line, workspace, monkeypatch, capsys):
    skip = next((why for marker, why in NOT_RUN_OTHER.items() if marker in line), None)
    if skip:
        pytest.skip(skip)
    for key, value in FILL.items():
        line = line.replace(key, value)
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    argv = to_argv(line)
    code = main(argv)
    err = capsys.readouterr().err
    verdicts = (0, 1, 3, 4, 5) if argv[0] == "gate" else (0,)  # a gate's verdict on these folders: anything but 2
    assert code in verdicts, f"{line}: exit {code}: {err[-3000:]}"
    assert "Traceback" not in err
