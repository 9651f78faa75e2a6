/**
 * Helpers for tests that need a real claimd: build the binary, start it on
 * free loopback ports with embedded tiers, wait for gRPC health SERVING,
 * stop it by PID. Exported as "@claimd/client/testing".
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import * as http2 from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

/**
 * buildClaimd runs `go build` of ./cmd/claimd in the claimd module at
 * moduleDir and returns the binary's path (outPath). Go's build cache makes
 * a repeat cheap.
 */
export function buildClaimd(moduleDir: string, outPath: string): string {
  const r = spawnSync("go", ["build", "-o", outPath, "./cmd/claimd"], { cwd: moduleDir, stdio: ["ignore", "inherit", "inherit"] });
  if (r.error) {
    throw new Error(`go build of claimd failed to start: ${r.error.message} (is Go on PATH?)`);
  }
  if (r.status !== 0) {
    throw new Error(`go build of claimd in ${moduleDir} exited ${r.status}`);
  }
  return outPath;
}

/** StartOptions configures startClaimd. */
export interface StartOptions {
  /** bin is the claimd binary. Default $CLAIMD_BIN. */
  bin?: string;
  /** dataDir of the embedded tiers. Default a fresh temporary directory, removed by stop(). */
  dataDir?: string;
  /** args are extra `claimd serve` flags. */
  args?: string[];
  /** readyTimeoutMs bounds start-up. Default 20000. */
  readyTimeoutMs?: number;
  /**
   * tls is how the health check connects to a claimd that serves TLS (args
   * name --tls-cert and the rest): the CA that signed its certificate, and a
   * client certificate when it requires one. PEM contents.
   */
  tls?: HealthTls;
}

/** HealthTls is the TLS of a health check: PEM contents. */
export interface HealthTls {
  ca: string | Buffer;
  cert?: string | Buffer;
  key?: string | Buffer;
}

/** Claimd is a running claimd process. */
export interface Claimd {
  /** target is the gRPC address, "127.0.0.1:PORT". */
  readonly target: string;
  /** http is the HTTP address (/healthz, /readyz, /metrics). */
  readonly http: string;
  readonly pid: number;
  readonly dataDir: string;
  /** logs are the last lines claimd wrote on stderr (for failure messages). */
  logs(): string[];
  /** stop sends SIGTERM and resolves with the exit code once it exited. */
  stop(): Promise<number | null>;
}

/**
 * startClaimd starts `claimd serve` on free loopback ports and resolves once
 * its gRPC health check answers SERVING. It rejects (and kills the process)
 * if that does not happen within readyTimeoutMs.
 */
export async function startClaimd(opts: StartOptions = {}): Promise<Claimd> {
  const bin = opts.bin ?? process.env["CLAIMD_BIN"];
  if (!bin) {
    throw new Error("startClaimd: no claimd binary: set CLAIMD_BIN or pass bin (see buildClaimd)");
  }
  const ownDir = opts.dataDir === undefined;
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), "claimd-test-"));
  const child = spawn(
    bin,
    ["serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--data-dir", dataDir, ...(opts.args ?? [])],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const tail: string[] = [];
  const addrs = new Promise<{ grpc: string; http: string }>((resolve, reject) => {
    // Keep reading stderr for the whole life of the process: claimd logs a
    // line per request, and a full pipe would block it.
    createInterface({ input: child.stderr! }).on("line", (line) => {
      tail.push(line);
      if (tail.length > 200) {
        tail.shift();
      }
      try {
        const rec = JSON.parse(line) as { msg?: string; grpc?: string; http?: string };
        if (rec.msg === "claimd serving" && rec.grpc && rec.http) {
          resolve({ grpc: rec.grpc, http: rec.http });
        }
      } catch {
        // not JSON: keep it in the tail only
      }
    });
    child.once("error", reject);
    void exited.then((code) => reject(new Error(`claimd exited ${code} before serving:\n${tail.join("\n")}`)));
  });
  const readyTimeoutMs = opts.readyTimeoutMs ?? 20_000;
  const deadline = Date.now() + readyTimeoutMs;
  const stop = async (): Promise<number | null> => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
    }
    const code = await exited;
    if (ownDir) {
      rmSync(dataDir, { recursive: true, force: true });
    }
    return code;
  };
  try {
    const { grpc, http } = await withTimeout(addrs, readyTimeoutMs, "claimd did not log its addresses");
    for (;;) {
      if ((await healthStatus(grpc, 1000, opts.tls).catch(() => -1)) === SERVING) {
        break;
      }
      if (Date.now() > deadline) {
        throw new Error(`claimd at ${grpc} not SERVING after ${readyTimeoutMs}ms:\n${tail.join("\n")}`);
      }
      await new Promise((r) => setTimeout(r, 20)); // poll interval of an observable condition
    }
    return { target: grpc, http, pid: child.pid!, dataDir, logs: () => [...tail], stop };
  } catch (e) {
    child.kill("SIGKILL");
    await exited;
    throw e;
  }
}

const SERVING = 1;

/**
 * healthStatus calls grpc.health.v1.Health/Check for the server as a whole
 * (service "") over a raw HTTP/2 stream, over TLS when tls is given, and
 * returns the ServingStatus number. The messages are two fields, so no
 * generated code is needed: the request is empty, the response is field 1
 * (varint).
 */
export function healthStatus(target: string, timeoutMs: number, tls?: HealthTls): Promise<number> {
  return new Promise((resolve, reject) => {
    const session = tls ? http2.connect(`https://${target}`, { ...tls }) : http2.connect(`http://${target}`);
    const done = (err: Error | undefined, status?: number) => {
      clearTimeout(timer);
      session.close();
      session.destroy();
      if (err) reject(err);
      else resolve(status!);
    };
    const timer = setTimeout(() => done(new Error("health check timed out")), timeoutMs);
    session.on("error", (err) => done(err));
    const req = session.request({
      ":method": "POST",
      ":path": "/grpc.health.v1.Health/Check",
      "content-type": "application/grpc",
      te: "trailers",
    });
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("error", (err) => done(err));
    req.on("trailers", (trailers) => {
      const code = trailers["grpc-status"];
      if (code !== "0") {
        done(new Error(`health check: grpc-status ${code}: ${trailers["grpc-message"]}`));
        return;
      }
      const frame = Buffer.concat(chunks);
      const msg = frame.subarray(5); // 1 byte compressed flag, 4 bytes length
      // Field 1, varint: tag 0x08 then the status; an empty message is UNKNOWN (0).
      done(undefined, msg.length >= 2 && msg[0] === 0x08 ? msg[1]! : 0);
    });
    req.end(Buffer.alloc(5)); // an empty HealthCheckRequest: flag 0, length 0
  });
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} within ${ms}ms`)), ms);
    }),
  ]);
}
