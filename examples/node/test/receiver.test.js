// End to end: a real claimd, the receiver on a loopback port, Stripe-style
// POSTs, and the ledger file as the only witness.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { createClient } from "@claimd/client";
import { buildClaimd, startClaimd } from "@claimd/client/testing";

import { createReceiver } from "../server.js";

const here = dirname(fileURLToPath(import.meta.url));
let claimd, client, receiver, url, dir, ledger;

before(async () => {
  const bin =
    process.env.CLAIMD_BIN ?? buildClaimd(resolve(here, "../../.."), join(here, "../../../clients/typescript/.build/claimd"));
  claimd = await startClaimd({ bin });
  client = createClient(claimd.target);
  dir = mkdtempSync(join(tmpdir(), "claimd-example-"));
  ledger = join(dir, "ledger.jsonl");
  receiver = createReceiver({ client, ledgerPath: ledger, logger: { warn() {} } });
  await new Promise((r) => receiver.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${receiver.address().port}/webhooks/stripe`;
});

after(async () => {
  await new Promise((r) => (receiver ? receiver.close(r) : r()));
  client?.close();
  const code = await claimd?.stop();
  rmSync(dir, { recursive: true, force: true });
  assert.equal(code, 0, `claimd exit code = ${code}, want 0`);
});

function stripeEvent() {
  const id = `evt_${randomBytes(8).toString("hex")}`;
  return { id, type: "charge.succeeded", data: { object: { id: `ch_${id}`, amount: 4200 } } };
}

/** post sends the event as Stripe does; each retry carries a fresh signature. */
async function post(event) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", "stripe-signature": `t=${Date.now()},v1=${randomBytes(16).toString("hex")}` },
    body: JSON.stringify(event),
  });
  return { status: res.status, body: await res.text(), retryAfter: res.headers.get("retry-after") };
}

function ledgerRows(eventId) {
  if (!existsSync(ledger)) return [];
  return readFileSync(ledger, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .filter((row) => row.event_id === eventId);
}

test("the same event delivered twice appends one ledger row", async () => {
  const ev = stripeEvent();
  const first = await post(ev);
  const second = await post(ev);
  assert.equal(first.status, 200, `first POST ${ev.id}: status ${first.status} ${first.body}`);
  assert.equal(second.status, 200, `second POST ${ev.id}: status ${second.status} ${second.body}`);
  assert.equal(second.body, first.body, "the duplicate must get the stored answer");
  const rows = ledgerRows(ev.id);
  assert.equal(rows.length, 1, `ledger rows for ${ev.id} = ${rows.length}, want 1`);
  assert.equal(rows[0].amount, 4200);
});

test("20 concurrent deliveries of one event append one ledger row", async () => {
  const ev = stripeEvent();
  const results = await Promise.all(Array.from({ length: 20 }, () => post(ev)));
  for (const r of results) {
    assert.ok(r.status === 200 || r.status === 409, `POST ${ev.id}: status ${r.status} ${r.body}, want 200 or 409`);
    if (r.status === 409) {
      assert.ok(Number(r.retryAfter) >= 1, `409 without a Retry-After: ${r.retryAfter}`);
    }
  }
  const rows = ledgerRows(ev.id);
  assert.equal(rows.length, 1, `ledger rows for ${ev.id} = ${rows.length}, want 1`);
  const later = await post(ev);
  assert.equal(later.status, 200, `a later retry of ${ev.id}: status ${later.status}`);
  assert.equal(ledgerRows(ev.id).length, 1);
});

test("a body that is not a Stripe event is refused before claimd", async () => {
  const res = await fetch(url, { method: "POST", body: "not json" });
  assert.equal(res.status, 400);
});
