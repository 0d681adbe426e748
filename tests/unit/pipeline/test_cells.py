"""A cell's row: a cell with failed requests is never stable, whatever its noise."""
from speedbench.config import BackendConfig
from speedbench.config.engine_options import OpenAIOptions
from speedbench.pipeline import runner
from speedbench.pipeline.summary import format_table
from speedbench.records import STATUS_FAILED
from speedbench.results import ResultsStore

from tests.support.openai_loopback import LoopbackServer
from tests.support.sweep_helpers import make_run


def test_a_load_point_with_cut_streams_is_failed_and_never_stable(tmp_path):
    """Every third speculative stream is cut ("incomplete response"); the noise target is set so wide
    that the finished requests alone would pass it. Before: status=failed and stable=true ("stable yes ... failed")."""
    with LoopbackServer() as server:
        opts = OpenAIOptions(base_url=server.url("flaky"), baseline_url=server.url("ok"), model="tiny", timeout_s=5.0)
        run = make_run(tmp_path, "cut", categories=("coding",), max_new_tokens=8,
                       backend=BackendConfig(name="openai", options=opts))
        run.load.concurrency, run.load.num_requests = 2, 6
        pr = run.protocol
        pr.min_repeats = pr.max_repeats = 2
        pr.target_rel_half_width, pr.min_cpu_util, pr.max_load_per_cpu = 1e9, 0.0, 1e9  # noise and load never object
        cells = runner.run_cells(run, progress=False)
    assert cells and all(c.status == STATUS_FAILED for c in cells), [c.error for c in cells]
    assert all(c.stable is False and "request(s) failed" in c.unstable_reason for c in cells)
    table = ResultsStore(tmp_path / "cut").cells()
    assert not table.stable.astype(bool).any()
    printed = format_table(table)
    assert "failed" in printed and not any(" yes " in line and "failed" in line for line in printed.splitlines())
