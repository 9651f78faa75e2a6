// The effect fence (clients/GUARD.md, "Exactly-once effects") beyond what
// the guardspec scenarios say: misuse, the other node-postgres handles,
// concurrent effects on one connection, the first-use race, pruning, a
// lost claim before the commit. Each test runs on SQLite and on the
// PostgreSQL at $CLAIMD_TEST_POSTGRES_URL, against a real claimd.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import pg from "pg";

import {
  createClient,
  EffectError,
  effectKey,
  guard,
  leaseOf,
  Outcome,
  pruneEffects,
  type ClaimdClient,
  type EffectOutcome,
  type GuardContext,
} from "../src/index.js";
import { startClaimd, type Claimd } from "../src/testing.js";
import { openTestDb, postgresUrl, type Dialect, type TestDb } from "./effectdb.js";
import { claimdBin, deferred, eventId, pkgDir, str, within } from "./helpers.js";

const ledgerSchema = (JSON.parse(readFileSync(join(pkgDir, "..", "guardspec", "scenarios.json"), "utf8")) as { effects: { ledger_schema: string } }).effects
  .ledger_schema;
const NS = "ts-effect-test";
const quiet = { warn: () => {} };

let server: Claimd;
let client: ClaimdClient;
const dir = mkdtempSync(join(tmpdir(), "ts-effect-"));

before(async () => {
  server = await startClaimd({ bin: claimdBin() });
  client = createClient(server.target);
});

after(async () => {
  client?.close();
  const code = await server?.stop();
  rmSync(dir, { recursive: true, force: true });
  assert.equal(code, 0, `claimd exit code = ${code}, want 0`);
});

function req(id: string) {
  return { namespace: NS, provider: "stripe", eventId: id };
}

