#!/usr/bin/env bash
# The official openai npm client and curl against `ferry serve` on the scripted checkpoint:
# chat with and without streaming, a tool call round trip, reasoning content, a stop string,
# invalid requests and the API key (openai_client/client_test.mjs), then the server-sent event
# framing as curl sees it, then `ferry chat` over the gRPC API. The client is installed (npm ci, the pinned lock) into this test's
# own folder under the build tree. Exit 77 (skipped) when the npm registry cannot be reached.
# Usage: openai_client.sh BIN_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
bin=$1 src=$2 work=$3
model=$src/tests/data/glm-dsa-scripted
mkdir -p "$work"
cp "$src/tests/integration/openai_client/package.json" "$src/tests/integration/openai_client/package-lock.json" \
   "$src/tests/integration/openai_client/client_test.mjs" "$work/"
if [ ! -d "$work/node_modules/openai" ]; then
  if ! (cd "$work" && npm ci --no-audit --no-fund --loglevel=error >"$work/npm.log" 2>&1); then
    cat "$work/npm.log" >&2
    echo "openai_client: SKIPPED: npm ci could not install the openai client (registry unreachable?)" >&2
    exit 77
  fi
fi

# Free consecutive ports below the ephemeral range: API, control, metrics, worker metrics, HTTP.
pick_ports() {
  local p
  for _ in $(seq 50); do
    p=$(( (RANDOM % 2000) * 8 + 12000 ))
    if [ -z "$(ss -Htan "( sport >= :$p and sport <= :$((p + 7)) )" 2>/dev/null)" ]; then echo "$p"; return; fi
  done
  echo "openai_client: no free ports" >&2; exit 1
}
port=$(pick_ports)
http=$((port + 7))
key_file=$work/api-key
umask 077
echo "sk-ferry-test-$RANDOM$RANDOM" >"$key_file"
key=$(cat "$key_file")
log=$work/serve.log
"$bin/ferry" serve --model "$model" --ranks 1 --port "$port" --control-port $((port + 1)) \
  --metrics-port $((port + 2)) --http-port "$http" --api-key-file "$key_file" >"$log" 2>&1 &
serve=$!
trap 'kill $serve 2>/dev/null; wait $serve 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  if curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http/health" 2>/dev/null | grep -q 200; then break; fi
  if ! kill -0 $serve 2>/dev/null; then cat "$log" >&2; echo "openai_client: ferry serve exited" >&2; exit 1; fi
  sleep 0.1
done

node "$work/client_test.mjs" "http://127.0.0.1:$http/v1" "$key"

# curl: the event stream's framing. Every event is one "data: " line and a blank line; the last is [DONE].
out=$work/sse.txt
curl -sSN -D "$work/sse.head" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
  -d '{"model": "glm-dsa-scripted", "messages": [{"role": "user", "content": "hi"}], "stream": true, "max_tokens": 8}' \
  "http://127.0.0.1:$http/v1/chat/completions" >"$out"
grep -qi '^content-type: text/event-stream' "$work/sse.head" || { cat "$work/sse.head" >&2; echo "openai_client: not an event stream" >&2; exit 1; }
awk 'NR % 2 == 1 && !/^data: / { bad = 1 } NR % 2 == 0 && $0 != "" { bad = 1 } END { exit bad }' "$out" ||
  { cat -A "$out" >&2; echo "openai_client: SSE framing broken" >&2; exit 1; }
[ "$(tail -n 2 "$out" | head -n 1)" = "data: [DONE]" ] || { cat "$out" >&2; echo "openai_client: no [DONE]" >&2; exit 1; }
events=$(grep -c '^data: {' "$out")
# Without a key: 401 in OpenAI's error shape.
code=$(curl -s -o "$work/noauth.json" -w '%{http_code}' -H 'Content-Type: application/json' \
  -d '{"prompt": "hi"}' "http://127.0.0.1:$http/v1/completions")
[ "$code" = 401 ] && grep -q '"invalid_api_key"' "$work/noauth.json" || { echo "openai_client: no-key answer $code" >&2; exit 1; }
# ferry chat (the gRPC API's chat field): two turns, thinking off then on; the history goes back
# each time (the second reply comes after a two-turn prompt).
chat=$(printf 'Weather in Oslo?\n/think on\nAnd tomorrow?\n' | "$bin/ferry" chat --server "127.0.0.1:$port" --max-tokens 40 2>"$work/chat.err")
want=$'<tool_call>weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>\nSure thing.</think><tool_call>weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>'
[ "$chat" = "$want" ] || { echo "openai_client: ferry chat printed:"; echo "$chat"; cat "$work/chat.err"; exit 1; } >&2
echo "openai_client: passed (curl: $events events then [DONE]; ferry chat: 2 turns)"
