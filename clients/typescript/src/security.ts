import { readFileSync } from "node:fs";
import * as net from "node:net";
import type * as tls from "node:tls";

import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";

/**
 * TokenProvider returns the bearer token to send. It is called before every
 * call attempt, so it can rotate tokens; cache inside it if fetching one is
 * slow. A provider that throws fails the attempt as UNAVAILABLE (retried).
 */
export type TokenProvider = () => string | Promise<string>;

/**
 * TlsOptions connects over TLS: the `ca`, `cert`, `key` and `servername` of
 * node's tls.connect, given as PEM (`ca`, `cert`, `key`) or as files
 * (`caFile`, `certFile`, `keyFile`). Without a CA, node's default roots
 * verify claimd (its bundled Mozilla store, plus NODE_EXTRA_CA_CERTS, or the
 * system's with --use-openssl-ca). `cert` and `key` are the client
 * certificate for a claimd that requires one (mTLS): both or neither. Files
 * are read again for each new connection, so a certificate rotated on disk
 * is used from the next reconnection on.
 */
export interface TlsOptions {
  /** caFile is a PEM bundle that verifies claimd's certificate. */
  caFile?: string;
  /** ca is that bundle in memory (replaces caFile). */
  ca?: string | Buffer | Array<string | Buffer>;
  /** certFile is the client certificate chain (PEM), for mTLS. */
  certFile?: string;
  /** cert is that chain in memory (replaces certFile). */
  cert?: string | Buffer;
  /** keyFile is the client certificate's private key (PEM). */
  keyFile?: string;
  /** key is that key in memory (replaces keyFile). */
  key?: string | Buffer;
  /**
   * serverName is the name claimd's certificate must carry when the target
   * is not it (an IP address, a load balancer). Default: the target's host.
   */
  serverName?: string;
}

/** MAX_TOKEN_BYTES is the longest bearer token claimd accepts. */
export const MAX_TOKEN_BYTES = 512;

/** checkToken says what makes a token unusable, undefined when it is fine; never quoting it. */
export function checkToken(token: unknown): string | undefined {
  if (typeof token !== "string") {
    return "the token is not a string";
  }
  if (token === "") {
    return "the token is empty";
  }
  const bytes = Buffer.byteLength(token);
  if (bytes > MAX_TOKEN_BYTES) {
    return `the token is ${bytes} bytes; claimd accepts at most ${MAX_TOKEN_BYTES}`;
  }
  if (/[\s\u0000-\u001f\u007f]/.test(token)) {
    return "the token contains white space or a control character (a trailing newline from a file?)";
  }
  return undefined;
}

/**
 * bearerInterceptor sets "authorization: Bearer <token>" on every attempt.
 * The token stays in the provider's closure, so inspecting a client never
 * shows it, and it is set innermost: interceptors of the caller do not see
 * it either.
 */
export function bearerInterceptor(provider: TokenProvider): Interceptor {
  return (next) => async (req) => {
    let token: string;
    try {
      token = await provider();
    } catch (e) {
      const name = e instanceof Error ? e.name : typeof e;
      throw new ConnectError(`claimd token provider failed: ${name}`, Code.Unavailable);
    }
    const problem = checkToken(token);
    if (problem !== undefined) {
      throw new ConnectError(`claimd token provider returned an unusable token: ${problem}`, Code.Unauthenticated);
    }
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
}

/** isLoopbackHost reports whether host names this machine: a loopback IP or localhost. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[(.*)\]$/, "$1").toLowerCase();
  if (h === "localhost") {
    return true;
  }
  switch (net.isIP(h)) {
    case 4:
      return h.startsWith("127.");
    case 6:
      return h === "::1" || /^::ffff:127\./.test(h);
  }
  return false;
}

/**
 * tlsConnectOptions reads the files of o into node tls.connect options. It
 * runs for each new connection.
 */
export function tlsConnectOptions(o: TlsOptions): tls.ConnectionOptions {
  const read = (file: string | undefined, what: string): Buffer | undefined => {
    if (file === undefined) {
      return undefined;
    }
    try {
      return readFileSync(file);
    } catch (e) {
      throw new ConnectError(`claimd TLS ${what} ${file}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`, Code.Internal);
    }
  };
  const out: tls.ConnectionOptions = {};
  const ca = o.ca ?? read(o.caFile, "caFile");
  const cert = o.cert ?? read(o.certFile, "certFile");
  const key = o.key ?? read(o.keyFile, "keyFile");
  if (ca !== undefined) {
    out.ca = ca;
  }
  if (cert !== undefined) {
    out.cert = cert;
  }
  if (key !== undefined) {
    out.key = key;
  }
  return out;
}

/** checkTlsOptions refuses an incomplete client certificate at createClient. */
export function checkTlsOptions(o: TlsOptions): void {
  const hasCert = o.cert !== undefined || o.certFile !== undefined;
  const hasKey = o.key !== undefined || o.keyFile !== undefined;
  if (hasCert !== hasKey) {
    throw new TypeError("createClient: tls cert and key go together: give both or neither");
  }
  tlsConnectOptions(o); // unreadable files fail now, not at the first call
}
