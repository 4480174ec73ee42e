"""MQClientError / MQBrokerError."""

from __future__ import annotations

import pickle

from client import MQBrokerError, MQClientError
from protocol.codes import ResponseCode


def test_broker_error_names_code_and_remark() -> None:
    err = MQBrokerError(ResponseCode.SYSTEM_BUSY, "busy now", "1.2.3.4:10911", context="send to X")
    assert isinstance(err, MQClientError)
    assert err.response_code is ResponseCode.SYSTEM_BUSY
    assert err.remark == "busy now"
    assert str(err) == "send to X: CODE: SYSTEM_BUSY (2), REMARK: busy now, SERVER: 1.2.3.4:10911"


def test_unknown_code_and_missing_remark() -> None:
    err = MQBrokerError(999, None)
    assert err.response_code == 999
    assert err.remark == ""
    assert "UNKNOWN (999)" in str(err)


def test_pickle_round_trip() -> None:
    err = pickle.loads(pickle.dumps(MQBrokerError(17, "no topic", "h:1", context="c")))
    assert err.response_code is ResponseCode.TOPIC_NOT_EXIST
    assert (err.remark, err.addr, err.context) == ("no topic", "h:1", "c")
