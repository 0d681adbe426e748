# Sourced by gate-ci.sh and update-baseline.sh: run from the repo root, import this checkout,
# one OpenMP thread (tiny models stall with more on a shared CPU), no W&B.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export WANDB_MODE=disabled
baseline=results/baselines/ci-default
