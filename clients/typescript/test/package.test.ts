/**
 * The package as a stranger gets it: `npm pack` of a clean copy (no dist/,
 * so the pack must build it), installed from the tarball into a fresh
 * project outside the repository, type-checked there with tsc against the
 * shipped .d.ts, and run: a delivery guarded twice through a claimd started
 * with the package's own "@claimd/client/testing".
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { after, test } from "node:test";

import { effectKey } from "../src/index.js";
import { claimdBin, pkgDir } from "./helpers.js";

const repoRoot = resolve(pkgDir, "../..");
const work = realpathSync(mkdtempSync(join(tmpdir(), "claimd-ts-pack-")));

after(() => rmSync(work, { recursive: true, force: true }));

/** run runs cmd in cwd and returns its stdout; a non-zero exit fails with both streams. */
function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = {}): string {
  const r = spawnSync(cmd, args, { cwd, encoding: "utf8", env: { ...process.env, ...env }, timeout: 240_000 });
  if (r.status !== 0) {
    throw new Error(`${cmd} ${args.join(" ")} in ${cwd}: exit ${r.status} ${r.error?.message ?? ""}\n${r.stdout}\n${r.stderr}`);
  }
  return r.stdout;
}

function packageVersion(): string {
  return (JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")) as { version: string }).version;
}

/** The pinned versions a consumer compiles with: already in npm's cache after test.sh's `npm ci`. */
function devPin(name: string): string {
  const pkg = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")) as { devDependencies: Record<string, string> };
  const v = pkg.devDependencies[name];
  assert.ok(v, `${name} is not a devDependency of the package`);
  return `${name}@${v}`;
}

const consumer = `
import { createClient, guard, Outcome, type GuardResult } from "@claimd/client";
import { startClaimd } from "@claimd/client/testing";

const server = await startClaimd({ bin: process.env["CLAIMD_BIN"] });
const client = createClient(server.target);
let effects = 0;
const keys: string[] = [];
const results: GuardResult[] = [];
try {
  for (let i = 0; i < 2; i++) {
    results.push(await guard(client, { namespace: "pack-test", provider: "stripe", eventId: "evt_packed" }, (_claim, _signal, ctx) => {
      effects++;
      keys.push(ctx.effectKey("charge"));
      return { charged: true };
    }));
  }
} finally {
  client.close();
  await server.stop();
}
console.log(JSON.stringify({
  effects,
  keys,
  answers: results.map((r) => ({ status: r.status, body: Buffer.from(r.body).toString(), outcome: r.outcome === undefined ? null : Outcome[r.outcome] })),
}));
`;

/** powertoolsConsumer swaps Powertools' store for claimd through the package's "@claimd/client/powertools". */
const powertoolsConsumer = `
import { makeIdempotent } from "@aws-lambda-powertools/idempotency";
import { createClient } from "@claimd/client";
import { ClaimdPersistenceLayer } from "@claimd/client/powertools";
import { startClaimd } from "@claimd/client/testing";

const server = await startClaimd({ bin: process.env["CLAIMD_BIN"] });
const client = createClient(server.target);
let runs = 0;
const answers: number[] = [];
try {
  const persistenceStore = new ClaimdPersistenceLayer({ client, namespace: "pack-test", provider: "stripe" });
  const double = makeIdempotent(async (order: { n: number }) => {
    runs++;
    return order.n * 2;
  }, { persistenceStore });
  answers.push(await double({ n: 21 }), await double({ n: 21 }));
} finally {
  client.close();
  await server.stop();
}
console.log(JSON.stringify({ runs, answers }));
`;

test("npm pack builds the package, and a fresh project outside the repo installs it and runs a claim", { timeout: 300_000 }, () => {
  assert.ok(relative(repoRoot, work).startsWith(".."), `${work} is inside the repository ${repoRoot}`);

  // A copy of what a checkout holds, without dist/: the pack must build it.
  const src = join(work, "src-copy");
  for (const f of ["package.json", "package-lock.json", "tsconfig.json", "README.md", "LICENSE", "src"]) {
    cpSync(join(pkgDir, f), join(src, f), { recursive: true });
  }
  symlinkSync(join(pkgDir, "node_modules"), join(src, "node_modules"), "dir");
  const out = join(work, "out");
  mkdirSync(out);
  // Not --json: the prepare script's output shares stdout with it.
  run("npm", ["pack", "--pack-destination", out, "--loglevel=error"], src);
  const tarballs = readdirSync(out);
  assert.deepEqual(tarballs, [`claimd-client-${packageVersion()}.tgz`]);
  const tarball = join(out, tarballs[0]!);
  const files = run("tar", ["-tzf", tarball], work)
    .split("\n")
    .filter((f) => f !== "" && !f.endsWith("/"))
    .map((f) => f.replace(/^package\//, ""));
  for (const want of ["package.json", "README.md", "LICENSE", "dist/src/index.js", "dist/src/index.d.ts", "dist/src/testing.d.ts"]) {
    assert.ok(files.includes(want), `the tarball lacks ${want}; it has ${files.join(", ")}`);
  }
  const strays = files.filter((f) => !f.startsWith("dist/src/") && !["package.json", "README.md", "LICENSE"].includes(f));
  assert.deepEqual(strays, [], "the tarball ships files a consumer does not need");
  assert.equal(
    readFileSync(join(pkgDir, "LICENSE"), "utf8"),
    readFileSync(join(repoRoot, "LICENSE"), "utf8"),
    "clients/typescript/LICENSE differs from the repository's LICENSE",
  );
  // The README opens with the install line of make dist's tarball (make dist-test runs it).
  assert.match(readFileSync(join(pkgDir, "README.md"), "utf8"), /^# @claimd\/client\n+```sh\nnpm install "\$CLAIMD"\/dist\/claimd-client-\*\.tgz /);

  // A fresh project that knows nothing of the repository.
  const app = join(work, "app");
  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "claimd-consumer", private: true, type: "module" }));
  run(
    "npm",
    ["install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error", tarball, devPin("typescript"), devPin("@types/node")],
    app,
  );
  // The effect fence's drivers and Powertools (for "@claimd/client/powertools") are
  // optional peers: installing the client installs none of them.
  for (const driver of ["pg", "better-sqlite3", "@aws-lambda-powertools/idempotency"]) {
    assert.ok(!existsSync(join(app, "node_modules", driver)), `installing the client installed ${driver}`);
  }
  const installed = JSON.parse(readFileSync(join(app, "node_modules/@claimd/client/package.json"), "utf8")) as { license?: string; private?: boolean };
  assert.equal(installed.license, "Apache-2.0");
  assert.equal(installed.private, undefined);

  writeFileSync(join(app, "main.ts"), consumer);
  writeFileSync(
    join(app, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", strict: true, types: ["node"], outDir: "dist" },
      files: ["main.ts"],
    }),
  );
  // strict tsc against the shipped .d.ts: a package without them, or with wrong ones, fails here.
  run(join(app, "node_modules/.bin/tsc"), ["-p", "tsconfig.json"], app);
  const got = JSON.parse(run("node", ["dist/main.js"], app, { CLAIMD_BIN: claimdBin() })) as unknown;
  assert.deepEqual(got, {
    effects: 1,
    keys: [effectKey({ namespace: "pack-test", provider: "stripe", key: "evt_packed" }, "charge")],
    answers: [
      { status: 200, body: '{"charged":true}', outcome: "ACQUIRED" },
      { status: 200, body: '{"charged":true}', outcome: "DUPLICATE" },
    ],
  });

  // With Powertools installed beside it, its store swaps for claimd's from the subpath export.
  run(
    "npm",
    ["install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error", devPin("@aws-lambda-powertools/idempotency"), devPin("@types/aws-lambda")],
    app,
  );
  writeFileSync(join(app, "powertools.ts"), powertoolsConsumer);
  writeFileSync(
    join(app, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", strict: true, types: ["node"], outDir: "dist" },
      files: ["main.ts", "powertools.ts"],
    }),
  );
  run(join(app, "node_modules/.bin/tsc"), ["-p", "tsconfig.json"], app);
  assert.deepEqual(JSON.parse(run("node", ["dist/powertools.js"], app, { CLAIMD_BIN: claimdBin() })), { runs: 1, answers: [42, 42] });
});
