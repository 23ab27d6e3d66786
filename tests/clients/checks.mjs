// The reporting shared by the client scripts (tasks-client.mjs, legacy-client.mjs,
// tests/peers/node/ts-v2-tasks-client.mjs): `ok - ...` per passed check, `FAIL: ...`
// and exit 1 on the first failed one, with the recent wire exchange when the script
// traced any. No dependencies, so any script can import it by relative path.

/** The last wire messages, printed when a check fails. */
const wire = [];

/** Remember one wire message (`->` sent, `<-` received); printed as it goes with TASKS_CLIENT_TRACE set. */
export function trace(direction, message) {
  wire.push(`${direction} ${JSON.stringify(message)}`);
  if (wire.length > 40) wire.shift();
  if (process.env.TASKS_CLIENT_TRACE) console.log(`  ${direction} ${JSON.stringify(message)}`);
}

export function fail(message) {
  console.error(`FAIL: ${message}`);
  if (wire.length > 0) {
    console.error("recent wire exchange (task requests, newest last):");
    for (const line of wire) console.error(`  ${line}`);
  }
  process.exit(1);
}

export function check(cond, message) {
  if (!cond) fail(message);
}

export function ok(message) {
  console.log(`ok - ${message}`);
}

/** The text parts of a tool result, joined. */
export function text(result) {
  return (result?.content ?? [])
    .filter((c) => c.type === "text")
    .map((c) => c.text)
    .join("");
}
