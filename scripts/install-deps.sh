#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages Ferry builds against. Idempotent: packages already present
# are not touched, and apt is not called at all when nothing is missing (with a CUDA toolkit that
# lacks NCCL, libnccl-dev counts as missing: it is tried, and only warned about, each run).
# The CUDA toolkit is not installed here: the build uses it when nvcc is found and stays CPU-only
# otherwise.
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build ccache pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev catch2 libucx-dev nlohmann-json3-dev libicu-dev
  iproute2 prometheus  # tests: the two-namespace cluster (ip netns), the dashboard's queries
  curl                 # tests: the OpenAI API's event streams as curl sees them
  python3-jinja2       # tests: the chat templates' reference renders, checked against jinja2 itself
)
# Tests: the official openai npm client runs on Node.js; Debian's when the machine has none.
if ! command -v npm >/dev/null 2>&1; then pkgs+=(nodejs npm); fi

# NCCL, the data plane between ranks on distinct GPUs: CUDA 13's toolkit ships it; an older one
# needs NVIDIA's libnccl-dev (the CUDA apt repository). Without it the build leaves
# --dataplane nccl out and auto takes UCX, so a failed install only warns.
optional=()
nvcc_bin=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
if [ -n "$nvcc_bin" ] && [ ! -e "$(dirname "$nvcc_bin")/../include/nccl.h" ] && [ ! -e /usr/include/nccl.h ]; then
  optional+=(libnccl-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present" >&2
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
updated=0
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  $SUDO apt-get update -q
  updated=1
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
if [ ${#optional[@]} -gt 0 ]; then
  echo "install-deps: installing ${optional[*]} (nvcc at $nvcc_bin has no nccl.h beside it)" >&2
  { [ "$updated" -eq 1 ] || $SUDO apt-get update -q; } &&
    $SUDO apt-get install -y -q --no-install-recommends "${optional[@]}" ||
    echo "install-deps: WARNING: ${optional[*]} not installed (is NVIDIA's CUDA apt repository configured?):" \
      "the build will have no NCCL data plane (--dataplane ucx only)" >&2
fi
