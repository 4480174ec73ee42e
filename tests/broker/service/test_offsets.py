"""OffsetService in process: the real offset table, a fake queue-offset source;
and the remoting adapter's header mapping. No controller, no sockets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.consumer_manage_processor import commit_of
from broker.consumer_offset_manager import ConsumerOffsetManager
from broker.service.offsets import CommitKind, CommitStatus, OffsetCommit, OffsetService
from protocol.headers import UpdateConsumerOffsetRequestHeader

G, T = "g", "T"


@dataclass
class Queues:
    min_offset: int = 0
    max_offset: int = 10
    first_in_disk: bool = False
    disk_asked: int = 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.min_offset

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.max_offset

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, offset: int) -> bool:
        assert offset == 0
        self.disk_asked += 1
        return self.first_in_disk


@pytest.fixture
def offsets(tmp_path: Path) -> ConsumerOffsetManager:
    return ConsumerOffsetManager(BrokerConfig(store_path_root_dir=str(tmp_path)))


def test_query_a_stored_offset_or_the_new_group_rule(offsets: ConsumerOffsetManager) -> None:
    queues = Queues()
    svc = OffsetService(offsets, queues)
    assert svc.query(G, T, 0) == 0  # none stored, the first message still in memory
    assert svc.query(G, T, 0, zero_if_not_found=False) is None
    queues.first_in_disk = True
    assert svc.query(G, T, 0) is None
    queues.first_in_disk, queues.min_offset = False, 4
    asked = queues.disk_asked
    assert svc.query(G, T, 0) is None and queues.disk_asked == asked  # not asked: min > 0
    offsets.commit_offset(G, T, 0, 7)
    assert svc.query(G, T, 0) == 7 and svc.query(G, T, 0, zero_if_not_found=False) == 7
    assert (svc.min_offset(T, 0), svc.max_offset(T, 0)) == (4, 10)


def test_commit_kinds(offsets: ConsumerOffsetManager) -> None:
    svc = OffsetService(offsets, Queues())
    assert svc.commit(OffsetCommit(G, T, 0, 5)) is CommitStatus.OK
    assert offsets.query_offset(G, T, 0) == 5 and offsets.reset_version(T, G) == 0
    assert svc.commit(OffsetCommit(G, T, 0, 2, CommitKind.ADMIN_RESET)) is CommitStatus.OK
    assert offsets.query_offset(G, T, 0) == 2 and offsets.reset_version(T, G) == 1
    # a slave's offset: only forward, and only at the reset counter it read
    assert svc.commit(OffsetCommit(G, T, 0, 9, CommitKind.INCREASE_ONLY, 0)) is CommitStatus.OK
    assert offsets.query_offset(G, T, 0) == 2
    svc.commit(OffsetCommit(G, T, 0, 1, CommitKind.INCREASE_ONLY, 1))
    assert offsets.query_offset(G, T, 0) == 2
    svc.commit(OffsetCommit(G, T, 0, 9, CommitKind.INCREASE_ONLY, 1))
    assert offsets.query_offset(G, T, 0) == 9
    assert svc.commit(OffsetCommit(G, T, 0, -1)) is CommitStatus.ILLEGAL_OFFSET
    assert offsets.query_offset(G, T, 0) == 9


@pytest.mark.parametrize(("admin_reset", "increase_only", "kind"), [
    (None, None, CommitKind.COMMIT), (False, False, CommitKind.COMMIT),
    (True, None, CommitKind.ADMIN_RESET), (None, True, CommitKind.INCREASE_ONLY),
    (True, True, CommitKind.INCREASE_ONLY),  # increaseOnly first, as before
])
def test_the_adapter_reads_the_commit_kind(admin_reset: bool | None, increase_only: bool | None,
                                           kind: CommitKind) -> None:
    h = UpdateConsumerOffsetRequestHeader(G, T, 3, 8, admin_reset, increase_only, 2)
    assert commit_of(UpdateConsumerOffsetRequestHeader.from_fields(h.to_fields())) == (
        OffsetCommit(G, T, 3, 8, kind, 2))
