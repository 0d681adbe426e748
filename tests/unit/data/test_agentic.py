"""Agentic trajectories: cut before each assistant turn, the context grows, bad records name file and line."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from speedbench.data import DatasetError
from speedbench.data.agentic import turn_of
from speedbench.data.loader import load_requests
from speedbench.data.spec import DatasetSpec, datasets_dir
from speedbench.metrics.trajectory import turn_rows
from speedbench.records import RequestRecord

TRAJ = {"trajectory_id": "t", "messages": [
    {"role": "system", "content": "tools: read(id)"}, {"role": "user", "content": "What does passage 3 say?"},
    {"role": "assistant", "content": '{"tool": "read", "arguments": {"id": 3}}'},
    {"role": "tool", "name": "read", "content": "passage 3: the ovens are warm by four."},
    {"role": "assistant", "content": "The ovens are warm by four."}]}


def write(tmp_path, *records):
    path = tmp_path / "t.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_a_trajectory_is_cut_before_each_assistant_turn_with_the_trajectory_so_far(tmp_path):
    reqs = load_requests(DatasetSpec(source="agentic", path=str(write(tmp_path, TRAJ))))
    assert [r.request_id for r in reqs] == ["t@turn1", "t@turn2"] and [turn_of(r.request_id) for r in reqs] == [1, 2]
    one, two = (r.turns[0] for r in reqs)
    assert "What does passage 3 say?" in one and "passage 3: the ovens" not in one
    assert two.startswith(one.rsplit("\n\n[assistant]\n(write", 1)[0])  # the later cut extends the earlier
    assert '"tool": "read"' in two and "[tool result: read]\npassage 3" in two
    assert "The ovens are warm by four." not in two  # the turn it asks for is not in its prompt
    assert all(r.category == "agentic" and len(r.turns) == 1 for r in reqs)


def test_the_shipped_set_grows_its_context_turn_by_turn_and_the_generator_reproduces_it(tmp_path):
    reqs = load_requests(DatasetSpec(source="agentic", path="agentic/mini.jsonl"))
    by_traj = {}
    for r in reqs:
        by_traj.setdefault(r.request_id.split("@")[0], []).append(len(r.turns[0]))
    assert len(by_traj) >= 4 and all(len(v) >= 3 and v == sorted(set(v)) for v in by_traj.values())
    out = tmp_path / "mini.jsonl"
    subprocess.run([sys.executable, "scripts/make_agentic_mini.py", "--out", str(out)], check=True,
                   capture_output=True, cwd=Path(__file__).resolve().parents[3])
    assert out.read_bytes() == (datasets_dir() / "agentic" / "mini.jsonl").read_bytes()


@pytest.mark.parametrize("bad, where", [
    ({"messages": TRAJ["messages"]}, "trajectory_id"),
    ({"trajectory_id": "x", "messages": [{"role": "user", "content": "hi"}]}, "no assistant turn"),
    ({"trajectory_id": "x", "messages": [{"role": "robot", "content": "hi"}]}, "messages[0]"),
    ({"trajectory_id": "x", "messages": [{"role": "user", "content": ""}, TRAJ["messages"][2]]}, "messages[0].content"),
    ("{not json", "malformed JSON"),
])
def test_a_bad_record_is_one_line_naming_the_file_and_line(tmp_path, bad, where):
    path = write(tmp_path, TRAJ, bad)
    with pytest.raises(DatasetError) as err:
        load_requests(DatasetSpec(source="agentic", path=str(path)))
    (issue,) = err.value.issues
    text = str(issue)
    assert "\n" not in text and text.startswith(f"{path}:2:") and where in text


def rec(rid, role, tpot, drafts=0, accepted=0, prompt=100):
    return RequestRecord(rid, "agentic", "", "", role, prompt, 10, (), 0.0, tpot, 0.0, 10, drafts, 2 * drafts, accepted)


def test_al_and_speedup_per_turn_with_its_context():
    base = [rec(f"t{i}@turn{k}", "baseline", 0.010) for i in range(4) for k in (1, 2)] + [rec("plain", "baseline", 1.0)]
    spec = [rec(f"t{i}@turn1", "spec", 0.005, 4, 4, 100) for i in range(4)] + \
           [rec(f"t{i}@turn2", "spec", 0.0125, 4, 0, 300) for i in range(4)] + [rec("plain", "spec", 1.0)]
    one, two = turn_rows(base, spec)
    assert (one["turn"], one["n"], one["context_tokens"], one["al"]) == (1, 4, 100.0, 2.0)
    assert one["speedup"] == pytest.approx(2.0) and two["speedup"] == pytest.approx(0.8)
    assert two["context_tokens"] == 300.0 and two["al"] == 1.0
