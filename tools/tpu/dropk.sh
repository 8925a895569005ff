#!/usr/bin/env bash
# Attention dropout inside the fused splash kernel (issue 62, item 2), on the TPU machine, from the
# project's root:   bash tools/tpu/dropk.sh
#   1. correctness: the fused dropout kernel (the chip's generator and the hash) against XLA's
#      path given the kernel's own keep mask, forward and q/k/v gradients, bfloat16 tolerances
#      (tests/accelerator/test_fused_dropout_tpu.py)
#   2. BERT-base 32x512, device mode, --remat attention: with dropout (the fused kernel, the new
#      default) and without dropout
#   3. the same with dropout on XLA's path (--attention-dropout xla: the old step), and with the
#      fused dropout's bits from the hash instead of the generator (--dropout-bits hash)
# Each command's output goes to $OUT/dropk.log (JSON beside it); each has its own time limit.
cd "$(dirname "$0")/../.."
LOG_NAME="dropk"
# shellcheck source=tools/tpu/logged.sh
source tools/tpu/logged.sh

run 150 correctness env JAXFEED_TEST_ACCELERATOR=1 python3 -m pytest -q -m accelerator \
  -p no:xdist -p no:randomly -p no:cacheprovider --durations=5 \
  tests/accelerator/test_fused_dropout_tpu.py
b=(python3 benchmarks/accelerator.py --steps 5 --repeats 3 --cases bert --bert-shapes 32x512
  --remat attention --modes device)
run 100 bert-dropout-fused "${b[@]}" --out "$O/dropk-bert-fused.json"
run 100 bert-nodrop "${b[@]}" --no-dropout --out "$O/dropk-bert-nodrop.json"
run 100 bert-dropout-xla "${b[@]}" --attention-dropout xla --out "$O/dropk-bert-xla.json"
run 80 bert-dropout-fused-hash "${b[@]}" --dropout-bits hash --out "$O/dropk-bert-hash.json"
echo "== done in $(($(date +%s) - START)) s" | tee -a "$LOG"
