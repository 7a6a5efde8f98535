"""The share-group checker (KIP-932): what the share workload's history (share_workload.py) must never show.

Events it reads (`wall` is the member process's own clock, time.time(), taken when poll returned or just before
an acknowledgement was sent: one clock for every process of the machine):
  share-produced   the producer's acknowledged record at (partition, offset)
  share-deliver    a member received (partition, offset) with its delivery count `dc`
  share-acking     a member is about to send its acknowledgement of one delivery (`offset`, `dc`, `ack`
                   accept/release/reject) alone in one ShareAcknowledge: in doubt until answered
  share-ack        its answer: the error (`error`, None when none)
  share-end        the final drain's end: `complete` false when it gave up with records unaccounted for
  share-leader     the workload saw a new leader of the partition in Metadata
  share-state-read a broker, become the partition's leader, read its share state (from the broker's log, `at` on
                   the history's clock): a new leader's term begins there, whenever Metadata showed it
  share-archived   the share coordinator stored offsets `first`..`last` of the partition as archived after `dc`
                   deliveries (read from `__share_group_state` after the round: share_state_log.py)
  share-passed     the coordinator's start offset passed offsets `first`..`last` while they were stored available
                   with count `dc`, `held_ms` after that was first stored (share_state_log.py)
  share-member-killed  the workload killed a member's process
  fault            the nemesis's faults (phase start)

Anomalies:
  share_over_limit        a delivery count above group.share.delivery.count.limit
  share_two_holders       an acknowledgement the broker took from one member for a delivery after it had handed
                          the record to another (a higher delivery count received before the acknowledgement was
                          sent), or one (offset, delivery count) delivered twice
  share_after_ack         a delivery received after an ACCEPT or REJECT of the record was confirmed
  share_count_back        a delivery with a lower delivery count than an earlier delivery of the record: the
                          count an expired lock or a release left was lost (seed 17: 1, 2, 3, then 1 after a
                          leader move), so the record may be delivered more often than the limit allows
  share_unacknowledged    a produced record neither confirmed accepted or rejected, nor delivered up to the
                          limit (archived), when the drain ended

While share-partition state lives in the leader's memory (``durable=False``), a broker fault loses it: the new
leader starts the partition again from share.auto.offset.reset, so records come back after their acknowledgement,
delivery counts start again and records may be skipped. Such an anomaly is reported as explained
(`share_state_lost`) when a fault started, or the partition's leader changed, between the events that make it, or,
for a record never delivered since such a moment, when the partition was read again only from past it; with
``durable=True`` it is not, with one exception Kafka shares: an acquisition is not written to the share
coordinator (only acknowledgements, releases and lock timeouts are), so a record delivered, never confirmed
acknowledged, and offered again by a new leader of the partition comes back with the same delivery count
(`share_acquisition_not_durable`, not `share_two_holders`).
An acknowledgement never answered (its member was killed) or failed on the client's side (a timeout, a broken
connection), for a record never delivered again, is in doubt (the broker may have applied it): explained as
`share_ack_in_doubt`, never counted as accepted. One answered with a broker's error code (INVALID_RECORD_STATE,
NOT_LEADER_OR_FOLLOWER) was not applied: its record must come back; but the codes of a write to the share
coordinator that got no answer are in doubt too (REQUEST_TIMED_OUT, NETWORK_EXCEPTION, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: the partition leader's persister retries them and answers the last):
the write timed out waiting for `__share_group_state` to replicate, or its connection broke after sending, and
the coordinator's record may still commit (seen in chaos seed 1: a new leader read those accepts from it; seed 18
of a later run: an accept answered NETWORK_EXCEPTION was in the coordinator's log). So is FENCED_LEADER_EPOCH, the
answer of such a retry when a newer leader of the partition read the state in between (seed 7500: an accept
answered FENCED_LEADER_EPOCH was stored, at the old leader's epoch, as acknowledged).
A record handed to two members with the same delivery count is explained (`share_replaced_leader_delivery`) when
one of them then had its acknowledgement of it answered FENCED_LEADER_EPOCH: a replaced leader, paused while the
new one was elected, served it from memory (seed 7610: 21 ms after the new leader's read and delivery).
A member's consumer acquires records in the background, so one killed just after a fetch held deliveries its
application never saw. A record the coordinator stored as archived at the limit, seen delivered fewer times, is
explained (`share_archived_unseen`) when enough members were killed after its last seen delivery to have held the
unseen ones, one each (seed 7401: delivered twice and released, its member killed 150 ms later, archived with
count 3). The coordinator may not store that archiving: when the record was the first in flight, the write moves
the start offset past it instead. A record the start offset passed while stored available with count limit - 1
(how its acquisition at the limit is stored) at least a lock duration (the share-start's `lock_ms`) after that
count was first stored had its last lock run out, which archives it (KIP-932: a record whose acquisition lock
times out at the delivery count limit is archived, not made available): the leader acquires a released record
again only once a write that carries its count was taken (pybroker/replication/share/partition.py), so that
lock began after the write, and its holder, unseen, cannot have acknowledged it. It is explained so under the
same condition on kills (seed 8001: released at count 2, a member killed 20 ms later, the start offset passed it
3.05 s after count 2 was stored, with a lock of 3 s).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

from chaos.checker import Report

SHARE_ANOMALIES = ("share_over_limit", "share_two_holders", "share_after_ack", "share_count_back",
                   "share_unacknowledged")
FINAL = ("accept", "reject")
BROKER_CODE = re.compile(r"\bval=(-?\d+)")
NOT_LEADER_OR_FOLLOWER = 6
FENCED_LEADER_EPOCH = 74
UNANSWERED_WRITE = frozenset({7, 13, 14, 15, 16, FENCED_LEADER_EPOCH})
"""REQUEST_TIMED_OUT, NETWORK_EXCEPTION, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
and FENCED_LEADER_EPOCH: the answer of a retry, whose first attempt may have committed."""

Place = tuple[int, int]
"""(partition, offset) of the share workload's one topic."""


