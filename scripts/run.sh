#!/usr/bin/env bash
# The quick start: builds Ferry (installing what is missing), serves the embedded tiny GLM-5
# checkpoint (tests/data/glm-dsa-tiny, with its test tokenizer and chat template) on 2 local ranks
# with `ferry serve`, generates a continuation through the gRPC API with `ferry generate --server`,
# then a chat completion through the OpenAI-compatible HTTP API with curl, and stops the server.
# Extra arguments go to the first `ferry generate` (e.g. --prompt-ids 1,2,3 --max-tokens 32 --stream).
# Environment: FERRY_PORT (default 50051), FERRY_HTTP_PORT (8000), FERRY_METRICS_PORT (9400).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FERRY_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh" >&2

port="${FERRY_PORT:-50051}"
metrics_port="${FERRY_METRICS_PORT:-9400}"
http_port="${FERRY_HTTP_PORT:-8000}"
log="$(mktemp /tmp/ferry-serve-XXXXXX.log)"
"$build/bin/ferry" serve --model "$root/tests/data/glm-dsa-tiny" --ranks 2 \
  --port "$port" --metrics-port "$metrics_port" --http-port "$http_port" 2>"$log" &
serve_pid=$!
cleanup() {
  kill -TERM "$serve_pid" 2>/dev/null || true
  wait "$serve_pid" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT

for _ in $(seq 1 600); do
  if grep -q "ferry serve: serving" "$log"; then break; fi
  if ! kill -0 "$serve_pid" 2>/dev/null; then
    cat "$log" >&2
    echo "run.sh: ferry serve exited before serving" >&2
    exit 1
  fi
  sleep 0.1
done
grep "ferry serve: serving" "$log" >&2 || { cat "$log" >&2; echo "run.sh: not serving after 60 s" >&2; exit 1; }

echo "prompt: 17,42,99,123,7,256,31 -> continuation (greedy, 16 tokens):" >&2
"$build/bin/ferry" generate --server "127.0.0.1:$port" --prompt-ids 17,42,99,123,7,256,31 --max-tokens 16 "$@"
echo "prompt: 'Hello, world!' as text (the checkpoint's test tokenizer; a random tiny model, so the text is noise):" >&2
"$build/bin/ferry" generate --server "127.0.0.1:$port" --prompt "Hello, world!" --max-tokens 16
echo "the OpenAI API: POST http://127.0.0.1:$http_port/v1/chat/completions (the chat template renders the" >&2
echo "conversation; the reply's text, reasoning split out, is noise from the random model):" >&2
curl -sS "http://127.0.0.1:$http_port/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model": "glm-dsa-tiny", "messages": [{"role": "user", "content": "Hello, world!"}], "max_tokens": 16,
       "temperature": 0}'
echo
