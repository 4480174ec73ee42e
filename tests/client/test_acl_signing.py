"""The SDK's request signing (RemotingClient.credentials, AclCredentials)."""

from __future__ import annotations

import time

import pytest

from client import AclCredentials
from client.credentials import resolve_credentials
from client.errors import MQClientError
from protocol.acl import ACCESS_KEY, SIGNATURE, Binding, read_binding, verify
from protocol.command import RemotingCommand
from protocol.trio.client import RemotingClient


def test_sign_adds_key_and_signature() -> None:
    rc = RemotingClient(credentials=AclCredentials("rocketmq2", "12345678"))
    cmd = RemotingCommand.request(10, {"topic": "T", "queueId": 3}, b"body")
    rc.sign(cmd)
    assert cmd.ext_fields[ACCESS_KEY] == "rocketmq2"
    assert cmd.ext_fields["queueId"] == "3"
    assert verify(cmd.ext_fields, cmd.body, "12345678")
    assert not verify(cmd.ext_fields, cmd.body, "wrong123")


def test_sign_binds_the_request_code_and_time() -> None:
    """The SDK (and mqadmin, through it) signs the command's code and the time too."""
    rc = RemotingClient(credentials=AclCredentials("rocketmq2", "12345678"))
    cmd = RemotingCommand.request(215, {"topic": "T"})
    before = int(time.time() * 1000)
    rc.sign(cmd)
    binding = read_binding(cmd.ext_fields)
    assert isinstance(binding, Binding)
    assert binding.code == 215
    assert before <= binding.time_ms <= int(time.time() * 1000)
    assert verify(cmd.ext_fields, cmd.body, "12345678")


def test_unsigned_without_credentials() -> None:
    cmd = RemotingCommand.request(10, {"topic": "T"})
    RemotingClient().sign(cmd)
    assert SIGNATURE not in cmd.ext_fields


def test_resolve_credentials() -> None:
    assert resolve_credentials() is None
    assert resolve_credentials(access_key="ak12345", secret_key="sk1234") == \
        AclCredentials("ak12345", "sk1234")
    with pytest.raises(MQClientError):
        resolve_credentials(access_key="ak12345")
    assert "sk1234" not in repr(AclCredentials("ak12345", "sk1234"))
