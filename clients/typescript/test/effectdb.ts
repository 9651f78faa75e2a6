// The effect tests' databases (clients/guardspec/README.md, "The runner's
// database"): a better-sqlite3 file, or a schema of its own on the
// PostgreSQL at $CLAIMD_TEST_POSTGRES_URL, with the runners' ledger table.
// The test runner and the effectspec receiver both open theirs here.
import { randomBytes } from "node:crypto";
import { join } from "node:path";

import Database from "better-sqlite3";
import pg from "pg";

import type { EffectDatabase } from "../src/index.js";

export type Dialect = "sqlite" | "postgres";

/** Fence is a claimd_effects row as read back. */
export interface Fence {
  fencingToken: bigint;
  result: Uint8Array | null;
}

/** TestDb is one effect database and the reads and writes the tests make on it. */
export interface TestDb {
  dialect: Dialect;
  /** handle is what the guard's effect is given: a pg Pool or a better-sqlite3 Database. */
  handle: EffectDatabase;
  /** insertLedger writes one ledger row through an effect's tx. */
  insertLedger(tx: unknown, namespace: string, key: string, writer: string): Promise<void>;
  ledgerRows(namespace: string, key: string): Promise<number>;
  /** ledgerWriters lists the writer of each ledger row of the key. */
  ledgerWriters(namespace: string, key: string): Promise<string[]>;
  fence(namespace: string, provider: string, key: string): Promise<Fence | null>;
  /**
   * commitFence is another holder's effect, committed without the guard: one
   * transaction that inserts a ledger row and the fence row.
   */
  commitFence(namespace: string, lease: { provider: string; key: string; fencingToken: bigint | number }, result: Uint8Array): Promise<void>;
  hasEffectsTable(): Promise<boolean>;
  close(): Promise<void>;
}

const insertLedgerPg = "INSERT INTO guardspec_ledger (namespace, key, writer) VALUES ($1, $2, $3)";
const insertLedgerSqlite = "INSERT INTO guardspec_ledger (namespace, key, writer) VALUES (?, ?, ?)";

/**
 * postgresUrl is $CLAIMD_TEST_POSTGRES_URL; its absence is an error, never
 * a reason to skip.
 */
export function postgresUrl(): string {
  const url = process.env["CLAIMD_TEST_POSTGRES_URL"];
  if (!url) {
    throw new Error("CLAIMD_TEST_POSTGRES_URL is not set: the effect tests need a PostgreSQL (clients/typescript/test.sh starts one with internal/testenv/cmd/testpg)");
  }
  return url;
}

/**
 * openTestDb opens a fresh effect database: for sqlite a new file in dir;
 * for postgres a new schema (the pool's search_path), so that no two
 * openers share a table. ledgerSchema is the contract's ledger DDL.
 */
export async function openTestDb(dialect: Dialect, dir: string, ledgerSchema: string): Promise<TestDb> {
  if (dialect === "sqlite") {
    return openSqlite(join(dir, `effects-${randomBytes(4).toString("hex")}.db`), ledgerSchema);
  }
  const url = postgresUrl();
  const schema = `ts_${randomBytes(6).toString("hex")}`;
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await admin.query(`CREATE SCHEMA ${schema}`);
  } finally {
    await admin.end();
  }
  const db = await openPostgres(url, schema, ledgerSchema);
  const close = db.close;
  db.close = async () => {
    await close();
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      await c.query(`DROP SCHEMA ${schema} CASCADE`);
    } finally {
      await c.end();
    }
  };
  return db;
}

