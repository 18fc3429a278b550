"""The observe layer: what happened to an answer, after the fact.

Influence records and the influence log (:mod:`.influence_record`, :mod:`.influence_log`), where records go
(:mod:`.sinks`) and OpenTelemetry spans of reranking and influence (:mod:`.tracing`). It imports the core,
runtime, metrics and rerank layers only.
"""
