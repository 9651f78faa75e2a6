// End to end: a real claimd, the receiver on a loopback port, Stripe-style
// POSTs, and the ledger database as the only witness.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";

import { guard } from "@claimd/client";

import { useReceiver } from "./env.js";

const env = useReceiver();

function stripeEvent() {
  const id = `evt_${randomBytes(8).toString("hex")}`;
  return { id, type: "charge.succeeded", data: { object: { id: `ch_${id}`, amount: 4200 } } };
}

/** post sends the event as Stripe does; each retry carries a fresh signature. */
async function post(event) {
  const res = await fetch(env.url, {
    method: "POST",
    headers: { "content-type": "application/json", "stripe-signature": `t=${Date.now()},v1=${randomBytes(16).toString("hex")}` },
    body: JSON.stringify(event),
  });
  return { status: res.status, body: await res.text(), retryAfter: res.headers.get("retry-after") };
}

function ledgerRows(eventId) {
  return env.rows().filter((row) => row.event_id === eventId);
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

test("a holder that booked the event and died before settling: the next delivery books nothing and answers the stored result", async () => {
  const ev = stripeEvent();
  const body = Buffer.from(JSON.stringify(ev));
  // The first holder books through the fence, as the receiver does, then
  // fails before it settles: claimd releases the event, the fence stands.
  const first = await guard(
    env.client,
    { namespace: env.namespace, provider: "stripe", delivery: { headers: { "content-type": "application/json" }, body } },
    async (claim, _signal, ctx) => {
      await ctx.effect(env.db, (tx, fx) => {
        tx.prepare("INSERT INTO ledger (event_id, type, amount, booked, fencing_token, at) VALUES (?, ?, 4200, 4200, ?, ?)").run(
          claim.key,
          ev.type,
          claim.fencingToken.toString(),
          new Date().toISOString(),
        );
        fx.result = { received: true, event_id: claim.key, by: "the first holder" };
      });
      throw new Error("died before settling");
    },
    { logger: { warn() {} } },
  );
  assert.equal(first.status, 500, `the first holder: ${first.status} ${first.error}`);
  assert.equal(ledgerRows(ev.id).length, 1);

  const r = await post(ev);
  assert.equal(r.status, 200, `POST ${ev.id}: ${r.status} ${r.body}`);
  assert.equal(r.body, JSON.stringify({ received: true, event_id: ev.id, by: "the first holder" }), "the recovered answer");
  assert.equal(ledgerRows(ev.id).length, 1, "the receiver must not book the event again");
  const again = await post(ev);
  assert.equal(again.body, r.body, "a duplicate gets the recovered result");
});

test("a body that is not a Stripe event is refused before claimd", async () => {
  const res = await fetch(env.url, { method: "POST", body: "not json" });
  assert.equal(res.status, 400);
});
