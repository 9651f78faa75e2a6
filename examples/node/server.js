// A Stripe webhook receiver that appends each event to a ledger exactly once.
//
//   CLAIMD_ADDR=127.0.0.1:50051 PORT=8080 LEDGER=ledger.jsonl node server.js
//
// claimd decides which delivery of an event does the work; the guard turns
// its answer into the HTTP status Stripe should see.
import { appendFile } from "node:fs/promises";
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
        const row = {
          event_id: claim.key,
          type: event.type ?? null,
          amount: event.data?.object?.amount ?? null,
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
