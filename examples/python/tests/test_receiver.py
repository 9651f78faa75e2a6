"""The example end to end: HTTP POSTs to the receiver, a real claimd, the
SQLite ledger."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

from conftest import Receiver


def post(url: str, body: bytes, signature: str) -> tuple[int, bytes, dict[str, str]]:
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Stripe-Signature": signature},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read(), dict(resp.headers.items())
    except urllib.error.HTTPError as err:
        return err.code, err.read(), dict(err.headers.items())


def stripe_event(event_id: str, amount: int | None = 1999) -> bytes:
    # One payment intent per event: claimd orders a payment intent's events
    # (Stripe's lifecycle), and a second succeeded of one intent would be
    # superseded.
    obj = {"id": f"pi_{event_id}", "object": "payment_intent"} | ({"amount": amount} if amount is not None else {})
    return json.dumps({"id": event_id, "type": "payment_intent.succeeded", "data": {"object": obj}}).encode()


def test_the_same_event_twice_writes_one_row(receiver: Receiver) -> None:
    evt = f"evt_{uuid.uuid4().hex}"
    body = stripe_event(evt)
    # Stripe signs each attempt anew (t= changes); the key is the event id.
    first = post(receiver.url, body, "t=1700000000,v1=aaa")
    second = post(receiver.url, body, "t=1700000060,v1=bbb")
    assert first[:2] == (200, b'{"ledger_row": 1}'), f"first delivery: {first}"
    assert second[:2] == first[:2], f"second delivery = {second[:2]}, want the stored answer {first[:2]}"
    assert receiver.ledger.rows(evt) == 1, f"ledger rows for {evt} = {receiver.ledger.rows(evt)}, want 1"


def test_a_permanently_bad_event_is_answered_200_and_never_written(receiver: Receiver) -> None:
    evt = f"evt_{uuid.uuid4().hex}"
    status, body, _ = post(receiver.url, stripe_event(evt, amount=None), "t=1,v1=a")
    assert status == 200 and b"no integer data.object.amount" in body, (status, body)
    assert post(receiver.url, stripe_event(evt, amount=None), "t=2,v1=b")[:2] == (status, body)
    assert receiver.ledger.rows(evt) == 0


def test_the_same_id_with_another_body_is_422(receiver: Receiver) -> None:
    evt = f"evt_{uuid.uuid4().hex}"
    assert post(receiver.url, stripe_event(evt, amount=1), "t=1,v1=a")[0] == 200
    status, _, _ = post(receiver.url, stripe_event(evt, amount=2), "t=2,v1=b")
    assert status == 422
    assert receiver.ledger.rows(evt) == 1


def test_not_a_stripe_event_is_400(receiver: Receiver) -> None:
    assert post(receiver.url, b"not json", "t=1,v1=a")[0] == 400
