#!/usr/bin/env bash
# `ferry serve --device cuda` on the GPU machine: for each tiny checkpoint, a one-rank server on
# the GPU in float32 (--precision f32) must give, for several prompts sent at once, the greedy
# tokens of the CPU reference run in-process; a bf16 server must serve (its tokens may differ on
# these random tiny models, see bench/results/h200-check-golden-cuda.md). Each server's
# coordinator and its CUDA worker must answer /metrics (the worker's carries
# ferry_worker:step_tokens_total). At two ranks in float32, greedy and seeded sampled requests
# (temperature, top-k, top-p, log-probabilities: sampled on rank 0's GPU) get the CPU reference's
# tokens, and log-probabilities within 1e-3 of its.
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
      --metrics-port "$metrics" --http-port 0 > "$log" 2>&1 &
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
    if grep -q '^ferry:' <<<"$(scrape "$metrics")"; then echo "$model $precision: coordinator /metrics answers"; else
      echo "$model $precision: coordinator /metrics FAILED"; status=1; fi
    wm=$(scrape "$((metrics + 1))" 2>&1)
    if grep -q '^ferry_worker:step_tokens_total' <<<"$wm"; then
      echo "$model $precision: CUDA worker /metrics answers ($(echo "$wm" | grep -m1 '^ferry_worker:step_tokens_total'))"
    else
      echo "$model $precision: CUDA worker /metrics FAILED: $(echo "$wm" | tail -1)"; status=1
    fi
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    grep -m1 "KV plan\|KV pool" -A0 "$log" | head -1
  done
done
# For each tiny checkpoint, two CUDA workers (tensor parallelism; the latent split on by default
# from two ranks; on one GPU over the UCX data plane, where two GPUs are visible a GPU each over NCCL) in float32: 8 concurrent requests on small pages and a short
# context (borrowing cut short, history fetched through the owners) each get the tokens of the
# CPU reference run alone; the split's counters show queries crossed.
for model in glm-dsa-tiny glm5next-tiny; do
port=$((port + 1)); metrics=$((metrics + 4))
log="$out/serve-$model-f32-ranks2.log"
ferry serve --model "tests/data/$model" --ranks 2 --device cuda --precision f32 --port "$port" \
  --metrics-port "$metrics" --http-port 0 --page-size 16 --context 128 --max-batch-tokens 48 > "$log" 2>&1 &
pid=$!
if ! wait_serving "$port"; then
  echo "$model f32 ranks 2: not serving (log: $log)"; tail -5 "$log"; status=1
else
  eight=("${prompts[@]}" "9,8,7,6,5,4,3,2,1,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33"
         "200,201,202,203,204,205,206,207,208,209,210" "44,55,66,77,88,99,110,121,132,143,154,165,176,187,198,209,220,231,242,253,264"
         "3,300,30,33,333,3,300,30,33,333,3,300,30,33,333,3,300,30,33,333,3,300,30,33,333,3,300,30,33,333,3,300,30,33,333,3,300,30")
  clients=()
  for i in "${!eight[@]}"; do
    ferry generate --server "127.0.0.1:$port" --prompt-ids "${eight[$i]}" --max-tokens 12 --ignore-eos \
      > "$out/got-$model-ranks2-$i.txt" 2>>"$log" &
    clients+=($!)
  done
  wait "${clients[@]}"
  for i in "${!eight[@]}"; do
    want=$(ferry generate --model "tests/data/$model" --prompt-ids "${eight[$i]}" --max-tokens 12 --ignore-eos 2>/dev/null)
    have=$(cat "$out/got-$model-ranks2-$i.txt")
    if [ "$want" = "$have" ]; then echo "$model f32 ranks 2 prompt $i: equal ($have)"; else
      echo "$model f32 ranks 2 prompt $i: DIFFERENT cpu=$want cuda=$have"; status=1; fi
  done
  # Sampled on the device (rank 0's GPU) with log-probabilities: seeded requests sent at once get
  # the CPU reference's tokens, and log-probabilities within 1e-3 of its.
  sampling=(--temperature 0.8 --top-p 0.9 --top-k 60 --logprobs 3 --max-tokens 10 --ignore-eos)
  clients=()
  for i in 0 1 2 3; do
    ferry generate --server "127.0.0.1:$port" --prompt-ids "${eight[$i]}" --seed "$((7 + i))" "${sampling[@]}" \
      $([ $((i % 2)) = 0 ] && echo --stream) > "$out/sampled-$model-ranks2-$i.txt" 2>>"$log" &
    clients+=($!)
  done
  wait "${clients[@]}"
  for i in 0 1 2 3; do
    ferry generate --model "tests/data/$model" --prompt-ids "${eight[$i]}" --seed "$((7 + i))" "${sampling[@]}" \
      > "$out/sampled-$model-cpu-$i.txt" 2>/dev/null
    if verdict=$(python3 - "$out/sampled-$model-cpu-$i.txt" "$out/sampled-$model-ranks2-$i.txt" <<'PY'
import sys
want, have = (open(p).read().split("\n") for p in sys.argv[1:3])
if want[0] != have[0]:
    print("tokens DIFFERENT cpu=%s cuda=%s" % (want[0], have[0])); sys.exit(1)
worst, n = 0.0, 0
for w, h in zip(want[1:], have[1:]):
    if not w:
        continue
    wf, hf = w.split()[1:], h.split()[1:]  # token, its log-probability, then id:log-probability
    if [wf[0]] + [x.split(":")[0] for x in wf[2:]] != [hf[0]] + [x.split(":")[0] for x in hf[2:]]:
        print("top ids DIFFERENT: cpu %s, cuda %s" % (w, h)); sys.exit(1)
    for a, b in zip(wf, hf):
        worst = max(worst, abs(float(a.split(":")[-1]) - float(b.split(":")[-1]))); n += 1
print("tokens equal (%s), %d log-probabilities within %.2e" % (have[0], n, worst))
sys.exit(0 if worst <= 1e-3 and n > 0 else 1)
PY
    ); then echo "$model f32 ranks 2 sampled $i: $verdict"; else echo "$model f32 ranks 2 sampled $i: FAILED: $verdict"; status=1; fi
  done
  for r in 0 1; do
    wm=$(scrape "$((metrics + 1 + r))" 2>&1)
    echo "$model ranks 2 worker $r: $(echo "$wm" | grep -E '^ferry_worker:(owner_rows_(shipped|served|fetched)_total|dataplane_bytes_total)' | tr '\n' ' ')"
  done
  shipped=$(scrape "$((metrics + 1))" | awk '/^ferry_worker:owner_rows_(shipped|fetched)_total/ {s += $2} END {print s + 0}')
  shipped1=$(scrape "$((metrics + 2))" | awk '/^ferry_worker:owner_rows_(shipped|fetched)_total/ {s += $2} END {print s + 0}')
  if awk -v a="$shipped" -v b="$shipped1" 'BEGIN {exit !(a + b > 0)}'; then echo "$model ranks 2: the split moved rows ($shipped + $shipped1)"; else
    echo "$model ranks 2: the split moved no rows: FAILED"; status=1; fi
  grep -m2 -E "loaded .*rank [01] of 2" "$log"
fi
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
done
echo "gpu-serve-check: $([ "$status" -eq 0 ] && echo PASSED || echo FAILED)"
exit "$status"
