#!/usr/bin/env bash
# The GPU checks and the decode benchmarks, in parts that each fit one call of the device tool
# (at most 10 minutes a call; a device round costs minutes to start, a session has 30 minutes of
# device time). Run from the repository root on the GPU machine with a device bundle
# (../shared/DEVICE.md), e.g. packed as .bundle/dev.tar.xz:
#
#   [ -d .device ] || tar -xJf .bundle/dev.tar.xz; source .device/env.sh && scripts/gpu-round.sh PART...
#
# Parts (each step under its own time cap, seconds in brackets): golden: scripts/gpu-check-golden.sh
# (harness seed 1, model checks, goldens, tensor parallelism incl. NCCL) [420]; serve: the NVFP4
# harness cases at seed 2 [120] and scripts/gpu-serve-check.sh [180]; bench:
# ferry-bench-roofline --sections=experts [150], the whole decode steps with NVFP4 experts and
# dense MLPs [200] and whole prefills with them, GEMV at every row count and the engine's choice
# [2 x 120]; ab: when a ferry-bench-roofline-old is on PATH (an earlier commit's build), the
# models section of both, a model at a time, alternating twice [8 x 110]. No part named: all of
# them (more than one call's limit). Every log goes into one archive, "$OUT/round.tgz" (the device
# tool brings back at most 8 files); a summary of each step is printed. Exit status: 0 when every
# check step passed.
set -uo pipefail
out=${OUT:-$(mktemp -d /tmp/gpu-round.XXXXXX)}
logs=$(mktemp -d /tmp/gpu-round-logs.XXXXXX)
here=$(dirname "${BASH_SOURCE[0]}")
t0=$(date +%s)
status=0
parts=" ${*:-golden serve bench ab} "
want() { [[ "$parts" == *" $1 "* ]]; }
for p in $parts; do
  case "$p" in golden | serve | bench | ab) ;; *) echo "gpu-round: unknown part '$p' (golden, serve, bench, ab)" >&2; exit 2 ;; esac
done
step() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
nvidia-smi -L
if want golden; then
step "gpu-check-golden"
mkdir -p "$logs/golden"
timeout 420 env OUT="$logs/golden" "$here/gpu-check-golden.sh" > "$logs/golden.txt" 2>&1 || status=1
grep -h -E "^(golden:|gpu-check|kernels:)" "$logs/golden.txt" "$logs/golden/kernel-check.txt" 2>/dev/null | sort | uniq -c
grep -h -E "FAIL" "$logs/golden/kernel-check.txt" 2>/dev/null | head -5
grep -h -E "^gpu-check-ranks:" "$logs/golden/ranks.txt" 2>/dev/null
fi
if want serve; then
step "nvfp4 harness, seed 2"
timeout 120 ferry-kernel-check --seed 2 --filter nvfp4 > "$logs/nvfp4-seed2.txt" 2>&1 || status=1
tail -1 "$logs/nvfp4-seed2.txt"
step "gpu-serve-check"
mkdir -p "$logs/serve"
timeout 180 env OUT="$logs/serve" "$here/gpu-serve-check.sh" > "$logs/serve.txt" 2>&1 || status=1
grep -E "DIFFERENT|FAILED|moved|^gpu-serve-check" "$logs/serve.txt" | tail -6
fi
if want bench; then
step "experts (2d, 2g, 2h)"
timeout 150 ferry-bench-roofline --sections=experts > "$logs/experts.txt" 2>&1
grep -E "NOT MET|met$|targets met" "$logs/experts.txt" | tail -6
grep -E "^\| glm-5\.(2|3-flash) gate_up .* rows, " "$logs/experts.txt" | awk -F'|' '{printf "%s median %s\n", $2, $5}'
step "whole steps with NVFP4 experts and dense MLPs"
timeout 200 ferry-bench-roofline --sections models --batches 1,8 --prefill_tokens= --decode_contexts 4096 \
  --expert_formats nvfp4 > "$logs/models-nvfp4.txt" 2>&1
grep -E "NVFP4 experts decode b[18] ctx4k \|" "$logs/models-nvfp4.txt" | awk -F'|' '{printf "%s median %s\n", $2, $5}'
step "whole prefills with NVFP4 MLPs: GEMV at every row count, then the engine's choice"
for m in 1000000000 default; do
  extra=()
  [ "$m" = default ] || extra=(--nvfp4_gemm_min_rows "$m")
  timeout 120 ferry-bench-roofline --sections models --batches 1 --decode_contexts 512 --prefill_tokens 2048 \
    --expert_formats nvfp4 "${extra[@]}" > "$logs/prefill-nvfp4-$m.txt" 2>&1
  grep -E "NVFP4 experts prefill 2048 \|" "$logs/prefill-nvfp4-$m.txt" |
    awk -F'|' -v m="$m" '{printf "nvfp4_gemm_min_rows %s:%s median %s\n", m, $2, $5}'
done
fi
if want ab && command -v ferry-bench-roofline-old >/dev/null 2>&1; then
  step "models A/B"
  # One model a run: loading GLM-5.2's random checkpoint alone takes up to a minute on an H100,
  # so both models in one run of the old build did not fit a step's cap.
  args=(--sections models --batches 1,8 --prefill_tokens= --decode_contexts 4096)
  for i in 1 2; do
    for m in glm-5.2 glm-5.3-flash; do
      for b in ferry-bench-roofline-old ferry-bench-roofline; do
        timeout 110 "$b" "${args[@]}" --models "$m" > "$logs/ab-$b-$m-$i.txt" 2>&1
        grep -E "^\| glm-5\.(2|3-flash) decode b(1|8) ctx4k \|" "$logs/ab-$b-$m-$i.txt" |
          awk -F'|' -v b="$b" -v i="$i" '{printf "%s %s:%s median %s\n", b, i, $2, $5}'
      done
    done
  done
fi
step "done"
tar -czf "$out/round.tgz" -C "$logs" .
echo "gpu-round: $([ "$status" -eq 0 ] && echo PASSED || echo FAILED) (logs: $out/round.tgz)"
exit "$status"
