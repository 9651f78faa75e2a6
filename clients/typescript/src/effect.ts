/**
 * The effect fence (clients/GUARD.md, "Exactly-once effects"): a handler's
 * writes to its own database commit in one transaction with a row of
 * claimd_effects for the delivery, and the first transaction to commit that
 * row wins. This file imports no database driver: it speaks to a
 * node-postgres Client, Pool or PoolClient, or to a better-sqlite3 Database,
 * through the few methods it needs (declared below), so that installing
 * @claimd/client never installs a driver.
 */
import { createHash } from "node:crypto";

import type { RecordRef } from "./client.js";
import { resultBytes } from "./result.js";

/**
 * EFFECTS_SCHEMA is the DDL of claimd_effects per dialect, byte for byte
 * what effect executes on first use (clients/guardspec/scenarios.json,
 * effects.schema) and what `claimd effects-schema --dialect D` prints. No
 * guard speaks MySQL yet; its DDL is here for migration tools.
 */
export const EFFECTS_SCHEMA = {
  postgres:
    "CREATE TABLE IF NOT EXISTS claimd_effects (\n" +
    "    namespace     text        NOT NULL,\n" +
    "    provider      text        NOT NULL,\n" +
    "    key           text        NOT NULL,\n" +
    "    fencing_token bigint      NOT NULL,\n" +
    "    result        bytea,\n" +
    "    created_at    timestamptz NOT NULL DEFAULT now(),\n" +
    "    PRIMARY KEY (namespace, provider, key)\n" +
    ")",
  sqlite:
    "CREATE TABLE IF NOT EXISTS claimd_effects (\n" +
    "    namespace     TEXT    NOT NULL,\n" +
    "    provider      TEXT    NOT NULL,\n" +
    "    key           TEXT    NOT NULL,\n" +
    "    fencing_token INTEGER NOT NULL,\n" +
    "    result        BLOB,\n" +
    "    created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),\n" +
    "    PRIMARY KEY (namespace, provider, key)\n" +
    ")",
  mysql:
    "CREATE TABLE IF NOT EXISTS claimd_effects (\n" +
    "    namespace     VARCHAR(63)     NOT NULL,\n" +
    "    provider      VARCHAR(63)     NOT NULL,\n" +
    "    `key`         VARCHAR(255)    NOT NULL,\n" +
    "    fencing_token BIGINT UNSIGNED NOT NULL,\n" +
    "    result        MEDIUMBLOB,\n" +
    "    created_at    TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6),\n" +
    "    PRIMARY KEY (namespace, provider, `key`)\n" +
    ") CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
} as const;

/** The fence's statements per dialect, the same as every other guard's. */
const statements = {
  postgres: {
    begin: "BEGIN",
    insert: "INSERT INTO claimd_effects (namespace, provider, key, fencing_token) VALUES ($1, $2, $3, $4) ON CONFLICT (namespace, provider, key) DO NOTHING",
    selectDone: "SELECT fencing_token, result FROM claimd_effects WHERE namespace = $1 AND provider = $2 AND key = $3",
    setResult: "UPDATE claimd_effects SET result = $1 WHERE namespace = $2 AND provider = $3 AND key = $4",
    prune: "DELETE FROM claimd_effects WHERE created_at < $1",
  },
  sqlite: {
    // IMMEDIATE takes the write lock at once: writers queue here (under the
    // connection's busy timeout) instead of failing at commit.
    begin: "BEGIN IMMEDIATE",
    insert: "INSERT INTO claimd_effects (namespace, provider, key, fencing_token) VALUES (?, ?, ?, ?) ON CONFLICT (namespace, provider, key) DO NOTHING",
    selectDone: "SELECT fencing_token, result FROM claimd_effects WHERE namespace = ? AND provider = ? AND key = ?",
    setResult: "UPDATE claimd_effects SET result = ? WHERE namespace = ? AND provider = ? AND key = ?",
    prune: "DELETE FROM claimd_effects WHERE created_at < ?",
  },
} as const;

/** SqliteStatement is what effect uses of a better-sqlite3 Statement. */
export interface SqliteStatement {
  run(...params: unknown[]): { changes: number };
  get(...params: unknown[]): unknown;
}

