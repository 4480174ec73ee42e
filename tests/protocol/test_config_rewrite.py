"""rewrite_properties: run-time config changes written into a properties file."""

from __future__ import annotations

from protocol.config import rewrite_properties


def test_rewrite_properties_keeps_the_file_and_sets_the_keys() -> None:
    text = "# broker-a\nbrokerName=broker-a\nmaxMessageSize = 10\n\nmaxMessageSize=20\n! note\n"
    out = rewrite_properties(text, {"maxMessageSize": "99", "brokerPermission": "4"})
    assert out == ("# broker-a\nbrokerName=broker-a\nmaxMessageSize = 10\n\nmaxMessageSize=99\n"
                   "! note\nbrokerPermission=4\n")
    assert rewrite_properties("", {"a": "1"}) == "a=1\n"
