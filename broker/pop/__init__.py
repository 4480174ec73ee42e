"""POP consumption's pure core (``core.py``: in-flight records, receipt
handles, the table's state machine). The service over it is
broker/service/pop.py, its log broker/store/pop_log.py, its trio edge
broker/pop_processor.py (docs/pop.md)."""
