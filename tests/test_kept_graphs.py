"""Decode steps kept from batch to batch (grogu.runtime.engine.graphs), run on a CPU: the graphed path's
steps are captured and replayed there by the stand-in that enforces CUDA's rules
(``Decoder.emulate_graphs``, :mod:`grogu.runtime.engine.graphs.standin`): pool lifetimes, no host reads
during a capture, a capture that computes nothing, replays on the captured tensors only. Answers and
statistics must equal the plain decode loop's, with no failed capture and no step decoded eagerly."""

from __future__ import annotations

import gc
import logging
import weakref

import pytest
import torch
from grogu_research.naive import forward_stats
from grogu_research.testing import IdTokenizer, squad_paragraphs, tiny_model, with_shared_data

from grogu import Engine
from grogu.core.prompts import Document, PromptBuilder
from grogu.runtime.engine import EngineConfig
from grogu.runtime.engine.graphs import KEPT_ARENAS, MAX_FAILURES, KeptGraphs, StandInGraphs, bucket, span_class

TOL = 1e-4


def _engines(prompt_lookup: int = 0, seed: int = 3, **config) -> tuple[Engine, Engine]:
    """A 64-token vocabulary: rows stop (token 1) at different steps. The same model twice: with the
    kept graphs' path, and with the plain loop."""
    model = tiny_model("llama", vocab_size=64, seed=seed)
    graphed, plain = (
        Engine(
            model,
            IdTokenizer(),
            device="cpu",
            stop_token_ids=[1],
            config=EngineConfig(prompt_lookup=prompt_lookup, cuda_graphs=graphs, **config),
        )
        for graphs in (True, False)
    )
    graphed.decoder.emulate_graphs = True
    return graphed, plain


def _prompts(lengths, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(2, 64, (n,), generator=gen).tolist() for n in lengths]


def _same(got, ref) -> None:
    for g, r in zip(got, ref, strict=True):
        assert g.token_ids == r.token_ids and g.stop_token_id == r.stop_token_id
        torch.testing.assert_close(g.entropy, r.entropy, atol=TOL, rtol=0)
        torch.testing.assert_close(g.logprob, r.logprob, atol=TOL, rtol=0)


def _clean(engine: Engine) -> dict:
    """The engine's graph counts, asserting that nothing failed and no step ran eagerly for want of a graph."""
    stats = engine.graph_stats()
    assert stats["failed"] == 0 and stats["eager_steps"] == 0 and stats["last_error"] is None, stats
    return stats


def test_buckets_and_span_classes():
    assert [bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 21, 64)] == [1, 2, 4, 4, 8, 8, 16, 32, 64]
    assert [span_class(s) for s in (1, 256, 257, 385, 513, 1000, 1025, 2049, 3000, 5000)] == [
        256,
        256,
        384,
        512,
        768,
        1024,
        1536,
        3072,
        3072,
        6144,
    ]
    for s in range(1, 20000, 37):  # never short; over by less than half
        c = span_class(s)
        assert s <= c and (c == 256 or c < 1.5 * s)
    assert len({span_class(s) for s in range(1, 16385)}) == 13  # a handful of classes
    with pytest.raises(ValueError, match="at least one row"):
        bucket(0)
    with pytest.raises(ValueError, match="at least one slot"):
        span_class(0)


