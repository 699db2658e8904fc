#!/usr/bin/env bash
# One round of the CUDA backend's checks on the GPU machine: the kernel harness (seed 1), the
# CUDA model check of both tiny checkpoints (layer by layer, decode path, batching, pages), then
# `ferry check-golden` on both with --device cuda in both precisions (also with 7-token prefill
# chunks) and --device cpu for comparison, tensor parallelism at W = 2 and 4 on the one GPU
# (check-golden --ranks, with the owner split on and off), the model checks and MLA cases again with
# FERRY_PDL=0 and with --mla-tc-small (the small MLA form), and `ferry generate --device
# cuda`; glm5next-kpool8 (pools of 8, 12 layers) through the model check and check-golden too.
# Every check-golden run replays the reference's recorded selections (the goldens hold them) and
# counts the own choices that differ; float32 runs fail one beyond a near tie. One bf16 run uses
# a copy of the golden without selections, so the bf16 run is pinned to the float32 CUDA run's
# decisions and reports its unpinned run too (bench/results/h200-check-golden-cuda.md says why).
# Meant to run there from the repository root with a device bundle on PATH:
#
#   source .device/env.sh && scripts/gpu-check-golden.sh [--sanitize]
#
# Logs go to "$OUT" when set (the device tool's output folder), else to a temporary folder; a
# summary (one line per run, and every golden prompt line) is printed last. --sanitize adds a
# compute-sanitizer memcheck run of ferry-cuda-model-check on glm5next-tiny (both precisions).
# Exit status: 0 when every run passed, 1 otherwise, 2 on setup errors.
set -uo pipefail

sanitize=0
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    *) echo "usage: $0 [--sanitize]" >&2; exit 2 ;;
  esac
done
for b in ferry ferry-kernel-check ferry-cuda-model-check; do
  command -v "$b" >/dev/null 2>&1 || { echo "gpu-check-golden: $b is not on PATH (source .device/env.sh first)" >&2; exit 2; }
done
dir=${OUT:-$(mktemp -d /tmp/gpu-check-golden.XXXXXX)}
mkdir -p "$dir"
status=0
summary=()
source "$(dirname "${BASH_SOURCE[0]}")/check-run.sh"

run kernel-check.txt "kernel check seed 1" ferry-kernel-check --seed 1
for m in glm-dsa-tiny glm5next-tiny glm5next-kpool8; do
  run "model-check-$m.txt" "cuda model check $m" ferry-cuda-model-check --model "tests/data/$m"
  run "golden-$m-cuda-f32.txt" "check-golden $m cuda f32" ferry check-golden --device cuda --precision f32 --model "tests/data/$m"
  run "golden-$m-cuda-f32-chunk7.txt" "check-golden $m cuda f32 chunk 7" \
    ferry check-golden --device cuda --precision f32 --model "tests/data/$m" --prefill-chunk 7
  run "golden-$m-cuda-bf16.txt" "check-golden $m cuda bf16 (pinned)" \
    ferry check-golden --device cuda --precision bf16 --model "tests/data/$m"
  run "golden-$m-cuda-bf16-chunk7.txt" "check-golden $m cuda bf16 (pinned) chunk 7" \
    ferry check-golden --device cuda --precision bf16 --model "tests/data/$m" --prefill-chunk 7
  run "golden-$m-cpu.txt" "check-golden $m cpu" ferry check-golden --device cpu --model "tests/data/$m"
done
# A golden without recorded selections: bf16 pinned to the float32 CUDA run's decisions.
scratch=$(mktemp -d /tmp/gpu-check-golden-scratch.XXXXXX)
python3 -c "
import sys; from safetensors.torch import load_file, save_file
t = load_file(sys.argv[1]); save_file({k: v for k, v in t.items() if '.select.' not in k}, sys.argv[2])
" tests/data/glm5next-tiny/golden.safetensors "$scratch/golden-no-selections.safetensors"
run golden-glm5next-tiny-cuda-bf16-f32pins.txt "check-golden glm5next-tiny cuda bf16 (pinned to the f32 run)" \
  ferry check-golden --device cuda --precision bf16 --model tests/data/glm5next-tiny \
  --golden "$scratch/golden-no-selections.safetensors"