/** SqliteDatabase is what effect uses of a better-sqlite3 Database. */
export interface SqliteDatabase {
  exec(source: string): unknown;
  prepare(source: string): SqliteStatement;
  readonly inTransaction: boolean;
}

/** PgQueryable is what effect uses of a node-postgres Client or PoolClient. */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<{ rowCount: number | null; rows: unknown[] }>;
}

/** PgPoolClient is a node-postgres PoolClient: a connection checked out of a Pool. */
export interface PgPoolClient extends PgQueryable {
  release(err?: Error | boolean): void;
}

/** PgPool is a node-postgres Pool: effect checks one connection out for its transaction. */
export interface PgPool extends PgQueryable {
  connect(): Promise<PgPoolClient>;
}

/** EffectDatabase is any database effect speaks to. */
export type EffectDatabase = SqliteDatabase | PgQueryable;

/**
 * EffectTx is what an effect's function writes through, for a database of
 * type D: the Database itself (better-sqlite3), the Client or PoolClient
 * itself, or, for a Pool, the PoolClient checked out for the transaction.
 */
export type EffectTx<D> = D extends SqliteDatabase
  ? D
  : D extends { release(...args: never[]): unknown }
    ? D
    : D extends PgPool
      ? PoolClientOf<D>
      : D;

type PoolClientOf<D> = D extends { connect(): Promise<infer C> } ? (C extends PgQueryable ? C : PgPoolClient) : PgPoolClient;

/** Fx is a running effect, as its function sees it. */
export interface Fx {
  /**
   * result, when the function assigns it (anything but undefined), is stored
   * in the fence row with the effect's writes, encoded by the guard's rule
   * for results (bytes, a string as UTF-8, null as empty, else compact
   * JSON). Return it from the handler so that a recovery answers the same.
   */
  result: unknown;
  /** fencingToken is this holder's token, written to the fence row. */
  readonly fencingToken: bigint;
}

/** EffectFn does an effect's writes through tx; throwing rolls them back. */
export type EffectFn<D> = (tx: EffectTx<D>, fx: Fx) => unknown;

/** EffectOutcome is what effect returns. */
export interface EffectOutcome {
  /**
   * done is true when an earlier holder of the claim already committed this
   * delivery's effect: the function was not called, nothing was written,
   * and result and fencingToken are that holder's.
   */
  done: boolean;
  /**
   * result is what the function assigned to fx.result (undefined when it
   * assigned nothing) or, when done, the stored result's bytes (empty when
   * none was stored).
   */
  result: unknown;
  /** fencingToken is the token of the holder whose fence stands. */
  fencingToken: bigint;
}

/** EffectError is a misuse of effect: outside a guarded handler, or twice in one delivery. */
export class EffectError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "EffectError";
  }
}

/**
 * effectKey is a stable idempotency key for step of the delivery ref names,
 * for a downstream API (Stripe's or Adyen's Idempotency-Key): "claimd-" and
 * the first 32 hex digits of the SHA-256 of namespace, provider, key and
 * step joined by NUL bytes (UTF-8). The same across takeovers, replicas and
 * claimd's clients in every language, and different per step.
 */
export function effectKey(ref: RecordRef, step: string): string {
  const sum = createHash("sha256").update([ref.namespace, ref.provider, ref.key, step].join("\0"), "utf8").digest("hex");
  return `claimd-${sum.slice(0, 32)}`;
}

/**
 * pruneEffects deletes the fence rows created before `before` and returns
 * how many it deleted. A fence matters while claimd may still hand its
 * delivery to a new holder, i.e. within the provider's window (its ttl):
 * pass a cutoff older than the longest ttl in use, with a margin, from your
 * own clock. It creates claimd_effects when missing, like effect.
 */
export async function pruneEffects(db: EffectDatabase, before: Date): Promise<number> {
  const conn = connectionOf(db);
  await ensureSchema(conn);
  return conn.exclusive(async () => {
    const t = await conn.open();
    try {
      // SQLite's created_at is text in the DDL's strftime form, which is
      // toISOString's: they compare as the times do.
      const cutoff = conn.dialect === "sqlite" ? before.toISOString() : before;
      return await t.run(statements[conn.dialect].prune, [cutoff]);
    } finally {
      t.close();
    }
  });
}

