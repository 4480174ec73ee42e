"""The controller (RocketMQ 5's controller mode, RIP-44): per broker name, the
replicas, the master and its epoch, the SyncStateSet; it elects a new master
when the old one stops heart-beating. Runs inside the name server
(``enableControllerInNamesrv``) or alone (``mqcontroller``)."""
