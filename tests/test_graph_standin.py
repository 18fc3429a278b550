"""The CPU stand-in for CUDA graphs (grogu.runtime.engine.graphs.standin) enforces CUDA's rules: each
rule is broken once here and must raise, and what a capture and a replay compute is checked by hand."""

from __future__ import annotations

import gc

import pytest
import torch

from grogu.runtime.engine.graphs.standin import CaptureError, StandInGraphs


def _capture(graphs, pool, fn):
    return graphs.capture(pool, fn)


@torch.inference_mode()
def test_a_capture_computes_nothing_and_a_replay_reruns_it_on_the_captured_tensors():
    g = StandInGraphs()
    x = torch.tensor([1.0, 2.0, 3.0])
    acc = torch.zeros(3)

    def step():
        y = x * 2  # made in the pool
        acc.add_(y)  # a tensor that existed before the capture, written
        return y

    graph, y = _capture(g, g.new_pool(), step)
    assert acc.tolist() == [0.0, 0.0, 0.0]  # restored: the capture ran nothing
    assert torch.isnan(y).all()  # the pool's memory holds garbage until a replay
    graph.replay()
    assert y.tolist() == [2.0, 4.0, 6.0] and acc.tolist() == [2.0, 4.0, 6.0]
    x.copy_(torch.tensor([10.0, 0.0, 0.0]))  # new data in the captured input: the replay reads it
    graph.replay()
    assert y.tolist() == [20.0, 0.0, 0.0] and acc.tolist() == [22.0, 4.0, 6.0]


@torch.inference_mode()
def test_a_replay_does_not_run_python_again():
    """A tensor the step's Python rebinds after the capture, and a host value it read, stay as captured."""
    g = StandInGraphs()
    state = {"x": torch.ones(2), "scale": 3.0}
    out = torch.zeros(2)

    def step():
        out.copy_(state["x"] * state["scale"])
        return out

    graph, _ = _capture(g, g.new_pool(), step)
    state["x"], state["scale"] = torch.full((2,), 5.0), 100.0
    graph.replay()
    assert out.tolist() == [3.0, 3.0]


@torch.inference_mode()
@pytest.mark.parametrize(
    "what, read",
    [
        ("item", lambda t: t.sum().item()),
        ("tolist", lambda t: t.tolist()),
        ("numpy", lambda t: t.numpy()),
        ("bool", lambda t: bool(t[0] > 0)),
        ("int", lambda t: int(t[0])),
        ("nonzero", lambda t: t.nonzero()),
        ("boolean mask", lambda t: t[t > 0]),
        ("masked_select", lambda t: t.masked_select(t > 0)),
        ("host data", lambda t: t + torch.tensor([1.0, 2.0])),
        ("pinned", lambda t: torch.empty(2, pin_memory=True)),
        ("unique", lambda t: t.unique()),
    ],
)
def test_host_reads_and_host_memory_during_a_capture_raise(what, read):
    g = StandInGraphs()
    t = torch.tensor([1.0, -2.0])
    with pytest.raises(CaptureError, match="not permitted when stream is capturing"):
        _capture(g, g.new_pool(), lambda: read(t))
    assert t.tolist() == [1.0, -2.0]  # after the failed capture the host may read again


@torch.inference_mode()
def test_a_pool_is_freed_with_its_last_graph_and_capturing_into_it_then_raises():
    g = StandInGraphs()
    pool = g.new_pool()
    x = torch.ones(2)
    first, _ = _capture(g, pool, lambda: x * 2)
    second, _ = _capture(g, pool, lambda: x * 3)  # shares the pool: two graphs hold it
    assert g.pools.use[pool] == 2
    del first
    gc.collect()
    third, _ = _capture(g, pool, lambda: x * 4)  # still held by the second and now the third
    second.reset()
    del third
    gc.collect()
    assert pool in g.pools.freed and pool not in g.pools.use
    with pytest.raises(RuntimeError, match="use_count > 0"):
        _capture(g, pool, lambda: x * 5)
    graph, y = _capture(g, g.new_pool(), lambda: x * 5)  # a new pool is fine
    graph.replay()
    assert y.tolist() == [5.0, 5.0]


@torch.inference_mode()
def test_the_torch_cuda_spelling_works_too():
    """capture_begin / capture_end / replay, as code written for torch.cuda.CUDAGraph calls them."""
    g = StandInGraphs()
    x = torch.arange(4.0)
    graph = g.CUDAGraph()
    graph.capture_begin(pool=g.graph_pool_handle(), capture_error_mode="thread_local")
    y = x.flip(0) + 1
    graph.capture_end()
    graph.replay()
    assert y.tolist() == [4.0, 3.0, 2.0, 1.0]
    with pytest.raises(RuntimeError, match="captured already"):
        graph.capture_begin()
    with pytest.raises(RuntimeError, match="without capture_begin"):
        g.CUDAGraph().capture_end()
    with pytest.raises(RuntimeError, match="holds no capture"):
        g.CUDAGraph().replay()
