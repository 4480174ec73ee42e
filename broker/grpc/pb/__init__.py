"""apache.rocketmq.v2 message classes generated from proto/ (deploy/gen_proto.py)."""
