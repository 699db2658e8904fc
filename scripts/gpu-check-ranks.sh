#!/usr/bin/env bash
# Tensor parallelism on the GPU machine: W ranks as processes sharing one GPU (the first visible),
# joined by the UCX data plane (`ferry check-golden --ranks`), on both tiny checkpoints. Float32:
# the goldens pass at W = 2 and 4 and the logits stay within 1e-4 of W = 1 (same prefill chunks); the owner
# split on and off give the same bits, in float32 and in bf16 (bf16 unpinned: its own bits are
# compared, not the goldens: --tolerance 100). NCCL: one rank over an NCCL communicator gives the
# bits of one rank without it; two ranks on one GPU asked for NCCL are refused, naming the GPU they
# share; with two GPUs visible or more, W = 2 over NCCL (a GPU a rank) gives the bits of W = 2 over
# UCX on one GPU.
#
#   source .device/env.sh && scripts/gpu-check-ranks.sh
#
# Logs go to "$OUT" when set, else to a temporary folder. Exit status: 0 when every run passed.
set -uo pipefail
command -v ferry >/dev/null 2>&1 || { echo "gpu-check-ranks: ferry is not on PATH (source .device/env.sh first)" >&2; exit 2; }
dir=${OUT:-$(mktemp -d /tmp/gpu-check-ranks.XXXXXX)}
mkdir -p "$dir"
status=0
summary=()
source "$(dirname "${BASH_SOURCE[0]}")/check-run.sh"
# The GPUs CUDA will see (nvidia-smi lists them all, CUDA_VISIBLE_DEVICES or not); the runs that
# share a GPU take the first of them.
visible=${CUDA_VISIBLE_DEVICES-}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ -n "$visible" ] && gpus=$(tr ',' '\n' <<<"$visible" | grep -c .)
first=${visible%%,*}
for m in glm-dsa-tiny glm5next-tiny; do
  lg="$dir/logits-$m"
  mkdir -p "$lg"
  golden=(env CUDA_VISIBLE_DEVICES="${first:-0}" ferry check-golden --device cuda --model "tests/data/$m")
  apart=(ferry check-golden --device cuda --model "tests/data/$m")  # rank r on visible GPU r % gpus
  run "$m-f32-w1.txt" "check-golden $m f32 W=1 (logits)" "${golden[@]}" --precision f32 --logits-out "$lg/f32-w1.bin"
  run "$m-f32-w1-chunk7.txt" "check-golden $m f32 W=1 chunk 7 (logits)" "${golden[@]}" --precision f32 \
    --prefill-chunk 7 --logits-out "$lg/f32-w1-c7.bin"
  run "$m-f32-w1-nccl.txt" "check-golden $m f32 W=1 over NCCL = W=1" "${golden[@]}" --precision f32 \
    --dataplane nccl --logits-against "$lg/f32-w1.bin"
  for w in 2 4; do
    run "$m-f32-w$w.txt" "check-golden $m f32 W=$w split off ~ W=1" "${golden[@]}" --precision f32 --ranks "$w" --dataplane ucx \
      --owner-split off --logits-out "$lg/f32-w$w-off.bin" --logits-against "$lg/f32-w1.bin" --logits-within 1e-4
    run "$m-f32-w$w-split.txt" "check-golden $m f32 W=$w split on = off" "${golden[@]}" --precision f32 \
      --ranks "$w" --dataplane ucx --owner-split on --logits-against "$lg/f32-w$w-off.bin"
    run "$m-f32-w$w-split-chunk7.txt" "check-golden $m f32 W=$w split chunk 7 ~ W=1" "${golden[@]}" \
      --precision f32 --ranks "$w" --dataplane ucx --owner-split on --prefill-chunk 7 --logits-against "$lg/f32-w1-c7.bin" \
      --logits-within 1e-4
    run "$m-bf16-w$w.txt" "check-golden $m bf16 W=$w split off (logits)" "${golden[@]}" --precision bf16 \
      --pin-decisions=false --tolerance 100 --ranks "$w" --dataplane ucx --owner-split off --prefill-chunk 7 \
      --logits-out "$lg/bf16-w$w-off.bin"
    run "$m-bf16-w$w-split.txt" "check-golden $m bf16 W=$w split on = off" "${golden[@]}" --precision bf16 \
      --pin-decisions=false --tolerance 100 --ranks "$w" --dataplane ucx --owner-split on --prefill-chunk 7 \
      --logits-against "$lg/bf16-w$w-off.bin"
  done
  refuse() {  # NCCL asked for two ranks sharing GPU 0 (the only one visible): exit 2 naming the GPU
    if "$@"; then echo "ran"; return 1; fi
    grep -q "share GPU GPU-" "$dir/$m-nccl-shared.txt"
  }
  run "$m-nccl-shared.txt" "check-golden $m W=2 on one GPU over NCCL refused" refuse "${golden[@]}" \
    --precision f32 --ranks 2 --dataplane nccl
  if [ "$gpus" -ge 2 ]; then
    for split in off on; do
      run "$m-f32-w2-nccl-$split.txt" "check-golden $m f32 W=2 over NCCL split $split = UCX" "${apart[@]}" \
        --precision f32 --ranks 2 --dataplane nccl --owner-split "$split" --logits-against "$lg/f32-w2-off.bin"
      run "$m-bf16-w2-nccl-$split.txt" "check-golden $m bf16 W=2 over NCCL split $split = UCX" "${apart[@]}" \
        --precision bf16 --pin-decisions=false --tolerance 100 --ranks 2 --dataplane nccl --owner-split "$split" \
        --prefill-chunk 7 --logits-against "$lg/bf16-w2-off.bin"
    done
  fi
done
for f in "$dir"/*.txt; do
  grep -H -E '^(golden:|logits against|ferry check-golden:|rank [0-9])' "$f" | sed "s|^$dir/||"
done
for line in "${summary[@]}"; do echo "  $line"; done
echo "gpu-check-ranks: $([ "$status" -eq 0 ] && echo PASSED || echo FAILED)"
exit "$status"