@dataclass(frozen=True, slots=True)
class _Delivery:
    member: str
    dc: int
    wall: float
    t: float


@dataclass(frozen=True, slots=True)
class _Ack:
    member: str
    dc: int
    ack: str
    ok: bool
    refused: bool
    """Answered with a broker's error code (librdkafka's `val=` above 0): the broker did not apply it."""
    fenced: bool
    """Answered FENCED_LEADER_EPOCH: the broker it went to had been replaced as the partition's leader."""
    wall: float
    t: float


def check_share(events: list[dict[str, Any]], limit: int, durable: bool, report: Report | None = None) -> Report:
    """Add the share anomalies of ``events`` to ``report`` (a new one if None) and return it."""
    report = report if report is not None else Report()
    for name in SHARE_ANOMALIES:
        report.anomalies.setdefault(name, [])
    faults = [e["t"] for e in events if e["type"] == "fault" and e.get("phase") == "start"]
    losses: dict[int, list[float]] = defaultdict(lambda: list(faults))
    for e in events:
        if e["type"] == "share-leader":
            losses[e["partition"]].append(e["t"])
    moves: dict[int, list[float]] = defaultdict(list)
    """When the workload saw a partition's leader move, and when a leader said it no longer led (the workload's
    Metadata poll sees a move only later)."""
    for e in events:
        if e["type"] == "share-leader" or (e["type"] == "share-ack" and _code(e["error"]) == NOT_LEADER_OR_FOLLOWER):
            moves[e["partition"]].append(e["t"])
        elif e["type"] == "share-state-read":
            moves[e["partition"]].append(e["at"])
    deliveries: dict[Place, list[_Delivery]] = defaultdict(list)
    acks: dict[Place, list[_Ack]] = defaultdict(list)
    produced: dict[Place, float] = {}
    complete = True
    archived: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    passed: dict[int, list[tuple[int, int, int, int]]] = defaultdict(list)
    kills: list[float] = []
    lock_ms: int | None = None
    for e in events:
        if e["type"] == "share-archived":
            archived[e["partition"]].append((e["first"], e["last"], e["dc"]))
        elif e["type"] == "share-passed":
            passed[e["partition"]].append((e["first"], e["last"], e["dc"], e["held_ms"]))
        elif e["type"] == "share-start":
            lock_ms = e.get("lock_ms")
        elif e["type"] == "share-member-killed":
            kills.append(e["t"])
        elif e["type"] == "share-produced":
            produced[(e["partition"], e["offset"])] = e["t"]
        elif e["type"] == "share-deliver":
            deliveries[(e["partition"], e["offset"])].append(_Delivery(e["member"], e["dc"], e["wall"], e["t"]))
        elif e["type"] in ("share-acking", "share-ack"):
            answer = e["type"] == "share-ack"
            sent = _Ack(e["member"], e["dc"], e["ack"], answer and e["error"] is None,
                        answer and _broker_error(e["error"]), answer and _code(e["error"]) == FENCED_LEADER_EPOCH,
                        e["wall"], e["t"])
            known = acks[(e["partition"], e["offset"])]
            if answer:  # it takes the place of the "about to send" it answers
                known[:] = [a for a in known if (a.member, a.dc, a.wall) != (sent.member, sent.dc, sent.wall)]
            known.append(sent)
        elif e["type"] == "share-end":
            complete = complete and e["complete"]

    def judge(name: str, example: dict[str, Any], since: float, until: float) -> None:
        if not durable and any(since <= t <= until for t in losses[example["partition"]]):
            report.explain("share_state_lost", {"would_be": name, **example})
        else:
            report.anomalies[name].append(example)

    for place, delivered in deliveries.items():
        where = {"partition": place[0], "offset": place[1]}
        for d in delivered:
            if d.dc > limit:
                report.anomalies["share_over_limit"].append({**where, "member": d.member, "delivery_count": d.dc})
        seen: dict[int, _Delivery] = {}
        for d in sorted(delivered, key=lambda d: d.wall):
            higher = max(seen.values(), key=lambda s: s.dc, default=d)
            if higher.dc > d.dc:
                judge("share_count_back", {**where, "delivery_count": d.dc, "after": higher.dc,
                                           "members": [higher.member, d.member]}, higher.t, d.t)
            first = seen.setdefault(d.dc, d)
            if first is d:
                continue
            example = {**where, "delivery_count": d.dc, "members": [first.member, d.member]}
            if durable and _acquisition_forgotten(first, acks.get(place, []), [*faults, *moves[place[0]]], d):
                report.explain("share_acquisition_not_durable", example)
            elif durable and any(_from_replaced_leader(held, acks.get(place, [])) for held in (first, d)):
                report.explain("share_replaced_leader_delivery", example)
            else:
                judge("share_two_holders", example, first.t, d.t)
        for a in acks.get(place, []):
            if not a.ok:
                continue
            for d in delivered:
                if d.dc > a.dc and d.wall < a.wall:
                    judge("share_two_holders", {**where, "acked_by": a.member, "ack": a.ack, "acked_count": a.dc,
                                                "held_by": d.member, "delivery_count": d.dc}, d.t, a.t)
                elif a.ack in FINAL and d.wall > a.wall:
                    judge("share_after_ack", {**where, "acked_by": a.member, "ack": a.ack,
                                              "delivered_to": d.member, "delivery_count": d.dc}, a.t, d.t)
    for partition, _ in [*produced, *deliveries]:
        losses[partition]  # every partition may have lost its state in a fault
    restarts = {} if durable else _restarts(losses, deliveries)
    _accounting(report, produced, deliveries, acks, limit, complete, restarts,
                _Unseen(archived, passed, lock_ms, kills) if durable else _Unseen({}, {}, None, []))
    return report


