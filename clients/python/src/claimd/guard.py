"""The guard: the correct webhook flow as one with-block or one decorator.

    with client.guard("billing", "stripe", delivery=d) as g:
        if g.acquired:
            g.settle(charge(g.claim))
    respond(g.result.status, g.result.body, g.result.headers)

The guard follows the contract every claimd guard shares, clients/GUARD.md,
whose table gives the status, Retry-After and body of every outcome (the
scenarios in clients/guardspec check it). In short: Claim with start, which
records a new, released or window-expired key already in PROCESSING (a
LEASE_EXPIRED takeover keeps its vanished holder's state: the guard moves it to
PROCESSING itself); on ACQUIRED renew the lease every lease/3 while the block runs (the
client's one heartbeat thread schedules the renewals of all its guards);
then settle (SETTLED with the result, 200), fail (FAILED for a
PermanentError, 200: the provider must stop retrying) or release (any other
Exception, 500: the next delivery acquires with RELEASED). Every other outcome
answers without running the block: DUPLICATE 200 with the stored result,
IN_PROGRESS 409 with Retry-After, PAYLOAD_MISMATCH 422, a delivery claimd
cannot key 400, claimd unreachable 503, this principal over its rate limit 503
with claimd's Retry-After, credentials refused (UNAUTHENTICATED,
PERMISSION_DENIED) 500: a 5xx, so the provider retries.

A result is encoded by the rule every claimd guard (Go, Python, TypeScript)
follows: bytes-like as they are, str as UTF-8, None as empty, anything else
(dict, list, number, bool) as compact JSON in UTF-8 (json.dumps with no
spaces, non-ASCII kept as UTF-8, NaN and infinities refused). A result that
cannot be encoded is settled as empty and reported in GuardResult.error.

Only an Exception raised by the handler before it returned may release the
claim. Once the side effect may have happened (the handler returned, or the
block reached settle() or fail()), nothing releases: a result that cannot be
encoded or stored is settled without it, and a settle that fails or is
interrupted leaves the record PROCESSING, so whoever takes it over after the
lease sees LEASE_EXPIRED with state PROCESSING and must check its own books
before acting again. Nor is a BaseException that is not an Exception
(KeyboardInterrupt, SystemExit, CancelledError) a statement that nothing
happened: it propagates and leaves the claim to its lease. And a key taken
over from a holder that had reached PROCESSING is never released, whatever
the block does: the next holder must learn again that someone may have acted.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import heapq
import itertools
import json
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from types import TracebackType
from typing import TYPE_CHECKING, Concatenate, ParamSpec

import grpc

from claimd.errors import (
    ClaimdError,
    InvalidArgument,
    InvalidTransition,
    NotFound,
    NotOwner,
    PayloadMismatch,
    PermanentError,
    ResourceExhausted,
    ResultMismatch,
    StaleToken,
    Unavailable,
)
from claimd.types import MAX_RESULT_BYTES, Claim, Delivery, EventRef, EventState, Outcome, Reason, Record, Seconds

if TYPE_CHECKING:
    from claimd.client import Client, Seconds

log = logging.getLogger("claimd")

P = ParamSpec("P")

GuardKey = str | EventRef | Delivery
"""GuardKey is what a guarded function takes first: an event id, an EventRef
(an event id with its entity and event type), or a raw Delivery."""

UNAVAILABLE_RETRY_AFTER = 5
"""UNAVAILABLE_RETRY_AFTER is the Retry-After, in seconds, of a 503 when
claimd could not be asked or could not record an outcome."""

SUPERSEDED_RETRY_AFTER = 1
"""SUPERSEDED_RETRY_AFTER is the Retry-After, in seconds, of a 409 when
another holder took the key over: its lease is unknown here, and the
provider's retry meets IN_PROGRESS with the right Retry-After."""

MAX_FAILURE_BYTES = 1024
"""MAX_FAILURE_BYTES bounds the error text stored as a FAILED record's result."""

_MIN_HEARTBEAT = 0.1  # seconds; a floor for very short leases (GUARD.md)

