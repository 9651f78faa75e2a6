// A Stripe webhook receiver that appends each event to a ledger exactly once.
//
//   CLAIMD_ADDR=127.0.0.1:50051 PORT=8080 LEDGER=ledger.jsonl node server.js
//
// claimd decides which delivery of an event does the work; the guard turns
// its answer into the HTTP status Stripe should see.
import { appendFile, readFile } from "node:fs/promises";
import * as http from "node:http";
import { pathToFileURL } from "node:url";

import { createClient, guard } from "@claimd/client";

const MAX_BODY = 1 << 20; // Stripe events are far smaller

/**
 * createReceiver returns an http.Server (not yet listening) that takes
 * POST /webhooks/stripe and appends one JSON line per event to ledgerPath.
 */
export function createReceiver({ client, ledgerPath, namespace = "billing", logger }) {
  return http.createServer(async (req, res) => {
    if (req.method !== "POST" || req.url !== "/webhooks/stripe") {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return;
    }
    let body;
    try {
      body = await readBody(req);
    } catch (err) {
      res.writeHead(413, { "content-type": "text/plain" }).end(`${err.message}\n`);
      return;
    }
    // A real receiver verifies the Stripe-Signature header here, before it
    // claims anything, so that forged events never reach claimd.
    let event;
    try {
      event = JSON.parse(body.toString("utf8"));
    } catch {
      res.writeHead(400, { "content-type": "text/plain" }).end("body is not JSON\n");
      return;
    }
    if (typeof event?.id !== "string") {
      res.writeHead(400, { "content-type": "text/plain" }).end("event has no id\n");
      return;
    }

    // The raw delivery goes to claimd, which keys it by Stripe's rule (the
    // body's "id") and fingerprints the body. Stripe's signature header
    // changes on every retry and is never part of the key.
    const result = await guard(
      client,
      { namespace, provider: "stripe", delivery: { headers: flatHeaders(req.headers), body } },
      async (claim) => {
        // The side effect. claim.reason / claim.state tell a LEASE_EXPIRED
        // taker how far a crashed predecessor got; appending a line is all
        // or nothing here, so there is nothing to reconcile.
        const obj = event.data?.object ?? {};
        const row = {
          event_id: claim.key,
          type: event.type ?? null,
          amount: obj.amount ?? null,
          object_id: obj.id ?? null,
          order_id: obj.metadata?.order_id ?? null,
          booked: await booked(ledgerPath, event.type, obj),
          fencing_token: claim.fencingToken.toString(),
          at: new Date().toISOString(),
        };
        await appendFile(ledgerPath, JSON.stringify(row) + "\n");
        return JSON.stringify({ received: true, event_id: claim.key });
      },
      logger ? { logger } : {},
    );

    const headers = { "content-type": result.status === 200 ? "application/json" : "text/plain" };
    if (result.retryAfter !== undefined) {
      headers["retry-after"] = String(result.retryAfter);
    }
    if (result.error && result.status >= 500) {
      console.error(`stripe ${event.id}: ${result.status}: ${result.error}`);
    }
    res.writeHead(result.status, headers).end(result.body);
  });
}

/**
 * booked is the money an event moves: a charge that succeeded brings its
 * amount in, a refund takes out what was refunded since the last one
 * (charge.refunded carries the charge's running amount_refunded), anything
 * else moves nothing. No ordering logic: claimd's Stripe lifecycles never
 * run a refund before its charge succeeded (DEFERRED: 409 with Retry-After,
 * Stripe retries), never a stale event (SUPERSEDED: 200), and one event of
 * a charge at a time, so reading the refunds booked so far is safe.
 */
async function booked(ledgerPath, type, obj) {
  if (type === "charge.succeeded") {
    return obj.amount ?? 0;
  }
  if (type === "charge.refunded") {
    return -((obj.amount_refunded ?? 0) - (await refunded(ledgerPath, obj.id)));
  }
  return 0;
}

/** refunded is how much the refunds of charge booked out so far. */
async function refunded(ledgerPath, charge) {
  let text = "";
  try {
    text = await readFile(ledgerPath, "utf8");
  } catch (err) {
    if (err.code !== "ENOENT") throw err;
  }
  return text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .filter((r) => r.object_id === charge && r.type === "charge.refunded")
    .reduce((sum, r) => sum - r.booked, 0);
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on("data", (c) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(new Error(`body larger than ${MAX_BODY} bytes`));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

/** flatHeaders joins repeated headers, as claimd takes one value per name. */
function flatHeaders(h) {
  const out = {};
  for (const [name, value] of Object.entries(h)) {
    if (value !== undefined) {
      out[name] = Array.isArray(value) ? value.join(", ") : value;
    }
  }
  return out;
}

async function main() {
  const client = createClient(process.env.CLAIMD_ADDR ?? "127.0.0.1:50051");
  const ledgerPath = process.env.LEDGER ?? "ledger.jsonl";
  const server = createReceiver({ client, ledgerPath });
  const port = Number(process.env.PORT ?? 8080);
  server.listen(port, "127.0.0.1", () => {
    const { address, port: bound } = server.address();
    console.log(`listening on http://${address}:${bound}/webhooks/stripe, ledger ${ledgerPath}`);
  });
  const stop = () => {
    server.close(() => {
      client.close();
      process.exit(0);
    });
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main();
}
