#!/usr/bin/env bash
# Regenerate the CI gate's baseline results/baselines/ci-default/ from the current code and
# embedded default models (run it on the machine class CI uses, after the models or the
# CI benchmark change, and commit the result with the reason in the message).
#
#   bash scripts/update-baseline.sh
set -euo pipefail
source "$(dirname "$0")/ci-env.sh"
# The baseline's provenance names the commit it was measured at, and scripts/gate-ci.sh re-measures
# that commit's code as the speedup reference: uncommitted code would measure one thing and name another.
dirty=$(git status --porcelain --untracked-files=no -- speedbench conf hydra_plugins setup.py pyproject.toml)
if [ -n "$dirty" ]; then
  echo "update-baseline: commit these first (the baseline names the commit gate-ci.sh re-measures): $(echo $dirty | cut -c1-200)" >&2
  exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# a relative results_dir, so that no machine path lands in the committed provenance
(cd "$tmp" && python3 -m speedbench.cli run +experiment=ci_gate results_dir=runs hydra/job_logging=disabled)
# keep the results store only (cells, per-request and per-step records, tables, provenance)
cp -r "$tmp/runs/ci-default" "$tmp/baseline"
rm -rf "$tmp/baseline/.hydra" "$tmp/baseline/wandb" "$tmp/baseline/.locks"  # .locks: this machine's run locks
python3 - "$tmp/baseline" <<'PY'
import sys
from speedbench.results import ResultsStore
table = ResultsStore(sys.argv[1]).cells()
bad = table[table.status != "ok"]
if bad.empty:
    sys.exit(0)
print(f"update-baseline: {len(bad)} cell(s) failed; baseline not updated", file=sys.stderr)
sys.exit(1)
PY
mkdir -p "$(dirname "$baseline")"
rm -rf "$baseline.new"
mv "$tmp/baseline" "$baseline.new"
rm -rf "$baseline"
mv "$baseline.new" "$baseline"
echo "baseline written to $baseline:"
python3 -c "import sys; from speedbench.results import ResultsStore; from speedbench.pipeline.summary import format_table; print(format_table(ResultsStore(sys.argv[1]).cells()))" "$baseline"
