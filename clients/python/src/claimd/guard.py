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

Every decision above is made in claimd._core, shared with claimd.aio; this
module makes the calls with blocking stubs and keeps the heartbeat on threads.
"""

from __future__ import annotations

import concurrent.futures
import functools
import heapq
import itertools
import math
import threading
import time
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, overload

from claimd._core import (
    MAX_FAILURE_BYTES,
    SUPERSEDED_RETRY_AFTER,
    UNAVAILABLE_RETRY_AFTER,
    Call,
    GuardFront,
    GuardKey,
    GuardResult,
    Op,
    settle_options,
)
from claimd._function import Calls, KeySpec, PayloadSpec, keyed_split, settled_value, unowned_value
from claimd.effects import GuardEffects
from claimd.errors import ClaimdError
from claimd.serialize import Decoder, Encoder, ResultNotStorable, Serializer
from claimd.types import EventState

if TYPE_CHECKING:
    from claimd.client import Client, Seconds

__all__ = [
    "MAX_FAILURE_BYTES",
    "SUPERSEDED_RETRY_AFTER",
    "UNAVAILABLE_RETRY_AFTER",
    "Guard",
    "GuardKey",
    "GuardResult",
    "guarded",
    "idempotent",
]

P = ParamSpec("P")
T = TypeVar("T")


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
        # When the thread's wait ends of itself. A heartbeat due later needs
        # no wake-up: waking the thread for every event (its heap often
        # held only stopped heartbeats, so each new one was its first) cost
        # a thread switch and a GIL hand-off per delivery.
        self._wake_at = math.inf

    def schedule(self, hb: _Heartbeat, delay: float) -> None:
        due = time.monotonic() + delay
        with self._cond:
            heapq.heappush(self._heap, (due, next(self._seq), hb))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="claimd-heartbeats", daemon=True)
                self._thread.start()
            elif due < self._wake_at:
                self._cond.notify()  # due before the thread wakes

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
                        self._wait(self._IDLE - (now - idle_since))  # schedule() notifies an earlier due
                        continue
                    idle_since = None
                    due, _, hb = self._heap[0]
                    wait = due - time.monotonic()
                    if wait <= 0:
                        heapq.heappop(self._heap)
                        break
                    self._wait(wait)
                if self._pool is None:
                    self._pool = concurrent.futures.ThreadPoolExecutor(
                        max_workers=self._RENEWERS, thread_name_prefix="claimd-renew"
                    )
            self._pool.submit(hb.renew_once)

    def _wait(self, seconds: float) -> None:
        # Called with the lock held; schedule() reads _wake_at under it.
        self._wake_at = time.monotonic() + seconds
        self._cond.wait(seconds)
        self._wake_at = -math.inf  # awake: it reads the heap before it waits again


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
    renewals run on the client's shared scheduler; what each answer means is
    the guard core's to decide."""

    def __init__(self, guard: Guard, interval: float) -> None:
        self._guard = guard
        self._stop = threading.Event()
        self._interval = interval
        self._scheduler = _scheduler(guard.client)

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
        the heartbeat stopped or the core says to stop renewing."""
        if self._stop.is_set():
            return
        g = self._guard
        try:
            rec = g.client.renew(g.claim, lease=g.lease)
        except ClaimdError as err:
            if not g._core.renew_failed(err):
                return
        else:
            self._interval = g._core.renewed(rec)
        if not self._stop.is_set():
            self._scheduler.schedule(self, self._interval)


class Guard(GuardFront["Client", threading.Event], GuardEffects):
    """Guard is the with-block form of the guard (see the module doc).

    Inside the block: acquired says whether to act; claim is the Claim (key,
    fencing_token, reason, state: a LEASE_EXPIRED taker sees how far the
    previous holder got); settle(result) and fail(reason) end the work early;
    cancelled is set when another holder took over (check it between steps;
    check() raises StaleToken then); `with g.effect(conn) as fx:` writes to
    the handler's own database exactly once, and effect_key(step) names a
    downstream call (claimd.effects). After the block, result is the answer.

    While the guard owns the claim and the block has not reached settle() or
    fail(), an Exception from the block is handled (it becomes the result's
    error; the claim is released — unless it was taken over from
    PROCESSING —, or failed for a PermanentError) and does not propagate; a
    BaseException that is not an Exception (SystemExit, KeyboardInterrupt)
    stops the heartbeat, leaves the claim to its lease and propagates.
    Exceptions raised when nothing is owned, or after settle() or fail()
    began, never release and propagate untouched.
    """

    _heartbeat: _Heartbeat | None = None

    def _cancellation(self) -> threading.Event:
        return threading.Event()

    def __enter__(self) -> Guard:
        return self._open()

    def _open(self) -> Guard:
        self._drive(self._core.open())
        return self

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
        self._stop_heartbeat()
        self._drive(self._core.settle(result))

    def fail(self, reason: str | BaseException) -> None:
        """fail records the event as failed for good: FAILED with the reason's
        text (bounded to 1 KiB on a character boundary), answered 200 so the
        provider stops retrying."""
        self._stop_heartbeat()
        self._drive(self._core.fail(reason))

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
        the with-block) and says whether to swallow exc; GuardCore.handler_raised
        decides."""
        self._stop_heartbeat()
        call, swallow = self._core.handler_raised(exc)
        self._drive(call)
        return swallow

    def _drive(self, call: Call | None) -> None:
        """_drive makes the calls the core asks for until it has none."""
        while call is not None:
            try:
                answer = self._send(call)
            except Exception as err:
                call = self._core.failed(call, err)
            else:
                call = self._core.answered(call, answer)

    def _send(self, call: Call) -> Any:
        if call.op is Op.CLAIM:
            return self.client.claim(self.namespace, self.provider, **self._core.claim_args)
        if call.op is Op.START:
            return self.client.transition(self.claim, EventState.PROCESSING)
        if call.op is Op.SETTLE:
            return self.client.transition(self.claim, call.to, result=call.result, **settle_options(call))
        if call.op is Op.RELEASE:
            return self.client.release(self.claim)
        self._heartbeat = _Heartbeat(self, call.pace)
        self._heartbeat.start()
        return None

    def _abandon(self, err: BaseException) -> None:
        """_abandon ends the work without writing anything (GuardCore.abandon)."""
        self._stop_heartbeat()
        self._core.abandon(err)

    def _stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None


