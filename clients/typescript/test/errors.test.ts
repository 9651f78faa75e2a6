import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { Code, ConnectError } from "@connectrpc/connect";

import {
  ClaimdError,
  ERROR_DOMAIN,
  ErrorReason,
  InvalidTransitionError,
  NotOwnerError,
  ResultMismatchError,
  StaleTokenError,
  toClaimdError,
} from "../src/index.js";
import { ErrorReason as GenErrorReason } from "../src/gen/idempotency/v1/claim_pb.js";
import { resolveRetryPolicy, withRetry } from "../src/retry.js";

/** refusal is a ConnectError with code and, when reason is given, a claimd ErrorInfo. */
function refusal(code: Code, reason?: string): ConnectError {
  const err = new ConnectError("refused", code);
  if (reason !== undefined) {
    const info = new BinaryWriter().tag(1, WireType.LengthDelimited).string(reason).tag(2, WireType.LengthDelimited).string(ERROR_DOMAIN).finish();
    err.details.push({ type: "google.rpc.ErrorInfo", value: info });
  }
  return err;
}

describe("the reason decides the error, whatever the code", () => {
  const cases: { desc: string; code: Code; reason?: string; cls: typeof ClaimdError; unavailable: boolean }[] = [
    { desc: "stale token from this claimd (ABORTED)", code: Code.Aborted, reason: ErrorReason.STALE_TOKEN, cls: StaleTokenError, unavailable: false },
    { desc: "stale token from an older claimd (FAILED_PRECONDITION)", code: Code.FailedPrecondition, reason: ErrorReason.STALE_TOKEN, cls: StaleTokenError, unavailable: false },
    { desc: "invalid transition", code: Code.FailedPrecondition, reason: ErrorReason.INVALID_TRANSITION, cls: InvalidTransitionError, unavailable: false },
    { desc: "result mismatch", code: Code.FailedPrecondition, reason: ErrorReason.RESULT_MISMATCH, cls: ResultMismatchError, unavailable: false },
    { desc: "not the owner", code: Code.PermissionDenied, reason: ErrorReason.NOT_OWNER, cls: NotOwnerError, unavailable: false },
    // Connect reports a reset connection as ABORTED with no reason: claimd did not answer.
    { desc: "ABORTED without a reason is a transport reset", code: Code.Aborted, cls: ClaimdError, unavailable: true },
  ];
  for (const tc of cases) {
    test(tc.desc, () => {
      const err = toClaimdError(refusal(tc.code, tc.reason));
      assert.equal(err.constructor, tc.cls, `${tc.desc}: class = ${err.name}, want ${tc.cls.name}`);
      assert.equal(err.code, tc.code);
      assert.equal(err.reason, tc.reason);
      assert.equal(err.unavailable, tc.unavailable, `${tc.desc}: unavailable = ${err.unavailable}`);
    });
  }

  test("claimd's ABORTED/STALE_TOKEN is not retried; a reset ABORTED is", async () => {
    const policy = resolveRetryPolicy({ initialBackoffMs: 1, maxBackoffMs: 1 });
    let attempts = 0;
    await assert.rejects(
      withRetry(policy, 1000, undefined, async () => {
        attempts++;
        throw refusal(Code.Aborted, ErrorReason.STALE_TOKEN);
      }),
      StaleTokenError,
    );
    assert.equal(attempts, 1, "a stale token was retried");
    attempts = 0;
    await assert.rejects(
      withRetry(policy, 1000, undefined, async () => {
        attempts++;
        throw refusal(Code.Aborted);
      }),
    );
    assert.equal(attempts, policy.maxAttempts, "a reset connection was not retried");
  });
});

test("ErrorReason is the generated enum's names, each its own value", () => {
  const names = Object.keys(GenErrorReason).filter((k) => Number.isNaN(Number(k)) && k !== "ERROR_REASON_UNSPECIFIED");
  assert.deepEqual(Object.keys(ErrorReason).sort(), names.sort());
  for (const [k, v] of Object.entries(ErrorReason)) {
    assert.equal(v, k);
  }
  assert.equal(ErrorReason.STALE_TOKEN, "STALE_TOKEN");
  assert.ok(Object.isFrozen(ErrorReason));
});

test("a BadRequest's fields are read into ClaimdError.fields (GUARD.md rows 4 and 25 tell them apart)", () => {
  const violation = (field: string) =>
    new BinaryWriter().tag(1, WireType.LengthDelimited).string(field).tag(2, WireType.LengthDelimited).string("why").finish();
  const bad = new BinaryWriter()
    .tag(1, WireType.LengthDelimited)
    .bytes(violation("ClaimRequest.lease"))
    .tag(1, WireType.LengthDelimited)
    .bytes(violation("ClaimRequest.delivery (derived key)"))
    .finish();
  const err = new ConnectError("bad", Code.InvalidArgument);
  err.details.push({ type: "google.rpc.BadRequest", value: bad });
  assert.deepEqual(toClaimdError(err).fields, ["ClaimRequest.lease", "ClaimRequest.delivery (derived key)"]);
  assert.deepEqual(toClaimdError(new ConnectError("bare", Code.InvalidArgument)).fields, []);
});
