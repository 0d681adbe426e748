"""W&B run names carry the load point, so two load points of one configuration are two names (issue 35 item 3)."""
from speedbench.loggers.payload import run_name

ROW = {"drafter": "ngram", "num_speculative_tokens": 2, "batch_size": 1, "category": "all"}


def test_two_load_points_get_two_run_names():
    assert run_name({**ROW, "concurrency": 1}) == "ngram D=2 B=1 C=1 all"
    assert run_name({**ROW, "concurrency": 4}) == "ngram D=2 B=1 C=4 all"
    assert run_name({**ROW, "concurrency": -1, "request_rate": float("inf")}) == "ngram D=2 B=1 all"
