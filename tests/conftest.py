import os

import pytest

from speedbench import models
from speedbench.engine.clock import Clock


@pytest.fixture(scope="session")
def tiny_target():
    return models.load_model("random:tiny-target")


@pytest.fixture(scope="session")
def tiny_draft():
    return models.load_model("random:tiny-draft")


@pytest.fixture
def clock():
    return Clock("cpu")


@pytest.fixture(scope="session")
def engine_models(tmp_path_factory):
    """The tiny target and draft as folders every engine loads (vLLM cannot load ``random:`` presets)."""
    from speedbench.models import export, local_dir

    from .support.engine_support import TINY_DRAFT, TINY_TARGET

    root = tmp_path_factory.mktemp("engine-models")
    return {
        name: str(export(path, root / name)) if path.startswith("random:") else local_dir(path)
        for name, path in (("target", TINY_TARGET), ("draft", TINY_DRAFT))
    }


@pytest.fixture(scope="session")
def vllm_backend(engine_models):
    """One vLLM backend (CPU) on the exported tiny target for every module that needs one: its engines
    are the slow part (tens of seconds each on 2 cores) and stay alive between modules (an LRU of
    three, ``max_engines=3``), so unit/metrics/test_timing_split finds the baseline and draft-model engines
    engine/test_agreement left and starts none. ``profile_split`` on, as ``auto`` is on a CPU."""
    from .support.engine_support import make_backend

    backend = make_backend("vllm", engine_models["target"], {"max_engines": 3, "profile_split": "true"})
    yield backend
    backend.close()


@pytest.fixture(autouse=True)
def _speedbench_loggers_enabled():
    """An in-process `speedbench run` with `hydra/job_logging=disabled` applies a logging config that
    disables every logger existing at that moment; a later test that reads speedbench's warnings
    (caplog) would then see none, depending on the order the tests ran in."""
    import logging

    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("speedbench") and isinstance(logger, logging.Logger):
            logger.disabled = False
    yield


@pytest.fixture(autouse=True)
def _sigint_as_python_sets_it(request):
    """Every test starts with Python's own SIGINT handler and a test that leaves another one behind is
    named (a handler left as SIG_IGN is inherited by every process a later test starts, so Ctrl-C
    tests far away would fail)."""
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    left = signal.getsignal(signal.SIGINT)
    if left is not signal.default_int_handler:
        import sys

        print(f"\n{request.node.nodeid} left SIGINT handled by {left!r}", file=sys.__stderr__)
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (``-n 2 --dist loadfile``, pyproject's addopts): a module at a time per
    worker, the modules of the session's vLLM engines together (``support/workers.py``)."""
    if config.getvalue("dist") == "loadfile":
        from .support.workers import ModuleScheduling

        return ModuleScheduling(config, log)
    return None


@pytest.fixture(scope="module", autouse=True)
def _alone_where_timed(request, tmp_path_factory):
    """A module marked ``alone`` runs with no other test beside it (it asserts a verdict measured from
    wall-clock timings); every other module shares the machine with the other worker. No-op without
    xdist."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    folder = tmp_path_factory.getbasetemp().parent  # the run's folder, shared by its workers
    from .support.workers import hold

    with hold(folder, exclusive=request.node.get_closest_marker("alone") is not None):
        yield
