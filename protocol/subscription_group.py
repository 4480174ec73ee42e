"""SubscriptionGroupConfig: a consumer group's settings on a broker (RocketMQ's).

Shared by the broker (broker/subscription_group_manager.py keeps them, persisted to
config/subscriptionGroup.json) and the admin tools (mqadmin updateSubGroup). On the
wire (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP's body, GET_ALL_SUBSCRIPTIONGROUP_CONFIG's
table) a map under RocketMQ's camelCase names; ``from_dict`` checks every value.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

_WIRE = {
    "group_name": "groupName",
    "consume_enable": "consumeEnable",
    "consume_from_min_enable": "consumeFromMinEnable",
    "consume_broadcast_enable": "consumeBroadcastEnable",
    "retry_queue_nums": "retryQueueNums",
    "retry_max_times": "retryMaxTimes",
    "broker_id": "brokerId",
    "which_broker_when_consume_slowly": "whichBrokerWhenConsumeSlowly",
    "notify_consumer_ids_changed_enable": "notifyConsumerIdsChangedEnable",
    "consume_message_orderly": "consumeMessageOrderly",
}


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    # RocketMQ 5's FIFO group: POP (and gRPC) consumers get a queue's messages one
    # batch at a time, in order
    consume_message_orderly: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {_WIRE[f.name]: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Any) -> SubscriptionGroupConfig:
        """Raises ValueError for a map without a group name or with wrong types."""
        if not isinstance(data, dict) or not isinstance(data.get("groupName"), str):
            raise ValueError("a subscription group needs groupName")
        if not data["groupName"]:
            raise ValueError("groupName is empty")
        defaults = cls(data["groupName"])
        values: dict[str, Any] = {}
        for f in fields(cls):
            key = _WIRE[f.name]
            if key not in data or f.name == "group_name":
                continue
            value = data[key]
            if isinstance(getattr(defaults, f.name), bool):
                if not isinstance(value, bool):
                    raise ValueError(f"{key} must be true or false")
            elif type(value) is not int or value < 0:
                raise ValueError(f"{key} must be a non-negative integer")
            values[f.name] = value
        return cls(data["groupName"], **values)

    def retry_limit(self, header_max: int | None) -> int:
        """Reconsume times after which a message of the group is a dead letter:
        the request's ``maxReconsumeTimes`` when it carries one (RocketMQ's
        clients since 3.4.9), else the group's ``retryMaxTimes``."""
        return self.retry_max_times if header_max is None else header_max

    def __str__(self) -> str:
        """RocketMQ's toString (mqadmin updateSubGroup prints it)."""
        inner = ", ".join(f"{key}={str(value).lower() if isinstance(value, bool) else value}"
                          for key, value in self.to_dict().items())
        return f"SubscriptionGroupConfig [{inner}]"
