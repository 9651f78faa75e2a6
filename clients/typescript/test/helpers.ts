import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import type { Timestamp } from "@bufbuild/protobuf/wkt";

import { buildClaimd } from "../src/testing.js";

/** pkgDir is clients/typescript (this file runs from dist/test). */
export const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/**
 * claimdBin is $CLAIMD_BIN (test.sh builds it once), else a build of the
 * checkout this package lives in, so `npm test` works on its own.
 */
export function claimdBin(): string {
  const fromEnv = process.env["CLAIMD_BIN"];
  if (fromEnv) {
    if (!existsSync(fromEnv)) {
      throw new Error(`CLAIMD_BIN=${fromEnv} does not exist`);
    }
    return fromEnv;
  }
  return buildClaimd(resolve(pkgDir, "../.."), join(pkgDir, ".build", "claimd"));
}

/** TestCerts are the PEM files testca wrote: the CA and each leaf's pair. */
export interface TestCerts {
  ca: string;
  leaves: { [name: string]: { cert: string; key: string } };
}

/**
 * makeCerts writes a throwaway CA and the leaves named (name → [CN, SANs…])
 * into dir with internal/testenv/cmd/testca: $CLAIMD_TESTCA_BIN (test.sh
 * builds it), else `go run` of it. Node cannot make X.509 certificates, and
 * this is the CA the Go tests use, without openssl.
 */
export function makeCerts(dir: string, leaves: { [name: string]: string[] }): TestCerts {
  const args = ["-dir", dir, ...Object.entries(leaves).flatMap(([name, names]) => ["-leaf", `${name}=${names.join(",")}`])];
  const bin = process.env["CLAIMD_TESTCA_BIN"];
  const r = bin
    ? spawnSync(bin, args, { encoding: "utf8" })
    : spawnSync("go", ["run", "./internal/testenv/cmd/testca", ...args], { cwd: resolve(pkgDir, "../.."), encoding: "utf8" });
  if (r.status !== 0) {
    throw new Error(`testca ${args.join(" ")}: exit ${r.status}: ${r.error?.message ?? r.stderr}`);
  }
  return JSON.parse(r.stdout) as TestCerts;
}

/**
 * newToken runs `claimd token new` as an operator would and returns the
 * token (line 1) and the "tokens: [...]" line it says to paste.
 */
export function newToken(bin: string): { token: string; line: string } {
  const r = spawnSync(bin, ["token", "new"], { encoding: "utf8" });
  if (r.status !== 0) {
    throw new Error(`claimd token new: exit ${r.status}: ${r.stderr}`);
  }
  const lines = r.stdout.trim().split("\n");
  const line = lines.slice(1).map((l) => l.trim()).find((l) => l.startsWith("tokens: "));
  if (!lines[0] || !line) {
    throw new Error(`claimd token new printed no token and tokens: line:\n${r.stdout}`);
  }
  return { token: lines[0], line };
}

/** NS is the namespace of every test record; event ids are unique per test. */
export const NS = "ts-client-test";

/** eventId returns a fresh, unique Stripe-like event id. */
export function eventId(prefix = "evt"): string {
  return `${prefix}_${randomBytes(8).toString("hex")}`;
}

/** Deferred is a promise with its resolve at hand. */
export interface Deferred<T> {
  promise: Promise<T>;
  resolve(v: T): void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** within rejects when p has not settled after ms: tests must not hang. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: not within ${ms}ms`)), ms);
    }),
  ]);
}

/**
 * waitFor polls check until it returns a value other than undefined, every
 * intervalMs, failing after timeoutMs. It polls an observable condition; it
 * never stands in for one.
 */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined>,
  { timeoutMs = 10_000, intervalMs = 50 }: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined) {
      return v;
    }
    if (Date.now() > deadline) {
      throw new Error(`${what}: not within ${timeoutMs}ms`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

export function millis(t: Timestamp | undefined): number {
  if (!t) {
    throw new Error("timestamp missing");
  }
  return Number(t.seconds) * 1000 + Math.floor(t.nanos / 1_000_000);
}

const decoder = new TextDecoder();

export function str(b: Uint8Array): string {
  return decoder.decode(b);
}
