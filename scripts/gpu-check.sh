#!/usr/bin/env bash
# A prepared check for one bare CUDA machine (PyTorch and transformers present, no network):
# installs speedbench's other dependencies from a folder of wheels, then within ~8 minutes on
# one H200 runs, each under its own time limit,
#   1. microbench gemm        (bf16, M = B(1+D))
#   2. microbench attention   (bf16, decode attention over G(1+D))
#   3. microbench verify      (bf16, a random-weight target with Llama-3.1-8B's layer shapes)
#   4. the reference engine's default pair (tiny target + tiny draft) on CUDA, with the
#      draft/verify split (device-synced timers), baseline and speculative, B = 1 and 4
#   5. speedbench report over the results folder
# and leaves everything in OUT (default gpu-check-results/): microbench/, runs/, report/, logs/.
#
# Fill the wheel folder beforehand on a machine with network (same Python version and platform):
#   pip download -d wheels hydra-core omegaconf hydra-submitit-launcher submitit pandas pyarrow \
#       datasets safetensors tokenizers tqdm matplotlib httpx wandb numpy scipy pytest
# (torch and transformers are expected on the GPU machine already.)
#
#   bash scripts/gpu-check.sh [--wheels DIR] [--out DIR]
#   bash scripts/gpu-check.sh --dry-run [--out DIR]   # CPU, tiny sizes, no install (CI runs this)
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
WHEELS="wheels"; OUT="gpu-check-results"; DRY=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --wheels) WHEELS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
PACKAGES=(hydra-core omegaconf hydra-submitit-launcher submitit pandas pyarrow datasets safetensors tokenizers
          tqdm matplotlib httpx wandb numpy)
mkdir -p "$OUT/logs"
OUT="$(cd "$OUT" && pwd)"
export WANDB_MODE=disabled HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

if [[ $DRY == 1 ]]; then
  DEV=cpu; DT=float32; TARGET=random:tiny-target; LIMIT=120
  GEMM=(--n 256 --k 256 --batch 1,4 --depth 0,2 --repeats 3 --warmup 1)
  ATTN=(--context 256 --kv-heads 2 --head-dim 64 --batch 1 --group 2 --depth 0,2 --repeats 3 --warmup 1)
  VERIFY=(--context 64 --batch 1 --depth 0,2 --repeats 3 --warmup 1)
  RUN=(target.path=random:tiny-target drafter=tiny_draft drafter.model=random:tiny-draft max_new_tokens=8
       dataset=smoke "dataset.categories=[coding]" batch_size=1 protocol.min_repeats=1 protocol.max_repeats=1)
else
  DEV=cuda; DT=bfloat16; TARGET=random:llama-3.1-8b-layers; LIMIT=150
  "$python" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))"
  if ! "$python" -c "import hydra, pandas, pyarrow, httpx, matplotlib" 2>/dev/null; then
    "$python" -m pip install --no-index --find-links "$WHEELS" "${PACKAGES[@]}" > "$OUT/logs/pip.log" 2>&1
  fi
  "$python" -m pip install --no-index --no-deps --no-build-isolation -e . >> "$OUT/logs/pip.log" 2>&1 \
    || export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  GEMM=(--batch 1,8,32,64 --depth 0-8 --repeats 20)
  ATTN=(--context 8192 --kv-heads 8 --head-dim 128 --batch 1,8 --group 4 --depth 0-8,15,31 --repeats 20)
  VERIFY=(--context 1024 --batch 1,8,32 --depth 0,1,2,4,8 --repeats 10)
  RUN=(target.dtype=bfloat16 dataset=mini max_new_tokens=64 "batch_size=1,4" -m)
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0
step() {  # name, limit seconds, command...
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS
  if timeout "$limit" "$@" > "$OUT/logs/$name.log" 2>&1; then
    echo "gpu-check: $name ok ($((SECONDS - t0)) s)"
  else
    echo "gpu-check: $name FAILED (rc $?, $((SECONDS - t0)) s; see $OUT/logs/$name.log)"; status=1
  fi
}
MB=("$python" -m speedbench.cli microbench)
step gemm "$LIMIT" "${MB[@]}" gemm --results-dir "$OUT" --device "$DEV" --dtype "$DT" "${GEMM[@]}"
step attention "$LIMIT" "${MB[@]}" attention --results-dir "$OUT" --device "$DEV" --dtype "$DT" "${ATTN[@]}"
step verify "$LIMIT" "${MB[@]}" verify --results-dir "$OUT" --device "$DEV" --dtype "$DT" --target "$TARGET" "${VERIFY[@]}"
step engine "$LIMIT" "$python" -m speedbench.cli run backend=torch backend.device="$DEV" results_dir="$OUT/runs" \
  run_id=gpu-check "${RUN[@]}"
if [[ -d "$OUT/runs/gpu-check" ]]; then
  step report 120 "$python" -m speedbench.cli report "$OUT/runs/gpu-check" "$OUT" --out "$OUT/report" --no-plots
fi
echo "gpu-check: results in $OUT (status $status)"
exit $status