def test_a_stream_of_batches_equals_the_plain_loop_and_reuses_its_buffers():
    graphed, plain = _engines()
    kept = graphed.decoder.kept
    batches = [  # rows of several lengths; batch sizes in several buckets
        _prompts((30, 45, 60, 38, 52), seed=0),  # 5 rows: bucket 8
        _prompts((41, 33, 47), seed=1),  # 3 rows: the same arena, bucket 4
        _prompts((35,) * 9, seed=2),  # 9 rows: the arena grows to 16 rows
        _prompts((50,), seed=3),  # 1 row
        _prompts((400, 420), seed=4),  # longer prompts: another span class, another arena
    ]
    arenas = []
    for prompts in batches:
        got, ref = graphed.generate(prompts, 40), plain.generate(prompts, 40)
        _same(got, ref)
        assert len({len(g.token_ids) for g in got}) > 1 or len(prompts) < 3  # rows end at different steps
        for p, g in zip(prompts, got):  # and the plain forward pass agrees
            h, lp = forward_stats(graphed.model, p, g.token_ids)
            torch.testing.assert_close(g.entropy, h, atol=TOL, rtol=0)
            torch.testing.assert_close(g.logprob, lp, atol=TOL, rtol=0)
        arenas.append(next(reversed(kept.arenas.values())))
    assert arenas[0].rows == 8 and arenas[1] is arenas[0]  # kept, not made again
    assert arenas[2].rows == 16 and arenas[3] is arenas[2]
    assert arenas[4] is not arenas[3] and arenas[4].capacity == span_class(420 + 40) == 512
    assert arenas[0].capacity == span_class(60 + 40) == 256
    assert len(kept.arenas) == 2
    stats = _clean(graphed)
    assert stats["moves"] > 0  # finished rows moved the batch down a bucket
    assert all(mode == "greedy" for a in arenas for _, mode in a.warm)  # answers kept on the device
    assert stats["captured"] == graphed.decoder.graphs >= sum(len(a.graphs) for a in kept.arenas.values())
    assert stats["replayed"] > 5 * stats["captured"]  # captured once, replayed after
    assert plain.decoder.kept.arenas == {} and plain.graph_stats()["captured"] == 0  # the plain loop keeps nothing


def test_drafted_steps_on_kept_buffers_equal_the_plain_loop():
    graphed, plain = _engines(prompt_lookup=5)
    for seed in (0, 1):
        prompts = _prompts((30, 45, 60, 38), seed)
        got, ref = graphed.generate(prompts, 40), plain.generate(prompts, 40)
        _same(got, ref)
    assert graphed.lookup_drafted > 0
    assert _clean(graphed)["replayed"] > 0
    assert all(mode == "host" for a in graphed.decoder.kept.arenas.values() for _, mode in a.warm)
    assert len(graphed.decoder.kept.arenas) == 1 and next(iter(graphed.decoder.kept.arenas))[1] == 6  # width 1 + 5


def test_sampled_steps_on_kept_buffers_draw_what_the_plain_loop_draws():
    """Sampled answers (counter-based draws: a row's t-th token from its key and t) through the kept
    buffers, where the draw is part of the step, against the plain loop, at two temperatures; a prompt's
    samples do not depend on the batch it is drawn in."""
    graphed, plain = _engines()
    prompts = _prompts((30, 45, 60, 38, 52), seed=7)
    for temperature in (0.7, 1.3):
        got = graphed.generate(prompts, 30, temperature=temperature, seed=5)
        _same(got, plain.generate(prompts, 30, temperature=temperature, seed=5))
        assert len({len(g.token_ids) for g in got}) > 1
        for p, g in zip(prompts, got):  # statistics of the drawn tokens under the untempered model
            h, lp = forward_stats(graphed.model, p, g.token_ids)
            torch.testing.assert_close(g.entropy, h, atol=TOL, rtol=0)
            torch.testing.assert_close(g.logprob, lp, atol=TOL, rtol=0)
    alone = graphed.generate(prompts[2:3], 30, temperature=0.7, seed=5, sample_numbers=[0])
    _same(alone, graphed.generate(prompts, 30, temperature=0.7, seed=5)[2:3])
    greedy = graphed.generate(prompts, 30)
    assert [g.token_ids for g in greedy] != [g.token_ids for g in got]
    modes = {mode for a in graphed.decoder.kept.arenas.values() for _, mode in a.warm}
    assert modes == {"greedy", "sampled"}
    assert _clean(graphed)["captured"] > 0


#: prompt lengths whose spans (the prompt, 8 answer tokens) fall in six span classes, 256 to 1536 slots
SIX_CLASSES = (20, 330, 450, 700, 900, 1300)


