/**
 * The guards' rule for results (clients/GUARD.md, "Results"), shared by the
 * guard's settle and the effect fence's stored result.
 */
import { bytes } from "./client.js";

const encoder = new TextEncoder();

/**
 * resultBytes encodes what a handler returned by the guards' rule (see
 * GuardHandler). It throws (a TypeError, or what a toJSON threw) for a value
 * the rule cannot encode.
 */
export function resultBytes(v: unknown): Uint8Array {
  if (v === undefined || v === null) {
    return new Uint8Array();
  }
  if (v instanceof Uint8Array) {
    return v;
  }
  if (v instanceof ArrayBuffer) {
    return new Uint8Array(v);
  }
  if (ArrayBuffer.isView(v)) {
    return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  }
  if (typeof v === "string") {
    return bytes(wellFormed(v));
  }
  const json: string | undefined = JSON.stringify(v, jsonResult);
  if (json === undefined) {
    throw new TypeError(`a ${typeof v} cannot be encoded as JSON`);
  }
  return encoder.encode(json);
}

// A lone surrogate has no UTF-8 form: TextEncoder would replace it with
// U+FFFD and JSON.stringify escape it, where other guards refuse it.
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function wellFormed(s: string): string {
  if (loneSurrogate.test(s)) {
    throw new TypeError("a string with a lone surrogate cannot be encoded as UTF-8");
  }
  return s;
}

/** jsonResult is the JSON.stringify replacer of results: the JSON the other guards write. */
function jsonResult(key: string, v: unknown): unknown {
  wellFormed(key);
  switch (typeof v) {
    case "bigint":
      return v.toString();
    case "number":
      if (!Number.isFinite(v)) {
        throw new TypeError(`${v} cannot be encoded as JSON`);
      }
      return v;
    case "string":
      return wellFormed(v);
  }
  return v;
}
