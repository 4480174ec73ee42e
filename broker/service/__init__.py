"""Broker services: each feature's business behind every transport.

A service takes narrow collaborators (protocols or small bundles, never the
``BrokerController``) and domain values, and returns domain values (status
enums, offsets, buffers); no ``RemotingCommand`` inside. The remoting
processors decode a header, call a service and encode its answer.
"""