# The bodies of the answers that are not a result, the same in every claimd
# guard (clients/GUARD.md).
_IN_PROGRESS = b"delivery in progress elsewhere; retry later\n"
_PAYLOAD_MISMATCH = b"payload differs from an earlier delivery with the same key\n"
_REJECTED = b"delivery rejected by claimd\n"
_REFUSED = b"claimd refused the delivery\n"
_RATE_LIMITED = b"claimd rate limit reached; retry later\n"
_UNAVAILABLE = b"claimd unavailable; retry later\n"
_UNEXPECTED = b"unexpected answer from claimd\n"
_DEFERRED = b"event arrived before its prerequisite; retry later\n"
_SUPERSEDED = b"event superseded by a later state of its entity\n"
_TAKEN_OVER = b"delivery taken over by another holder; retry later\n"
_HANDLER_FAILED = b"processing failed; retry later\n"
_UNSETTLED = b"could not record the outcome; retry later\n"


@dataclasses.dataclass(frozen=True)
class GuardResult:
    """GuardResult is what to answer the provider, and what happened.

    status is the HTTP status; body the response body (the stored result for
    200); retry_after the Retry-After seconds for 409 and 503; outcome the
    Claim's outcome (None when the Claim itself failed); ran whether the
    guarded code ran; error the exception behind a non-2xx answer, a
    PermanentError, a PayloadMismatch, or why a settled result was not
    stored (over 64 KiB, or not encodable); claim the Claim, when there is
    one.
    """

    status: int
    body: bytes = b""
    retry_after: int | None = None
    outcome: Outcome | None = None
    ran: bool = False
    error: BaseException | None = None
    claim: Claim | None = None

    @property
    def headers(self) -> Mapping[str, str]:
        """headers are the response headers the answer needs (Retry-After)."""
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


def _seconds_until(t: datetime | None, minimum: int = 1) -> int:
    if t is None:
        return minimum
    return max(minimum, math.ceil((t - datetime.now(timezone.utc)).total_seconds()))


def _answer_unowned(claim: Claim) -> GuardResult:
    """_answer_unowned is the answer to a claim that owns nothing, so the
    handler does not run (GUARD.md rows 1-3, 10, 21, 22)."""
    if claim.outcome == Outcome.DUPLICATE:
        return GuardResult(200, claim.result, outcome=claim.outcome, claim=claim)
    if claim.outcome == Outcome.IN_PROGRESS:
        return GuardResult(
            409, _IN_PROGRESS, _seconds_until(claim.lease_expires_at), outcome=claim.outcome, claim=claim
        )
    if claim.outcome == Outcome.PAYLOAD_MISMATCH:
        mismatch = PayloadMismatch(f"key {claim.key!r} was claimed with a different payload")
        log.error("claimd: %s/%s: %s", claim.namespace, claim.provider, mismatch)
        return GuardResult(422, _PAYLOAD_MISMATCH, outcome=claim.outcome, error=mismatch, claim=claim)
    if claim.outcome == Outcome.DEFERRED:
        # No token was issued: nothing to release. The provider's retry,
        # after Retry-After, is the replay.
        return GuardResult(409, _DEFERRED, _deferred_retry_after(claim), outcome=claim.outcome, claim=claim)
    if claim.outcome == Outcome.SUPERSEDED:
        return GuardResult(200, _SUPERSEDED, outcome=claim.outcome, claim=claim)
    unknown = ClaimdError(f"claim answered outcome {claim.outcome!r}")
    return GuardResult(500, _UNEXPECTED, outcome=claim.outcome, error=unknown, claim=claim)


def _deferred_retry_after(claim: Claim) -> int:
    """_deferred_retry_after is a DEFERRED claim's retry_after in whole
    seconds, rounded up, at least 1 (1 when claimd sent none)."""
    if claim.retry_after is None:
        return 1
    return max(1, math.ceil(claim.retry_after.total_seconds()))


def _refused(err: ClaimdError) -> tuple[int, bytes, int | None]:
    """_refused is the answer to a claimd call that failed before the handler
    ran (GUARD.md rows 4-9): 400 for a request claimd will never accept (a
    delivery it cannot key), 503 with Retry-After when claimd could not
    answer or this principal is over its rate limit (claimd's RetryInfo
    delay), 500 otherwise (credentials, grants, an unknown provider: only an
    operator fixes those, and the provider must keep retrying meanwhile)."""
    if isinstance(err, InvalidArgument):
        return 400, _REJECTED, None
    if isinstance(err, ResourceExhausted):
        wait = math.ceil(err.retry_after) if err.retry_after else UNAVAILABLE_RETRY_AFTER
        return 503, _RATE_LIMITED, max(1, wait)
    if isinstance(err, Unavailable) or err.code == grpc.StatusCode.CANCELLED:
        return 503, _UNAVAILABLE, UNAVAILABLE_RETRY_AFTER
    return 500, _REFUSED, None


