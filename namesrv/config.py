"""NamesrvConfig: the name server's settings, with RocketMQ's key names."""

from __future__ import annotations

from dataclasses import dataclass

from protocol.config import ConfigError, PropertiesConfig
from protocol.route import DEFAULT_MAX_QUEUE_NUMS
from protocol.trio.limits import ConnectionLimits, limits_of


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
    # connections (protocol/trio/limits.py), as the broker's keys
    server_channel_max_idle_time_seconds: int = 120
    frame_read_timeout_seconds: int = 30
    write_buffer_high_water_mark: int = 4 * 1024 * 1024
    write_buffer_low_water_mark: int = 1024 * 1024
    max_total_connection_buffer_bytes: int = 256 * 1024 * 1024
    max_in_flight_requests_per_connection: int = 4096
    max_connections_per_address: int = 1024

    def connection_limits(self) -> ConnectionLimits:
        return limits_of(self)

    def validate(self) -> None:
        problem = self.connection_limits().problem()
        if problem is not None:
            raise ConfigError(f"connection limits: {problem}")
