"""Other tools' result files in and out (docs/interop.md).

In: ``speedbench import`` reads a baseline/speculative pair of another client's result files per
load point (``vllm bench serve --save-result [--save-detailed]``, AIPerf's
``profile_export_aiperf.json`` and its per-record ``profile_export.jsonl``) into ordinary cells
(:mod:`.importer`, through ``pipeline.cells.assemble_cell`` and the results store). Each reader
(:mod:`.vllm_bench`, :mod:`.aiperf`) turns one file into a :class:`.model.ToolRun`.

Out: ``speedbench export`` writes a results folder in the SPEED-Bench tool's run-folder layout,
as InferenceX golden-AL YAML, or as a tidy CSV (:mod:`.export`).
"""
