#!/usr/bin/env bash
# Builds Ferry (installing what is missing) and runs the whole test suite with CTest.
# Extra arguments go to ctest (e.g. -R golden).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FERRY_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh"
cd "$build"
ctest --output-on-failure --parallel "$(nproc)" "$@"