def _ended_already(err: ClaimdError) -> bool:
    """_ended_already reports whether a settle or fail found the record
    SETTLED or FAILED already under this guard's own token: the block ended
    the event itself through the typed calls. The outcome is recorded; the
    stored result stands."""
    if isinstance(err, ResultMismatch):
        return True
    return isinstance(err, InvalidTransition) and err.metadata.get("current_state") in (
        "EVENT_STATE_SETTLED",
        "EVENT_STATE_FAILED",
    )


def _taken_over_from_processing(claim: Claim) -> bool:
    """_taken_over_from_processing reports whether claim took the key over
    from a holder that had started the side effect: such a key is never
    released (a release resets the state to RECEIVED and would hide it)."""
    return claim.reason == Reason.LEASE_EXPIRED and claim.state == EventState.PROCESSING


def _started_by_claim(claim: Claim) -> bool:
    """_started_by_claim reports whether the claim (made with start) already
    recorded PROCESSING: a new, released or window-expired key. A
    LEASE_EXPIRED takeover keeps the state its vanished holder reached, so the
    guard still moves it to PROCESSING (a no-op from PROCESSING that checks the
    token)."""
    return claim.reason != Reason.LEASE_EXPIRED and claim.state == EventState.PROCESSING


def _encode(result: object) -> bytes:
    """_encode applies the guards' result rule (see the module doc). It
    raises what the encoder raises for a value it cannot encode: TypeError
    for an unknown type, ValueError for NaN, a cycle or text that is not
    UTF-8."""
    if result is None:
        return b""
    if isinstance(result, (bytes, bytearray, memoryview)):
        return bytes(result)
    if isinstance(result, str):
        return result.encode("utf-8")
    return json.dumps(result, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def _failure_text(err: BaseException) -> bytes:
    text = str(err) or type(err).__name__
    return text.encode("utf-8")[:MAX_FAILURE_BYTES].decode("utf-8", "ignore").encode("utf-8")


class _Scheduler:
    """_Scheduler runs the heartbeats of one client. One thread sleeps until
    the next renewal is due and hands it to a small pool of renewal threads,
    so an event whose handler ends within a third of its lease (the first
    renewal's due time, GUARD.md) costs a heap entry, not a thread of its
    own. The thread ends once no heartbeat has been left for _IDLE seconds
    and starts again with the next one: ending as soon as the last one
    stopped made a busy client start a thread for about one event in thirteen
    (the thread often found the only heartbeat already stopped), and the
    event waited for that start."""

    _RENEWERS = 4  # renewals in flight at once: a slow one must not hold up the rest
    _IDLE = 5.0  # seconds without a heartbeat before the thread ends

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Heartbeat]] = []
        self._seq = itertools.count()
        self._stopped = 0  # stopped heartbeats still in the heap
        self._thread: threading.Thread | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def schedule(self, hb: _Heartbeat, delay: float) -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), hb))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="claimd-heartbeats", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is hb:
                self._cond.notify()  # due before what the thread sleeps for

    def stopped(self) -> None:
        # Stopped heartbeats leave the heap when due; when they are most of
        # it (many short handlers), it is rebuilt without them.
        with self._cond:
            self._stopped += 1
            if self._stopped > 64 and self._stopped * 2 > len(self._heap):
                self._heap = [e for e in self._heap if not e[2].is_stopped]
                heapq.heapify(self._heap)
                self._stopped = 0

    def _run(self) -> None:
        while True:
            with self._cond:
                idle_since: float | None = None
                while True:
                    while self._heap and self._heap[0][2].is_stopped:
                        heapq.heappop(self._heap)
                        self._stopped = max(0, self._stopped - 1)
                    if not self._heap:
                        now = time.monotonic()
                        if idle_since is None:
                            idle_since = now
                        if now - idle_since >= self._IDLE:
                            self._thread = None
                            return
                        self._cond.wait(self._IDLE - (now - idle_since))  # schedule() notifies
                        continue
                    idle_since = None
                    due, _, hb = self._heap[0]
                    wait = due - time.monotonic()
                    if wait <= 0:
                        heapq.heappop(self._heap)
                        break
                    self._cond.wait(wait)
                if self._pool is None:
                    self._pool = concurrent.futures.ThreadPoolExecutor(
                        max_workers=self._RENEWERS, thread_name_prefix="claimd-renew"
                    )
            self._pool.submit(hb.renew_once)