for (const dialect of ["sqlite", "postgres"] as Dialect[]) {
  describe(`effect on ${dialect}`, () => {
    const dbs: TestDb[] = [];
    const fresh = async (): Promise<TestDb> => {
      const db = await openTestDb(dialect, dir, ledgerSchema);
      dbs.push(db);
      return db;
    };
    after(async () => {
      await Promise.all(dbs.map((d) => d.close()));
    });

    test("a second effect in one delivery and an effect after the handler returned are refused", async () => {
      const db = await fresh();
      const id = eventId();
      let second: unknown;
      let kept: GuardContext | undefined;
      const r = await guard(
        client,
        req(id),
        async (claim, _signal, ctx) => {
          kept = ctx;
          const first = await ctx.effect(db.handle, (tx) => db.insertLedger(tx, NS, claim.key, "t"));
          second = await ctx.effect(db.handle, (tx) => db.insertLedger(tx, NS, claim.key, "t")).catch((e: unknown) => e);
          return first.result;
        },
        { logger: quiet },
      );
      assert.equal(r.status, 200, String(r.error));
      assert.ok(second instanceof EffectError, `second effect: ${String(second)}, want an EffectError`);
      await assert.rejects(kept!.effect(db.handle, () => {}), EffectError);
      assert.equal(await db.ledgerRows(NS, id), 1);
    });

    test("ctx.effectKey is effectKey of the claim's namespace, provider and key", async () => {
      const id = eventId();
      let got = "";
      await guard(client, req(id), (_c, _s, ctx) => void (got = ctx.effectKey("charge")), { logger: quiet });
      assert.equal(got, effectKey({ namespace: NS, provider: "stripe", key: id }, "charge"));
      assert.match(got, /^claimd-[0-9a-f]{32}$/);
      assert.notEqual(got, effectKey({ namespace: NS, provider: "stripe", key: id }, "refund"));
    });

    test("the guard's result carries what the effect did", async () => {
      const db = await fresh();
      const id = eventId();
      const r = await guard(
        client,
        req(id),
        async (claim, _s, ctx) =>
          (
            await ctx.effect(db.handle, async (tx, fx) => {
              await db.insertLedger(tx, NS, claim.key, "t");
              fx.result = { booked: 1 };
            })
          ).result,
        { logger: quiet },
      );
      assert.equal(r.status, 200, String(r.error));
      assert.equal(str(r.body), '{"booked":1}');
      assert.deepEqual(r.effect, { done: false, result: { booked: 1 }, fencingToken: 1n });
      const f = await db.fence(NS, "stripe", id);
      assert.equal(f && str(f.result!), '{"booked":1}');
    });

    test("concurrent deliveries whose effects await inside their transactions each write once", async () => {
      const db = await fresh();
      const ids = Array.from({ length: 8 }, () => eventId());
      // Every effect's function waits until all have started the handler,
      // so the effects overlap in time as far as the connection allows.
      const started = deferred();
      let handlers = 0;
      const results = await within(
        Promise.all(
          ids.map((id) =>
            guard(
              client,
              req(id),
              async (claim, _s, ctx) => {
                if (++handlers === ids.length) {
                  started.resolve();
                }
                await started.promise;
                const out = await ctx.effect(db.handle, async (tx, fx) => {
                  await db.insertLedger(tx, NS, claim.key, "a");
                  await new Promise((r) => setImmediate(r));
                  await db.insertLedger(tx, NS, claim.key, "b");
                  fx.result = claim.key;
                });
                return out.result;
              },
              { logger: quiet },
            ),
          ),
        ),
        20_000,
        "eight guarded deliveries",
      );
      for (const [i, r] of results.entries()) {
        assert.equal(r.status, 200, `delivery ${ids[i]}: ${String(r.error)}`);
        assert.equal(str(r.body), ids[i]);
        assert.deepEqual(await db.ledgerWriters(NS, ids[i]!), ["a", "b"], `ledger of ${ids[i]}`);
      }
    });

    test("a claim lost before the commit rolls the effect back", async () => {
      const db = await fresh();
      const id = eventId();
      const input = { ...req(id), leaseMs: 300 };
      const inEffect = deferred();
      let out: unknown;
      const r = await guard(
        client,
        input,
        async (claim, signal, ctx) => {
          out = await ctx
            .effect(db.handle, async (tx) => {
              await db.insertLedger(tx, NS, claim.key, "zombie");
              inEffect.resolve();
              // Another holder takes over: release, claim; the heartbeat
              // then meets STALE_TOKEN and aborts the signal.
              await client.release(leaseOf(input, claim));
              const taker = await client.claim({ ...req(id), holder: "taker" });
              assert.equal(taker.outcome, Outcome.ACQUIRED);
              await within(
                new Promise<void>((resolve) => (signal.aborted ? resolve() : signal.addEventListener("abort", () => resolve()))),
                10_000,
                "the abort after a takeover",
              );
            })
            .catch((e: unknown) => e);
        },
        { logger: quiet },
      );
      await inEffect.promise;
      assert.equal(r.status, 409, `status ${r.status}, want 409 (error ${String(r.error)})`);
      assert.ok(out instanceof Error && !(out instanceof EffectError), `effect: ${String(out)}, want the abort reason`);
      assert.equal(await db.ledgerRows(NS, id), 0, "the zombie's ledger row must roll back");
      assert.equal(await db.fence(NS, "stripe", id), null, "the zombie's fence must roll back");
    });

    // Only better-sqlite3 can tell (PostgreSQL warns and carries on).
    if (dialect === "sqlite") {
      test("an effect inside a transaction the caller opened is refused, and the caller's transaction is left alone", async () => {
        const db = await fresh();
        const sqlite = db.handle as unknown as { exec(s: string): void; inTransaction: boolean };
        sqlite.exec("BEGIN");
        try {
          const r = await guard(client, req(eventId()), async (_c, _s, ctx) => ctx.effect(db.handle, () => {}), { logger: quiet });
          assert.equal(r.status, 500);
          assert.ok(r.error instanceof EffectError, String(r.error));
          assert.equal(sqlite.inTransaction, true);
        } finally {
          sqlite.exec("ROLLBACK");
        }
      });
    }

    test("pruneEffects deletes the fences created before the cutoff and keeps the rest", async () => {
      const db = await fresh();
      const ids = [eventId(), eventId()];
      for (const id of ids) {
        await guard(client, req(id), async (claim, _s, ctx) => ctx.effect(db.handle, (tx) => db.insertLedger(tx, NS, claim.key, "p")), { logger: quiet });
      }
      assert.equal(await pruneEffects(db.handle, new Date(Date.now() - 3_600_000)), 0, "a cutoff an hour ago");
      assert.notEqual(await db.fence(NS, "stripe", ids[0]!), null);
      assert.equal(await pruneEffects(db.handle, new Date(Date.now() + 3_600_000)), 2, "a cutoff an hour ahead");
      assert.equal(await db.fence(NS, "stripe", ids[0]!), null);
      assert.equal(await db.ledgerRows(NS, ids[0]!), 1, "pruning leaves the effect's own writes");
    });
  });
}

