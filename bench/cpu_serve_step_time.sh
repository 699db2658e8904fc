#!/usr/bin/env bash
# Step time per rank count of the CPU serving system: ferry serve at W = 1, 2, 4 ranks on a tiny
# checkpoint, 8 concurrent greedy requests (64-token prompts, 32 new tokens), then the mean step
# time per rank from the coordinator's ferry:rank_step_time_seconds and the wall time.
# Usage: bench/cpu_serve_step_time.sh [MODEL_DIR]   (needs curl; run after scripts/build.sh)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${FERRY_BUILD_DIR:-$root/build}/bin"
model="${1:-$root/tests/data/glm-dsa-tiny}"
source "$root/bench/tools/serve.sh"
port=50771
mport=9771
prompt=$(seq -s, 10 73)
printf "model: %s\nmachine: %s, %s cores\n\n" "$model" "$(uname -m)" "$(nproc)"
printf "| ranks | wall s | steps | mean step s (rank 0) | mean step s (all ranks) | tokens/s |\n|---|---|---|---|---|---|\n"
for w in 1 2 4; do
  serve_start "$bin" --model "$model" --ranks "$w" --port $port --metrics-port $mport --http-port 0
  t0=$(date +%s.%N)
  for i in $(seq 1 8); do
    "$bin/ferry" generate --server 127.0.0.1:$port --prompt-ids "$prompt,$i" --max-tokens 32 --ignore-eos >/dev/null 2>&1 &
  done
  serve_wait_clients
  t1=$(date +%s.%N)
  m=$(curl -s "http://127.0.0.1:$mport/metrics")
  serve_stop
  echo "$m" | awk -v w="$w" -v t0="$t0" -v t1="$t1" '
    /^ferry:rank_step_time_seconds_sum/ { split($0, a, " "); sum += a[2]; if ($0 ~ /rank="0"/) s0 = a[2] }
    /^ferry:rank_step_time_seconds_count/ { split($0, a, " "); cnt += a[2]; if ($0 ~ /rank="0"/) c0 = a[2] }
    /^ferry:generation_tokens_total/ { split($0, a, " "); gen = a[2] }
    /^ferry:prompt_tokens_total/ { split($0, a, " "); pr = a[2] }
    END { wall = t1 - t0; printf "| %d | %.2f | %d | %.5f | %.5f | %.0f |\n", w, wall, c0, s0 / c0, sum / cnt, (gen + pr) / wall }'
done
