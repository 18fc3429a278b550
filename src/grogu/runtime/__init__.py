"""The runtime layer: where a target LLM's token statistics come from.

The batched scoring engine (:mod:`.engine`), inference servers one class per API (:mod:`.inference_server`),
model loading (:mod:`.models`, :mod:`.gguf_meta`), the coalescer that batches concurrent calls
(:mod:`.coalescer`) and the packaged sentence embedders (:mod:`.embedders`). It imports only the core layer.
"""