@dataclass(frozen=True, slots=True)
class _Unseen:
    """What explains deliveries the history cannot show: the coordinator's archived offsets and the offsets its
    start offset passed, the lock duration, the members killed."""

    archived: dict[int, list[tuple[int, int, int]]]
    passed: dict[int, list[tuple[int, int, int, int]]]
    """Per partition: (first, last, stored count, held_ms), the ``share-passed`` events."""
    lock_ms: int | None
    kills: list[float]

    def archived_unseen(self, place: Place, produced_at: float, delivered: list[_Delivery], limit: int) -> bool:
        """The coordinator archived ``place`` at the limit (or its last lock at the limit ran out), and the
        deliveries missing from the history are no more than the members killed after its last seen delivery (each
        could hold one it had not handed out)."""
        if not (self._stored_archived(place, limit) or self._expired_at_limit(place, limit)):
            return False
        seen = max((d.dc for d in delivered), default=0)
        since = max((d.t for d in delivered), default=produced_at)
        return limit - seen <= sum(1 for t in self.kills if t >= since)

    def _stored_archived(self, place: Place, limit: int) -> bool:
        partition, offset = place
        return any(first <= offset <= last and dc >= limit for first, last, dc in self.archived.get(partition, []))

    def _expired_at_limit(self, place: Place, limit: int) -> bool:
        """The start offset passed ``place`` while it was stored available with count ``limit - 1``, a lock
        duration or more after that was first stored: acquired at the limit after that write, and its lock ran out
        (see the module doc)."""
        partition, offset = place
        return self.lock_ms is not None and any(
            first <= offset <= last and dc == limit - 1 and held_ms >= self.lock_ms
            for first, last, dc, held_ms in self.passed.get(partition, []))