def _stream(graphed: Engine, plain: Engine) -> None:
    """A stream through the kept graphs: six span classes (more than the arenas kept, so arenas are
    evicted and made again with new pools), batches of 1 to 5 rows, an arena replaced by a bigger one
    of its key, ``release()``, and a batch split on out-of-memory. Every answer is the plain loop's."""
    kept = graphed.decoder.kept

    def check(lengths, seed):
        prompts = _prompts(lengths, seed)
        _same(graphed.generate(prompts, 8), plain.generate(prompts, 8))

    check((30, 33), seed=30)
    check((30, 31, 32, 33, 34), seed=31)  # a bigger batch of the same key: its arena replaced
    for i, n in enumerate(SIX_CLASSES):
        check((n, n + 3), seed=i)
    for i, n in enumerate(SIX_CLASSES[:3]):  # evicted classes come back: new arenas, new pools
        check((n + 1,), seed=10 + i)
    check((25, 26, 27, 28, 29), seed=20)  # the 256 class again, a bigger bucket: its arena replaced
    kept.release()
    check((22, 23), seed=21)
    real_forward = graphed.model.forward

    def forward(*args, **kwargs):  # batches over 2 rows "run out of memory"
        if kwargs["input_ids"].shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_forward(*args, **kwargs)

    graphed.model.forward = forward
    try:
        check((25, 26, 27, 28), seed=22)
    finally:
        graphed.model.forward = real_forward
    check((460, 470, 480), seed=23)


def test_a_stream_of_six_span_classes_with_evictions_release_and_out_of_memory_keeps_every_graph_valid():
    graphed, plain = _engines()
    _stream(graphed, plain)
    stats = _clean(graphed)
    pools = graphed.decoder.kept.backend.pools
    assert stats["captured"] >= 10 and stats["replayed"] > stats["captured"]
    assert stats["arenas_dropped"] >= 6 and graphed.oom_backoffs >= 1
    assert len(pools.freed) >= 3  # pools really died with their arenas' graphs, and none was used again
    assert len(graphed.decoder.kept.arenas) <= KEPT_ARENAS


class _SharedPool(KeptGraphs):
    """The design before pools were owned by arenas: one pool id for every arena's graphs, kept
    while arenas come and go."""

    def arena(self, *args, **kwargs):
        arena = super().arena(*args, **kwargs)
        if not hasattr(self, "shared") or self.shared is None:
            self.shared = arena.pool
        arena.pool = self.shared
        return arena

    def release(self):
        super().release()
        self.shared = None


def test_the_stand_in_fails_a_pool_shared_by_arenas_that_come_and_go():
    """What the stream test guards against: with one pool for all arenas, the pool dies with the last
    graph of the arenas evicted, and the next capture into it trips the allocator's assert."""
    graphed, plain = _engines()
    graphed.decoder.kept = _SharedPool(StandInGraphs())
    _stream(graphed, plain)  # the answers stay right (failed batches decode eagerly) ...
    stats = graphed.graph_stats()
    assert stats["failed"] >= 1 and "use_count > 0" in stats["last_error"]  # ... but captures fail
    assert stats["eager_steps"] > 0


class _Flaky:
    """A stand-in whose next ``fail`` captures raise (a capture failing for any reason)."""

    def __init__(self, fail: int) -> None:
        self.inner, self.fail, self.tried = StandInGraphs(), fail, 0

    def new_pool(self):
        return self.inner.new_pool()

    def capture(self, pool, fn):
        self.tried += 1
        if self.fail > 0:
            self.fail -= 1
            raise RuntimeError("capture failed (simulated)")
        return self.inner.capture(pool, fn)

    def synchronize(self, device):
        pass


def test_a_failed_capture_is_counted_logged_once_and_retried_until_the_cap(caplog):
    graphed, plain = _engines()
    kept = graphed.decoder.kept
    kept.backend = _Flaky(fail=1)

    def run(seed):
        prompts = _prompts((30, 45, 60), seed)
        _same(graphed.generate(prompts, 30), plain.generate(prompts, 30))

    with caplog.at_level(logging.WARNING, logger="grogu.runtime.engine.graphs.cache"):
        run(0)  # its capture fails: this batch eager, its arena let go
        stats = graphed.graph_stats()
        assert (stats["failed"], stats["captured"]) == (1, 0) and stats["eager_steps"] > 0
        assert "simulated" in graphed.decoder.graphs_failed and len(kept.arenas) == 1
        run(1)  # a new arena, a new pool: captured
        stats = graphed.graph_stats()
        assert stats["failed"] == 1 and stats["captured"] >= 1 and stats["arenas_made"] == 2
        kept.backend = _Flaky(fail=100)
        kept.release()
        for seed in range(2, 2 + MAX_FAILURES + 2):
            run(seed)
    assert kept.failures == MAX_FAILURES and kept.backend.tried == MAX_FAILURES  # then no more tries
    eager = graphed.graph_stats()["eager_steps"]
    run(9)
    assert graphed.graph_stats()["eager_steps"] > eager  # counted, not silent
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("simulated" in m for m in warnings) == 1  # one cause, logged once
    assert any("until release_graphs()" in m for m in warnings)
    kept.backend = StandInGraphs()
    graphed.decoder.release_graphs()  # starts afresh: captures again
    captured = graphed.graph_stats()["captured"]
    run(10)
    assert kept.failures == 0 and graphed.graph_stats()["captured"] > captured


