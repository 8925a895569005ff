#!/usr/bin/env bash
# The TPU figures of issue 62 (layer stacks stored stacked, cheap dropout, 7B LoRA over int8), in
# two calls of a few minutes each, from the project's root on the TPU machine:
#   bash tools/tpu/issue62.sh encoders   # BERT-base 32x512 with and without dropout, ViT-B/16 b128
#   bash tools/tpu/issue62.sh decoders   # the accelerator tier, the 7B LoRA, Llama 1.1B, decoding
# Each command's output goes to $OUT/issue62-<part>.log (and JSON beside it); every command has a
# time limit of its own so that one stuck case does not take the others' time.
cd "$(dirname "$0")/../.."
LOG_NAME="issue62-$1"
# shellcheck source=tools/tpu/logged.sh
source tools/tpu/logged.sh

bench=(python3 benchmarks/accelerator.py --steps 5 --repeats 3)
case "$1" in
encoders)
  run 150 bert-nodrop "${bench[@]}" --cases bert --bert-shapes 32x512 --no-dropout --remat dots \
    --modes reference,device,trainer --out "$O/bert-nodrop.json"
  run 120 bert-dropout "${bench[@]}" --cases bert --bert-shapes 32x512 --remat dots \
    --modes reference,device --out "$O/bert-dropout.json"
  run 70 bert-dropout-counter "${bench[@]}" --cases bert --bert-shapes 32x512 --remat dots \
    --dropout-prng counter --modes device --out "$O/bert-counter.json"
  run 120 vit "${bench[@]}" --cases vit --vit-batch 128 --remat dots --modes reference,device \
    --out "$O/vit.json"
  ;;
sweep)  # the encoders' variants, one process each: remat policies, the fused kernel, dropout
  b=("${bench[@]}" --cases bert --bert-shapes 32x512 --modes device)
  run 150 bert-none "${b[@]}" --no-dropout --remat none --out "$O/s-bert-none.json"
  run 150 bert-attention "${b[@]}" --no-dropout --remat attention --out "$O/s-bert-attention.json"
  run 150 bert-flash-none "${b[@]}" --no-dropout --attention flash --remat none \
    --out "$O/s-bert-flash-none.json"
  run 150 bert-drop-none "${b[@]}" --remat none --out "$O/s-bert-drop-none.json"
  run 150 vit-none "${bench[@]}" --cases vit --vit-batch 128 --modes device --remat none \
    --out "$O/s-vit-none.json"
  run 150 bert-drop-attention "${b[@]}" --remat attention --out "$O/s-bert-drop-attention.json"
  run 150 vit-attention "${bench[@]}" --cases vit --vit-batch 128 --modes device --remat attention \
    --out "$O/s-vit-attention.json"
  ;;
profile)  # BERT-base 32x512: logits in bfloat16 (default) or float32, a trace of each step
  b=("${bench[@]}" --cases bert --bert-shapes 32x512 --remat attention)
  run 150 bert-nodrop "${b[@]}" --no-dropout --modes reference,device --profile "$O/prof" \
    --out "$O/p-bert-nodrop.json"
  run 100 bert-nodrop-f32 "${b[@]}" --no-dropout --modes device --logits-float32 \
    --out "$O/p-bert-nodrop-f32.json"
  run 150 bert-drop "${b[@]}" --modes reference,device --profile "$O/prof-drop" \
    --out "$O/p-bert-drop.json"
  run 100 bert-drop-f32 "${b[@]}" --modes device --logits-float32 --out "$O/p-bert-drop-f32.json"
  ;;
profile2)  # the step's trace; the fused kernel with long blocks (BERT, Llama 1.1B)
  b=("${bench[@]}" --cases bert --bert-shapes 32x512 --no-dropout --modes device)
  run 120 bert-nodrop "${b[@]}" --remat attention --profile "$O/prof" --out "$O/q-bert.json"
  run 90 bert-flash512 "${b[@]}" --attention flash --flash-block 512 --out "$O/q-bert-f512.json"
  run 90 bert-flash256 "${b[@]}" --attention flash --flash-block 256 --out "$O/q-bert-f256.json"
  l=("${bench[@]}" --steps 3 --cases llama --modes device)
  run 130 llama "${l[@]}" --out "$O/q-llama.json"
  run 110 llama-flash512 "${l[@]}" --attention flash --flash-block 512 --out "$O/q-llama-f512.json"
  ;;
round3)  # erf GELU; splash attention; the tier last
  b=("${bench[@]}" --cases bert --bert-shapes 32x512 --remat attention)
  run 100 bert-nodrop "${b[@]}" --no-dropout --modes reference,device --out "$O/r-bert.json"
  run 75 bert-splash "${b[@]}" --no-dropout --modes device --attention flash --fused-kernel splash \
    --flash-block 512 --out "$O/r-bert-splash.json"
  run 100 bert-drop "${b[@]}" --modes reference,device --out "$O/r-bert-drop.json"
  run 90 llama-splash "${bench[@]}" --steps 3 --cases llama --modes device --attention flash \
    --fused-kernel splash --flash-block 512 --out "$O/r-llama-splash.json"
  run 100 vit "${bench[@]}" --cases vit --vit-batch 128 --remat dots --modes reference,device \
    --out "$O/r-vit.json"
  run "${TIER_S:-120}" tier env OUT="$O" bash tools/tpu/run_accelerator_tests.sh
  ;;
