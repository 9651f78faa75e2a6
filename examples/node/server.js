// A Stripe webhook receiver that books each event in a ledger exactly once.
//
//   CLAIMD_ADDR=127.0.0.1:50051 PORT=8000 LEDGER=ledger.db node server.js
//   LEDGER=ledger.db node server.js ledger     # print the ledger, a JSON line a row
//
// claimd decides which delivery of an event does the work; the guard turns
// its answer into the HTTP status Stripe should see. The ledger is a SQLite
// database, written through the guard's effect fence: the row and the
// fence commit together, so even a receiver killed between its commit and
// its answer to claimd books the event once.
import * as http from "node:http";
import { pathToFileURL } from "node:url";

import { createClient, describeGuardResult, guard } from "@claimd/client";
import Database from "better-sqlite3";

const MAX_BODY = 1 << 20; // Stripe events are far smaller

/**
 * DEFAULT_PORT is the receiver's port on 127.0.0.1 unless PORT says
 * otherwise: beside `make run`, whose claimd holds 50051 (gRPC) and 8080
 * (HTTP), so neither of those.
 */
export const DEFAULT_PORT = 8000;

/**
 * openLedger opens (creating when missing) the SQLite ledger at path. The
 * table has no unique constraint on event_id on purpose: the effect fence
 * alone keeps it to one row per event, and a test would see a second one.
 */
export function openLedger(path) {
  const db = new Database(path, { timeout: 10_000 });
  db.pragma("journal_mode = WAL");
  db.exec(`CREATE TABLE IF NOT EXISTS ledger (
    event_id      TEXT    NOT NULL,
    type          TEXT,
    amount        INTEGER,
    object_id     TEXT,
    order_id      TEXT,
    booked        INTEGER NOT NULL,
    fencing_token TEXT    NOT NULL,
    at            TEXT    NOT NULL
  )`);
  return db;
}

/** ledgerRows reads the ledger in booking order. */
export function ledgerRows(db) {
  return db.prepare("SELECT * FROM ledger ORDER BY rowid").all();
}

/**
 * createReceiver returns an http.Server (not yet listening) that takes
 * POST /webhooks/stripe and books one ledger row per event in db (from
 * openLedger).
 */
export function createReceiver({ client, db, namespace = "billing", logger }) {
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
      async (claim, _signal, ctx) => {
        // The side effect, in one transaction with the delivery's fence row.
        // When an earlier holder committed it and died before settling
        // (claim.reason LEASE_EXPIRED, state PROCESSING), the function does
        // not run: done is true and result is that holder's answer.
        const { result } = await ctx.effect(db, (tx, fx) => {
          const obj = event.data?.object ?? {};
          tx.prepare(
            `INSERT INTO ledger (event_id, type, amount, object_id, order_id, booked, fencing_token, at)
             VALUES (@event_id, @type, @amount, @object_id, @order_id, @booked, @fencing_token, @at)`,
          ).run({
            event_id: claim.key,
            type: event.type ?? null,
            amount: obj.amount ?? null,
            object_id: obj.id ?? null,
            order_id: obj.metadata?.order_id ?? null,
            booked: booked(tx, event.type, obj),
            fencing_token: claim.fencingToken.toString(),
            at: new Date().toISOString(),
          });
          fx.result = { received: true, event_id: claim.key };
        });
        return result;
      },
      logger ? { logger } : {},
    );

    const headers = { "content-type": result.status === 200 ? "application/json" : "text/plain" };
    if (result.retryAfter !== undefined) {
      headers["retry-after"] = String(result.retryAfter);
    }
    // The guard itself logs a handler's failure (and what needs an
    // operator); this line is for claimd not answering, before anything ran.
    if (result.status >= 500 && !result.ran) {
      console.error(`stripe ${event.id}: ${describeGuardResult(result)}`);
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
function booked(tx, type, obj) {
  if (type === "charge.succeeded") {
    return obj.amount ?? 0;
  }
  if (type === "charge.refunded") {
    return -((obj.amount_refunded ?? 0) - refunded(tx, obj.id));
  }
  return 0;
}

/** refunded is how much the refunds of charge booked out so far. */
function refunded(tx, charge) {
  return tx.prepare("SELECT coalesce(sum(-booked), 0) AS n FROM ledger WHERE object_id = ? AND type = 'charge.refunded'").get(charge).n;
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
  const ledgerPath = process.env.LEDGER ?? "ledger.db";
  const db = openLedger(ledgerPath);
  if (process.argv[2] === "ledger") {
    for (const row of ledgerRows(db)) {
      console.log(JSON.stringify(row));
    }
    db.close();
    return;
  }
  const client = createClient(process.env.CLAIMD_ADDR ?? "127.0.0.1:50051");
  const server = createReceiver({ client, db });
  const port = Number(process.env.PORT ?? DEFAULT_PORT);
  server.listen(port, "127.0.0.1", () => {
    const { address, port: bound } = server.address();
    console.log(`listening on http://${address}:${bound}/webhooks/stripe, ledger ${ledgerPath}`);
  });
  const stop = () => {
    server.close(() => {
      client.close();
      db.close();
      process.exit(0);
    });
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main();
}
