"""The CLI edge (``speedbench.cli.main``): a path that cannot be used, of any kind, is one line naming it, exit 2.

Real paths on this file system: a name over NAME_MAX and a symlink loop (a read-only mount is the same
``OSError`` path through the CLI); the commands run in this process through ``main``, as the console script does.
"""
from __future__ import annotations

import os

import pytest

from speedbench.cli import main

from tests.support.synthetic_results import shared_results

TOO_LONG = "x" * (os.pathconf("/", "PC_NAME_MAX") + 1)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return shared_results(tmp_path_factory)


@pytest.fixture
def loop(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    return tmp_path / "loop"


def _commands(bad: str, results: str, prompts: str) -> dict[str, list[str]]:
    return {
        "fixtures export": ["fixtures", "export", "builtin:tiny-draft-small", bad],
        "data build": ["data", "build", "--tokenizer", "random:tiny-target", "--out-dir", bad],
        "data validate": ["data", "validate", bad],
        "merge": ["merge", bad, results],
        "wandb-log --dir": ["wandb-log", results, "--mode", "offline", "--dir", bad],
        "schedule --out": ["schedule", results, "--drafter", "ngram", "--out", os.path.join(bad, "schedule.json")],
    }


@pytest.mark.parametrize("kind", ["name over NAME_MAX", "symlink loop"])
@pytest.mark.parametrize("command", list(_commands("", "", "")))
def test_a_path_that_cannot_be_used_is_one_line_and_exit_2(command, kind, results, loop, tmp_path, capsys):
    bad = str(tmp_path / TOO_LONG) if kind == "name over NAME_MAX" else str(loop / "sub")
    argv = _commands(bad, str(results), str(results / "prompts.jsonl"))[command]
    code = main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, (command, code, err[-2000:])
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    assert lines[0].startswith("speedbench") and (TOO_LONG if kind == "name over NAME_MAX" else "loop") in lines[0]
    assert any(why in lines[0] for why in ("File name too long", "symbolic links", "symlink loop")), lines[0]
