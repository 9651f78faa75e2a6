"""Retry of the client's own calls: exponential backoff with full jitter,
bounded in attempts and in total time, on the codes that mean "claimd did not
get to answer" — the policy every claimd client shares (clients/GUARD.md).
Every claimd call is safe to repeat: Transition, Renew and Release are no-ops
when repeated with the same token, Get has no effect, and a Claim is repeated
with the same attempt_id so the server answers the same ACQUIRED and token
instead of IN_PROGRESS."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc

from claimd.errors import from_rpc_error, retry_delay

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """RetryPolicy bounds the client's retries of one call.

    Calls that fail with a code in retryable are retried (UNAVAILABLE, and
    DEADLINE_EXCEEDED of an attempt while the call still has time: a Claim
    is repeated with its attempt_id), and so is a rate
    limit's RESOURCE_EXHAUSTED that carries a RetryInfo: never sooner than
    its delay, and not at all when the delay would end past total_timeout
    (the call then raises ResourceExhausted at once).

    max_attempts counts the first try (1 disables retries). Backoff before
    retry n is uniform in [0, min(max_backoff, initial_backoff *
    multiplier**(n-1))]. total_timeout bounds the whole call, attempts and
    waits included; each attempt also gets at most the client's timeout.
    """

    max_attempts: int = 4
    initial_backoff: float = 0.05
    max_backoff: float = 1.0
    multiplier: float = 2.0
    total_timeout: float = 10.0
    retryable: frozenset[grpc.StatusCode] = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"RetryPolicy.max_attempts: {self.max_attempts} must be >= 1")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.multiplier < 1:
            raise ValueError("RetryPolicy: backoffs must be >= 0 and multiplier >= 1")
        if self.total_timeout <= 0:
            raise ValueError(f"RetryPolicy.total_timeout: {self.total_timeout} must be > 0")

    def backoff(self, retry: int) -> float:
        """backoff is the wait before retry number retry (1 for the first)."""
        ceiling = min(self.max_backoff, self.initial_backoff * self.multiplier ** (retry - 1))
        return random.uniform(0, ceiling)


def call_with_retry(policy: RetryPolicy, attempt_timeout: float, fn: Callable[[float], T], extra: float = 0.0) -> T:
    """call_with_retry runs fn(timeout) until it succeeds, fails with a code
    the policy does not retry, or the policy's attempts or total time run
    out. It raises the last failure as a ClaimdError. extra is time the
    server is asked to spend (a Claim's wait), added to every bound."""
    attempt_timeout += extra
    deadline = time.monotonic() + policy.total_timeout + extra
    attempt = 0
    while True:
        attempt += 1
        remaining = deadline - time.monotonic()
        try:
            return fn(max(0.001, min(attempt_timeout, remaining)))
        except grpc.RpcError as err:
            time.sleep(pause_before_retry(policy, err, attempt, deadline))


async def call_with_retry_async(
    policy: RetryPolicy, attempt_timeout: float, fn: Callable[[float], Awaitable[T]], extra: float = 0.0
) -> T:
    """call_with_retry_async is call_with_retry for grpc.aio calls: the same
    policy, pauses taken with asyncio.sleep."""
    attempt_timeout += extra
    deadline = time.monotonic() + policy.total_timeout + extra
    attempt = 0
    while True:
        attempt += 1
        remaining = deadline - time.monotonic()
        try:
            return await fn(max(0.001, min(attempt_timeout, remaining)))
        except grpc.RpcError as err:
            await asyncio.sleep(pause_before_retry(policy, err, attempt, deadline))


def pause_before_retry(policy: RetryPolicy, err: grpc.RpcError, attempt: int, deadline: float) -> float:
    """pause_before_retry decides what follows attempt number attempt, which
    failed with err: the pause before the next attempt, or (raised) err as a
    ClaimdError when the policy does not retry it or has no attempts or time
    left. It must be called in the except block that caught err."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    wait = policy.backoff(attempt)
    retryable = code in policy.retryable
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        # A rate limit says when to come back. Without a RetryInfo the
        # refusal is something else (a message over a size limit), which
        # repeating does not change.
        delay = retry_delay(err)
        retryable = delay is not None
        wait = max(wait, delay or 0.0)
    if not retryable or attempt >= policy.max_attempts:
        raise from_rpc_error(err) from err
    # Another attempt needs time to wait and then to be answered; give up
    # now rather than start one that cannot finish.
    if time.monotonic() + wait >= deadline:
        raise from_rpc_error(err) from err
    return wait
