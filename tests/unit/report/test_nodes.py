"""The report's "Where the cells ran" table: cells of one results folder measured on two nodes
(a synthetic folder whose cells are relabelled as two Slurm array tasks on two hosts)."""
import json
import shutil

from speedbench.report import build_report
from speedbench.results import ResultsStore

from tests.support.synthetic_results import raw_cells, shared_results


def test_cells_from_two_nodes_are_shown_per_node(tmp_path_factory, tmp_path):
    run = tmp_path / "two-nodes"
    shutil.copytree(shared_results(tmp_path_factory), run)
    files = sorted((run / "cells").glob("*.json"))
    expected = {"node-a": [0, 0, set()], "node-b": [0, 0, set()]}
    for i, path in enumerate(files):
        cell = json.loads(path.read_text())
        node, task = ("node-a", "0") if cell["num_speculative_tokens"] <= 2 else ("node-b", "1")
        cell["extra"]["measured_on"] = {"node": node, "slurm": {"job_id": str(100 + i), "array_job_id": "77", "array_task_id": task}}
        if node == "node-b" and i % 5 == 0:
            cell["status"], cell["error"] = "failed", "RuntimeError: boom"
        path.write_text(json.dumps(cell))
        expected[node][0] += 1
        expected[node][1] += cell["status"] == "ok"
        expected[node][2].add(f"77_{task}")
    ResultsStore(run).rebuild_table()
    assert expected["node-b"][0] > expected["node-b"][1]  # some failed cells on node-b

    out = build_report([run], tmp_path / "report", plots=False)
    rows = {r["node"]: r for r in json.loads(out.json.read_text())["summary"]["nodes"]}
    assert set(rows) == {"node-a", "node-b"}
    for node, (n, ok, jobs) in expected.items():
        assert (rows[node]["cells"], rows[node]["ok"], rows[node]["failed"]) == (n, ok, n - ok)
        assert rows[node]["Slurm jobs"] == ", ".join(sorted(jobs))
    assert "D=1" in rows["node-a"]["configurations"] and "D=1" not in rows["node-b"]["configurations"]
    md = out.markdown.read_text()
    assert "### Where the cells ran (2 nodes)" in md and "node-b" in md


def test_one_node_gets_no_node_table(tmp_path_factory, tmp_path):
    run = shared_results(tmp_path_factory)
    assert len({c["extra"]["measured_on"]["node"] for c in raw_cells(run)}) == 1  # every cell records its host
    out = build_report([run], tmp_path / "report", plots=False)
    assert "Where the cells ran" not in out.markdown.read_text()
    assert "nodes" not in json.loads(out.json.read_text())["summary"]
