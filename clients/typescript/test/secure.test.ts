/**
 * The client against a claimd that requires TLS, a client certificate of
 * its CA (mTLS) and a principal of its auth file for every call, with tokens
 * made by `claimd token new` and certificates by internal/testenv's testca.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { inspect } from "node:util";

import type { Interceptor } from "@connectrpc/connect";

import {
  ClaimdError,
  Code,
  createClient,
  guard,
  Outcome,
  PermissionDeniedError,
  Reason,
  ResourceExhaustedError,
  UnauthenticatedError,
  type ClaimdClient,
  type ClientOptions,
  type GuardLogger,
  type GuardResult,
} from "../src/index.js";
import { startClaimd, type Claimd } from "../src/testing.js";
import { claimdBin, eventId, makeCerts, newToken, type TestCerts } from "./helpers.js";

const SECURE_NS = "tssec"; // granted to principals hooks and mesh
const DENIED_NS = "tssec-other"; // granted to nobody
const PACED_NS = "tssec-paced"; // principal paced: one call every 2s
const SLOW_NS = "tssec-slow"; // principal slow: one call every 10s

let bin: string;
let dir: string;
let certs: TestCerts;
let server: Claimd;
const tokens: { [name: string]: string } = {};
const clients: ClaimdClient[] = [];

before(async () => {
  bin = claimdBin();
  dir = mkdtempSync(join(tmpdir(), "claimd-ts-secure-"));
  certs = makeCerts(join(dir, "ca"), {
    server: ["claimd", "127.0.0.1", "localhost", "claimd.test"],
    receiver: ["spiffe://claimd.test/receiver"], // names no principal: a call needs a token too
    mesh: ["spiffe://claimd.test/mesh"], // names principal mesh
  });
  const lines: { [name: string]: string } = {};
  for (const name of ["hooks", "hooksNext", "paced", "slow", "revoked"]) {
    const t = newToken(bin);
    tokens[name] = t.token;
    lines[name] = t.line;
  }
  // principal hooks lists two tokens: the second is the one rotated to.
  const nextHash = lines["hooksNext"]!.replace(/^tokens: \[/, "").replace(/\]$/, "");
  const hooksLine = lines["hooks"]!.replace(/\]$/, `, ${nextHash}]`);
  const authFile = join(dir, "auth.yaml");
  writeFileSync(
    authFile,
    `version: 1
principals:
  hooks:
    ${hooksLine}
    namespaces: [${SECURE_NS}]
    roles: [claim, read]
  mesh:
    identities: ["spiffe://claimd.test/mesh"]
    namespaces: [${SECURE_NS}]
    roles: [claim]
  paced:
    ${lines["paced"]}
    namespaces: [${PACED_NS}]
    roles: [claim]
    rate: {per_second: 0.5, burst: 1}
  slow:
    ${lines["slow"]}
    namespaces: [${SLOW_NS}]
    roles: [claim]
    rate: {per_second: 0.1, burst: 1}
`,
    { mode: 0o600 }, // claimd refuses an auth file other users may read
  );
  const srv = certs.leaves["server"]!;
  const receiver = certs.leaves["receiver"]!;
  server = await startClaimd({
    bin,
    args: ["--tls-cert", srv.cert, "--tls-key", srv.key, "--tls-client-ca", certs.ca, "--auth-file", authFile],
    tls: { ca: readFileSync(certs.ca), cert: readFileSync(receiver.cert), key: readFileSync(receiver.key) },
  });
});

after(async () => {
  for (const c of clients) {
    c.close();
  }
  const code = await server?.stop();
  rmSync(dir, { recursive: true, force: true });
  assert.equal(code, 0, `secured claimd exit code = ${code}, want 0`);
});

/** secured is a client of the secured server with the CA, a certificate (receiver's by default) and opts. */
function secured(opts: ClientOptions & { leaf?: string } = {}): ClaimdClient {
  const { leaf = "receiver", ...rest } = opts;
  const pair = certs.leaves[leaf]!;
  const c = createClient(server.target, {
    tls: { caFile: certs.ca, certFile: pair.cert, keyFile: pair.key },
    retry: { maxAttempts: 3, totalTimeoutMs: 5000 },
    ...rest,
  });
  clients.push(c);
  return c;
}

