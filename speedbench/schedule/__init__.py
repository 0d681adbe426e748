"""Draft length per load: pick the best D per load point from a sweep, emit vLLM's schedule, verify it.

``pick`` reads the cells of a sweep over load x D (x context bucket) and chooses K per load value;
``verify`` compares cells that ran a schedule with the static-D cells at the same load points.
Nothing here runs an engine.
"""
