# Sourced by the GPU check scripts: run LOGNAME LABEL COMMAND... runs COMMAND with its output in
# "$dir/LOGNAME", sets status=1 when it fails, and adds a line (label, exit code, seconds) to the
# summary array. The sourcing script sets dir, status=0 and summary=() first.
run() {
  local log="$dir/$1" label=$2; shift 2
  local start end rc
  start=$(date +%s.%N)
  { echo "== $label: $*"; "$@"; } > "$log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  [ "$rc" -eq 0 ] || status=1
  summary+=("$(printf '%-60s exit %d, %.1f s' "$label" "$rc" "$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')")")
}