describe("effect on the other node-postgres handles", () => {
  let url: string;
  let schema: string;
  let admin: pg.Client;
  before(async () => {
    url = postgresUrl();
    admin = new pg.Client({ connectionString: url });
    await admin.connect();
    schema = `ts_handles_${Date.now()}`;
    await admin.query(`CREATE SCHEMA ${schema}`);
  });
  after(async () => {
    await admin?.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin?.end();
  });

  test("a Client and a PoolClient hold the effect's transaction themselves", async () => {
    const options = `-c search_path=${schema}`;
    const c = new pg.Client({ connectionString: url, options });
    await c.connect();
    const pool = new pg.Pool({ connectionString: url, options, max: 2 });
    const pc = await pool.connect();
    try {
      await c.query(ledgerSchema);
      for (const handle of [c, pc]) {
        const id = eventId();
        let out: EffectOutcome | undefined;
        const r = await guard(
          client,
          req(id),
          async (claim, _s, ctx) => {
            out = await ctx.effect(handle, async (tx, fx) => {
              assert.equal(tx, handle, "tx must be the connection given");
              await tx.query("INSERT INTO guardspec_ledger (namespace, key, writer) VALUES ($1, $2, $3)", [NS, claim.key, "h"]);
              fx.result = "ok";
            });
            return out.result;
          },
          { logger: quiet },
        );
        assert.equal(r.status, 200, String(r.error));
        assert.equal(out?.done, false);
        const n = await admin.query(`SELECT count(*)::int AS n FROM ${schema}.guardspec_ledger WHERE key = $1`, [id]);
        assert.equal(n.rows[0].n, 1);
        // The connection is out of the transaction: a statement of its own autocommits.
        const tx = await handle.query("SELECT now() = statement_timestamp() AS own");
        assert.equal(tx.rows[0].own, true, "the handle is still inside a transaction");
      }
    } finally {
      pc.release();
      await pool.end();
      await c.end();
    }
  });

  test("effects that create claimd_effects at the same moment from separate pools all succeed", async () => {
    const s = `ts_race_${Date.now()}`;
    await admin.query(`CREATE SCHEMA ${s}`);
    const pools = Array.from({ length: 4 }, () => new pg.Pool({ connectionString: url, options: `-c search_path=${s}`, max: 1 }));
    try {
      await pools[0]!.query(ledgerSchema);
      const ids = pools.map(() => eventId());
      const results = await Promise.all(
        pools.map((p, i) =>
          guard(
            client,
            req(ids[i]!),
            async (claim, _s, ctx) =>
              (await ctx.effect(p, (tx) => tx.query("INSERT INTO guardspec_ledger (namespace, key, writer) VALUES ($1, $2, $3)", [NS, claim.key, "r"]))).done,
            { logger: quiet },
          ),
        ),
      );
      for (const r of results) {
        assert.equal(r.status, 200, String(r.error));
      }
      const n = await admin.query(`SELECT count(*)::int AS n FROM ${s}.claimd_effects`);
      assert.equal(n.rows[0].n, pools.length);
    } finally {
      await Promise.all(pools.map((p) => p.end()));
      await admin.query(`DROP SCHEMA ${s} CASCADE`);
    }
  });
});
