// A Stripe payment delivered out of order, end to end: internal/horizon's
// out_of_order fixture (the refund first, then the capture, stale processing
// and pending events, the refund again) POSTed to the receiver in the order
// its sequence.yaml lists, against a real claimd with the built-in Stripe
// lifecycles. The receiver has no ordering logic of its own.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { useReceiver } from "./env.js";

const here = dirname(fileURLToPath(import.meta.url));
const fixture = resolve(here, "../../../internal/horizon/testdata/lifecycles/stripe/out_of_order");
// A namespace of its own: the fixture's entities must start new.
const env = useReceiver({ tmpPrefix: "claimd-example-order-", namespace: `example-${randomBytes(6).toString("hex")}` });

/**
 * deliveries are sequence.yaml's [file, order] pairs, in order. The file is
 * read for these two keys only (no YAML parser here): each entry starts with
 * `- file:` and names its `order:` below.
 */
function deliveries() {
  const text = readFileSync(join(fixture, "sequence.yaml"), "utf8");
  const block = text.split("\ndeliveries:\n")[1].split("\nfinal:")[0] + "\n";
  const found = [...block.matchAll(/- file: (\S+)\n(?: {4}.*\n)*? {4}order: (\w+)/g)].map((m) => [m[1], m[2]]);
  assert.ok(found.length > 0 && found.length === block.split("- file:").length - 1, `sequence.yaml: read ${found}`);
  return found;
}

async function post(file) {
  const res = await fetch(env.url, {
    method: "POST",
    headers: { "content-type": "application/json", "stripe-signature": `t=${Date.now()},v1=${randomBytes(16).toString("hex")}` },
    body: readFileSync(join(fixture, file)),
  });
  return { status: res.status, body: await res.text(), retryAfter: res.headers.get("retry-after") };
}

test("a Stripe payment delivered out of order ends with the ledger correct", async () => {
  const seq = deliveries();
  for (const [i, [file, order]] of seq.entries()) {
    const r = await post(file);
    const what = `delivery ${i + 1} (${file}, ${order}): ${r.status} ${r.body}`;
    if (order === "defer") {
      // Stripe retries a 409; its retry is the replay.
      assert.equal(r.status, 409, what);
      assert.ok(Number(r.retryAfter) >= 1, `${what}: Retry-After ${r.retryAfter}`);
    } else if (order === "proceed") {
      assert.equal(r.status, 200, what);
      assert.match(r.body, /"received":true/, what);
    } else if (order === "supersede") {
      assert.equal(r.status, 200, what);
      assert.equal(r.body, "event superseded by a later state of its entity\n", what);
    } else {
      assert.fail(`sequence.yaml: unknown order ${order}`);
    }
  }
  // Stripe may deliver any of them again, in any order: nothing changes.
  for (const [file] of [...seq].reverse()) {
    const r = await post(file);
    assert.equal(r.status, 200, `redelivery of ${file}: ${r.status} ${r.body}`);
  }

  const rows = env.rows();
  const charge = "ch_3QxOrd2eZvKYlo2C1Rk5Zt9B";
  const intent = "pi_3QxOrd2eZvKYlo2C1Nq0Pq7A";
  assert.deepEqual(
    rows.map((r) => [r.event_id, r.type, r.object_id, r.booked]),
    [
      ["evt_3QxOrd2eZvKYlo2C0cHs0k03", "charge.succeeded", charge, 2000],
      ["evt_3QxOrd2eZvKYlo2C0aPs0k04", "payment_intent.succeeded", intent, 0],
      ["evt_3QxOrd2eZvKYlo2C0cHr3f05", "charge.refunded", charge, -2000],
    ],
  );
  const balance = rows.filter((r) => r.order_id === "A-1001").reduce((sum, r) => sum + r.booked, 0);
  assert.equal(balance, 0, "sequence.yaml's ledger: A-1001 ends at 0");
});
