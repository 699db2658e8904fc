#!/usr/bin/env bash
# Configures and builds Ferry into build/ (binaries in build/bin/), installing the Debian
# packages first when any is missing. Usage: scripts/build.sh [extra cmake args...]
# Environment: FERRY_BUILD_DIR (default build), FERRY_BUILD_TYPE (default RelWithDebInfo).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FERRY_BUILD_DIR:-$root/build}"

"$root/scripts/install-deps.sh"

# ccache hits across clones of the repository (CI builds a fresh clone in another folder).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"

gen=()
if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE="${FERRY_BUILD_TYPE:-RelWithDebInfo}" "$@"
elif [ $# -gt 0 ]; then
  cmake "$build" "$@"
fi
cmake --build "$build" --parallel "$(nproc)"
