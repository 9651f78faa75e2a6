"""A Stripe payment delivered out of order, end to end: internal/horizon's
out_of_order fixture (the refund first, then the capture, stale processing
and pending events, the refund again) POSTed to the receiver in the order
its sequence.yaml lists, against a real claimd with the built-in Stripe
lifecycles. The receiver has no ordering logic of its own."""

from __future__ import annotations

import re

from conftest import REPO, Receiver
from test_receiver import post

FIXTURE = REPO / "internal" / "horizon" / "testdata" / "lifecycles" / "stripe" / "out_of_order"
CHARGE, INTENT = "ch_3QxOrd2eZvKYlo2C1Rk5Zt9B", "pi_3QxOrd2eZvKYlo2C1Nq0Pq7A"


def deliveries() -> list[tuple[str, str]]:
    """deliveries are sequence.yaml's (file, order) pairs, in order. The file
    is read for these two keys only (the test extra has no YAML parser): each
    entry starts with `- file:` and names its `order:` below."""
    text = (FIXTURE / "sequence.yaml").read_text()
    block = text.split("\ndeliveries:\n", 1)[1].split("\nfinal:", 1)[0]
    found = re.findall(r"- file: (\S+)\n(?:    .*\n)*?    order: (\w+)", block + "\n")
    assert found and len(found) == block.count("- file:"), f"sequence.yaml: read {found}"
    return found


def test_stripe_sequence_out_of_order_ends_with_the_ledger_correct(receiver: Receiver) -> None:
    seq = deliveries()
    for i, (file, order) in enumerate(seq, 1):
        status, body, headers = post(receiver.url, (FIXTURE / file).read_bytes(), f"t={i},v1=a")
        what = f"delivery {i} ({file}, {order})"
        if order == "defer":
            # Stripe retries a 409; its retry is the replay.
            assert status == 409 and int(headers.get("Retry-After", "0")) >= 1, (what, status, body, headers)
        elif order == "proceed":
            assert status == 200 and b"ledger_row" in body, (what, status, body)
        elif order == "supersede":
            assert (status, body) == (200, b"event superseded by a later state of its entity\n"), what
        else:
            raise AssertionError(f"sequence.yaml: unknown order {order!r}")
    # Stripe may deliver any of them again, in any order: nothing changes.
    for i, (file, _) in enumerate(reversed(seq), 1):
        status, body, _ = post(receiver.url, (FIXTURE / file).read_bytes(), f"t={100 + i},v1=b")
        assert status == 200, (f"redelivery of {file}", status, body)

    assert receiver.ledger.bookings() == [
        ("evt_3QxOrd2eZvKYlo2C0cHs0k03", "charge.succeeded", CHARGE, 2000),
        ("evt_3QxOrd2eZvKYlo2C0aPs0k04", "payment_intent.succeeded", INTENT, 0),
        ("evt_3QxOrd2eZvKYlo2C0cHr3f05", "charge.refunded", CHARGE, -2000),
    ]
    assert receiver.ledger.balance("A-1001") == 0  # sequence.yaml's ledger
