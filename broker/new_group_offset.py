"""What QUERY_CONSUMER_OFFSET answers: RocketMQ 4.x's rule for a group with no stored offset.

RocketMQ 4.x (ConsumerManageProcessor.queryConsumerOffset):

- an offset stored for the group and queue: that offset;
- else, when the queue's min offset is <= 0 and its first message (queue
  offset 0) is not "in disk" (``MessageStore.check_in_disk_by_consume_offset``:
  within accessMessageInMemoryMaxRatio % of the machine's memory from the
  commit log's end, or no message there yet): offset 0;
- else QUERY_NOT_FOUND.

A client's CONSUME_FROM_LAST_OFFSET takes the 0 and reads the queue from its
start; only on QUERY_NOT_FOUND does it start at the max offset. So a new group
of a young topic reads what was sent before it started, as with RocketMQ,
while a group new to a queue with history already cleaned up, or too old to
be cached, starts at the end.

RocketMQ 5.x adds the request field ``setZeroIfNotFound``: false asks for
QUERY_NOT_FOUND instead of the 0 (its brokers forwarding queries for static
topics); honoured here too. (5.x also asks whether the first message is in the
page cache rather than this memory-ratio estimate, and answers QUERY_NOT_FOUND
for an empty queue; this broker keeps 4.x's rule.)

Pure: the stored offset and queue facts in, the answer out.
"""

from __future__ import annotations

from collections.abc import Callable

NOT_FOUND_REMARK = "Not found, maybe this group consumer boot first"


def query_offset_answer(stored: int, min_offset: int, first_in_disk: Callable[[], bool],
                        zero_if_not_found: bool = True) -> int | None:
    """The offset QUERY_CONSUMER_OFFSET answers, or None for QUERY_NOT_FOUND.

    ``stored``: the group's stored offset (-1 for none); ``min_offset``: the
    queue's min offset; ``first_in_disk``: whether the queue's message at
    offset 0 is in disk (asked only when it decides, as RocketMQ's ``&&``);
    ``zero_if_not_found``: RocketMQ 5's ``setZeroIfNotFound`` (absent: true)."""
    if stored >= 0:
        return stored
    if zero_if_not_found and min_offset <= 0 and not first_in_disk():
        return 0
    return None


def pop_init_offset(init_mode_min: bool, retry_topic: bool, min_offset: int, max_offset: int,
                    first_in_disk: Callable[[], bool]) -> int:
    """Where a POP group with no offset on a queue starts (RocketMQ 5's
    PopMessageProcessor.getInitOffset with ``initPopOffsetByCheckMsgInMem``).

    - ConsumeInitMode MIN (``init_mode_min``), or a retry topic: the queue's
      min offset;
    - MAX: 0 when the queue's min offset is <= 0 and its first message (queue
      offset 0) is not in disk (``first_in_disk``: the store's
      accessMessageInMemoryMaxRatio estimate, as QUERY_CONSUMER_OFFSET above;
      asked only when the min offset allows it), so that a new group of a young
      queue sees what was sent before its first pop; else the queue's max
      offset (RocketMQ starts one before it, re-serving the last message; here
      a group starts past everything already stored).
    """
    if init_mode_min or retry_topic:
        return max(0, min_offset)
    if min_offset <= 0 and not first_in_disk():
        return 0
    return max(0, max_offset)
