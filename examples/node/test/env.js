// A real claimd and the example receiver on a loopback port, for one test
// file: useReceiver registers the hooks that start them before its tests
// and stop them after, and returns the object they fill in.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before } from "node:test";
import { fileURLToPath } from "node:url";

import { createClient } from "@claimd/client";
import { buildClaimd, startClaimd } from "@claimd/client/testing";

import { createReceiver, ledgerRows, openLedger } from "../server.js";

const here = dirname(fileURLToPath(import.meta.url));

/**
 * useReceiver returns { url, rows, db, client, namespace } once its before
 * hook ran: url is the receiver's Stripe endpoint, rows() reads its ledger
 * (a SQLite file, db) in booking order, client talks to the receiver's
 * claimd. namespace, when given, is the receiver's claimd namespace.
 */
export function useReceiver({ tmpPrefix, namespace } = {}) {
  const env = {};
  let claimd, client, receiver, dir, db;
  before(async () => {
    const bin =
      process.env.CLAIMD_BIN ?? buildClaimd(resolve(here, "../../.."), join(here, "../../../clients/typescript/.build/claimd"));
    claimd = await startClaimd({ bin });
    client = createClient(claimd.target);
    dir = mkdtempSync(join(tmpdir(), tmpPrefix ?? "claimd-example-"));
    db = openLedger(join(dir, "ledger.db"));
    env.rows = () => ledgerRows(db);
    env.db = db;
    env.client = client;
    env.namespace = namespace ?? "billing";
    receiver = createReceiver({ client, db, namespace, logger: { warn() {} } });
    await new Promise((r) => receiver.listen(0, "127.0.0.1", r));
    env.url = `http://127.0.0.1:${receiver.address().port}/webhooks/stripe`;
  });
  after(async () => {
    await new Promise((r) => (receiver ? receiver.close(r) : r()));
    client?.close();
    db?.close();
    const code = await claimd?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
    assert.equal(code, 0, `claimd exit code = ${code}, want 0`);
  });
  return env;
}
