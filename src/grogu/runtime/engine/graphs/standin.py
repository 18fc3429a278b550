"""A CPU stand-in for CUDA graphs that enforces CUDA's rules, so that the graph tests can fail on a
CPU where a GPU would.

:class:`StandInGraphs` has the interface of :class:`~.cache.CudaGraphs` (``new_pool``, ``capture``,
``synchronize``); its graphs have ``torch.cuda.CUDAGraph``'s ``capture_begin``, ``capture_end``,
``replay`` and ``reset``, and :meth:`StandInGraphs.graph_pool_handle` mirrors
``torch.cuda.graph_pool_handle``, so code written against ``torch.cuda`` can be run on it too. The
rules, as PyTorch's caching allocator and CUDA apply them:

- **Pools.** A pool comes to life with the first capture into it; each graph captured into it holds
  it; it is freed when the last such graph is destroyed (``reset()`` or garbage). Capturing into a
  freed pool raises the allocator's ``use_count > 0`` assert. (PyTorch forgets a freed pool once its
  blocks are returned to the device, after which a capture would make it anew; the stand-in always
  raises, the stricter rule.)
- **Capture runs nothing.** Every tensor a capture wrote that existed before it is restored when the
  capture ends; every tensor the capture made (its pool's memory) is filled with garbage (NaN, -1).
  Only :meth:`~_StandInGraph.replay` computes.
- **No host synchronisation during capture**: ``.item()``, ``.tolist()``, ``.numpy()``, ``bool()``,
  ``nonzero``, boolean-mask indexing, ``masked_select``, ``unique``, ``equal`` raise, as they do under
  ``torch.cuda.graph``.
- **No host memory during capture**: a tensor made from host data (``torch.tensor([...])``, a
  synchronous copy on CUDA) or in pinned memory raises.
- **Replay reads and writes the captured buffers only**: it runs the recorded operations again on the
  very tensors the capture saw. Python that ran during the capture does not run again: a tensor a
  step rebinds, a host value it read, a branch it took, all stay as captured.

An operation the stand-in cannot tell from a legal one (a copy to another device, a side stream) is
not checked: on a CPU every tensor is on one device.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import weakref
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .cache import CudaGraphs

aten = torch.ops.aten

#: operations that read a device value back to the host (a synchronisation), by overload packet
HOST_SYNCS = frozenset(
    {
        aten.item,
        aten._local_scalar_dense,
        aten.is_nonzero,
        aten.nonzero,
        aten.masked_select,
        aten.equal,
        aten.allclose,
        aten.unique_dim,
        aten._unique,
        aten._unique2,
        aten.unique_consecutive,
        aten.repeat_interleave,
    }
)
#: operations that make a tensor from host data (a synchronous host-to-device copy on CUDA)
HOST_DATA = frozenset({aten.lift_fresh, aten.lift_fresh_copy})
#: Tensor methods that read the whole tensor back to the host (they reach no operator on a CPU)
HOST_METHODS = ("tolist", "numpy", "__array__")


class CaptureError(RuntimeError):
    """An operation CUDA does not allow while a stream is capturing."""


class _Pools:
    """The caching allocator's graph pools: how many live graphs hold each, and which were freed."""

    def __init__(self) -> None:
        self.use: dict[tuple, int] = {}
        self.freed: set[tuple] = set()

    def begin(self, pool: tuple) -> None:
        if pool in self.freed:
            raise RuntimeError(
                "it->second->use_count > 0 INTERNAL ASSERT FAILED (CUDA graph stand-in): capture into a "
                f"graph pool {pool} whose graphs are all gone (PyTorch freed it with its last graph)"
            )
        self.use[pool] = self.use.get(pool, 0) + 1

    def release(self, pool: tuple) -> None:
        self.use[pool] -= 1
        if self.use[pool] == 0:
            del self.use[pool]
            self.freed.add(pool)


def _storage_key(t: torch.Tensor) -> Any:
    if t.layout != torch.strided or t.is_mkldnn:  # no storage to reach (oneDNN's packed weights): the object
        return ("opaque", id(t))
    return t.untyped_storage().data_ptr()


