#!/usr/bin/env bash
# The quick start: builds Ferry (installing what is missing), loads the embedded tiny GLM-5
# checkpoint (tests/data/glm-dsa-tiny) in-process and prints a greedy continuation of a prompt.
# Extra arguments go to `ferry generate` (e.g. --prompt-ids 1,2,3 --max-tokens 32).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FERRY_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh" >&2
model="$root/tests/data/glm-dsa-tiny"
echo "prompt: 17,42,99,123,7,256,31 -> continuation:" >&2
exec "$build/bin/ferry" generate --model "$model" --prompt-ids 17,42,99,123,7,256,31 --max-tokens 16 "$@"
