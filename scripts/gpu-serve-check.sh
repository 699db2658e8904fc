#!/usr/bin/env bash
# `ferry serve --device cuda` on the GPU machine: for each tiny checkpoint, a one-rank server on
# the GPU in float32 (--precision f32) must give, for several prompts sent at once, the greedy
# tokens of the CPU reference run in-process; a bf16 server must serve (its tokens may differ on
# these random tiny models, see bench/results/h200-check-golden-cuda.md). Each server's
# coordinator and its CUDA worker must answer /metrics (the worker's carries
# ferry_worker:step_tokens_total).
#
#   source .device/env.sh && scripts/gpu-serve-check.sh
#
# Exit status 0 when every comparison matched, 1 otherwise. Logs go to $OUT (or /tmp).
set -uo pipefail
out="${OUT:-/tmp}"
status=0
# Below Linux's ephemeral range (32768..60999), where UCX's listeners take their ports.
port=22011
metrics=24011

scrape() {  # port: prints the /metrics text, fails when nothing answers within 10 s
  python3 -c 'import sys, urllib.request; print(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=10).read().decode())' "$1"
}
prompts=("5,6,7,8,9,10,11,12" "100,37,250,3,77,300,12,45,9,200,18,61" "7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7" "381,2,190,45")

wait_serving() {  # port
  for _ in $(seq 1 300); do
    if ferry generate --server "127.0.0.1:$1" --prompt-ids 1,2 --max-tokens 1 --timeout-s 5 >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  return 1
}

for model in glm-dsa-tiny glm5next-tiny; do
  for precision in f32 bf16; do
    port=$((port + 1)); metrics=$((metrics + 2))
    log="$out/serve-$model-$precision.log"
    ferry serve --model "tests/data/$model" --ranks 1 --device cuda --precision "$precision" --port "$port" \
      --metrics-port "$metrics" > "$log" 2>&1 &
    pid=$!
    if ! wait_serving "$port"; then
      echo "$model $precision: not serving (log: $log)"; tail -5 "$log"; status=1
      kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; continue
    fi
    clients=()
    for i in "${!prompts[@]}"; do
      ferry generate --server "127.0.0.1:$port" --prompt-ids "${prompts[$i]}" --max-tokens 8 --ignore-eos \
        > "$out/got-$model-$precision-$i.txt" 2>>"$log" &
      clients+=($!)
    done
    wait "${clients[@]}"
    for i in "${!prompts[@]}"; do
      want=$(ferry generate --model "tests/data/$model" --prompt-ids "${prompts[$i]}" --max-tokens 8 --ignore-eos 2>/dev/null)
      have=$(cat "$out/got-$model-$precision-$i.txt")
      if [ "$precision" = f32 ]; then
        if [ "$want" = "$have" ]; then echo "$model f32 prompt $i: equal ($have)"; else echo "$model f32 prompt $i: DIFFERENT cpu=$want cuda=$have"; status=1; fi
      else
        n=$(echo "$have" | tr ',' '\n' | grep -c .)
        if [ "$n" = 8 ]; then echo "$model bf16 prompt $i: served 8 tokens ($have; cpu $want)"; else echo "$model bf16 prompt $i: FAILED ($have)"; status=1; fi
      fi
    done
    # The coordinator's /metrics at M, the CUDA worker's (rank 0) at M + 1.
    if scrape "$metrics" | grep -q '^ferry:'; then echo "$model $precision: coordinator /metrics answers"; else
      echo "$model $precision: coordinator /metrics FAILED"; status=1; fi
    wm=$(scrape "$((metrics + 1))" 2>&1)
    if echo "$wm" | grep -q '^ferry_worker:step_tokens_total'; then
      echo "$model $precision: CUDA worker /metrics answers ($(echo "$wm" | grep -m1 '^ferry_worker:step_tokens_total'))"
    else
      echo "$model $precision: CUDA worker /metrics FAILED: $(echo "$wm" | tail -1)"; status=1
    fi
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    grep -m1 "KV plan\|KV pool" -A0 "$log" | head -1
  done
done
echo "gpu-serve-check: $([ "$status" -eq 0 ] && echo PASSED || echo FAILED)"
exit "$status"