def _restarts(losses: dict[int, list[float]], deliveries: dict[Place, list[_Delivery]]
              ) -> dict[int, list[tuple[float, float]]]:
    """Per partition, each moment its share state may have been lost, with the lowest offset delivered after it
    (infinity when none was): where a new leader's share-partition started, from share.auto.offset.reset."""
    restarts: dict[int, list[tuple[float, float]]] = {}
    for partition, moments in losses.items():
        restarts[partition] = [(moment, min((offset for (p, offset), delivered in deliveries.items()
                                             if p == partition and any(d.t > moment for d in delivered)),
                                            default=float("inf"))) for moment in moments]
    return restarts


def _accounting(report: Report, produced: dict[Place, float], deliveries: dict[Place, list[_Delivery]],
                acks: dict[Place, list[_Ack]], limit: int, complete: bool,
                restarts: dict[int, list[tuple[float, float]]], unseen: _Unseen) -> None:
    """Each produced record's end: accepted, rejected, archived, in doubt, or unaccounted for. With share state in
    memory, a record below where a share-partition started again after a loss, and not delivered since, was skipped
    by that loss (explained)."""
    stats = {"share_produced": len(produced), "share_deliveries": sum(map(len, deliveries.values())),
             "share_accepted": 0, "share_rejected": 0, "share_archived": 0, "share_in_doubt": 0}
    for place in sorted(produced):
        confirmed = [a for a in acks.get(place, []) if a.ok and a.ack in FINAL]
        delivered = deliveries.get(place, [])
        if confirmed:
            stats["share_accepted" if confirmed[-1].ack == "accept" else "share_rejected"] += 1
        elif any(d.dc >= limit for d in delivered):
            stats["share_archived"] += 1
        elif _in_doubt(acks.get(place, []), delivered):
            stats["share_in_doubt"] += 1
            report.explain("share_ack_in_doubt", {"partition": place[0], "offset": place[1]})
        else:
            example = {"partition": place[0], "offset": place[1], "deliveries": len(delivered),
                       "drain_complete": complete}
            if any(place[1] < first and all(d.t < moment for d in delivered)
                   for moment, first in restarts.get(place[0], [])):
                report.explain("share_state_lost", {"would_be": "share_unacknowledged", **example})
            elif unseen.archived_unseen(place, produced[place], delivered, limit):
                stats["share_archived"] += 1
                report.explain("share_archived_unseen", example)
            else:
                report.anomalies["share_unacknowledged"].append(example)
    report.stats.update(stats)


def _acquisition_forgotten(first: _Delivery, acks: Iterable[_Ack], losses: list[float], again: _Delivery) -> bool:
    """``again`` repeats ``first``'s delivery count because the share-partition's leader changed in between while
    the record was still acquired: Kafka's share-partition leader writes a record's state to the share coordinator
    when it is acknowledged, released or its lock times out, not when it is acquired, so a new leader offers it
    again with the count it had before. Only when no acknowledgement of ``first`` was confirmed (a confirmed one was
    written, and a count that then went back would be an anomaly)."""
    moved = any(first.t <= t <= again.t for t in losses)
    confirmed = any(a.ok and a.member == first.member and a.dc == first.dc and a.wall < again.wall for a in acks)
    return moved and not confirmed


def _from_replaced_leader(delivery: _Delivery, acks: Iterable[_Ack]) -> bool:
    """``delivery`` came from a leader already replaced: its member's acknowledgement of it was answered
    FENCED_LEADER_EPOCH. A paused leader serves the share fetches queued for it before it learns it lost the
    partition, from its own memory (acquisitions are not written), while the new leader hands the same records
    out; only its writes are fenced. Kafka has the same window (ShareFetch carries no leader epoch)."""
    return any(a.fenced and a.member == delivery.member and a.dc == delivery.dc and a.wall >= delivery.wall
               for a in acks)


def _in_doubt(acks: Iterable[_Ack], delivered: list[_Delivery]) -> bool:
    """A final acknowledgement not answered, or failed on the client's side (a timeout, a broken connection), and
    no delivery after it: it may have been applied."""
    last_delivery = max((d.wall for d in delivered), default=0.0)
    return any(not a.ok and not a.refused and a.ack in FINAL and a.wall >= last_delivery for a in acks)


def _code(error: str | None) -> int | None:
    found = BROKER_CODE.search(error or "")
    return None if found is None else int(found.group(1))


def _broker_error(error: str | None) -> bool:
    code = _code(error)
    return code is not None and code > 0 and code not in UNANSWERED_WRITE
