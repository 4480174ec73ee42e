"""The name server's configuration over the wire (mqadmin getNamesrvConfig /
updateNamesrvConfig; RocketMQ's GET_NAMESRV_CONFIG and UPDATE_NAMESRV_CONFIG).

- GET_NAMESRV_CONFIG (319): body = the effective config as properties text (UTF-8),
  every secret's value masked as ``******`` (protocol.config.mask_secrets);
- UPDATE_NAMESRV_CONFIG (318): body = properties text of the keys to change.

Both are admin-only with ACL on (acl/binding.py NAMESRV_ADMIN_CODES) and need
a bound signature. A secret key is refused by name before any other check; only the
keys of ``RUNTIME_KEYS`` change at run time (each names what reads it again), any
other key or a bad value is refused naming it, and nothing is applied. Applied
changes are written (atomically) into the config file the name server was started
from (``-c``), so they survive a restart; without a file they hold until the name
server stops, and the answer's remark says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from namesrv.config import NamesrvConfig
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.config import ConfigError, properties_body, runtime_changes
from protocol.trio.connection import RemotingConnection

if TYPE_CHECKING:
    from namesrv.controller import NamesrvController

# RocketMQ key -> what reads it again after a change
RUNTIME_KEYS: dict[str, str] = {
    "orderMessageEnable": "each route look-up (orderTopicConf in routes)",
    "scanNotActiveBrokerInterval": "the liveness scan, from its next period",
    "brokerChannelExpiredTime": "each liveness scan and each registration",
    "kvConfigMaxNamespaces": "each KV config put",
    "kvConfigMaxKeys": "each KV config put",
    "kvConfigMaxChars": "each KV config put",
}

_POSITIVE = ("scanNotActiveBrokerInterval", "brokerChannelExpiredTime")

NOT_PERSISTED = ("applied, but not persisted: the name server was started without a config "
                 "file (-c), so the change holds until it stops")


def check_namesrv_changes(config: NamesrvConfig, props: dict[str, str]) -> dict[str, str]:
    """The changes under their RocketMQ names, checked on a copy of ``config``:
    ConfigError naming the first key that cannot change at run time or whose value
    is bad. Nothing is applied."""
    changes, trial = runtime_changes(config, props, RUNTIME_KEYS, "name server")
    shown = trial.to_properties()
    for name in changes:
        if name in _POSITIVE and int(shown[name]) <= 0:
            raise ConfigError(f"{name} must be positive, not {shown[name]}")
    return {name: shown[name] for name in changes}


class NamesrvConfigProcessor:
    def __init__(self, controller: NamesrvController) -> None:
        self.controller = controller

    def get_namesrv_config(self, conn: RemotingConnection, cmd: RemotingCommand
                           ) -> RemotingCommand:
        text = self.controller.config.render() + "\n"
        return cmd.response(ResponseCode.SUCCESS, body=text.encode())

    async def update_namesrv_config(self, conn: RemotingConnection, cmd: RemotingCommand
                                    ) -> RemotingCommand:
        try:
            changes = check_namesrv_changes(self.controller.config, properties_body(cmd.body))
        except ConfigError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"UPDATE_NAMESRV_CONFIG: {exc}")
        try:
            persisted = await self.controller.apply_runtime_config(changes)
        except OSError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"UPDATE_NAMESRV_CONFIG: not applied, cannot write "
                                f"{self.controller.config_file}: {exc}")
        return cmd.response(ResponseCode.SUCCESS, None if persisted else NOT_PERSISTED)
