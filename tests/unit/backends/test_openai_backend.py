"""``backend=openai`` measured end to end against a loopback server: with vLLM's /metrics, a
"speculative" server that drafts nothing is never recorded as a measurement of the drafter."""
import pytest

from speedbench.config import BackendConfig
from speedbench.config.engine_options import OpenAIOptions
from speedbench.pipeline import runner
from speedbench.records import STATUS_FAILED, STATUS_OK

from tests.support.openai_loopback import LoopbackServer
from tests.support.sweep_helpers import make_run


@pytest.fixture(scope="module")
def server():
    with LoopbackServer() as srv:
        yield srv


def measure(server, root, speculative: str, baseline: str = "plain_vllm~baseline"):
    opts = OpenAIOptions(base_url=server.url(speculative), baseline_url=server.url(baseline), model="tiny", timeout_s=5.0)
    run = make_run(root, speculative, categories=("coding",), max_new_tokens=8,
                   backend=BackendConfig(name="openai", options=opts))
    run.protocol.min_repeats = run.protocol.max_repeats = 1
    return runner.run_cells(run, progress=False)


def test_a_speculative_url_that_serves_no_speculation_fails_the_cell_naming_the_url(server, tmp_path):
    """Both URLs one plain vLLM server: 0 drafts on /metrics. Before: status ok, drafter ngram D=4, AL 1.0."""
    cells = measure(server, tmp_path, "plain_vllm")
    assert cells and all(c.status == STATUS_FAILED for c in cells)
    assert all(server.url("plain_vllm") in c.error and "drafted nothing" in c.error for c in cells)


def test_a_speculative_server_whose_counters_move_is_measured(server, tmp_path):
    cells = measure(server, tmp_path, "spec_vllm")
    assert cells and all(c.status == STATUS_OK for c in cells), [c.error for c in cells]
    assert all(c.extra["counters"]["drafts"] > 0 for c in cells)