/** quiet collects the guard's warnings instead of printing them. */
function quiet(): GuardLogger & { lines: string[] } {
  const lines: string[] = [];
  return { lines, warn: (m, fields) => void lines.push(`${m} ${JSON.stringify(fields)}`) };
}

function describeResult(r: GuardResult): string {
  return `status ${r.status}, outcome ${r.outcome === undefined ? "none" : Outcome[r.outcome]}, ran ${r.ran}, error ${r.error}`;
}

describe("secured claimd", () => {
  test("guard round trip with token and client certificate", async () => {
    const c = secured({ token: tokens["hooks"]! });
    const id = eventId();
    let runs = 0;
    const handler = () => {
      runs++;
      return { charged: true };
    };
    const first = await guard(c, { namespace: SECURE_NS, provider: "stripe", eventId: id }, handler);
    const second = await guard(c, { namespace: SECURE_NS, provider: "stripe", eventId: id }, handler);
    assert.equal(first.status, 200, `first: ${describeResult(first)}\n${server.logs().join("\n")}`);
    assert.equal(first.outcome, Outcome.ACQUIRED);
    assert.equal(second.status, 200, `second: ${describeResult(second)}`);
    assert.equal(second.outcome, Outcome.DUPLICATE);
    assert.equal(Buffer.from(second.body).toString(), '{"charged":true}');
    assert.equal(runs, 1, "the handler ran more than once");
  });

  test("a client certificate alone names principal mesh", async () => {
    const c = secured({ leaf: "mesh" });
    const r = await guard(c, { namespace: SECURE_NS, provider: "stripe", eventId: eventId() }, () => "ok");
    assert.equal(r.status, 200, describeResult(r));
    assert.equal(r.outcome, Outcome.ACQUIRED);
  });

  test("a token provider is asked per call, so a rotated token is used", async () => {
    let current = tokens["hooks"]!;
    let asked = 0;
    const c = secured({
      token: async () => {
        asked++;
        return current;
      },
    });
    const claim = () => c.claim({ namespace: SECURE_NS, provider: "stripe", eventId: eventId() });
    assert.equal((await claim()).outcome, Outcome.ACQUIRED);
    current = tokens["hooksNext"]!;
    assert.equal((await claim()).outcome, Outcome.ACQUIRED);
    current = tokens["revoked"]!;
    await assert.rejects(claim(), UnauthenticatedError);
    assert.ok(asked >= 3, `token provider asked ${asked} times for 3 calls, want once per call`);
  });

  const refusals: {
    desc: string;
    token: () => string | undefined;
    namespace: string;
    cls: typeof ClaimdError;
    code: Code;
    reason: string;
  }[] = [
    {
      desc: "no token, certificate of no principal",
      token: () => undefined,
      namespace: SECURE_NS,
      cls: UnauthenticatedError,
      code: Code.Unauthenticated,
      reason: "IDENTITY_UNKNOWN",
    },
    {
      desc: "token no principal lists",
      token: () => tokens["revoked"],
      namespace: SECURE_NS,
      cls: UnauthenticatedError,
      code: Code.Unauthenticated,
      reason: "TOKEN_UNKNOWN",
    },
    {
      desc: "namespace outside the principal's",
      token: () => tokens["hooks"],
      namespace: DENIED_NS,
      cls: PermissionDeniedError,
      code: Code.PermissionDenied,
      reason: "NAMESPACE_DENIED",
    },
  ];
  for (const tc of refusals) {
    test(`refused (${tc.desc}): typed, not retried, nothing written, guard answers 500`, async () => {
      const codes: Code[] = [];
      const record: Interceptor = (next) => async (req) => {
        try {
          return await next(req);
        } catch (e) {
          codes.push((e as { code: Code }).code);
          throw e;
        }
      };
      const token = tc.token();
      const c = secured({ interceptors: [record], ...(token ? { token } : {}) });
      const id = eventId();
      const err = await c.claim({ namespace: tc.namespace, provider: "stripe", eventId: id }).then(
        () => assert.fail(`Claim(${id}) succeeded, want ${tc.cls.name}`),
        (e: unknown) => e,
      );
      assert.ok(err instanceof tc.cls, `Claim(${id}) rejected with ${err}, want ${tc.cls.name}`);
      assert.equal(err.code, tc.code);
      assert.equal(err.reason, tc.reason);
      assert.deepEqual(codes, [tc.code], "a refusal is not retried");
      if (tc.cls === PermissionDeniedError) {
        assert.equal(err.metadata["principal"], "hooks");
      }
      for (const t of [tokens["hooks"]!, tokens["revoked"]!]) {
        assert.ok(!inspect(err, { depth: 5 }).includes(t), "a bearer token is in the error");
      }

      const log = quiet();
      let ran = false;
      const r = await guard(c, { namespace: tc.namespace, provider: "stripe", eventId: id }, () => {
        ran = true;
      }, { logger: log });
      assert.equal(r.status, 500, describeResult(r));
      assert.equal(r.ran || ran, false, "the handler ran");
      assert.ok(r.error instanceof tc.cls, describeResult(r));
      assert.ok(log.lines.some((l) => l.includes("claim refused") && l.includes(tc.reason)), `no warning: ${log.lines}`);

      if (tc.namespace === SECURE_NS) {
        // Nothing was written: the key is new to its rightful owner.
        const owner = secured({ token: tokens["hooks"]! });
        const cl = await owner.claim({ namespace: SECURE_NS, provider: "stripe", eventId: id });
        assert.equal(cl.outcome, Outcome.ACQUIRED);
        assert.equal(cl.reason, Reason.NEW);
      }
    });
  }

  test("a rate limit is retried after its RetryInfo delay", async () => {
    const attempts: { at: number; code: Code | "ok" }[] = [];
    const record: Interceptor = (next) => async (req) => {
      try {
        const res = await next(req);
        attempts.push({ at: Date.now(), code: "ok" });
        return res;
      } catch (e) {
        attempts.push({ at: Date.now(), code: (e as { code: Code }).code });
        throw e;
      }
    };
    const c = secured({ token: tokens["paced"]!, interceptors: [record], retry: { maxAttempts: 3, totalTimeoutMs: 10_000 } });
    await c.claim({ namespace: PACED_NS, provider: "stripe", eventId: eventId() });
    await c.claim({ namespace: PACED_NS, provider: "stripe", eventId: eventId() });
    assert.deepEqual(
      attempts.map((a) => a.code),
      ["ok", Code.ResourceExhausted, "ok"],
      "want OK, RESOURCE_EXHAUSTED, OK (burst 1 at 0.5 per second)",
    );
    // The bucket refills one call in 2s and the refusal came at once, so
    // claimd's delay is most of that; the retry waited at least as long.
    const gap = attempts[2]!.at - attempts[1]!.at;
    assert.ok(gap >= 1000, `retried ${gap}ms after the refusal, want claimd's delay`);
  });

  test("a rate limit past the call's time rejects at once and the guard answers 503", async () => {
    const c = secured({ token: tokens["slow"]!, retry: { maxAttempts: 4, totalTimeoutMs: 2000 } });
    await c.claim({ namespace: SLOW_NS, provider: "stripe", eventId: eventId() });
    const start = Date.now();
    const err = await c.claim({ namespace: SLOW_NS, provider: "stripe", eventId: eventId() }).then(
      () => assert.fail("second claim admitted, want RESOURCE_EXHAUSTED"),
      (e: unknown) => e,
    );
    const took = Date.now() - start;
    assert.ok(err instanceof ResourceExhaustedError, `second claim rejected with ${err}, want ResourceExhaustedError`);
    assert.equal(err.reason, "RATE_LIMITED");
    assert.ok((err.retryAfterMs ?? 0) > 5000, `retryAfterMs ${err.retryAfterMs}, want about 10s`);
    assert.ok(took < 2000, `the refused claim took ${took}ms; its delay outlasts totalTimeoutMs: want it at once`);

    let ran = false;
    const r = await guard(c, { namespace: SLOW_NS, provider: "stripe", eventId: eventId() }, () => {
      ran = true;
    });
    assert.equal(r.status, 503, describeResult(r));
    assert.equal(ran, false);
    assert.ok((r.retryAfter ?? 0) > 5, `Retry-After ${r.retryAfter}, want claimd's delay`);
  });

  for (const { serverName, ok } of [
    { serverName: "claimd.test", ok: true },
    { serverName: "elsewhere.test", ok: false },
  ]) {
    test(`server name ${serverName} is ${ok ? "accepted" : "refused"}`, async () => {
      const pair = certs.leaves["receiver"]!;
      const c = secured({
        token: tokens["hooks"]!,
        tls: { caFile: certs.ca, certFile: pair.cert, keyFile: pair.key, serverName },
        retry: { maxAttempts: 1 },
      });
      const call = c.claim({ namespace: SECURE_NS, provider: "stripe", eventId: eventId() });
      if (ok) {
        assert.equal((await call).outcome, Outcome.ACQUIRED);
      } else {
        await assert.rejects(call, /altname|Hostname/i);
      }
    });
  }

  test("node's default roots do not trust the test CA", async () => {
    const pair = certs.leaves["receiver"]!;
    const c = secured({ token: tokens["hooks"]!, tls: { certFile: pair.cert, keyFile: pair.key }, retry: { maxAttempts: 1 } });
    await assert.rejects(c.claim({ namespace: SECURE_NS, provider: "stripe", eventId: eventId() }), /certificate/i);
  });

  test("the token stays out of an inspected client", () => {
    const c = secured({ token: tokens["hooks"]! });
    assert.ok(!inspect(c, { depth: 20, showHidden: true }).includes(tokens["hooks"]!));
  });
});

