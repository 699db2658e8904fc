#!/usr/bin/env bash
# The coordinator's own time per step (ferry:scheduler_step_seconds: planning a step and applying
# its results, the wait for the workers left out) with 64 concurrent streams, two ways through the
# same client (curl on the OpenAI API): token ids in and out on a copy of the model without its
# tokenizer (nothing to tokenize or detokenize), and text chat (the chat template, tokenizing,
# detokenizing and the reply parser, all on the requests' own threads). Equal means the text path
# stays off the step's critical path.
# Usage: bench/openai_step_overhead.sh [MODEL_DIR]   (needs curl; run after scripts/build.sh)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${FERRY_BUILD_DIR:-$root/build}/bin"
model="${1:-$root/tests/data/glm-dsa-tiny}"
name=$(basename "$model")
source "$root/bench/tools/serve.sh"
port=50871 mport=9871 hport=8871 streams=64 tokens=128
printf "model: %s\nmachine: %s, %s cores; %d streams x %d tokens, 1 rank, --parallel %d\n\n" \
  "$model" "$(uname -m)" "$(nproc)" "$streams" "$tokens" "$streams"
printf "| path | wall s | steps | mean scheduler ms/step | p50 bucket ms | mean rank step ms | tokens/s |\n"
printf "|---|---|---|---|---|---|---|\n"
ids_model=$(mktemp -d)/$name  # the same checkpoint without tokenizer.json: ids only
mkdir -p "$ids_model"
for f in config.json generation_config.json model.safetensors; do ln -s "$model/$f" "$ids_model/$f"; done
for path in ids text-chat; do
  served=$model
  [ $path = ids ] && served=$ids_model
  serve_start "$bin" --model "$served" --ranks 1 --port $port --metrics-port $mport --http-port $hport \
    --parallel $streams --max-batch-tokens 4096 --prompt-cache-gib 0
  t0=$(date +%s.%N)
  for i in $(seq 1 $streams); do
    if [ $path = ids ]; then
      curl -sN -o /dev/null http://127.0.0.1:$hport/v1/completions -H 'Content-Type: application/json' \
        -d "{\"model\": \"$name\", \"prompt\": [$(seq -s, 10 40), $i], \"max_tokens\": $tokens,
             \"ignore_eos\": true, \"stream\": true}" &
    else
      curl -sN -o /dev/null http://127.0.0.1:$hport/v1/chat/completions -H 'Content-Type: application/json' \
        -d "{\"model\": \"$name\", \"messages\": [{\"role\": \"user\", \"content\": \"Tell me a story, number $i.\"}],
             \"max_tokens\": $tokens, \"ignore_eos\": true, \"stream\": true}" &
    fi
  done
  serve_wait_clients
  t1=$(date +%s.%N)
  m=$(curl -s "http://127.0.0.1:$mport/metrics")
  serve_stop
  echo "$m" | awk -v p="$path" -v t0="$t0" -v t1="$t1" '
    /^ferry:scheduler_step_seconds_sum/ { ss = $NF }
    /^ferry:scheduler_step_seconds_count/ { sc = $NF }
    /^ferry:scheduler_step_seconds_bucket/ { match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5);
                                             n++; les[n] = le; cum[n] = $NF }
    /^ferry:rank_step_time_seconds_sum/ { rs = $NF }
    /^ferry:rank_step_time_seconds_count/ { rc = $NF }
    /^ferry:generation_tokens_total/ { gen = $NF }
    END { p50 = "?"; for (i = 1; i <= n; i++) if (cum[i] >= sc / 2) { p50 = les[i] * 1000; break }
          wall = t1 - t0
          printf "| %s | %.2f | %d | %.4f | <= %s | %.2f | %.0f |\n", p, wall, sc, 1000 * ss / sc, p50, 1000 * rs / rc, gen / wall }'
done
rm -rf "$(dirname "$ids_model")"