/** FenceRef is what the fence row records of the holder's claim. */
export interface FenceRef extends RecordRef {
  fencingToken: bigint;
}

/**
 * runEffect is one effect: the fence's transaction on db for ref (the
 * contract's steps 2 to 5). signal aborts when the claim was lost: then the
 * effect does not commit, its writes roll back and it throws the reason.
 */
export async function runEffect<D extends EffectDatabase>(db: D, ref: FenceRef, fn: EffectFn<D>, signal: AbortSignal): Promise<EffectOutcome> {
  const conn = connectionOf(db);
  signal.throwIfAborted();
  await ensureSchema(conn);
  return conn.exclusive(async () => {
    const q = statements[conn.dialect];
    const t = await conn.open();
    let ended = false;
    // unsure is set when the transaction may still be open (a failed
    // commit or rollback): then the connection is discarded, not reused.
    let unsure: Error | undefined;
    try {
      await t.run(q.begin, []);
      const key = [ref.namespace, ref.provider, ref.key];
      const inserted = await t.run(q.insert, [...key, conn.dialect === "postgres" ? ref.fencingToken.toString() : ref.fencingToken]);
      if (inserted === 0) {
        // A fence is committed: the insert waited for its holder's
        // transaction (PostgreSQL) or for the write lock (SQLite), so what
        // is read now is committed. Nothing was written here; the rollback
        // below ends the transaction.
        const row = (await t.get(q.selectDone, key)) as { fencing_token: unknown; result: Uint8Array | null } | undefined;
        if (row === undefined) {
          throw new Error("claimd: effect: the fence row vanished between the insert and the read");
        }
        const stored = row.result === null ? new Uint8Array() : new Uint8Array(row.result.buffer, row.result.byteOffset, row.result.byteLength);
        return { done: true, result: stored, fencingToken: BigInt(row.fencing_token as string | number | bigint) };
      }
      const fx: Fx = { result: undefined, fencingToken: ref.fencingToken };
      await fn(t.tx as EffectTx<D>, fx);
      if (fx.result !== undefined) {
        const b = resultBytes(fx.result);
        await t.run(q.setResult, [Buffer.from(b.buffer, b.byteOffset, b.byteLength), ...key]);
      }
      // Lost the claim while the function ran: do not commit. The fence
      // would stop a second write anyway; rolling back leaves the event to
      // the new holder with nothing of ours in it.
      signal.throwIfAborted();
      ended = true;
      try {
        await t.run("COMMIT", []);
      } catch (e) {
        // It may have committed after all: then the next holder finds the fence.
        unsure = e instanceof Error ? e : new Error(String(e));
        await t.rollbackQuietly();
        throw new Error(`claimd: effect: commit: ${unsure.message}`, { cause: e });
      }
      return { done: false, result: fx.result, fencingToken: ref.fencingToken };
    } finally {
      if (!ended && !(await t.rollbackQuietly())) {
        unsure = new Error("claimd: effect: rollback failed");
      }
      t.close(unsure);
    }
  });
}

// --- the two drivers -----------------------------------------------------------

/** Txn is one checked-out connection that runs the fence's statements. */
interface Txn {
  /** tx is what the effect's function writes through. */
  tx: unknown;
  /** run executes a statement and returns how many rows it changed. */
  run(sql: string, params: unknown[]): Promise<number>;
  /** get returns the first row of a query, undefined when none. */
  get(sql: string, params: unknown[]): Promise<unknown>;
  /** rollbackQuietly ends an open transaction; false when that failed. */
  rollbackQuietly(): Promise<boolean>;
  /** close gives the connection back; a failure that left it unsure discards it. */
  close(failure?: Error): void;
}

/** Conn is one database as effect sees it. */
interface Conn {
  dialect: "postgres" | "sqlite";
  /** key identifies the database for the once-per-database schema check. */
  key: object;
  /** exclusive runs f when no other effect runs on the same connection. */
  exclusive<T>(f: () => Promise<T>): Promise<T>;
  open(): Promise<Txn>;
  /** ddl runs a statement outside any effect's transaction. */
  ddl(sql: string): Promise<void>;
}

