"""The run edge: ``speedbench run`` from argv to exit code; the only place that knows Hydra.

* :mod:`.argv`: speedbench's own options out of argv, Hydra's in front; Hydra's error reports as one line;
* :mod:`.app`: compose ``conf/``, run the cells (one run or one job of a sweep), the exit code;
* :mod:`.errors`: the one map from an exception to the lines that say why a run was refused;
* :mod:`.verdict`: the one failure-fraction verdict (``sweep.allowed_failure_frac``);
* :mod:`.sweeps`: a multirun's jobs, expanded and checked before the first one starts;
* :mod:`.callbacks`: the Hydra callback around a multirun (``conf/config.yaml``: ``hydra.callbacks``);
* :mod:`.output`: what an invocation prints and writes once it ends (table, verdict, ``--json``, ``latest``).

Nothing below this package imports Hydra: the pipeline gets a typed ``RunConfig``.
"""
