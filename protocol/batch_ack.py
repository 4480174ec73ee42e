"""BATCH_ACK_MESSAGE's bodies (RocketMQ 5's code 200151; the body is ours:
RocketMQ's names its check points, ours carries receipt handles).

Request body: the receipt handles, one per line (UTF-8), at most
``MAX_BATCH_ACK`` of at most ``MAX_HANDLE_BYTES`` each; the header names the
group and the topic (``BatchAckMessageRequestHeader``). Response body: one line
per handle, in order: empty when acked, else the refusal's remark.
"""

from __future__ import annotations

MAX_BATCH_ACK = 1024
MAX_HANDLE_BYTES = 512  # the broker's longest handle (broker/pop/core.py MAX_HANDLE_LEN)
MAX_BATCH_ACK_BODY = MAX_BATCH_ACK * (MAX_HANDLE_BYTES + 1)
MAX_REMARK_BYTES = 512


class BatchAckError(ValueError):
    """A batch-ack body that breaks the format or its bounds."""


def encode_handles(handles: list[str]) -> bytes:
    if not 0 < len(handles) <= MAX_BATCH_ACK:
        raise BatchAckError(f"a batch ack takes 1..{MAX_BATCH_ACK} receipt handles")
    for h in handles:
        if not h or "\n" in h or len(h.encode("utf-8")) > MAX_HANDLE_BYTES:
            raise BatchAckError("a receipt handle must be 1.."
                                f"{MAX_HANDLE_BYTES} bytes without a line break")
    return "\n".join(handles).encode("utf-8")


def decode_handles(body: bytes | None) -> list[str]:
    if not body:
        raise BatchAckError("a batch ack needs a body of receipt handles")
    if len(body) > MAX_BATCH_ACK_BODY:
        raise BatchAckError(f"batch ack body longer than {MAX_BATCH_ACK_BODY} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BatchAckError("batch ack body is not UTF-8") from exc
    handles = text.split("\n")
    if len(handles) > MAX_BATCH_ACK:
        raise BatchAckError(f"a batch ack takes at most {MAX_BATCH_ACK} receipt handles")
    for i, h in enumerate(handles):
        if not h or len(h.encode("utf-8")) > MAX_HANDLE_BYTES:
            raise BatchAckError(f"receipt handle {i} is empty or longer than "
                                f"{MAX_HANDLE_BYTES} bytes")
    return handles


def encode_results(remarks: list[str | None]) -> bytes:
    """``None`` for an acked handle, else why it was refused."""
    lines = ["" if r is None else ((r or "refused").replace("\n", " ")[:MAX_REMARK_BYTES])
             for r in remarks]
    return "\n".join(lines).encode("utf-8")


def decode_results(body: bytes | None, count: int) -> list[str | None]:
    text = (body or b"").decode("utf-8", errors="replace")
    lines = text.split("\n")
    if len(lines) != count:
        raise BatchAckError(f"batch ack answer has {len(lines)} results for {count} handles")
    return [line or None for line in lines]