class _Recorder(TorchDispatchMode):
    """Records each operation of a capture, checks CUDA's rules, and notes what it wrote and made."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[Any, tuple, dict, Any, bool]] = []
        self.made: dict[int, torch.Tensor] = {}  # storages made during the capture: the pool's memory
        self.saved: dict[int, tuple[Any, Any]] = {}  # storages written that existed before: their content
        self.violation: str | None = None

    def _refuse(self, what: str) -> None:
        self.violation = self.violation or what
        raise CaptureError(f"operation not permitted when stream is capturing (CUDA graph stand-in): {what}")

    def _check(self, func: Any, args: tuple, kwargs: dict) -> None:
        packet = func.overloadpacket
        if packet in HOST_SYNCS:
            self._refuse(f"{func} reads a value back to the host")
        if packet in HOST_DATA:
            self._refuse(f"{func} copies host data to the device")
        if kwargs.get("pin_memory"):
            self._refuse(f"{func} allocates pinned host memory")
        if packet in (aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_):
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices):
                self._refuse(f"{func} with a boolean mask finds its indices on the host")

    def _written(self, func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        out = []
        for i, arg in enumerate(func._schema.arguments):
            if arg.alias_info is None or not arg.alias_info.is_write:
                continue
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            out.extend(t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor))
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self._check(func, args, kwargs)
        for t in self._written(func, args, kwargs):
            key = _storage_key(t)
            if key not in self.made and key not in self.saved and not isinstance(key, tuple):
                self.saved[key] = (t.untyped_storage(), t.untyped_storage().clone())
        out = func(*args, **kwargs)
        inputs = {_storage_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        fresh = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and _storage_key(t) not in inputs]
        for t in fresh:
            self.made.setdefault(_storage_key(t), t)
        # an operation that only views its inputs is not run again (its recorded view sees the same memory);
        # one that may alias (``to``, ``contiguous``) is, when it made a tensor of its own
        self.ops.append((func, args, kwargs, out, bool(fresh) or not func.is_view))
        return out

    def finish(self) -> None:
        """Undo what the capture computed: tensors that existed get their content back, tensors it made
        hold garbage."""
        for storage, content in self.saved.values():
            storage.copy_(content)
        for t in self.made.values():
            if t.is_floating_point():
                t.fill_(math.nan)
            elif t.dtype != torch.bool:
                t.fill_(-1)


@contextlib.contextmanager
def _no_host_reads(recorder: _Recorder):
    """Tensor methods that read a tensor back to the host raise while a capture records."""
    originals = {name: getattr(torch.Tensor, name) for name in HOST_METHODS}

    def refuse(name: str) -> Callable:
        def method(self, *a, **kw):
            recorder._refuse(f"Tensor.{name}() reads the tensor back to the host")

        return method

    for name in HOST_METHODS:
        setattr(torch.Tensor, name, refuse(name))
    try:
        yield
    finally:
        for name, method in originals.items():
            setattr(torch.Tensor, name, method)


class _StandInGraph:
    """One graph of :class:`StandInGraphs`: ``torch.cuda.CUDAGraph``'s methods, CUDA's rules."""

    def __init__(self, backend: "StandInGraphs") -> None:
        self._backend = backend
        self._ops: list | None = None
        self._recorder: _Recorder | None = None
        self._stack: contextlib.ExitStack | None = None
        self._release: Any = None

    def capture_begin(self, pool: tuple | None = None, capture_error_mode: str = "global") -> None:
        if self._recorder is not None or self._ops is not None:
            raise RuntimeError("this graph was captured already (reset() it first)")
        pool = pool if pool is not None else self._backend._private_pool()
        self._backend.pools.begin(pool)  # raises on a freed pool
        self._release = weakref.finalize(self, self._backend.pools.release, pool)
        self._recorder = _Recorder()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(self._recorder)
        self._stack.enter_context(_no_host_reads(self._recorder))

    def capture_end(self) -> None:
        recorder, stack = self._recorder, self._stack
        if recorder is None or stack is None:
            raise RuntimeError("capture_end() without capture_begin()")
        stack.close()
        recorder.finish()
        self._recorder = self._stack = None
        if recorder.violation is not None:
            raise RuntimeError(f"CUDA graph stand-in: the capture was invalidated ({recorder.violation})")
        self._ops = recorder.ops
        self._backend.captured += 1

    def replay(self) -> None:
        if self._ops is None:
            raise RuntimeError("replay() of a graph that holds no capture")
        for func, args, kwargs, out, computes in self._ops:
            if not computes:  # the recorded view still views the same memory
                continue
            res = func(*args, **kwargs)
            for r, o in zip(tree_flatten(res)[0], tree_flatten(out)[0]):
                if isinstance(o, torch.Tensor) and r.data_ptr() != o.data_ptr():
                    o.copy_(r)
        self._backend.replayed += 1

    def reset(self) -> None:
        """Let the capture go; its pool loses this graph (freed with its last one)."""
        self._ops = None
        if self._release is not None:
            self._release()
            self._release = None


class StandInGraphs(CudaGraphs):
    """CUDA graphs on a CPU under CUDA's rules (see the module docstring); one allocator's pools.

    Attributes:
        pools: the pools and their live graphs (``pools.use``), and the pools freed (``pools.freed``).
        captured, replayed: graphs captured and replays run (diagnostics).
    """

    def __init__(self) -> None:
        self.pools = _Pools()
        self._ids = itertools.count(1)
        self.captured = self.replayed = 0

    def graph_pool_handle(self) -> tuple:
        """A new pool's id, as ``torch.cuda.graph_pool_handle()`` gives (the pool exists once captured into)."""
        return (0, next(self._ids))

    def _private_pool(self) -> tuple:
        return (next(self._ids), 0)

    def CUDAGraph(self) -> _StandInGraph:  # noqa: N802 - torch.cuda's name
        return _StandInGraph(self)

    # where :class:`~.cache.CudaGraphs` takes its graphs and pools; its ``capture`` is shared
    graph = CUDAGraph

    def new_pool(self) -> tuple:
        return self.graph_pool_handle()

    def synchronize(self, device: Any) -> None:
        pass
