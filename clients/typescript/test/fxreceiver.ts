// fxreceiver is the TypeScript client's receiver for effectspec, the crash
// and zombie driver (clients/guardspec/README.md, "Effect processes"). It
// guards deliveries of provider stripe by event id with guard and writes
// one ledger row per delivery through ctx.effect, in the database
// effectspec names:
//
//   node dist/test/fxreceiver.js --claimd ADDR --namespace NS --db sqlite:PATH|postgres://URL
//
// It reads one JSON object per line on standard input ({"deliver": ID,
// "lease_ms": N, "wait_ms": N, "gate": G?, "raise": true?} and {"go": ID}),
// handles each delivery in a promise of its own, and writes its ready line,
// gate lines and answers on standard output, one write per line. It logs
// to standard error and exits when standard input closes, after answering
// the deliveries under way.
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";

import Database from "better-sqlite3";
import pg from "pg";

import { createClient, guard, type EffectDatabase } from "../src/index.js";

type Gate = "before_effect" | "in_effect" | "after_commit";

interface Command {
  deliver?: string;
  lease_ms?: number;
  wait_ms?: number;
  gate?: Gate;
  raise?: boolean;
  go?: string;
}

/** out writes one JSON line; a pipe's writes are synchronous on Linux, so lines never interleave. */
function out(v: unknown): void {
  process.stdout.write(JSON.stringify(v) + "\n");
}

/** Gates hold one promise per event, resolved by its "go"; a "go" that comes before the gate is kept. */
class Gates {
  private readonly m = new Map<string, { promise: Promise<void>; resolve: () => void }>();

  private get(id: string) {
    let g = this.m.get(id);
    if (!g) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      g = { promise, resolve };
      this.m.set(id, g);
    }
    return g;
  }

  release(id: string): void {
    this.get(id).resolve();
  }

  /** at stops the delivery at point when it is its gate: it says so and waits for the event's "go". */
  async at(id: string, gate: Gate | undefined, point: Gate): Promise<void> {
    if (gate !== point) {
      return;
    }
    const g = this.get(id);
    out({ event: id, at: point });
    await g.promise;
  }
}

interface Ledger {
  db: EffectDatabase;
  insert(tx: unknown, namespace: string, key: string, writer: string): Promise<void>;
  close(): Promise<void>;
}

/** openLedger opens --db with the driver a Node service would use. */
function openLedger(arg: string): Ledger {
  const insert = "INSERT INTO guardspec_ledger (namespace, key, writer) VALUES ";
  if (arg.startsWith("sqlite:")) {
    // A writer queued behind another process's BEGIN IMMEDIATE waits for
    // the lock (up to the busy timeout) instead of failing at once.
    const db = new Database(arg.slice("sqlite:".length), { timeout: 30_000 });
    db.pragma("journal_mode = WAL");
    const stmt = db.prepare(insert + "(?, ?, ?)");
    return {
      db,
      insert: async (_tx, ns, key, writer) => void stmt.run(ns, key, writer),
      close: async () => void db.close(),
    };
  }
  if (arg.startsWith("postgres://") || arg.startsWith("postgresql://")) {
    // Room for every delivery of a run to hold a transaction at its gate at once.
    const pool = new pg.Pool({ connectionString: arg, max: 64 });
    pool.on("error", (e) => console.error(`fxreceiver: idle pg connection: ${e.message}`));
    return {
      db: pool,
      insert: async (tx, ns, key, writer) => void (await (tx as pg.PoolClient).query(insert + "($1, $2, $3)", [ns, key, writer])),
      close: () => pool.end(),
    };
  }
  throw new Error(`--db ${JSON.stringify(arg)}: want sqlite:PATH or a postgres:// URL`);
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { claimd: { type: "string" }, namespace: { type: "string" }, db: { type: "string" } } });
  if (!values.claimd || !values.namespace || !values.db) {
    throw new Error("--claimd, --namespace and --db are required");
  }
  const namespace = values.namespace;
  const ledger = openLedger(values.db);
  const client = createClient(values.claimd);
  const writer = String(process.pid);
  const gates = new Gates();

  async function deliver(id: string, c: Command): Promise<void> {
    const r = await guard(
      client,
      {
        namespace,
        provider: "stripe",
        eventId: id,
        ...(c.lease_ms ? { leaseMs: c.lease_ms } : {}),
        ...(c.wait_ms ? { waitMs: c.wait_ms } : {}),
      },
      async (claim, _signal, ctx) => {
        await gates.at(id, c.gate, "before_effect");
        const fx = await ctx.effect(ledger.db, async (tx, fx) => {
          await ledger.insert(tx, namespace, claim.key, writer);
          fx.result = { event: id };
          await gates.at(id, c.gate, "in_effect");
          if (c.raise) {
            throw new Error("fxreceiver: raised inside the effect, as asked");
          }
        });
        await gates.at(id, c.gate, "after_commit");
        return fx.result;
      },
    );
    if (r.error !== undefined) {
      console.error(`fxreceiver: delivery ${id}: status ${r.status}: ${String(r.error)}`);
    }
    out({ event: id, status: r.status, body: Buffer.from(r.body).toString("utf8"), done: r.effect?.done === true });
  }

  out({ ready: true });
  const pending: Promise<void>[] = [];
  for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    let c: Command;
    try {
      c = JSON.parse(line) as Command;
    } catch (e) {
      console.error(`fxreceiver: a line that is not a command: ${line}: ${String(e)}`);
      continue;
    }
    if (typeof c.deliver === "string") {
      const id = c.deliver;
      pending.push(deliver(id, c).catch((e: unknown) => console.error(`fxreceiver: delivery ${id}: ${String(e)}`)));
    } else if (typeof c.go === "string") {
      gates.release(c.go);
    } else {
      console.error(`fxreceiver: a line that is neither deliver nor go: ${line}`);
    }
  }
  await Promise.all(pending); // answer what is under way, then exit
  client.close();
  await ledger.close();
}

main().catch((e: unknown) => {
  console.error(`fxreceiver: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
});
