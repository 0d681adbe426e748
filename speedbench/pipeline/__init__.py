"""The measurement pipeline: cells, the runner that drives every backend, conversations, summaries, sweep verdicts."""
