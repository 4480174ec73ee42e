"""Timer messages (RocketMQ 5's timer): delivery at any time, not only the delay levels.

- ``rules``: the TIMER_* properties of a send, validated, into a due time (pure);
- ``wheel``: slots of pending messages by due time, the delivery cursor, recalls (pure);
- ``timer_log``: the append-only timer log and the checkpoint (synchronous files);
- ``service``: the trio edge that moves messages in from the timer topic and out when due.
"""
