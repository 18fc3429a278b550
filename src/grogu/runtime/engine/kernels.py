"""Which kernels run the model's linear layers on a CPU.

PyTorch's CPU ``nn.Linear`` in float32 calls MKL's sgemm, which appears to take a slower path on AMD
CPUs; oneDNN, which every PyTorch CPU build also ships, runs the same product with the CPU's widest
vector instructions, and with the weights packed once in oneDNN's blocked layout a decode step gains
more; the products agree with MKL's to float32 rounding (the figures for SmolLM2 on AMD EPYC CPUs:
``docs/benchmarks.md``, "Engine speed"). Where MKL is as fast (it is tuned for Intel CPUs),
``auto`` measures that on one of the model's layers — with the packed weights the engine will run,
medians of alternating runs, a decode-sized and a prompt-sized input weighing alike — and keeps the
default.

The model is not modified for good: while an engine runs, each plain ``nn.Linear`` with float32
weights on the CPU gets an instance ``forward`` that calls oneDNN, and the original is restored when
the last engine using that model is done (a count per model, so nested and concurrent engines sharing
one model are safe). Modules that already carry an instance ``forward`` (e.g. accelerate hooks) and
subclasses of ``nn.Linear`` (quantised or LoRA layers) are left alone, and a caller that needs
gradients meanwhile gets the original op.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
import types
from typing import Any, Iterator

import torch

from .config import LINEAR_BACKENDS

_LOCK = threading.Lock()
_ACTIVE: dict[int, int] = {}  # id(model) -> engines currently running it with oneDNN linears


def _onednn_op() -> Any | None:
    """``torch.ops.mkldnn._linear_pointwise`` when this PyTorch build has it, else None."""
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):
        return None


def cpu_linears(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """The model's plain ``nn.Linear`` modules with float32 weights on the CPU and no instance forward."""
    return [
        m
        for m in model.modules()
        if type(m) is torch.nn.Linear
        and m.weight.device.type == "cpu"
        and m.weight.dtype == torch.float32
        and "forward" not in m.__dict__
    ]


def _median_pair(fn_a, fn_b, reps: int = 9) -> tuple[float, float]:
    """Median seconds of ``fn_a`` and of ``fn_b``, timed alternately (after one warm-up call each), so
    that a slow moment of a shared machine weighs on both alike."""
    fn_a(), fn_b()
    ta, tb = [], []
    for _ in range(reps):
        for fn, out in ((fn_a, ta), (fn_b, tb)):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return statistics.median(ta), statistics.median(tb)


@torch.inference_mode()
def onednn_is_faster(layer: torch.nn.Linear, rows: tuple[int, ...] = (8, 128), *, pack: bool = False) -> bool:
    """Whether oneDNN computes ``layer`` faster than the default kernel (by at least 10 %: the geometric
    mean over inputs of ``rows`` rows of the time ratio, each time a median of alternating runs) and to
    the same values (float32 rounding).
    ``pack``: time oneDNN on the weight packed in its blocked layout, as the engine will run it."""
    op = _onednn_op()
    if op is None:
        return False
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(n, layer.in_features, generator=g) for n in rows]
    reorder = _reorder_op() if pack else None
    try:
        weight = reorder(layer.weight.detach(), 8) if reorder is not None else layer.weight
        onednn = lambda x: op(x, weight, layer.bias, "none", [], "")  # noqa: E731
        for x in xs:
            ref, got = torch.nn.functional.linear(x, layer.weight, layer.bias), onednn(x)
            if not torch.allclose(got, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max().clamp(min=1))):
                return False
    except RuntimeError:
        return False
    ratios = []  # each input weighs alike: decode steps (few rows) are as many as prompt passes (many)
    for x in xs:
        t_default, t_onednn = _median_pair(
            lambda: torch.nn.functional.linear(x, layer.weight, layer.bias), lambda: onednn(x)
        )
        ratios.append(t_onednn / t_default)
    return statistics.geometric_mean(ratios) < 0.9


def choose_linear_backend(model: torch.nn.Module, backend: str = "auto", *, pack: bool = False) -> str:
    """'onednn' or 'default' for this model. 'auto' picks oneDNN when the model has CPU float32
    linear layers and oneDNN (on packed weights when ``pack``) measures faster on a representative one
    (the largest of at most 64 MB, so that the check stays quick for large models)."""
    if backend not in LINEAR_BACKENDS:
        raise ValueError(f"cpu_linear must be one of {LINEAR_BACKENDS}, got {backend!r}")
    layers = cpu_linears(model)
    if backend == "default" or not layers or _onednn_op() is None:
        return "default"
    if backend == "onednn":
        return "onednn"
    small = [m for m in layers if m.weight.numel() * 4 <= 64 * 2**20]
    probe = max(small, key=lambda m: m.weight.numel()) if small else min(layers, key=lambda m: m.weight.numel())
    return "onednn" if onednn_is_faster(probe, pack=pack) else "default"