# _schedulers holds each client's scheduler for as long as the client lives.
_schedulers: weakref.WeakKeyDictionary[Client, _Scheduler] = weakref.WeakKeyDictionary()
_schedulers_lock = threading.Lock()


def _scheduler(client: Client) -> _Scheduler:
    with _schedulers_lock:
        sched = _schedulers.get(client)
        if sched is None:
            sched = _schedulers[client] = _Scheduler()
        return sched


class _Heartbeat:
    """_Heartbeat renews the lease until stopped, and reports a takeover. Its
    renewals run on the client's shared scheduler."""

    def __init__(self, guard: Guard, interval: float) -> None:
        self._guard = guard
        self._stop = threading.Event()
        self._interval = interval
        self._scheduler = _scheduler(guard.client)

    @staticmethod
    def _pace(rec: Record) -> float:
        lease = rec.lease
        return max(_MIN_HEARTBEAT, lease.total_seconds() / 3) if lease is not None else _MIN_HEARTBEAT

    @staticmethod
    def _first_pace(claim: Claim, lease: Seconds | None) -> float:
        """_first_pace is the pace when the claim itself started the event
        (no Transition record to read the lease from): the lease asked for,
        else the one claimd granted, until the claim's lease_expires_at."""
        if lease is not None:
            secs = lease.total_seconds() if isinstance(lease, timedelta) else float(lease)
        elif claim.lease_expires_at is not None:
            secs = (claim.lease_expires_at - datetime.now(timezone.utc)).total_seconds()
        else:
            return _MIN_HEARTBEAT
        return max(_MIN_HEARTBEAT, secs / 3)

    @property
    def is_stopped(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        self._scheduler.schedule(self, self._interval)

    def stop(self) -> None:
        # No wait: a renewal in flight is harmless after a settle (renewing a
        # terminal record fails and ends the heartbeat), and waiting for its
        # retries would only delay the answer.
        if not self._stop.is_set():
            self._stop.set()
            self._scheduler.stopped()

    def renew_once(self) -> None:
        """renew_once is one tick: renew, then schedule the next one unless
        the heartbeat stopped or ownership is lost."""
        if self._stop.is_set():
            return
        g, c = self._guard, self._guard.claim
        try:
            rec = g.client.renew(c, lease=g.lease)
        except (StaleToken, NotOwner, NotFound) as err:
            g._lose(err)
            return
        except InvalidTransition:
            return  # terminal: settled or failed meanwhile, nothing to keep alive
        except ClaimdError as err:
            # Keep trying: the lease is still ours until someone takes it
            # over, and a takeover shows up as StaleToken.
            log.warning("claimd: renew %s/%s/%s failed: %s", c.namespace, c.provider, c.key, err)
        else:
            self._interval = self._pace(rec)
        if not self._stop.is_set():
            self._scheduler.schedule(self, self._interval)


class Guard:
    """Guard is the with-block form of the guard (see the module doc).

    Inside the block: acquired says whether to act; claim is the Claim (key,
    fencing_token, reason, state: a LEASE_EXPIRED taker sees how far the
    previous holder got); settle(result) and fail(reason) end the work early;
    cancelled is set when another holder took over (check it between steps;
    check() raises StaleToken then). After the block, result is the answer.

    While the guard owns the claim and the block has not reached settle() or
    fail(), an Exception from the block is handled (it becomes the result's
    error; the claim is released — unless it was taken over from
    PROCESSING —, or failed for a PermanentError) and does not propagate; a
    BaseException that is not an Exception (SystemExit, KeyboardInterrupt)
    stops the heartbeat, leaves the claim to its lease and propagates.
    Exceptions raised when nothing is owned, or after settle() or fail()
    began, never release and propagate untouched.
    """

    def __init__(
        self,
        client: Client,
        namespace: str,
        provider: str,
        *,
        event_id: str | None = None,
        delivery: Delivery | None = None,
        scope: str = "",
        payload_sha256: bytes | None = None,
        lease: Seconds | None = None,
        holder: str | None = None,
        wait: Seconds | None = None,
        entity_id: str = "",
        event_type: str = "",
        start: bool = True,
    ) -> None:
        if (event_id is None) == (delivery is None):
            raise ValueError("guard: exactly one of event_id or delivery is required")
        self.client = client
        self.namespace = namespace
        self.provider = provider
        self.lease = lease
        self._event_id = event_id
        self._delivery = delivery
        self._scope = scope
        self._payload_sha256 = payload_sha256
        self._holder = holder
        self._wait = wait
        self._entity_id = entity_id
        self._event_type = event_type
        self._start_at_claim = start
        self._claim: Claim | None = None
        self.cancelled = threading.Event()
        self._lost: ClaimdError | None = None
        self._heartbeat: _Heartbeat | None = None
        self._result: GuardResult | None = None
        self._ran = False
        # _done is set as settle() or fail() begins: the side effect may have
        # happened, and from then on nothing may release the claim.
        self._done = False

    @property
    def acquired(self) -> bool:
        """acquired is true when the block must do the work."""
        return self._claim is not None and self._claim.acquired and self._result is None

    @property
    def claim(self) -> Claim:
        """claim is claimd's answer. It raises RuntimeError when the Claim
        call itself failed (result.error says why)."""
        if self._claim is None:
            raise RuntimeError("Guard.claim: the Claim call failed; see Guard.result.error")
        return self._claim

    @property
    def result(self) -> GuardResult:
        """result is the answer for the provider; set once the block ended
        (or as soon as the claim decided that the block must not run)."""
        if self._result is None:
            raise RuntimeError("Guard.result is set when the with-block ends")
        return self._result

    def check(self) -> None:
        """check raises StaleToken when another holder took the key over, so
        long work stops between steps."""
        if self._lost is not None:
            raise self._lost

    def __enter__(self) -> Guard:
        return self._open()

    def _open(self) -> Guard:
        try:
            claim = self.client.claim(
                self.namespace,
                self.provider,
                event_id=self._event_id,
                delivery=self._delivery,
                scope=self._scope,
                payload_sha256=self._payload_sha256,
                lease=self.lease,
                holder=self._holder,
                wait=self._wait,
                entity_id=self._entity_id,
                event_type=self._event_type,
                start=self._start_at_claim,
            )
        except ClaimdError as err:
            status, body, retry = _refused(err)
            if status == 500:
                # UNAUTHENTICATED and PERMISSION_DENIED land here: this
                # receiver's credentials or grants are wrong, which only an
                # operator fixes. 500 and not 4xx, so that the provider keeps
                # retrying meanwhile.
                log.error("claimd: claim %s/%s failed: %s", self.namespace, self.provider, err)
            self._result = GuardResult(status, body, retry, error=err)
            return self
        self._claim = claim
        if claim.outcome == Outcome.ACQUIRED:
            self._start(claim)
        else:
            self._result = _answer_unowned(claim)
        return self

    def _start(self, claim: Claim) -> None:
        if _started_by_claim(claim):
            self._heartbeat = _Heartbeat(self, _Heartbeat._first_pace(claim, self.lease))
            self._heartbeat.start()
            return
        # A repeat of PROCESSING is a no-op on the server, so a LEASE_EXPIRED
        # taker whose predecessor got that far passes through.
        try:
            moved = self.client.transition(claim, EventState.PROCESSING)
        except (StaleToken, NotOwner) as err:
            self._result = self._answer_lost(err)
            return
        except ClaimdError as err:
            # The block did not run: give the key back so that the
            # provider's retry need not wait out the lease (unless it was
            # taken over from PROCESSING; if the release fails, the lease
            # frees the key).
            if not _taken_over_from_processing(claim):
                self._release_quietly()
            status, body, retry = _refused(err)
            self._result = GuardResult(status, body, retry, outcome=claim.outcome, error=err, claim=claim)
            return
        self._heartbeat = _Heartbeat(self, _Heartbeat._pace(moved.record))
        self._heartbeat.start()

    def settle(self, result: object = b"") -> None:
        """settle records the side effect as done: SETTLED with result, which
        duplicates get back. result is encoded by the guards' rule: bytes,
        bytearray or memoryview as they are, str as UTF-8, None as empty,
        anything else (dict, list, number, bool) as compact JSON in UTF-8.
        The encoded result is stored up to 64 KiB; a larger one is answered
        to this delivery but not stored, and one that cannot be encoded (an
        arbitrary object, NaN) is settled as empty: either way the event is
        SETTLED, never released, and result.error says what was lost.
        Leaving the block without settle() or fail() settles with an empty
        result."""
        self._done = True
        try:
            body = _encode(result)
        except Exception as err:  # whatever the encoder raises, the side effect happened
            log.error(
                "claimd: result of type %s cannot be encoded (%s); settling without it", type(result).__name__, err
            )
            self._finish(EventState.SETTLED, b"", err)
            return
        self._finish(EventState.SETTLED, body, None)

    def fail(self, reason: str | BaseException) -> None:
        """fail records the event as failed for good: FAILED with the reason's
        text (bounded to 1 KiB on a character boundary), answered 200 so the
        provider stops retrying."""
        self._done = True
        err = reason if isinstance(reason, BaseException) else PermanentError(reason)
        self._finish(EventState.FAILED, _failure_text(err), err)

    def _finish(self, to: EventState, body: bytes, error: BaseException | None) -> None:
        if self._result is not None:
            raise RuntimeError("Guard: settle() or fail() after the answer was decided")
        claim = self._claim
        if claim is None or not claim.acquired:
            raise RuntimeError("Guard: settle() or fail() without an acquired claim")
        self._ran = True
        self._stop_heartbeat()
        if self._lost is not None:
            self._result = self._answer_lost(self._lost)
            return
        stored = body
        if len(body) > MAX_RESULT_BYTES:
            # The side effect happened: refusing to settle would let it run
            # again. Settle without the result and say so.
            log.error(
                "claimd: result of %s is %d bytes, over %d; settling without it", claim.key, len(body), MAX_RESULT_BYTES
            )
            error = error or ValueError(f"result is {len(body)} bytes, over {MAX_RESULT_BYTES}; not stored")
            stored = b""
        try:
            self.client.transition(claim, to, result=stored)
        except (StaleToken, NotOwner) as err:
            self._result = self._answer_lost(err)
            return
        except ClaimdError as err:
            if not _ended_already(err):
                self._result = self._unsettled(to, err)
                return
            # The block ended the event itself; its stored outcome stands,
            # and the provider may stop retrying.
            log.warning(
                "claimd: %s/%s/%s was ended by the handler itself: %s", claim.namespace, claim.provider, claim.key, err
            )
            error = error or err
        except Exception as err:
            self._result = self._unsettled(to, err)
            return
        self._result = GuardResult(200, body, outcome=claim.outcome, ran=True, error=error, claim=claim)

    def _unsettled(self, to: EventState, err: Exception) -> GuardResult:
        # Ambiguous: the transition may or may not have been applied. Either
        # way the record is not released, whatever failed (claimd, the
        # network, a bug in this client); see the module doc.
        c = self._claim
        assert c is not None
        log.error("claimd: %s %s/%s/%s failed: %s", to.name, c.namespace, c.provider, c.key, err)
        return GuardResult(503, _UNSETTLED, UNAVAILABLE_RETRY_AFTER, outcome=c.outcome, ran=True, error=err, claim=c)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc is None:
            if self.acquired:
                self.settle(b"")  # the block ended: its work is done
            return False
        return self._handler_raised(exc)

    def _handler_raised(self, exc: BaseException) -> bool:
        """_handler_raised ends the work after exc escaped the handler (or
        the with-block) and says whether to swallow exc. It is the only path
        to a release, and releases only when the handler raised an Exception
        before it returned, on a key not taken over from PROCESSING: once
        settle() or fail() began, or when the block was interrupted, the
        side effect may have happened."""
        if self._done:
            if self._result is None:
                # settle() or fail() was itself interrupted (KeyboardInterrupt
                # mid-call): whether it was recorded is unknown. Keep the
                # claim; its lease hands it over with state PROCESSING.
                self._stop_heartbeat()
                self._result = GuardResult(
                    503,
                    _UNSETTLED,
                    UNAVAILABLE_RETRY_AFTER,
                    outcome=Outcome.ACQUIRED,
                    ran=True,
                    error=exc,
                    claim=self._claim,
                )
            return False
        if not self.acquired:
            return False  # nothing is owned: an exception has nothing to undo
        claim = self.claim
        self._ran = True
        if isinstance(exc, PermanentError):
            self.fail(exc)
            return True
        self._stop_heartbeat()
        failed = GuardResult(500, _HANDLER_FAILED, outcome=claim.outcome, ran=True, error=exc, claim=claim)
        if self._lost is not None:
            self._result = dataclasses.replace(self._answer_lost(self._lost), error=exc)
        elif not isinstance(exc, Exception):
            # An interruption, not the handler saying that nothing happened:
            # leave the claim to its lease, and let it propagate.
            log.warning(
                "claimd: %s/%s/%s interrupted (%r); the key frees at its lease end",
                claim.namespace,
                claim.provider,
                claim.key,
                exc,
            )
            self._result = failed
        elif _taken_over_from_processing(claim):
            log.warning(
                "claimd: handler failed on %s/%s/%s taken over from PROCESSING; leaving the key to its lease: %s",
                claim.namespace,
                claim.provider,
                claim.key,
                exc,
            )
            self._result = failed
        else:
            lost = self._release_quietly()
            self._result = dataclasses.replace(self._answer_lost(lost), error=exc) if lost is not None else failed
        return isinstance(exc, Exception)

    def _lose(self, err: ClaimdError) -> None:
        self._lost = err
        self.cancelled.set()
        c = self._claim
        if c is not None:
            log.warning("claimd: lost %s/%s/%s (token %d): %s", c.namespace, c.provider, c.key, c.fencing_token, err)

    def _answer_lost(self, err: ClaimdError) -> GuardResult:
        # Another holder owns the delivery now: come back shortly, and meet
        # its IN_PROGRESS with the right Retry-After.
        if self._lost is None:
            self._lose(err)
        return GuardResult(
            409,
            _TAKEN_OVER,
            SUPERSEDED_RETRY_AFTER,
            outcome=Outcome.ACQUIRED,
            ran=self._ran,
            error=err,
            claim=self._claim,
        )

    def _stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None

    def _release_quietly(self) -> ClaimdError | None:
        """_release_quietly gives the key back and returns the error when the
        claim turned out not to be ours any more (StaleToken, NotOwner).
        Callers: _start (before the handler ran) and _handler_raised (after
        the handler raised, before settle() or fail() began)."""
        c = self.claim
        try:
            self.client.release(c)
        except (StaleToken, NotOwner) as err:
            return err
        except ClaimdError as err:
            # The lease runs out on its own; the next delivery then takes over.
            log.warning("claimd: release %s/%s/%s failed: %s", c.namespace, c.provider, c.key, err)
        return None


def guarded(
    client: Client,
    namespace: str,
    provider: str,
    *,
    scope: str = "",
    lease: Seconds | None = None,
    holder: str | None = None,
    wait: Seconds | None = None,
    start: bool = True,
) -> Callable[[Callable[Concatenate[Guard, P], object]], Callable[Concatenate[GuardKey, P], GuardResult]]:
    """guarded is Client.guarded: fn(guard, *args, **kwargs) -> result becomes
    f(event_id_or_delivery, *args, **kwargs) -> GuardResult. fn's result is
    settled as Guard.settle encodes it (bytes as they are, str as UTF-8,
    None as empty, anything else as compact JSON); an exception from fn
    releases the claim (fails it, for a PermanentError), and once fn has
    returned nothing releases it."""

    def decorate(
        fn: Callable[Concatenate[Guard, P], object],
    ) -> Callable[Concatenate[GuardKey, P], GuardResult]:
        @functools.wraps(fn)
        def run(key: GuardKey, /, *args: P.args, **kwargs: P.kwargs) -> GuardResult:
            ref = EventRef(key) if isinstance(key, str) else key
            g = Guard(
                client,
                namespace,
                provider,
                event_id=ref.event_id if isinstance(ref, EventRef) else None,
                delivery=ref if isinstance(ref, Delivery) else None,
                scope=scope,
                lease=lease,
                holder=holder,
                wait=wait,
                entity_id=ref.entity_id if isinstance(ref, EventRef) else "",
                event_type=ref.event_type if isinstance(ref, EventRef) else "",
                start=start,
            )
            g._open()
            if not g.acquired:
                return g.result
            try:
                returned = fn(g, *args, **kwargs)
            except BaseException as exc:
                if g._handler_raised(exc):
                    return g.result
                raise
            # fn returned: the side effect may have happened. The settle is
            # out of the try above, so no path from here leads to a release.
            if g.acquired:  # fn may have called settle() or fail() itself
                g.settle(returned)
            return g.result

        return run

    return decorate