def test_arenas_hold_no_prefill_cache_and_stay_within_the_token_budget():
    graphed, plain = _engines(max_batch_tokens=2048)
    kept = graphed.decoder.kept
    buffers = []
    for_decoding = graphed.prefill.for_decoding

    def watched(*args, **kwargs):
        start = for_decoding(*args, **kwargs)
        buffers.append(weakref.ref(start.cache.layers[0].buffers[0]))
        return start

    graphed.prefill.for_decoding = watched
    for i, n in enumerate(SIX_CLASSES):
        prompts = _prompts((n, n + 3), seed=i)
        _same(graphed.generate(prompts, 8), plain.generate(prompts, 8))
        others = list(kept.arenas.values())[:-1]
        assert sum(a.slots_held for a in others) <= 2048  # the arenas kept besides this batch's
    gc.collect()
    assert buffers and all(b() is None for b in buffers)  # no prefill cache outlives its batch
    assert graphed.graph_stats()["arenas_dropped"] >= 3


@pytest.mark.parametrize("max_new_tokens, stops", [(1, [1]), (6, list(range(64))), (3, list(range(2, 64, 2)))])
def test_answers_kept_on_the_device_end_where_the_plain_loop_ends(max_new_tokens, stops):
    """One-token answers; every token a stop token (empty answers, the stop's statistics kept); half of
    them stop tokens (rows end after a token or two, at different steps)."""
    model = tiny_model("llama", vocab_size=64, seed=5)
    graphed, plain = (
        Engine(model, IdTokenizer(), device="cpu", stop_token_ids=stops, config=EngineConfig(cuda_graphs=graphs))
        for graphs in (True, False)
    )
    graphed.decoder.emulate_graphs = True
    prompts = _prompts((30, 45, 60, 38, 33), seed=6)
    got, ref = graphed.generate(prompts, max_new_tokens), plain.generate(prompts, max_new_tokens)
    _same(got, ref)
    _clean(graphed)
    for g, r in zip(got, ref):
        assert (g.stop_entropy is None) == (r.stop_entropy is None)
        if r.stop_entropy is not None:
            assert abs(g.stop_entropy - r.stop_entropy) < TOL and abs(g.stop_logprob - r.stop_logprob) < TOL
    assert len(graphed.decoder.kept.arenas) == 1


@pytest.mark.slow
def test_a_real_model_on_real_prompts_equals_the_plain_loop(smol_engine):
    """SmolLM2 on grounded prompts of real SQuAD paragraphs, two queries in a row on the kept buffers
    (the engine splits them into batches of 5, 1 and 3 rows): the plain loop's answers and statistics."""
    graphed = Engine((smol_engine.model, smol_engine.tokenizer), config=EngineConfig(cuda_graphs=True))
    graphed.decoder.emulate_graphs = True
    builder = PromptBuilder(smol_engine.tokenizer, smol_engine.max_context_tokens, 24)
    paras = with_shared_data(squad_paragraphs, 7, 11)
    for query, docs in ((paras[0]["question"], paras[1:7]), (paras[1]["question"], paras[2:5])):
        prompts = [builder.grounded_ids(query, [Document(d["text"], d["title"])]) for d in docs]
        _same(graphed.generate(prompts, 24), smol_engine.generate(prompts, 24))
    assert sorted(key[0] for key in graphed.decoder.kept.arenas) == [256, 384]  # prompts of ~90 and ~200-335 tokens
    assert _clean(graphed)["captured"] > 0
