"""The broker's services know no transport: nothing under broker/service/
imports the remoting command, the trio edge or a remoting processor."""

from __future__ import annotations

from tests.layout import import_graph, imports_between


def test_services_import_no_transport() -> None:
    graph = import_graph(packages=("protocol", "acl", "broker"))
    assert any(m.startswith("broker.service.") for m in graph)
    for transport in ("protocol.command", "protocol.trio",
                      "broker.pull_processor", "broker.consumer_manage_processor",
                      "broker.client_manage_processor", "broker.send_processor",
                      "broker.query_processor", "broker.queue_admin_processor",
                      "broker.end_transaction_processor", "broker.admin_processor",
                      "broker.ops_processor", "broker.broker_to_client", "broker.controller"):
        assert imports_between(graph, "broker.service", transport) == []