@overload
def guarded(
    client: Client,
    namespace: str,
    provider: str,
    *,
    key: None = None,
    payload: PayloadSpec = None,
    argument: str | None = None,
    scope: str = "",
    window: Seconds | None = None,
    lease: Seconds | None = None,
    holder: str | None = None,
    wait: Seconds | None = None,
    start: bool = True,
) -> Callable[[Callable[Concatenate[Guard, P], object]], Callable[Concatenate[GuardKey, P], GuardResult]]: ...


@overload
def guarded(
    client: Client,
    namespace: str,
    provider: str,
    *,
    key: str | Callable[..., GuardKey],
    payload: PayloadSpec = None,
    argument: str | None = None,
    scope: str = "",
    window: Seconds | None = None,
    lease: Seconds | None = None,
    holder: str | None = None,
    wait: Seconds | None = None,
    start: bool = True,
) -> Callable[[Callable[Concatenate[Guard, P], object]], Callable[P, GuardResult]]: ...


def guarded(
    client: Client,
    namespace: str,
    provider: str,
    *,
    key: KeySpec = None,
    payload: PayloadSpec = None,
    argument: str | None = None,
    scope: str = "",
    window: Seconds | None = None,
    lease: Seconds | None = None,
    holder: str | None = None,
    wait: Seconds | None = None,
    start: bool = True,
) -> Callable[[Callable[Concatenate[Guard, P], object]], Callable[..., GuardResult]]:
    """guarded is Client.guarded: fn(guard, *args, **kwargs) -> result becomes
    f(event_id_or_delivery, *args, **kwargs) -> GuardResult, or, with key=,
    f(*args, **kwargs) -> GuardResult, the key read from the arguments (a
    JMESPath expression on the first argument, or on argument=; or a
    callable given the arguments). payload= (a JMESPath expression or a
    callable) names the part of the event a duplicate must repeat: its hash
    is the claim's payload_sha256, so a field that changes on every retry (a
    timestamp) does not make it a PAYLOAD_MISMATCH; it needs a key by event
    id. scope= keeps two functions apart on one key (claimd keys by delivery,
    not by function). window= asks for a dedup window longer than the
    provider's. fn's result is settled as Guard.settle encodes it; an
    exception from fn releases the claim (fails it, for a PermanentError),
    and once fn has returned nothing releases it."""

    def decorate(fn: Callable[Concatenate[Guard, P], object]) -> Callable[..., GuardResult]:
        calls = Calls(fn, key=key, payload=payload, argument=argument, guard_first=True)

        @functools.wraps(fn)
        def run(*call_args: Any, **kwargs: Any) -> GuardResult:
            # JMESPath expressions and callables see fn's own arguments: those
            # after the delivery, when the delivery comes first (no key=).
            if key is None:
                delivery, args = keyed_split(call_args)
            else:
                args = call_args
                delivery = calls.key(args, kwargs)
            digest = calls.digest(args, kwargs, delivery)
            g = Guard._for_key(
                client,
                namespace,
                provider,
                delivery,
                scope=scope,
                lease=lease,
                holder=holder,
                wait=wait,
                start=start,
                window=window,
                payload_sha256=digest,
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


def idempotent(
    client: Client,
    namespace: str,
    provider: str,
    *,
    key: KeySpec = None,
    payload: PayloadSpec = None,
    argument: str | None = None,
    scope: str = "",
    window: Seconds | None = None,
    lease: Seconds | None = None,
    holder: str | None = None,
    wait: Seconds | None = None,
    encoder: Encoder | None = None,
    decoder: Decoder | None = None,
) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """idempotent makes fn(*args, **kwargs) -> T run once per key: the first
    call runs it and stores its value, every duplicate gets the stored value
    back, as the same type (the return annotation, or decoder=, says which:
    claimd.serialize). Exceptions propagate: one from fn releases the key
    (a PermanentError records it FAILED, and duplicates raise PermanentError
    again); a duplicate of a key another holder works on raises InProgress,
    another payload PayloadMismatch, a claimd failure its ClaimdError.

    The key is fn's first argument (an event id, an EventRef or a Delivery)
    unless key= reads it from the arguments: a JMESPath expression on the
    first argument (or on argument=, a parameter's name: Powertools'
    data_keyword_argument), or a callable given the arguments. payload=,
    scope=, window=, lease=, holder= and wait= are guarded's. A value that
    cannot be stored (encoder= turns one the serializer does not know into
    one it does) raises ResultNotStorable before anything is settled; the key
    is left to its lease, as the side effect may have happened."""

    def decorate(fn: Callable[P, T]) -> Callable[P, T]:
        calls = Calls(fn, key=key, payload=payload, argument=argument)
        serializer = Serializer.for_function(fn, encoder=encoder, decoder=decoder)

        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> T:
            delivery, digest = calls.delivery(args, kwargs)
            g = Guard._for_key(
                client,
                namespace,
                provider,
                delivery,
                scope=scope,
                lease=lease,
                holder=holder,
                wait=wait,
                start=True,
                window=window,
                payload_sha256=digest,
            )
            g._open()
            if not g.acquired:
                value: T = unowned_value(g.result, serializer)
                return value
            try:
                returned = fn(*args, **kwargs)
            except BaseException as exc:
                g._handler_raised(exc)
                raise
            try:
                stored = serializer.dumps(returned)
            except ResultNotStorable as err:
                g._abandon(err)
                raise
            g.settle(stored)
            settled: T = settled_value(g.result, returned, stored, serializer)
            return settled

        return run

    return decorate
