"""QueryMessageProcessor: SEARCH_OFFSET_BY_TIMESTAMP, QUERY_MESSAGE and
VIEW_MESSAGE_BY_ID on the remoting wire, a thin adapter over ``QueryService``
(broker/service/queries.py, where the rules live).

It decodes the header, calls the service and encodes its outcome: the status
by the one table of this transport (``QUERY_STATUS_TO_CODE``, which
broker/queue_admin_processor.py shares), the records as the body. ACL for
what a request does not name (a stored message's topic) is checked here, with
the request's signature, through the check the service calls per message.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.acl.stored import ResourceCheck, message_needs
from broker.service.queries import MessageQuery, QueryService, QueryStatus
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    OffsetResponseHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    SearchOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from protocol.message import MessageExt
from protocol.trio.connection import RemotingConnection

# A query by message id (RocketMQ's MixAll.UNIQUE_MSG_QUERY_FLAG): an extra field
# of QUERY_MESSAGE's header, "true" or not there
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"

# the remoting code of each query status (this transport's one table)
QUERY_STATUS_TO_CODE: dict[QueryStatus, int] = {
    QueryStatus.OK: ResponseCode.SUCCESS,
    QueryStatus.NOT_FOUND: ResponseCode.QUERY_NOT_FOUND,
    QueryStatus.NO_MESSAGE: ResponseCode.SYSTEM_ERROR,
    QueryStatus.NO_PERMISSION: ResponseCode.NO_PERMISSION,
    QueryStatus.TOPIC_NOT_EXIST: ResponseCode.TOPIC_NOT_EXIST,
    QueryStatus.NO_QUEUE: ResponseCode.SYSTEM_ERROR,
    QueryStatus.ILLEGAL_REQUEST: ResponseCode.SYSTEM_ERROR,
    QueryStatus.NOT_ON_SLAVE: ResponseCode.SYSTEM_ERROR,
}


def decode_query(cmd: RemotingCommand) -> MessageQuery:
    """A QUERY_MESSAGE request as the service's query (raises on a bad header)."""
    h = QueryMessageRequestHeader.from_fields(cmd.ext_fields)
    by_id = str(cmd.ext_fields.get(UNIQUE_MSG_QUERY_FLAG, "")).lower() == "true"
    return MessageQuery(h.topic, h.key, h.max_num, h.begin_timestamp, h.end_timestamp, by_id)


class QueryMessageProcessor:
    def __init__(self, service: QueryService, acl_check: Callable[[], ResourceCheck]) -> None:
        self.service = service
        self.acl_check = acl_check  # the controller's, set once ACL is loaded

    def search_offset_by_timestamp(
        self, conn: RemotingConnection, cmd: RemotingCommand
    ) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_fields(cmd.ext_fields)
        offset = self.service.search_offset(h.topic, h.queue_id, h.timestamp)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(offset).to_fields())

    def query_message(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        """Records indexed under a key, newest first; the response header says
        how far the index goes (RocketMQ's clients read it on every answer)."""
        query = decode_query(cmd)
        acl = self.acl_check()
        visible = None
        if acl.enabled:
            def visible(msg: MessageExt) -> bool:
                # the guard checked SUB on the header's topic; a system topic's message
                # (a half or delayed one) also needs SUB on its real topic: others are left out
                return acl.allows(conn, cmd, message_needs(query.topic, msg.properties))
        out = self.service.query_messages(query, visible)
        header = QueryMessageResponseHeader(out.index_end_timestamp,
                                            out.index_end_phy_offset).to_fields()
        body = b"".join(out.records) if out.status is QueryStatus.OK else None
        return cmd.response(QUERY_STATUS_TO_CODE[out.status], out.remark, ext_fields=header,
                            body=body)

    def view_message_by_id(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_fields(cmd.ext_fields)
        acl = self.acl_check()
        may_read = None
        if acl.enabled:
            def may_read(msg: MessageExt) -> str | None:
                # ACL: the request names no topic, the message has one: SUB on it (the
                # answer does not say which topic the caller lacks)
                refused = acl.refusal(
                    conn, cmd, message_needs(msg.topic, msg.properties),
                    remark=f"No permission to read the message at commit-log offset {h.offset}: "
                           "SUB on its topic needed")
                return None if refused is None else refused.remark
        out = self.service.view_message(h.offset, may_read)
        return cmd.response(QUERY_STATUS_TO_CODE[out.status], out.remark, body=out.record)