/** openSqlite opens (creating when missing) the SQLite file at path. */
export function openSqlite(path: string, ledgerSchema: string): TestDb {
  const db = new Database(path);
  db.exec(ledgerSchema);
  return {
    dialect: "sqlite",
    handle: db,
    insertLedger: async (tx, namespace, key, writer) => {
      (tx as Database.Database).prepare(insertLedgerSqlite).run(namespace, key, writer);
    },
    ledgerRows: async (namespace, key) =>
      (db.prepare("SELECT count(*) AS n FROM guardspec_ledger WHERE namespace = ? AND key = ?").get(namespace, key) as { n: number }).n,
    ledgerWriters: async (namespace, key) =>
      (db.prepare("SELECT writer FROM guardspec_ledger WHERE namespace = ? AND key = ?").all(namespace, key) as { writer: string }[]).map((r) => r.writer),
    fence: async (namespace, provider, key) => {
      const row = db
        .prepare("SELECT fencing_token, result FROM claimd_effects WHERE namespace = ? AND provider = ? AND key = ?")
        .get(namespace, provider, key) as { fencing_token: number; result: Buffer | null } | undefined;
      return row ? { fencingToken: BigInt(row.fencing_token), result: row.result } : null;
    },
    commitFence: async (namespace, lease, result) => {
      db.transaction(() => {
        db.prepare(insertLedgerSqlite).run(namespace, lease.key, "guardspec-other");
        db.prepare("INSERT INTO claimd_effects (namespace, provider, key, fencing_token, result) VALUES (?, ?, ?, ?, ?)").run(
          namespace,
          lease.provider,
          lease.key,
          BigInt(lease.fencingToken),
          Buffer.from(result),
        );
      })();
    },
    hasEffectsTable: async () =>
      (db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'claimd_effects'").get() as { n: number }).n === 1,
    close: async () => {
      db.close();
    },
  };
}

/** openPostgres opens a pool on url whose tables live in schema (search_path). */
export async function openPostgres(url: string, schema: string | undefined, ledgerSchema: string): Promise<TestDb> {
  // Room for every delivery of an effectspec run to hold a transaction at
  // its gate at once.
  const pool = new pg.Pool({ connectionString: url, max: 64, ...(schema ? { options: `-c search_path=${schema}` } : {}) });
  try {
    await pool.query(ledgerSchema);
  } catch {
    // Two processes creating the ledger at once: the loser's CREATE fails on the catalog.
    await pool.query(ledgerSchema);
  }
  return {
    dialect: "postgres",
    handle: pool,
    insertLedger: async (tx, namespace, key, writer) => {
      await (tx as pg.PoolClient).query(insertLedgerPg, [namespace, key, writer]);
    },
    ledgerRows: async (namespace, key) =>
      Number((await pool.query("SELECT count(*) AS n FROM guardspec_ledger WHERE namespace = $1 AND key = $2", [namespace, key])).rows[0].n),
    ledgerWriters: async (namespace, key) =>
      (await pool.query("SELECT writer FROM guardspec_ledger WHERE namespace = $1 AND key = $2", [namespace, key])).rows.map((r: { writer: string }) => r.writer),
    fence: async (namespace, provider, key) => {
      const r = await pool.query("SELECT fencing_token, result FROM claimd_effects WHERE namespace = $1 AND provider = $2 AND key = $3", [namespace, provider, key]);
      const row = r.rows[0] as { fencing_token: string; result: Buffer | null } | undefined;
      return row ? { fencingToken: BigInt(row.fencing_token), result: row.result } : null;
    },
    commitFence: async (namespace, lease, result) => {
      const c = await pool.connect();
      try {
        await c.query("BEGIN");
        await c.query(insertLedgerPg, [namespace, lease.key, "guardspec-other"]);
        await c.query("INSERT INTO claimd_effects (namespace, provider, key, fencing_token, result) VALUES ($1, $2, $3, $4, $5)", [
          namespace,
          lease.provider,
          lease.key,
          String(lease.fencingToken),
          Buffer.from(result),
        ]);
        await c.query("COMMIT");
      } catch (e) {
        await c.query("ROLLBACK");
        throw e;
      } finally {
        c.release();
      }
    },
    hasEffectsTable: async () => (await pool.query("SELECT to_regclass('claimd_effects') IS NOT NULL AS ok")).rows[0].ok === true,
    close: () => pool.end(),
  };
}
