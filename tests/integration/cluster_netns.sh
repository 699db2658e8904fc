#!/usr/bin/env bash
# Two hosts on one machine: two network namespaces joined by a veth pair with their own addresses
# (not loopback), each with its own copy of the tiny checkpoints and the token file. For each
# family, deploy/ferry-cluster brings up the coordinator in the first and one worker in each (UCX
# over TCP between them, the owner split on); every golden prompt through the gRPC API gives the
# goldens' tokens (those of one rank); a worker killed in the second namespace is reported by host;
# `down` leaves no process. Preflight refusals: a token file another user can read, a run
# directory others may write, model files that differ between hosts, dataplane nccl on CPUs; a
# pid file naming another process is not signalled.
#
#   tests/integration/cluster_netns.sh BIN_DIR SOURCE_DIR
#
# Needs root (ip netns). Exit 0 passed, 1 failed, 77 skipped (not root, or no network namespaces).
set -uo pipefail
bin="$1" src="$2"
launcher="$src/deploy/ferry-cluster"
[ "$(id -u)" = 0 ] || { echo "cluster_netns: needs root for ip netns: skipped"; exit 77; }
tag="f$$"
A="${tag}a" B="${tag}b"
ip netns add "$A" 2>/dev/null || { echo "cluster_netns: ip netns add failed: skipped"; exit 77; }
tmp="$(mktemp -d /tmp/ferry-cluster-test.XXXXXX)"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cleanup() {
  [ -f "$tmp/conf" ] && "$launcher" -c "$tmp/conf" down >/dev/null 2>&1
  pkill -KILL -f "$tmp/" 2>/dev/null
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$B" || { echo "cluster_netns: second namespace failed"; exit 1; }
ip link add "${tag}va" type veth peer name "${tag}vb" || { echo "cluster_netns: veth failed"; exit 1; }
ip link set "${tag}va" netns "$A"
ip link set "${tag}vb" netns "$B"
ip -n "$A" addr add 10.213.0.1/24 dev "${tag}va"
ip -n "$B" addr add 10.213.0.2/24 dev "${tag}vb"
for ns in "$A" "$B"; do
  ip -n "$ns" link set lo up
done
ip -n "$A" link set "${tag}va" up
ip -n "$B" link set "${tag}vb" up

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$tmp/token"
chmod 600 "$tmp/token"
echo "sk-netns-$RANDOM$RANDOM" > "$tmp/api.key"
chmod 600 "$tmp/api.key"
for h in a b; do
  mkdir -p "$tmp/$h"
  cp -r "$src/tests/data/glm-dsa-tiny" "$src/tests/data/glm5next-tiny" "$tmp/$h/"
done

config() {  # $1: the checkpoint
  cat > "$tmp/conf" <<EOF
reach = ip netns exec {host} sh -c
bin = $bin
token_file = $tmp/token
api_port = 50051
metrics_port = 9400
http_port = 8000
api_key_file = $tmp/api.key
device = cpu
owner_split = on
parallel = 4
env = UCX_TLS=tcp
ready_timeout_s = 90
[host $A]
interface = ${tag}va
model = $tmp/a/$1
run_dir = $tmp/run-a
[host $B]
interface = ${tag}vb
model = $tmp/b/$1
run_dir = $tmp/run-b
EOF
}

for m in glm-dsa-tiny glm5next-tiny; do
  echo "=== $m"
  config "$m"
  out="$("$launcher" -c "$tmp/conf" up 2>&1)"; rc=$?
  echo "$out"
  [ $rc -eq 0 ] || { fail "$m: up exited $rc"; continue; }
  grep -q "serving: gRPC API 10.213.0.1:50051" <<<"$out" || fail "$m: up did not print the endpoint"
  grep -q "serving: OpenAI API http://10.213.0.1:8000/v1" <<<"$out" || fail "$m: up did not print the OpenAI endpoint"
  grep -q "owner split on" <<<"$out" || fail "$m: the owner split is not on"
  grep -q "^rank 1: serving" <<<"$out" || fail "$m: rank 1 is not serving"
  # Every golden prompt through the API, from the first namespace.
  out="$(ip netns exec "$A" "$bin/ferry" check-golden --server 10.213.0.1:50051 --model "$tmp/a/$m" 2>&1)"
  echo "$out"
  grep -q "golden: 3 passed, 0 failed" <<<"$out" || fail "$m: golden prompts through the cluster"
  # The OpenAI API on the cluster interface: a chat completion with the key, 401 without it.
  body='{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4, "temperature": 0}'
  out="$(ip netns exec "$A" curl -sS -H "Authorization: Bearer $(cat "$tmp/api.key")" -H 'Content-Type: application/json' \
    -d "$body" http://10.213.0.1:8000/v1/chat/completions 2>&1)"
  echo "$out"
  grep -q '"object":"chat.completion"' <<<"$out" || fail "$m: no chat completion through the OpenAI API"
  code="$(ip netns exec "$A" curl -s -o /dev/null -w '%{http_code}' -d "$body" http://10.213.0.1:8000/v1/chat/completions)"
  [ "$code" = 401 ] || fail "$m: the OpenAI API answered $code without the key"
  # The scrape configuration names every process at its host's address.
  out="$("$launcher" -c "$tmp/conf" prometheus 2>&1)"
  for t in 10.213.0.1:9400 10.213.0.1:9401 10.213.0.2:9402; do
    grep -q "targets: \[\"$t\"\]" <<<"$out" || fail "$m: prometheus config lacks $t"
  done
  # The API is not on loopback, and not in the root namespace.
  ip netns exec "$A" "$bin/ferry" status --server 127.0.0.1:50051 >/dev/null 2>&1 && fail "$m: the API answers on loopback"
  # The second namespace's worker dies: status names its host.
  pid="$(cat "$tmp/run-b/worker-1.pid")"
  ip netns exec "$B" kill -KILL "$pid"
  sleep 0.5
  out="$("$launcher" -c "$tmp/conf" status 2>&1)"; rc=$?
  echo "$out"
  [ $rc -ne 0 ] || fail "$m: status exited 0 with a dead worker"
  grep -q "^$B: worker-1 (pid $pid) is not running" <<<"$out" || fail "$m: status did not name the dead worker's host"
  out="$("$launcher" -c "$tmp/conf" down 2>&1)"; rc=$?
  echo "$out"
  [ $rc -eq 0 ] && grep -q "down: no process left" <<<"$out" || fail "$m: down"
  if pgrep -f "$tmp/" >/dev/null; then fail "$m: processes left after down: $(pgrep -af "$tmp/")"; fi
done

echo "=== preflight refusals"
config glm-dsa-tiny
chmod 644 "$tmp/token"
out="$("$launcher" -c "$tmp/conf" up 2>&1)"; rc=$?
echo "$out" | grep -E "FAIL|preflight|up:"
[ $rc -ne 0 ] && grep -q "token file $tmp/token has mode 644; it must be 600" <<<"$out" || fail "a readable token file passed"
pgrep -f "$tmp/" >/dev/null && fail "up started processes after a failed preflight"
chmod 600 "$tmp/token"
# A run directory others may write (where a planted pid file or log link would be followed).
mkdir -p "$tmp/run-a" && chmod 777 "$tmp/run-a"
out="$("$launcher" -c "$tmp/conf" preflight 2>&1)"; rc=$?
[ $rc -ne 0 ] && grep -q "run directory $tmp/run-a is not owned by this user or others may write it" <<<"$out" ||
  { fail "a run directory others may write passed (rc $rc, $(stat -c '%U %a' "$tmp/run-a"))"; echo "$out"; }
chmod 700 "$tmp/run-a"
# A pid file that names another process is not signalled by down, nor counted as ours.
sleep 300 & bystander=$!
echo "$bystander" > "$tmp/run-a/worker-0.pid"
"$launcher" -c "$tmp/conf" down >/dev/null 2>&1
kill -0 "$bystander" 2>/dev/null || fail "down signalled a process that is not Ferry's"
kill "$bystander" 2>/dev/null
# The OpenAI API beyond loopback without a key file is refused before anything starts.
sed -i '/^api_key_file/d' "$tmp/conf"
out="$("$launcher" -c "$tmp/conf" preflight 2>&1)"; rc=$?
[ $rc -ne 0 ] && grep -q "give api_key_file" <<<"$out" || fail "an OpenAI API without a key passed"
# NCCL moves device values: a CPU cluster asking for it is refused before anything starts.
config glm-dsa-tiny
sed -i 's/^device = cpu$/device = cpu\ndataplane = nccl/' "$tmp/conf"
out="$("$launcher" -c "$tmp/conf" preflight 2>&1)"; rc=$?
[ $rc -ne 0 ] && grep -q "dataplane nccl needs device cuda" <<<"$out" || fail "dataplane nccl on a CPU cluster passed"
config glm-dsa-tiny
echo '{"changed": true}' >> "$tmp/b/glm-dsa-tiny/config.json"
out="$("$launcher" -c "$tmp/conf" preflight 2>&1)"; rc=$?
echo "$out" | grep -E "FAIL|preflight"
[ $rc -ne 0 ] && grep -q "model config.json differs between hosts" <<<"$out" || fail "differing model configs passed"

if [ "$failures" -gt 0 ]; then echo "cluster_netns: $failures failure(s)"; exit 1; fi
echo "cluster_netns: passed"
