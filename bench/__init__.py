"""Benchmarks and the tools that measure the project: ``mqbench`` (mqbench.py) with its
attack modes (attacks.py), ``make bench``'s whole run (all.py), the comparisons run beside it
(official.py: RocketMQ's C++ client, redis_streams.py: Redis Streams) and the measurements
behind the figures in README.md and docs/ (accept, ha, scrape, security, topics, trace_send).

No part of the SDK or the daemons imports this package.
"""
