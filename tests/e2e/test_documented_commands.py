"""Every `speedbench ...` command line in README.md and docs/ works as written.

Each line is checked the cheap way (Hydra composes the `run` overrides, argparse accepts the
other subcommands' options); the README's own-config and scripting recipes run for real, in
a small form, from an empty folder.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from speedbench.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "datasets" / "README.md"]
PLACEHOLDERS = {"<run-id>": "some-run", "$M": "builtin:tiny-target", "$(date +%Y%m%d)": "20260101",
                "builtin:NAME": "builtin:tiny-target", " FILE": " smoke.jsonl", " DIR": " some-dir"}
EXPECTED_TO_FAIL = {"drafter.num_speculativ_tokens=3"}  # the README shows this typo being refused


def _blocks(text: str) -> list[str]:
    """The shell code blocks (fenced as bash, sh, console or with no language)."""
    fenced = re.findall(r"^```([\w-]*)\n(.*?)^```", text, re.S | re.M)
    return [body for lang, body in fenced if lang in ("", "bash", "sh", "console")]


def documented_commands() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in _blocks(text):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.strip()
                if line.startswith("speedbench "):
                    found.append((doc.name, line))
        prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
        # inline mentions that carry options or overrides are commands too (bare names are not)
        found += [(doc.name, m) for m in re.findall(r"`(speedbench [^`]+)`", prose) if "--" in m or "=" in m or re.search(r"\b[A-Z]{3,}\b", m)]
    return sorted(set(found))


def to_argv(line: str) -> list[str]:
    line = line.split(" # ")[0].split(" | ")[0]
    for key, value in PLACEHOLDERS.items():
        line = line.replace(key, value)
    line = re.sub(r"\[(--[^\]]+)\]", r"\1", line)  # optional parts: include them
    argv = [a for a in shlex.split(line)[1:] if a != "..."]
    return argv


def _first_of_sweep(arg: str) -> str:
    key, sep, value = arg.partition("=")
    if sep and "," in value and not value.startswith(("[", "{")):
        return f"{key}={value.split(',')[0]}"
    return arg


COMMANDS = documented_commands()


def test_the_docs_have_commands_to_check():
    names = {to_argv(line)[0] for _, line in COMMANDS if to_argv(line)}
    assert {"run", "report", "gate", "merge", "plan", "microbench", "fixtures", "data", "round"} <= names


@pytest.mark.parametrize("doc,line", COMMANDS, ids=[f"{d}:{c[:60]}" for d, c in COMMANDS])
def test_documented_command_parses(doc, line, capsys):
    argv = to_argv(line)
    if "--config-dir" in argv:
        pytest.skip("needs the folder its recipe creates: test_readme_own_config_folder_recipe runs it")
    if argv[0] == "run":
        args = [_first_of_sweep(a) for a in argv[1:] if a not in ("-m", "--multirun")]
        if "--json" in args:  # speedbench's own option, not Hydra's
            i = args.index("--json")
            del args[i:i + 2]
        args += ["--cfg", "job"]
        code = main(["run", *args])
        err = capsys.readouterr().err
        if any(bad in line for bad in EXPECTED_TO_FAIL):
            assert code == 2 and len(err.strip().splitlines()) == 1
        else:
            assert code == 0, err
        return
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse refused it (exit 2); --help would be 0
        assert exc.code == 0, capsys.readouterr().err


def _readme_block(marker: str) -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return next(b for b in _blocks(text) if marker in b)


@pytest.fixture
def shell(tmp_path):
    """A shell whose `speedbench` is this checkout's CLI."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "speedbench"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m speedbench.cli "$@"\n')
    shim.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))

    def run(script: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, cwd=work,
                              env=env, timeout=600)

    run.cwd = work
    return run


def test_readme_own_config_folder_recipe(shell):
    proc = shell(_readme_block("--config-dir myconf") + "\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"^math\s+ngram\s+3\s", proc.stdout, re.M), proc.stdout  # category, drafter (method ngram: shown only when it differs), D


def test_readme_scripting_recipe(shell):
    lines = [ln.split(" # ")[0] for ln in _readme_block("--json summary.json").splitlines() if ln.strip()]
    small = [ln.replace("dataset=smoke", "dataset=smoke max_new_tokens=8 dataset.categories=[coding]") for ln in lines]
    small = [ln.replace("| jq '.cells[] | {category, al, speedup}'", "> stdout.json") for ln in small]
    proc = shell("\n".join(small) + "\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((shell.cwd / "summary.json").read_text())
    assert summary["n_cells"] == 1 and summary["cells"][0]["category"] == "coding"
    piped = json.loads((shell.cwd / "stdout.json").read_text())  # `--json -`: stdout is the JSON alone
    assert piped["n_cells"] == 1 and piped["results"] != summary["results"]
    assert (shell.cwd / "results/runs/latest/report/report.md").is_file()