function connectionOf(db: EffectDatabase): Conn {
  const d = db as unknown as { [k: string]: unknown };
  if (typeof d["query"] !== "function" && typeof d["exec"] === "function" && typeof d["prepare"] === "function") {
    return sqliteConn(db as SqliteDatabase);
  }
  if (typeof d["query"] === "function") {
    if (typeof d["release"] !== "function" && typeof d["connect"] === "function" && typeof d["totalCount"] === "number") {
      return pgPoolConn(db as PgPool);
    }
    return pgClientConn(db as PgQueryable);
  }
  throw new TypeError("claimd: effect: want a node-postgres Client, Pool or PoolClient, or a better-sqlite3 Database");
}

/**
 * A connection runs one transaction at a time. Deliveries that share one
 * better-sqlite3 Database or one pg Client queue here, in order, so that an
 * effect's function may await while its transaction stays open; a pg Pool
 * gives each effect a connection of its own instead.
 */
const queues = new WeakMap<object, Promise<unknown>>();

function exclusiveOn(key: object): <T>(f: () => Promise<T>) => Promise<T> {
  return <T>(f: () => Promise<T>): Promise<T> => {
    const prev = queues.get(key) ?? Promise.resolve();
    const run = prev.then(f, f);
    queues.set(
      key,
      run.then(
        () => undefined,
        () => undefined,
      ),
    );
    return run;
  };
}

function sqliteConn(db: SqliteDatabase): Conn {
  const txn: Txn = {
    tx: db,
    run: async (sql, params) => {
      if (params.length === 0) {
        db.exec(sql);
        return 0;
      }
      return db.prepare(sql).run(...params).changes;
    },
    get: async (sql, params) => db.prepare(sql).get(...params),
    rollbackQuietly: async () => {
      if (!db.inTransaction) {
        return true;
      }
      try {
        db.exec("ROLLBACK");
        return true;
      } catch {
        return false;
      }
    },
    close: () => {},
  };
  return {
    dialect: "sqlite",
    key: db,
    exclusive: exclusiveOn(db),
    open: async () => {
      if (db.inTransaction) {
        throw new EffectError("claimd: effect: the better-sqlite3 Database is inside a transaction already; an effect opens its own");
      }
      return txn;
    },
    ddl: async (sql) => {
      db.exec(sql);
    },
  };
}

function pgTxn(c: PgQueryable, close: (failure?: Error) => void): Txn {
  return {
    tx: c,
    run: async (sql, params) => (await c.query(sql, params)).rowCount ?? 0,
    get: async (sql, params) => (await c.query(sql, params)).rows[0],
    rollbackQuietly: async () => {
      try {
        await c.query("ROLLBACK");
        return true;
      } catch {
        return false;
      }
    },
    close,
  };
}

function pgClientConn(c: PgQueryable): Conn {
  return {
    dialect: "postgres",
    key: c,
    exclusive: exclusiveOn(c),
    open: async () => pgTxn(c, () => {}),
    ddl: async (sql) => {
      await c.query(sql);
    },
  };
}

function pgPoolConn(pool: PgPool): Conn {
  return {
    dialect: "postgres",
    key: pool,
    exclusive: (f) => f(),
    open: async () => {
      const c = await pool.connect();
      // A connection whose transaction may still be open never goes back to the pool.
      return pgTxn(c, (failure) => c.release(failure));
    },
    ddl: async (sql) => {
      await pool.query(sql);
    },
  };
}

/**
 * schemas remembers, per database (a Pool, a Client, a better-sqlite3
 * Database), that claimd_effects exists, or is being created. A failure is
 * forgotten: the next effect tries again.
 */
const schemas = new WeakMap<object, Promise<void>>();

function ensureSchema(conn: Conn): Promise<void> {
  let p = schemas.get(conn.key);
  if (p === undefined) {
    const ddl = EFFECTS_SCHEMA[conn.dialect];
    p = conn.exclusive(async () => {
      try {
        await conn.ddl(ddl);
      } catch {
        // Two PostgreSQL sessions that CREATE TABLE IF NOT EXISTS at once:
        // the loser fails on the catalog's unique index. The table exists
        // now; the second try says so.
        await conn.ddl(ddl);
      }
    });
    schemas.set(conn.key, p);
    p.catch(() => schemas.delete(conn.key));
  }
  return p.catch((e: unknown) => {
    throw new Error(`claimd: effect: create claimd_effects: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  });
}
