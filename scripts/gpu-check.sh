#!/usr/bin/env bash
# Runs the CUDA kernel harness (ferry-kernel-check) on the GPU machine, twice with fixed seeds.
# Meant to run there from the repository root, with the binaries of a device bundle on PATH:
#
#   source .device/env.sh && scripts/gpu-check.sh [--sanitize]
#
# Full output goes to "$OUT/kernel-check.txt" when $OUT is set (the device tool's output folder),
# else to a temporary file; a short summary (device, per-seed totals, failing cases) is printed
# last. --sanitize adds a third run (seed 3) under compute-sanitizer memcheck, when it is there
# (slow: expect minutes). Exit status: 0 when every run passed, 1 otherwise, 2 on setup errors.
set -uo pipefail

sanitize=0
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    *) echo "usage: $0 [--sanitize]" >&2; exit 2 ;;
  esac
done
if ! command -v ferry-kernel-check >/dev/null 2>&1; then
  echo "gpu-check: ferry-kernel-check is not on PATH (source .device/env.sh first)" >&2
  exit 2
fi
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  log="$OUT/kernel-check.txt"
else
  log=$(mktemp /tmp/kernel-check.XXXXXX.txt)
fi
: > "$log"

status=0
summary=()
run() {  # run LABEL COMMAND...
  local label=$1; shift
  local start end rc
  echo "== $label: $*" >> "$log"
  start=$(date +%s)
  "$@" >> "$log" 2>&1
  rc=$?
  end=$(date +%s)
  echo "== $label: exit $rc after $((end - start)) s" >> "$log"
  [ "$rc" -eq 0 ] || status=1
  summary+=("$label: exit $rc, $((end - start)) s")
}

run "seed 1" ferry-kernel-check --seed 1
run "seed 2" ferry-kernel-check --seed 2
if [ "$sanitize" -eq 1 ]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ -x "$sanitizer" ]; then
    run "memcheck seed 3" "$sanitizer" --tool memcheck --error-exitcode 1 ferry-kernel-check --seed 3
  else
    summary+=("memcheck: compute-sanitizer not found, skipped")
  fi
fi

echo "gpu-check: full output in $log"
grep -m1 -E '^device:' "$log" || true
grep -E '^kernels:|no CUDA device' "$log" || true
for line in "${summary[@]}"; do echo "  $line"; done
if grep -q -E ' (FAIL|ERROR)' "$log"; then
  echo "failing cases:"
  grep -E ' (FAIL|ERROR)' "$log" | head -40
fi
if grep -q -E 'ERROR SUMMARY: [1-9]' "$log"; then grep -E 'ERROR SUMMARY' "$log"; fi
echo "gpu-check: $([ "$status" -eq 0 ] && echo PASSED || echo FAILED)"
exit "$status"
