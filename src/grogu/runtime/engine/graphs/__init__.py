"""Decode steps kept as CUDA graphs from one batch to the next.

A CUDA graph replays the kernels of one decode step on the memory they used when it was captured. A
slot step (:class:`~..feeds.SlotStep`) reads nothing back to the host, so it can be captured. For a
graph to serve later batches too, every tensor the step reads must outlive the batch. Three jobs, one
module each:

- :mod:`.arena`: **arena memory.** A :class:`StepArena` holds the step's buffers for ``rows`` rows of
  ``capacity`` slots. A batch is copied in after its prefill (its prefill cache then let go) and
  decodes in the next power of two of rows (:func:`bucket`). Arenas are kept per span class
  (:func:`span_class`: two sizes an octave, so prompts of many lengths share a handful), step width,
  layer shapes and stop tokens.
- :mod:`.cache`: **the graph cache.** :class:`KeptGraphs` keeps the arenas (the least recently used
  let go first, within the planner's token budget), captures each (bucket, mode) once after one eager
  warm-up step, and replays it after. **Each arena owns its graph memory pool, and the pool dies with
  it**: a capture names a pool that is new or held by a live graph, never one PyTorch has freed. A
  failed capture is counted and logged, its arena let go, and a later batch tries again with a new
  pool (up to :data:`~.cache.MAX_FAILURES`, then eager until ``release()``). :class:`GraphStats` counts
  captures, replays, failures, warm-up and eager steps.
- :mod:`.loop`: **the loop over an arena.** :class:`ArenaFeed` feeds the decode loop from an arena
  (drafts: the host keeps the answers), or decodes entirely on the device without drafts, greedy or
  sampled (:meth:`ArenaFeed.decode_on_device`).

On a CPU, :mod:`.standin` captures and replays under CUDA's rules (pool lifetimes, no host reads or
host memory during a capture, replay on the captured tensors only): ``Decoder.emulate_graphs`` uses
it, which is how the tests check this path.
"""

from .arena import MIN_SPAN, StepArena, arena_key, bucket, span_class
from .cache import KEPT_ARENAS, MAX_FAILURES, CudaGraphs, GraphStats, KeptGraphs
from .loop import ArenaFeed
from .standin import StandInGraphs

__all__ = [
    "KEPT_ARENAS",
    "MAX_FAILURES",
    "MIN_SPAN",
    "ArenaFeed",
    "CudaGraphs",
    "GraphStats",
    "KeptGraphs",
    "StandInGraphs",
    "StepArena",
    "arena_key",
    "bucket",
    "span_class",
]
