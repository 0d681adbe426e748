"""The results store: no write replaces a measured cell with a failed one, and a row never sits
beside another attempt's records. Measured for real against a loopback OpenAI-compatible server."""
import json
import logging
from dataclasses import replace

from speedbench.config import BackendConfig
from speedbench.config.engine_options import OpenAIOptions
from speedbench.pipeline import runner
from speedbench.records import STATUS_FAILED, STATUS_OK
from speedbench.results import ResultsStore

from tests.support.openai_loopback import LoopbackServer
from tests.support.sweep_helpers import make_run

def measure(root, speculative: str, baseline: str, resume: bool = False):
    """One cell; each test's loopback server stopped before the second call: the same URLs, nothing listening."""
    opts = OpenAIOptions(base_url=speculative, baseline_url=baseline, model="tiny", timeout_s=5.0, connect_timeout_s=2.0)
    run = make_run(root, "again", categories=("coding",), max_new_tokens=8, backend=BackendConfig(name="openai", options=opts))
    run.protocol.min_repeats = run.protocol.max_repeats = 1
    run.resume = resume
    return runner.run_cells(run, progress=False)


def snapshot(store: ResultsStore, cid: str) -> dict:
    paths = [store.cell_path(cid), store.requests_path(cid), *(store.table_path(f) for f in ("csv", "jsonl"))]
    return {p.name: p.read_bytes() for p in paths}


def test_a_failed_re_measurement_keeps_the_measured_cell_and_logs_the_failure(tmp_path, caplog):
    """Before: the failed attempt overwrote cells/<id>.json and the tables; requests/<id>.parquet kept the earlier run's."""
    with LoopbackServer() as server:
        urls = server.url("ok"), server.url("ok~baseline")
        measured = measure(tmp_path, *urls)
    assert [c.status for c in measured] == [STATUS_OK]
    store, cid = ResultsStore(tmp_path / "again"), measured[0].cell_id
    before = snapshot(store, cid)
    with caplog.at_level(logging.WARNING, logger="speedbench.results.store"):
        again = measure(tmp_path, *urls)  # resume=false, the servers are down
    assert [(c.cell_id, c.status) for c in again] == [(cid, STATUS_FAILED)]
    assert snapshot(store, cid) == before  # the row, its records and the tables are the measured run's
    assert store.finished(cid)
    failures = [json.loads(line) for line in store.failures_path.read_text().splitlines()]
    assert [f["cell_id"] for f in failures] == [cid] and failures[0]["error"] == again[0].error
    assert any(cid in r.getMessage() and "kept" in r.getMessage() for r in caplog.records)


def test_a_failed_cell_without_records_drops_an_earlier_attempts_records(tmp_path):
    """A server that cannot start writes the row alone (``failed_cell``): the earlier failed attempt's
    records must not stay beside it as if they were this attempt's."""
    with LoopbackServer() as server:
        first = measure(tmp_path, server.url("flaky"), server.url("ok"))  # streams cut: failed, with records
    store, cid = ResultsStore(tmp_path / "again"), first[0].cell_id
    assert first[0].status == STATUS_FAILED and store.requests_path(cid).exists()
    assert store.write_cell(replace(first[0], error="start: the baseline server did not come up"))  # no records
    assert store.cell(cid)["error"] == "start: the baseline server did not come up"
    assert not store.requests_path(cid).exists() and not store.failures_path.exists()
