"""The broker's gRPC endpoint: apache.rocketmq.v2.MessagingService for RocketMQ 5's clients.

``framing`` is the sans-IO core (length-prefixed messages, grpc-timeout, status
trailers); ``server`` is the trio edge (an ASGI app and the server) over ``h2_server``
(HTTP/2 with h2 on trio sockets);
``convert`` maps protobuf messages to and from the broker's domain values and
``messaging`` holds the RPC handlers, thin adapters over broker/service/.
docs/grpc.md says what is served.
"""
