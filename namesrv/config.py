"""NamesrvConfig: the name server's settings, with RocketMQ's key names."""

from __future__ import annotations

from dataclasses import dataclass

from protocol.config import PropertiesConfig
from protocol.route import DEFAULT_MAX_QUEUE_NUMS


@dataclass(slots=True)
class NamesrvConfig(PropertiesConfig):
    listen_ip: str = "127.0.0.1"
    listen_port: int = 9876
    # ms between liveness scans
    scan_not_active_broker_interval: int = 10_000
    # ms of silence after which a broker is dropped
    broker_channel_expired_time: int = 120_000
    max_frame_size: int = 16 * 1024 * 1024
    # most read/write queues a topic may have per broker; registrations beyond it are refused
    max_queue_nums: int = DEFAULT_MAX_QUEUE_NUMS
    # most bytes a compressed REGISTER_BROKER body may inflate to
    max_register_body_size: int = 64 * 1024 * 1024
    # topics a large REGISTER_BROKER reads or applies between two checkpoints (look-ups
    # are answered in between)
    register_apply_chunk: int = 128
