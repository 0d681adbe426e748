"""``speedbench fixtures export NAME DIR``: an embedded model as a folder a server loads (docs' two-server recipe)."""
import argparse
import json

from speedbench.fixtures import MODELS_DIR
from speedbench.fixtures.cli import main


def export(name, out):
    return main(argparse.Namespace(fixtures_command="export", name=name, dir=str(out)))


def test_a_shipped_model_is_copied_bit_for_bit(tmp_path, capsys):
    assert export("tiny-draft-small", tmp_path / "d") == 0
    src = MODELS_DIR / "tiny-draft-small"
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == sorted(p.name for p in src.iterdir())
    assert (tmp_path / "d" / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    assert export("builtin:tiny-target", tmp_path / "t") == 0
    assert json.loads((tmp_path / "t" / "config.json").read_text())["model_type"]


def test_unknown_names_and_full_folders_are_refused_in_one_line(tmp_path, capsys):
    assert export("no-such-model", tmp_path / "x") == 2
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    assert export("tiny-target", tmp_path / "full") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no-such-model" in err[0] and "not an empty folder" in err[1]
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
