"""Decode steps kept from batch to batch (grogu.runtime.engine.graphs), run on a CPU: the graphed path's
steps are eager there (``Decoder.emulate_graphs``) but read and write the same kept buffers over the
same spans and buckets a CUDA graph would. Answers and statistics must equal the plain decode loop's."""

from __future__ import annotations

import pytest
import torch
from grogu_research.naive import forward_stats
from grogu_research.testing import IdTokenizer, squad_paragraphs, tiny_model, with_shared_data

from grogu import Engine
from grogu.core.prompts import Document, PromptBuilder
from grogu.runtime.engine import EngineConfig
from grogu.runtime.engine.graphs import KEPT_ARENAS, bucket, span_class

TOL = 1e-4


def _engines(prompt_lookup: int = 0, seed: int = 3) -> tuple[Engine, Engine]:
    """A 64-token vocabulary: rows stop (token 1) at different steps. The same model twice: with the
    kept graphs' path, and with the plain loop."""
    model = tiny_model("llama", vocab_size=64, seed=seed)
    graphed, plain = (
        Engine(
            model,
            IdTokenizer(),
            device="cpu",
            stop_token_ids=[1],
            config=EngineConfig(prompt_lookup=prompt_lookup, cuda_graphs=graphs),
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


def test_buckets_and_span_classes():
    assert [bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 21, 64)] == [1, 2, 4, 4, 8, 8, 16, 32, 64]
    assert [span_class(s) for s in (1, 256, 257, 1000, 1025, 2049, 3000, 5000)] == [
        256,
        256,
        512,
        1024,
        1280,
        2560,
        3072,
        5120,
    ]
    for s in range(1, 20000, 37):  # never short; over by less than 256 slots or a quarter
        c = span_class(s)
        assert s <= c < s + max(256, s / 4)
    with pytest.raises(ValueError, match="at least one row"):
        bucket(0)


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
    assert kept.moves > 0  # finished rows moved the batch down a bucket
    assert all(mode == "greedy" for a in arenas for _, mode in a.warm)  # answers kept on the device
    assert kept.captured == 0 and graphed.decoder.graphs == 0  # a CPU captures nothing
    assert plain.decoder.kept.arenas == {}  # the plain loop keeps no buffers


def test_drafted_steps_on_kept_buffers_equal_the_plain_loop():
    graphed, plain = _engines(prompt_lookup=5)
    for seed in (0, 1):
        prompts = _prompts((30, 45, 60, 38), seed)
        got, ref = graphed.generate(prompts, 40), plain.generate(prompts, 40)
        _same(got, ref)
    assert graphed.lookup_drafted > 0
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


def test_least_recently_used_arenas_go_first_and_out_of_memory_lets_all_go():
    graphed, plain = _engines()
    for n in (20, 300, 600, 900):  # four span classes
        prompts = _prompts((n, n + 3), seed=n)
        _same(graphed.generate(prompts, 8), plain.generate(prompts, 8))
    kept = graphed.decoder.kept
    assert len(kept.arenas) == KEPT_ARENAS
    assert sorted(key[0] for key in kept.arenas) == [span_class(n + 3 + 8) for n in (300, 600, 900)]
    prompts = _prompts((25, 26, 27, 28), seed=9)
    expected = plain.generate(prompts, 8)
    real_forward = graphed.model.forward

    def forward(*args, **kwargs):  # batches over 2 rows "run out of memory"
        if kwargs["input_ids"].shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_forward(*args, **kwargs)

    graphed.model.forward = forward
    released = []
    release = kept.release
    kept.release = lambda: (released.append(len(kept.arenas)), release())
    try:
        _same(graphed.generate(prompts, 8), expected)
    finally:
        graphed.model.forward = real_forward
    assert graphed.oom_backoffs >= 1 and released and released[0] == KEPT_ARENAS


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
    assert sorted(key[0] for key in graphed.decoder.kept.arenas) == [256, 512]  # prompts of ~90 and ~200-335 tokens