describe("plaintext", () => {
  test("a token goes to a claimd on loopback without TLS", async () => {
    const { token, line } = newToken(bin);
    const d = mkdtempSync(join(tmpdir(), "claimd-ts-local-"));
    const authFile = join(d, "auth.yaml");
    writeFileSync(authFile, `version: 1\nprincipals:\n  local:\n    ${line}\n    namespaces: [tslocal]\n    roles: [claim]\n`, { mode: 0o600 });
    const local = await startClaimd({ bin, args: ["--auth-file", authFile] });
    const c = createClient(local.target, { token });
    const anonymous = createClient(local.target);
    try {
      const r = await guard(c, { namespace: "tslocal", provider: "stripe", eventId: eventId() }, () => "ok");
      assert.equal(r.status, 200, describeResult(r));
      await assert.rejects(anonymous.claim({ namespace: "tslocal", provider: "stripe", eventId: eventId() }), UnauthenticatedError);
    } finally {
      c.close();
      anonymous.close();
      assert.equal(await local.stop(), 0);
      rmSync(d, { recursive: true, force: true });
    }
  });

  const SECRET = "cl_not-a-real-token-but-secret-all-the-same";
  const refused: { desc: string; target: string; opts: ClientOptions; want: string[] }[] = [
    { desc: "remote host, nothing", target: "claimd.invalid:50051", opts: {}, want: ["not a loopback address", "tls:", "insecure"] },
    { desc: "remote host, token", target: "claimd.invalid:50051", opts: { token: SECRET }, want: ["bearer token", "tls:"] },
    { desc: "remote IP, token", target: "http://192.0.2.1:50051", opts: { token: SECRET }, want: ["not a loopback address"] },
    { desc: "insecure with a token", target: "claimd.invalid:50051", opts: { insecure: true, token: SECRET }, want: ["plaintext"] },
    { desc: "token with a newline", target: "127.0.0.1:50051", opts: { token: `${SECRET}\n` }, want: ["trailing newline"] },
    { desc: "tls and insecure", target: "127.0.0.1:50051", opts: { tls: true, insecure: true }, want: ["give one of"] },
    { desc: "certificate without key", target: "127.0.0.1:50051", opts: { tls: { certFile: "client.pem" } }, want: ["give both or neither"] },
  ];
  for (const tc of refused) {
    test(`createClient refuses: ${tc.desc}`, () => {
      assert.throws(
        () => createClient(tc.target, tc.opts),
        (e: unknown) => {
          assert.ok(e instanceof TypeError, `threw ${e}, want a TypeError`);
          for (const w of tc.want) {
            assert.ok(e.message.includes(w), `message ${JSON.stringify(e.message)} does not say ${JSON.stringify(w)}`);
          }
          assert.ok(!e.message.includes("secret-all-the-same"), "the message quotes the token");
          return true;
        },
      );
    });
  }

  test("loopback targets stay plaintext", () => {
    for (const target of ["127.0.0.1:1", "localhost:1", "[::1]:1", "http://127.0.0.2:1"]) {
      createClient(target, { token: SECRET }).close();
    }
  });
});