round4)  # the tier first (splash in it); ViT-B/16 b128; Llama 1.1B with splash; counter-hash dropout
  run "${TIER_S:-200}" tier env OUT="$O" bash tools/tpu/run_accelerator_tests.sh
  run 110 vit "${bench[@]}" --cases vit --vit-batch 128 --remat attention --modes reference,device \
    --out "$O/t-vit.json"
  run 100 llama-splash "${bench[@]}" --steps 3 --cases llama --modes device --attention flash \
    --fused-kernel splash --flash-block 512 --out "$O/t-llama-splash.json"
  run 80 bert-drop-counter "${bench[@]}" --cases bert --bert-shapes 32x512 --remat attention \
    --modes device --dropout-prng counter --out "$O/t-bert-counter.json"
  ;;
round5)  # boolean keep mask saved (dropout); splash by "auto" (BERT, Llama); the 7B LoRA on splash
  b=("${bench[@]}" --cases bert --bert-shapes 32x512 --remat attention --modes device)
  run 80 bert-drop "${b[@]}" --out "$O/u-bert-drop.json"
  run 100 llama "${bench[@]}" --steps 3 --cases llama --modes device --out "$O/u-llama.json"
  run 140 lora-7b python3 benchmarks/lora.py --case 7b --steps 5 --out "$O/u-lora-7b.json"
  run 80 bert-nodrop "${b[@]}" --no-dropout --out "$O/u-bert.json"
  ;;
round6)  # the tier on the new defaults; decoding; ViT's trace
  run "${TIER_S:-180}" tier env OUT="$O" bash tools/tpu/run_accelerator_tests.sh
  run 100 generate "${bench[@]}" --cases generate --modes device --gen-batches 1 \
    --out "$O/v-generate.json"
  run 100 vit "${bench[@]}" --cases vit --vit-batch 128 --remat attention --modes device \
    --profile "$O/vit-prof" --out "$O/v-vit.json"
  ;;
traces)  # next: where decoding's 0.33 ms a token and dropout's 21 ms a step go
  run 120 generate "${bench[@]}" --cases generate --modes device --gen-batches 1 \
    --profile "$O/gen-prof" --out "$O/w-generate.json"
  run 120 bert-drop "${bench[@]}" --cases bert --bert-shapes 32x512 --remat attention \
    --modes device --profile "$O/drop-prof" --out "$O/w-bert-drop.json"
  ;;
decode)  # decoding's layers: scanned over the stacks (default), a loop over slices, the old list
  g=("${bench[@]}" --cases generate --modes device --gen-batches 1)
  run 90 gen-scan "${g[@]}" --out "$O/x-gen-scan.json"
  run 90 gen-loop "${g[@]}" --no-scan --out "$O/x-gen-loop.json"
  run 90 gen-list "${g[@]}" --unstacked --no-scan --out "$O/x-gen-list.json"
  run 90 gen-unroll2 "${g[@]}" --unroll 2 --out "$O/x-gen-unroll2.json"
  run 90 gen-b16 "${bench[@]}" --cases generate --modes device --gen-batches 16 \
    --out "$O/x-gen-b16.json"
  run 120 bert-nodrop "${bench[@]}" --cases bert --bert-shapes 32x512 --remat attention \
    --modes device --no-dropout --profile "$O/nodrop-prof" --out "$O/x-bert-nodrop.json"
  ;;
layout)  # decoding as jaxfeed generate lays the layers out (a list on the chip) and stacked
  g=("${bench[@]}" --cases generate --modes device)
  run 100 gen-layout-b1 "${g[@]}" --gen-batches 1 --out "$O/l-gen-b1.json"
  run 60 gen-stacked-b1 "${g[@]}" --gen-batches 1 --stacked-decode --out "$O/l-gen-stacked-b1.json"
  run 100 gen-layout-b16 "${g[@]}" --gen-batches 16 --out "$O/l-gen-b16.json"
  ;;
traces2)  # decoding's fusions with the layers stored stacked and as the old list; BERT's step
  g=("${bench[@]}" --cases generate --modes device --gen-batches 1)
  run 110 gen-list "${g[@]}" --unstacked --no-scan --profile "$O/list-prof"
  run 60 gen-scan "${g[@]}" --profile "$O/scan-prof"
  run 100 bert-nodrop "${bench[@]}" --cases bert --bert-shapes 32x512 --remat attention \
    --modes device --no-dropout --profile "$O/nodrop-prof"
  # only the perfetto traces and the HLO come back (the device tool returns a few files)
  rm -rf "$O"/*/*/plugins
  find "$O" \( -name "*.xplane.pb" -o -name "runsc*.trace.json.gz" \) -delete
  ;;
sweep-decoders)  # Llama 1.1B at 2048 (XLA and the fused kernel), decoding, then the tier
  l=("${bench[@]}" --steps 3 --cases llama --modes device)
  run 150 llama-full "${l[@]}" --out "$O/s-llama-full.json"
  run 120 llama-flash-full "${l[@]}" --attention flash --out "$O/s-llama-flash-full.json"
  run 120 llama-flash-dots "${l[@]}" --attention flash --remat dots --out "$O/s-llama-flash-dots.json"
  run 120 generate "${bench[@]}" --cases generate --modes device --gen-batches 1,16 \
    --out "$O/s-generate.json"
  run 200 tier env OUT="$O" bash tools/tpu/run_accelerator_tests.sh
  ;;
decoders)
  run 180 tier env OUT="$O" bash tools/tpu/run_accelerator_tests.sh
  run 130 lora-7b python3 benchmarks/lora.py --case 7b --steps 5 --out "$O/lora-7b.json"
  run 150 generate "${bench[@]}" --cases generate --modes device --gen-batches 1 \
    --out "$O/generate.json"
  run 70 llama "${bench[@]}" --steps 3 --cases llama --modes device --out "$O/llama.json"
  ;;
*)
  echo "usage: bash tools/tpu/issue62.sh encoders|decoders" >&2
  exit 2
  ;;
esac
echo "== done in $(($(date +%s) - START)) s" | tee -a "$LOG"