# Tensor parallelism on the GPU (scripts/gpu-check-ranks.sh: W = 2 and 4 ranks sharing one GPU;
# NCCL with a GPU a rank where two are visible).
run ranks.txt "tensor parallelism: gpu-check-ranks.sh" env OUT="$dir/ranks" "$(dirname "$0")/gpu-check-ranks.sh"
# Programmatic dependent launch off (FERRY_PDL=0: every LaunchDependent kernel then starts after
# the one before it ends): the model checks, and the MLA cases (the persistent form's fold).
for m in glm-dsa-tiny glm5next-tiny; do
  run "model-check-$m-nopdl.txt" "cuda model check $m FERRY_PDL=0" \
    env FERRY_PDL=0 ferry-cuda-model-check --model "tests/data/$m"
done
run kernel-check-mla-nopdl.txt "kernel check seed 2 mla_decode FERRY_PDL=0" \
  env FERRY_PDL=0 ferry-kernel-check --seed 2 --filter mla_decode
# The mma.sync MLA kernel's small form (the one a 99 KiB device such as the GB10 runs), forced on
# this GPU: every MLA case, and both tiny checkpoints' model checks.
run kernel-check-mla-small.txt "kernel check seed 3 mla_decode --mla-tc-small" \
  ferry-kernel-check --seed 3 --filter mla_decode --mla-tc-small
for m in glm-dsa-tiny glm5next-tiny; do
  run "model-check-$m-mla-small.txt" "cuda model check $m --mla-tc-small" \
    ferry-cuda-model-check --model "tests/data/$m" --mla-tc-small
done
run generate-cuda-bf16.txt "generate glm-dsa-tiny cuda bf16" \
  ferry generate --device cuda --model tests/data/glm-dsa-tiny --prompt-ids 5,6,7,8 --max-tokens 8
run generate-cuda-f32.txt "generate glm-dsa-tiny cuda f32" \
  ferry generate --device cuda --precision f32 --model tests/data/glm-dsa-tiny --prompt-ids 5,6,7,8 --max-tokens 8
run generate-cpu.txt "generate glm-dsa-tiny cpu" \
  ferry generate --device cpu --model tests/data/glm-dsa-tiny --prompt-ids 5,6,7,8 --max-tokens 8
if [ "$sanitize" -eq 1 ]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ -x "$sanitizer" ]; then
    run memcheck.txt "memcheck model check" "$sanitizer" --tool memcheck --error-exitcode 1 \
      ferry-cuda-model-check --model tests/data/glm5next-tiny
  else
    summary+=("memcheck: compute-sanitizer not found, skipped")
  fi
fi

echo "gpu-check-golden: logs in $dir"
grep -h -m1 -E '^device:' "$dir/kernel-check.txt" || true
grep -h -E '^kernels:' "$dir/kernel-check.txt" || true
grep -h -E ' (FAIL|ERROR)' "$dir/kernel-check.txt" | head -20
grep -h -E '^(==|  hidden|  layer|  worst|decode path|batching|pages:|f32:|bf16:|cuda model check)' "$dir"/model-check-*.txt
for f in "$dir"/golden-*.txt; do
  echo "-- $(basename "$f")"
  grep -E '^(device|p[0-9]+( f32 reference)?:|  expected|  got|  pinned:|  unpinned|  selections|    |golden:|logits against|ferry check-golden:|rank [0-9])' "$f"
done
grep -h -E '^(  check-golden|gpu-check-ranks:)' "$dir/ranks.txt"
for f in "$dir"/generate-*.txt; do echo "-- $(basename "$f"): $(grep -E '^[0-9,]+$|ferry generate:' "$f")"; done
[ -f "$dir/memcheck.txt" ] && grep -E 'ERROR SUMMARY|cuda model check' "$dir/memcheck.txt"
for line in "${summary[@]}"; do echo "  $line"; done
echo "gpu-check-golden: $([ "$status" -eq 0 ] && echo PASSED || echo FAILED)"
exit "$status"
