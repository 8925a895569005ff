#!/usr/bin/env bash
# The splash kernels' residuals kept under remat="attention", and ViT-B/16 on splash with its 197
# patches padded to 256 (issue 62), on the TPU machine, from the project's root:
#   bash tools/tpu/remat.sh [bench|tier|all]     (default: all)
#   1. BERT-base 32x512, --remat attention, device mode, without and with dropout (the forward
#      kernels' output and log-sum-exp now kept: no second forward kernel in the backward pass)
#   2. ViT-B/16 batch 128, --remat attention: XLA's path ("auto"), then splash forced
#      (--attention flash: the patches padded to 256), then splash with no remat
#   3. the accelerator tier (tests/accelerator)
# Each command's output goes to $OUT/remat.log (JSON beside it); each has its own time limit.
cd "$(dirname "$0")/../.."
LOG_NAME="remat"
# shellcheck source=tools/tpu/logged.sh
source tools/tpu/logged.sh

a=(python3 benchmarks/accelerator.py --steps 5 --repeats 3 --modes device)
b=("${a[@]}" --cases bert --bert-shapes 32x512 --remat attention)
v=("${a[@]}" --cases vit --vit-batch 128)
PART=${1:-all}
if [ "$PART" != tier ]; then
run 100 bert-nodrop "${b[@]}" --no-dropout --out "$O/remat-bert-nodrop.json"
run 100 bert-dropout "${b[@]}" --out "$O/remat-bert-dropout.json"
run 100 vit-xla "${v[@]}" --remat attention --out "$O/remat-vit-xla.json"
run 100 vit-splash "${v[@]}" --remat attention --attention flash --out "$O/remat-vit-splash.json"
run 100 vit-splash-noremat "${v[@]}" --remat none --attention flash \
  --out "$O/remat-vit-splash-noremat.json"
fi
[ "$PART" = bench ] ||
run 300 tier env JAXFEED_TEST_ACCELERATOR=1 python3 -m pytest -q -m accelerator -p no:xdist \
  -p no:randomly -p no:cacheprovider --durations=10 tests/accelerator
echo "== done in $(($(date +%s) - START)) s" | tee -a "$LOG"
