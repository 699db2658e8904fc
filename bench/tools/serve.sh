# Shared by the serving benchmarks (source it): start `ferry serve`, wait for client jobs, stop.
#   serve_start BIN ARGS...   starts BIN/ferry serve ARGS in the background (its log in $serve_log,
#                              its pid in $serve_pid) and waits up to 60 s until it serves
#   serve_wait_clients        waits for every background job but the server
#   serve_stop                SIGTERM, wait, remove the log

serve_start() {
  local bin=$1; shift
  serve_log=$(mktemp)
  "$bin/ferry" serve "$@" 2>"$serve_log" &
  serve_pid=$!
  for _ in $(seq 1 600); do grep -q "ferry serve: serving" "$serve_log" && return 0; sleep 0.1; done
  cat "$serve_log" >&2
  echo "bench: ferry serve did not come up" >&2
  return 1
}

serve_wait_clients() {
  wait $(jobs -p | grep -v "^$serve_pid$") 2>/dev/null || true
}

serve_stop() {
  kill -TERM "$serve_pid"
  wait "$serve_pid" 2>/dev/null || true
  rm -f "$serve_log"
}
