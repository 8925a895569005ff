#!/usr/bin/env bash
# The short-sequence attention kernel (jaxfeed.models.kernels.short_attention) on the TPU machine,
# from the project's root:   bash tools/tpu/short.sh [bench|tier|all]   (default: all)
#   1. ViT-B/16 batch 128, remat="attention": the plain JAX reference and jaxfeed's step with the
#      kernel ("auto"), profiled (where the step's time goes: tools/tpu/trace_summary.py), then
#      XLA's path (--no-short-kernel) in the same session
#   2. BERT-base 32x128 without dropout, the kernel and XLA's path
#   3. the accelerator tier (tests/accelerator)
# Each command's output goes to $OUT/short.log (JSON beside it); each has its own time limit.
cd "$(dirname "$0")/../.."
LOG_NAME="short"
# shellcheck source=tools/tpu/logged.sh
source tools/tpu/logged.sh

a=(python3 benchmarks/accelerator.py --steps 5 --repeats 3 --remat attention)
v=("${a[@]}" --cases vit --vit-batch 128)
b=("${a[@]}" --cases bert --bert-shapes 32x128 --no-dropout --modes device)
PART=${1:-all}
if [ "$PART" != tier ]; then
run 150 vit-short "${v[@]}" --modes reference,device --profile "$O/prof-short" \
  --out "$O/short-vit.json"
run 60 vit-trace python3 tools/tpu/trace_summary.py "$O/prof-short/vit" --top 30
run 100 vit-xla "${v[@]}" --modes device --no-short-kernel --out "$O/short-vit-xla.json"
run 80 bert128-short "${b[@]}" --out "$O/short-bert128.json"
run 80 bert128-xla "${b[@]}" --no-short-kernel --out "$O/short-bert128-xla.json"
fi
[ "$PART" = bench ] ||
run 360 tier env JAXFEED_TEST_ACCELERATOR=1 python3 -m pytest -q -m accelerator -p no:xdist \
  -p no:randomly -p no:cacheprovider --durations=10 tests/accelerator
echo "== done in $(($(date +%s) - START)) s" | tee -a "$LOG"