class CpuLinears:
    """An engine's kernels for a model's CPU float32 linear layers; calling it gives the context in
    which the model's forward passes use them.

    backend: 'auto', 'onednn' or 'default' (see :func:`choose_linear_backend`). With oneDNN, weights
    are also re-laid-out once in oneDNN's blocked format (``pack``; default: when the linear weights
    take at most ``pack_limit_mb``, as the packed copy is held beside the model's own weights). Packed
    weights made decode steps of SmolLM2-135M 25-40 % faster than plain oneDNN on this project's CPU.
    A weight changed in place since it was packed (training, ``load_state_dict``) is packed again
    before the next use, so a packed copy is never stale.
    """

    def __init__(
        self, model: torch.nn.Module, backend: str = "auto", *, pack: bool | None = None, pack_limit_mb: int = 2048
    ) -> None:
        self.model = model
        if pack is None:
            size = sum(m.weight.numel() * 4 for m in cpu_linears(model))
            pack = size <= pack_limit_mb * 2**20
        pack = bool(pack) and _reorder_op() is not None
        self.backend = choose_linear_backend(model, backend, pack=pack)
        self.pack = pack and self.backend == "onednn"
        self._packed: dict[int, tuple[tuple[int, int], torch.Tensor]] = {}

    def _weight(self, m: torch.nn.Linear) -> torch.Tensor:
        """The weight oneDNN reads: the packed copy (made again if the weight changed), or the weight."""
        if not self.pack:
            return m.weight
        try:
            stamp = (m.weight._version, m.weight.data_ptr())
        except RuntimeError:  # an inference tensor has no version counter (and cannot change outside one)
            stamp = (-1, m.weight.data_ptr())
        entry = self._packed.get(id(m))
        if entry is None or entry[0] != stamp:
            with torch.inference_mode():
                entry = (stamp, _reorder_op()(m.weight.detach(), 8))  # blocked for ~8 rows a step
            self._packed[id(m)] = entry
        return entry[1]

    def __call__(self):
        if self.backend != "onednn":
            return contextlib.nullcontext()
        return _onednn_linears(self.model, self._weight)


def _reorder_op() -> Any | None:
    op = _onednn_op()
    return getattr(torch.ops.mkldnn, "_reorder_linear_weight", None) if op is not None else None


#: oneDNN calls see at most these row counts: 1..EXACT_ROWS as they are, more rows in chunks of
#: CHUNK_ROWS with the last chunk padded to a multiple of ROW_STEP (see :func:`row_shapes`)
EXACT_ROWS, ROW_STEP, CHUNK_ROWS = 64, 16, 256


def row_shapes(rows: int) -> list[tuple[int, int]]:
    """How :func:`onednn_linear` cuts an input of ``rows`` rows: (rows taken, rows oneDNN sees) per call.

    oneDNN builds and caches a primitive per input shape and layer shape (up to 1,024 of them), each
    holding 0.6 MB (a few rows) to 5 MB (a thousand rows) whatever the weight's size. A serving process
    sees a new row count with almost every prompt, so its memory grew for hours (+35 % in ten minutes:
    ``docs/service.md``). Here a layer sees at most 76 row counts: decode steps (up to 64 rows) run as
    they are; a longer input runs in chunks of 256 rows, its last chunk padded to a multiple of 16."""
    if rows <= EXACT_ROWS:
        return [(rows, rows)]
    out = [(CHUNK_ROWS, CHUNK_ROWS)] * (rows // CHUNK_ROWS)
    rest = rows % CHUNK_ROWS
    if rest:
        out.append((rest, rest if rest <= EXACT_ROWS else -(-rest // ROW_STEP) * ROW_STEP))
    return out


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, W, bias)`` by oneDNN on ``weight`` (W or its packed copy), through a bounded set of
    input shapes (:func:`row_shapes`). Each output row is computed from its input row alone, so cutting
    and padding change no row beyond float32 rounding."""
    op = torch.ops.mkldnn._linear_pointwise
    rows = x.numel() // max(x.shape[-1], 1)
    if rows <= EXACT_ROWS or rows == CHUNK_ROWS:
        return op(x, weight, bias, "none", [], "")
    flat, outs, start = x.reshape(rows, x.shape[-1]), [], 0
    for take, size in row_shapes(rows):
        chunk = flat[start : start + take]
        if size > take:
            chunk = torch.cat([chunk, chunk.new_zeros(size - take, chunk.shape[1])])
        outs.append(op(chunk, weight, bias, "none", [], "")[:take])
        start += take
    return torch.cat(outs).reshape(*x.shape[:-1], -1)


def _bound_forward(weight: torch.Tensor):
    def forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():  # oneDNN's op has no backward: a caller that needs gradients gets the original
            return torch.nn.functional.linear(x, self.weight, self.bias)
        return onednn_linear(x, weight, self.bias)

    return forward


@contextlib.contextmanager
def _onednn_linears(model: torch.nn.Module, weight_of) -> Iterator[None]:
    """Run the model's CPU float32 ``nn.Linear`` layers with oneDNN inside this block, reading
    ``weight_of(module)`` (re-entrant; nested and concurrent users of one model share the patch)."""
    key = id(model)
    with _LOCK:
        if _ACTIVE.get(key, 0) == 0:
            for m in cpu_linears(model):
                m.forward = types.MethodType(_bound_forward(weight_of(m)), m)
                m._grogu_onednn = True
        _ACTIVE[key] = _ACTIVE.get(key, 0) + 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE[key] -= 1
            if _ACTIVE[key] == 0:
                del _ACTIVE[key]
                for m in model.modules():
                    if m.__dict__.pop("_grogu_onednn", False):
                        m.__dict__.pop("forward", None)
