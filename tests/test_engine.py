"""The batched engine against the plain one-document-at-a-time computation (grogu_research.naive)."""

from __future__ import annotations

import copy
import threading
from dataclasses import replace

import pytest
import torch
from grogu_research.naive import forward_stats, greedy_generate, naive_grogu_stats
from grogu_research.precision import bf16_reference
from grogu_research.testing import IdTokenizer, squad_paragraphs, tiny_model, with_shared_data

from grogu import Engine, UtilityScorer, get_engine
from grogu.core.prompts import Document, PromptBuilder
from grogu.runtime.engine import EngineConfig
from grogu.runtime.engine.prefixtree import common_prefix, prefix_groups

TOL = 1e-4


def _docs(k: int, seed: int = 0) -> tuple[str, list[Document]]:
    """k real documents of different lengths (SQuAD paragraphs cut to 20..150 words)."""
    paras = with_shared_data(squad_paragraphs, k, seed)
    docs = [Document(" ".join(p["text"].split()[: 20 + (37 * i) % 130]), p["title"]) for i, p in enumerate(paras)]
    return paras[0]["question"], docs


def _compare(engine: Engine, k: int, max_new_tokens: int, seed: int = 0):
    query, docs = _docs(k, seed)
    pb = PromptBuilder(engine.tokenizer, engine.max_context_tokens, max_new_tokens)
    grounded = [pb.grounded_ids(query, [d]) for d in docs]
    ungrounded = pb.ungrounded_ids(query)
    assert len({len(g) for g in grounded}) > 1 or k == 1, "documents should differ in length"

    gens = engine.generate(grounded, max_new_tokens)
    conts = [g.token_ids or [g.stop_token_id] for g in gens]
    u_stats = engine.token_stats([ungrounded] * k, conts)
    ref = naive_grogu_stats(
        engine.model, grounded, ungrounded, max_new_tokens, engine.stop_token_ids, engine.pad_token_id
    )
    for g, u, r in zip(gens, u_stats, ref):
        assert g.token_ids == r.token_ids
        assert g.stop_token_id == r.stop_token_id
        torch.testing.assert_close(g.entropy, r.grounded_entropy, atol=TOL, rtol=0)
        torch.testing.assert_close(g.logprob, r.grounded_logprob, atol=TOL, rtol=0)
        torch.testing.assert_close(u.entropy, r.ungrounded_entropy, atol=TOL, rtol=0)
        torch.testing.assert_close(u.logprob, r.ungrounded_logprob, atol=TOL, rtol=0)
        if r.stop_entropy is not None:
            assert abs(g.stop_entropy - r.stop_entropy) < TOL
    return gens


@pytest.mark.parametrize("k", [1, 3, 10])
def test_batched_equals_one_at_a_time_tiny(tiny_engine, k):
    gens = _compare(tiny_engine, k, max_new_tokens=12)
    assert all(len(g.token_ids) > 0 for g in gens)


@pytest.mark.parametrize("arch", ["qwen2", "gpt2", "gemma3"])
def test_batched_equals_one_at_a_time_other_architectures(tokenizer, arch):
    engine = Engine(tiny_model(arch), tokenizer, device="cpu")
    _compare(engine, 4, max_new_tokens=8, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, pytest.param(3, marks=pytest.mark.heavy), pytest.param(10, marks=pytest.mark.heavy)])
def test_batched_equals_one_at_a_time_smollm2(smol_engine, k):
    _compare(smol_engine, k, max_new_tokens=24, seed=2)


@pytest.mark.slow
@pytest.mark.heavy  # the tiny-model tests above compare batches of 3 and 10 with the naive loop
def test_rows_finish_at_different_steps(smol_engine):
    # real model, prompts whose answers end at different lengths: exercises leaving the decode batch
    gens = _compare(smol_engine, 6, max_new_tokens=40, seed=3)
    lengths = {len(g.token_ids) for g in gens if g.finished}
    assert len(lengths) >= 2


@pytest.mark.slow
@pytest.mark.heavy  # the tiny model's test below checks the same on every CI run
def test_prompt_lookup_decoding_is_exactly_greedy_smollm2(smol_engine):
    # drafts verified by the model: same answers and statistics as the naive loop, in fewer steps
    engine = Engine((smol_engine.model, smol_engine.tokenizer), prompt_lookup=4)
    gens = _compare(engine, 6, max_new_tokens=32, seed=4)
    assert engine.lookup_drafted > 0
    assert engine.lookup_steps < max(len(g.token_ids) for g in gens)


def test_prompt_lookup_decoding_is_exactly_greedy_tiny():
    # a 64-token vocabulary makes repeated bigrams (drafts) common; rows stop at different steps
    model = tiny_model("llama", vocab_size=64, seed=3)
    lookup = Engine(model, IdTokenizer(), device="cpu", prompt_lookup=5, stop_token_ids=[1])
    plain = Engine(model, IdTokenizer(), device="cpu", prompt_lookup=0, stop_token_ids=[1])
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(2, 64, (n,), generator=gen).tolist() for n in (30, 45, 60, 38)]
    got, ref = lookup.generate(prompts, 40), plain.generate(prompts, 40)
    assert lookup.lookup_drafted > 0 and plain.lookup_drafted == 0
    for g, r, p in zip(got, ref, prompts):
        assert g.token_ids == r.token_ids and g.stop_token_id == r.stop_token_id
        torch.testing.assert_close(g.entropy, r.entropy, atol=TOL, rtol=0)
        torch.testing.assert_close(g.logprob, r.logprob, atol=TOL, rtol=0)
        h, lp = forward_stats(model, p, g.token_ids)  # and the plain forward pass agrees
        torch.testing.assert_close(g.entropy, h, atol=TOL, rtol=0)
        torch.testing.assert_close(g.logprob, lp, atol=TOL, rtol=0)


def _with_stop(gen) -> list[int]:
    """An answer's tokens and its stop token, if it stopped: what the model chose at every step."""
    return list(gen.token_ids) + ([gen.stop_token_id] if gen.stop_token_id is not None else [])


def test_bf16_batches_and_drafts_stay_within_bf16_noise_of_float32(tokenizer):
    """bf16 weights on this CPU: padding, masks, the reserved decode cache, prompt-lookup drafts verified
    in bf16, and statistics computed in float32 from bf16 logits.

    Every bf16 value is compared with the float32 forward pass of the same tokens through the same
    weights. It may differ by 8 sds of bf16's rounding noise carried through this model, measured by
    Monte Carlo arithmetic (``grogu_research.precision`` derives the bound; it is per token, and never
    below the float32 tests' 1e-4). The bound is checked both ways: transformers' own bf16 loop keeps
    within it, and a prompt missing its first token (what an off-by-one mask gives) falls outside it.
    Two bf16 paths round in different orders, so their greedy answers may part only at a float32
    near-tie. This holds whatever kernels ATen and oneDNN pick (default, AVX2, AVX-512, AMX)."""
    b16 = tiny_model("llama").to(torch.bfloat16)
    f32 = copy.deepcopy(b16).float()  # bf16 weights are exact in float32
    engine = Engine(b16, tokenizer, device="cpu", prompt_lookup=4)
    assert engine.dtype == torch.bfloat16 and engine.linear_backend == "default"
    query, docs = _docs(6, seed=5)
    pb = PromptBuilder(engine.tokenizer, engine.max_context_tokens, 16)
    grounded = [pb.grounded_ids(query, [d]) for d in docs]
    ungrounded = pb.ungrounded_ids(query)
    gens = engine.generate(grounded, 16)
    u_stats = engine.token_stats([ungrounded] * len(docs), [g.token_ids or [g.stop_token_id] for g in gens])
    naive = naive_grogu_stats(b16, grounded, ungrounded, 16, engine.stop_token_ids, engine.pad_token_id)
    for prompt, g, u, r in zip(grounded, gens, u_stats, naive):
        answer, n = _with_stop(g), len(g.token_ids)
        assert n > 0 and g.entropy.dtype == u.entropy.dtype == torch.float32
        ref = bf16_reference(f32, prompt, answer)
        ref.head(n).assert_close(g.entropy, g.logprob, "engine, grounded")
        if g.stop_token_id is not None:
            assert abs(g.stop_entropy - float(ref.entropy[n])) <= float(ref.bound(ref.entropy_sd[n]))
        ref_u = bf16_reference(f32, ungrounded, g.token_ids or [g.stop_token_id])
        ref_u.assert_close(u.entropy, u.logprob, "engine, ungrounded")
        # transformers' own bf16 generate: the same answer up to a near-tie, and within the same bound
        naive_answer = r.token_ids + ([r.stop_token_id] if r.stop_token_id is not None else [])
        ref.assert_same_greedy(f32, prompt, answer, naive_answer, "engine against transformers' bf16 loop")
        if naive_answer != answer:
            ref = bf16_reference(f32, prompt, naive_answer)
            ref_u = bf16_reference(f32, ungrounded, r.token_ids or naive_answer)
        ref.head(len(r.token_ids)).assert_close(r.grounded_entropy, r.grounded_logprob, "transformers, grounded")
        ref_u.assert_close(r.ungrounded_entropy, r.ungrounded_logprob, "transformers, ungrounded")
    # the bound has teeth: the first document's prompt without its first token is far outside it
    ref = bf16_reference(f32, grounded[0], _with_stop(gens[0]))
    assert ref.excess(*forward_stats(f32, grounded[0][1:], _with_stop(gens[0]))) > 1

    # drafts in bf16 (a 64-token vocabulary makes them common), verified by the model
    toy = tiny_model("llama", vocab_size=64, seed=3).to(torch.bfloat16)
    toy32 = copy.deepcopy(toy).float()
    lookup = Engine(toy, IdTokenizer(), device="cpu", prompt_lookup=4, stop_token_ids=[1])
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(2, 64, (n,), generator=gen).tolist() for n in (30, 45, 60, 38)]
    got = lookup.generate(prompts, 40)
    plain = Engine(toy, IdTokenizer(), device="cpu", prompt_lookup=0, stop_token_ids=[1]).generate(prompts, 40)
    assert lookup.lookup_drafted > 0
    for g, pl, p in zip(got, plain, prompts):
        ref = bf16_reference(toy32, p, _with_stop(g))
        ref.head(len(g.token_ids)).assert_close(g.entropy, g.logprob, "drafted")
        ref.assert_same_greedy(toy32, p, _with_stop(g), _with_stop(pl), "drafted against plain bf16 decoding")
    assert ref.excess(*forward_stats(toy32, p[1:], _with_stop(g))) > 1


def test_config_or_keyword_settings_give_the_same_engine():
    model = tiny_model("llama", vocab_size=64, seed=3)
    by_kwargs = Engine(model, IdTokenizer(), device="cpu", prompt_lookup=5, max_batch_size=2, stop_token_ids=[1])
    by_config = Engine(
        model, IdTokenizer(), device="cpu", stop_token_ids=[1], config=EngineConfig(prompt_lookup=5, max_batch_size=2)
    )
    assert by_kwargs.config == by_config.config == EngineConfig(prompt_lookup=5, max_batch_size=2).resolved("cpu")
    assert by_kwargs.config.max_batch_size == 2 and by_kwargs.config.max_batch_tokens == 16384
    # the keyword arguments only build the configuration: the settings are not attributes of the engine
    with pytest.raises(AttributeError):
        by_kwargs.max_batch_size
    with pytest.raises(AttributeError, match=r"dataclasses\.replace\(config, max_batch_size=\.\.\.\)"):
        by_kwargs.max_batch_size = 4  # would otherwise change nothing
    assert by_kwargs.config.max_batch_size == 2
    with pytest.raises(TypeError, match="not both"):
        Engine(model, IdTokenizer(), device="cpu", config=EngineConfig(), max_batch_size=4)
    prompts = [[5, 6, 7, 5, 6, 7, 5], [9, 8, 9, 8], [4, 4, 4, 4, 4]]
    got, want = by_config.generate(prompts, 8), by_kwargs.generate(prompts, 8)
    assert [g.token_ids for g in got] == [g.token_ids for g in want]
    config = EngineConfig(min_batch_fill=0.25)
    shared = get_engine((model, IdTokenizer()), device="cpu", config=config)
    assert get_engine((model, shared.tokenizer), device="cpu", config=config) is shared
    assert shared.config.min_batch_fill == 0.25


def test_sliding_window_model_batched_equals_one_at_a_time():
    """Gemma 3 interleaves sliding-window layers, whose window counts cache slots: padding or rejected
    drafts inside it would hide real tokens. Prompts longer than the window (16), of several lengths
    (two rows share a length and a prefix), drafting asked for: answers and statistics must equal
    transformers' own greedy generate and plain forward passes on each prompt alone."""
    model = tiny_model("gemma3", vocab_size=64, seed=3)
    engine = Engine(model, IdTokenizer(), device="cpu", prompt_lookup=5, stop_token_ids=[1])
    # asked for, but its caches cannot be continued: none is kept
    engine.config = replace(engine.config, retain_prefix_tokens=4096)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(2, 64, (n,), generator=gen).tolist() for n in (30, 45, 60, 38)]
    prompts.append(prompts[1][:40] + [5, 6, 7, 8, 9])  # the same length as prompts[1], sharing 40 tokens
    got = engine.generate(prompts, 24)
    assert engine.lookup_drafted == 0
    assert engine.prefill.retained == []
    for g, p in zip(got, prompts):
        ref = greedy_generate(model, p, 24, [1], 0)
        assert g.token_ids + ([g.stop_token_id] if g.stop_token_id is not None else []) == ref
        h, lp = forward_stats(model, p, ref)
        n = len(g.token_ids)
        torch.testing.assert_close(g.entropy, h[:n], atol=TOL, rtol=0)
        torch.testing.assert_close(g.logprob, lp[:n], atol=TOL, rtol=0)
    conts = [p[:7] for p in reversed(prompts)]  # teacher forcing, rows of different total lengths
    for s, p, c in zip(engine.token_stats(prompts, conts), prompts, conts):
        h, lp = forward_stats(model, p, c)
        torch.testing.assert_close(s.entropy, h, atol=TOL, rtol=0)
        torch.testing.assert_close(s.logprob, lp, atol=TOL, rtol=0)
    nxt = engine.next_token_logprobs(prompts)
    for row, p in zip(nxt, prompts):
        ref = torch.log_softmax(model(input_ids=torch.tensor([p])).logits[0, -1].float(), -1)
        torch.testing.assert_close(row, ref, atol=TOL, rtol=0)


def test_a_later_call_continues_an_earlier_prompts_cache(tiny_engine, monkeypatch):
    """A doubtful query's other candidates keep the first documents in place: the second call encodes
    only what they do not share with the first prompt, and every answer equals the one computed alone
    (within float rounding: off by default, as it makes numbers depend on earlier calls)."""
    monkeypatch.setattr(tiny_engine.prefill, "retained", [])
    monkeypatch.setattr(tiny_engine, "config", replace(tiny_engine.config, retain_prefix_tokens=4096))
    query, docs = _docs(5, 7)
    pb = PromptBuilder(tiny_engine.tokenizer, tiny_engine.max_context_tokens, 8)
    first = pb.grounded_ids(query, docs[:3])
    others = [pb.grounded_ids(query, [docs[0], docs[1], d]) for d in docs[3:]] + [pb.grounded_ids(query, docs[2::-1])]
    tiny_engine.generate([first], 8)
    assert [e.tokens for e in tiny_engine.prefill.retained] == [first]
    shared = common_prefix(first, others[0])
    assert shared == common_prefix(first, others[1]) > 20
    before = tiny_engine.prefill_tokens
    gens = tiny_engine.generate(others, 8)
    encoded = tiny_engine.prefill_tokens - before
    assert tiny_engine.prefill.retained
    tiny_engine.drop_kept_prompts()
    assert tiny_engine.prefill.retained == []
    monkeypatch.setattr(tiny_engine, "config", replace(tiny_engine.config, retain_prefix_tokens=0))
    tiny_engine.generate([first], 8)
    before = tiny_engine.prefill_tokens
    fresh = tiny_engine.generate(others, 8)
    assert tiny_engine.prefill_tokens - before - encoded == shared  # the shared documents, encoded once, not again
    assert tiny_engine.prefill.retained == []
    for g, f, row in zip(gens, fresh, others):
        (alone,) = tiny_engine.generate([row], 8)
        for other in (f, alone):
            assert g.token_ids == other.token_ids
            torch.testing.assert_close(g.entropy, other.entropy, atol=TOL, rtol=0)
            torch.testing.assert_close(g.logprob, other.logprob, atol=TOL, rtol=0)


def test_kept_prompts_stay_within_their_budget(tiny_engine, monkeypatch):
    """At most retain_prefix_tokens are kept, the latest first; a kept prompt that a newer one starts
    with is dropped; none by default; a bad budget is refused."""
    monkeypatch.setattr(tiny_engine.prefill, "retained", [])
    assert tiny_engine.config.retain_prefix_tokens == 0
    tiny_engine.generate([[5, 6, 7, 8]], 2)
    assert tiny_engine.prefill.retained == []
    query, docs = _docs(4, 9)
    pb = PromptBuilder(tiny_engine.tokenizer, tiny_engine.max_context_tokens, 8)
    prompts = [pb.grounded_ids(query, [d]) for d in docs]
    budget = len(prompts[-1]) + len(prompts[-2])
    monkeypatch.setattr(tiny_engine, "config", replace(tiny_engine.config, retain_prefix_tokens=budget))
    for p in prompts:
        tiny_engine.generate([p], 4)
    kept = [e.tokens for e in tiny_engine.prefill.retained]
    assert kept == prompts[-2:] and sum(map(len, kept)) <= budget
    tiny_engine.generate([prompts[-1] + [5, 6, 7]], 4)  # starts with the latest kept prompt: that one goes,
    assert [e.tokens for e in tiny_engine.prefill.retained] == [prompts[-1] + [5, 6, 7]]  # and the oldest for room
    with pytest.raises(ValueError, match="retain_prefix_tokens"):
        EngineConfig(retain_prefix_tokens=-1)


def test_token_stats_different_prompts(tiny_engine):
    prompts = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], [5, 6, 7, 8, 9, 10, 11, 12, 13, 99], [300, 301]]
    conts = [[40, 41, 42], [], [7]]
    stats = tiny_engine.token_stats(prompts, conts)
    assert len(stats[1]) == 0
    for p, c, s in zip(prompts, conts, stats):
        if c:
            h, lp = forward_stats(tiny_engine.model, p, c)
            torch.testing.assert_close(s.entropy, h, atol=TOL, rtol=0)
            torch.testing.assert_close(s.logprob, lp, atol=TOL, rtol=0)


def test_next_token_logprobs(tiny_engine):
    prompts = [[5, 6, 7, 8], [9, 10]]
    out = tiny_engine.next_token_logprobs(prompts)
    assert out.shape == (2, tiny_engine.vocab_size)
    for p, row in zip(prompts, out):
        ref = torch.log_softmax(tiny_engine.model(input_ids=torch.tensor([p])).logits[0, -1].float(), -1)
        torch.testing.assert_close(row, ref.detach(), atol=TOL, rtol=0)
    sub = tiny_engine.next_token_logprobs(prompts, token_ids=[3, 17])
    torch.testing.assert_close(sub, out[:, [3, 17]])
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(2), atol=1e-4, rtol=0)


def test_sampling_is_reproducible_and_scored_under_the_model(tiny_engine):
    prompts = [[5, 6, 7, 8, 9], [11, 12, 13]]
    a = tiny_engine.generate(prompts, 6, temperature=1.0, seed=123)
    b = tiny_engine.generate(prompts, 6, temperature=1.0, seed=123)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    # per prompt: the same samples alone, in another order, or batched with other prompts
    alone = [tiny_engine.generate([p], 6, temperature=1.0, seed=123)[0] for p in prompts]
    mixed = tiny_engine.generate([[3, 4], prompts[1], prompts[0], [3, 4]], 6, temperature=1.0, seed=123)
    assert [g.token_ids for g in alone] == [g.token_ids for g in a] == [g.token_ids for g in mixed[2:0:-1]]
    assert mixed[0].token_ids != mixed[3].token_ids or mixed[0].token_ids == []  # repeats are new draws
    assert tiny_engine.generate(prompts, 6, temperature=1.0, seed=124)[0].token_ids != a[0].token_ids
    for p, g in zip(prompts, a):  # sampled tokens' statistics equal a teacher-forced pass
        if g.token_ids:
            h, lp = forward_stats(tiny_engine.model, p, g.token_ids)
            torch.testing.assert_close(g.logprob, lp, atol=TOL, rtol=0)
            torch.testing.assert_close(g.entropy, h, atol=TOL, rtol=0)


def test_out_of_memory_backoff_gives_same_results(tokenizer):
    engine = Engine(tiny_model("llama"), tokenizer, device="cpu")
    prompts = [[5, 6, 7, 8, 9, i] for i in range(20, 26)]
    expected = engine.generate(prompts, 5)
    real_forward = engine.model.forward

    def forward(*args, **kwargs):  # the device "runs out of memory" on batches larger than 2
        if kwargs["input_ids"].shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_forward(*args, **kwargs)

    engine.model.forward = forward
    got = engine.generate(prompts, 5)
    assert engine.oom_backoffs >= 2 and engine.config.max_batch_size <= 2
    assert [g.token_ids for g in got] == [g.token_ids for g in expected]
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.entropy, e.entropy, atol=TOL, rtol=0)


def test_the_batch_size_comes_back_after_memory_is_freed(tokenizer):
    """An artificial memory limit: batches over 2 rows run out of memory while it holds. The engine halves
    and retries (same results), then, once the limit is lifted, doubles its batch size back to where it
    was after ``batch_cap.restore_after`` batches in a row ran; under a limit that stays it keeps trying."""
    engine = Engine(tiny_model("llama"), tokenizer, device="cpu", max_batch_size=8)
    engine.batch_cap.restore_after = 2
    prompts = [[5, 6, 7, 8, 9, i] for i in range(20, 28)]
    expected = engine.generate(prompts, 4)
    real_forward = engine.model.forward
    limit = {"rows": 2}
    sizes = []

    def forward(*args, **kwargs):
        sizes.append(kwargs["input_ids"].shape[0])
        if limit["rows"] is not None and kwargs["input_ids"].shape[0] > limit["rows"]:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_forward(*args, **kwargs)

    engine.model.forward = forward
    got = engine.generate(prompts, 4)  # 8 -> 4 -> 2: four batches of 2 ran, so the cap is back at 4
    assert [g.token_ids for g in got] == [g.token_ids for g in expected]
    assert engine.oom_backoffs == 3 and engine.config.max_batch_size == 4
    got = engine.generate(prompts, 4)  # the limit holds: 4 fails again, and the cap goes back up
    assert [g.token_ids for g in got] == [g.token_ids for g in expected]
    assert engine.oom_backoffs == 5 and engine.config.max_batch_size == 4
    limit["rows"] = None  # memory freed
    for _ in range(2):
        got = engine.generate(prompts, 4)
        assert [g.token_ids for g in got] == [g.token_ids for g in expected]
    assert engine.config.max_batch_size == 8 and engine.oom_backoffs == 5
    sizes.clear()
    engine.generate(prompts, 4)
    assert max(sizes) == 8  # one batch of 8 again


@pytest.mark.slow
def test_threads_share_one_engine(tokenizer):
    engine = Engine(tiny_model("llama", seed=3), tokenizer, device="cpu")
    scorer = UtilityScorer(engine, max_new_tokens=6)
    queries = [
        (f"question number {i} about topic {i % 4}?", [f"doc {j} for {i}: " + "word " * (j + i % 5) for j in range(3)])
        for i in range(80)
    ]
    sequential = [[(r.score, r.answer) for r in scorer.score(q, d)] for q, d in queries]
    results: dict[int, list] = {}

    def worker(t: int):
        for i in range(t * 10, t * 10 + 10):
            results[i] = [(r.score, r.answer) for r in scorer.score(*queries[i])]

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert [results[i] for i in range(80)] == sequential


def test_bad_prompts(tiny_engine):
    with pytest.raises(TypeError):
        tiny_engine.generate("text is not token ids")
    with pytest.raises(ValueError):
        tiny_engine.generate([[]])
    with pytest.raises(ValueError):
        tiny_engine.token_stats([[1, 2]], [])
    assert tiny_engine.generate([]) == []


def test_leave_one_out_prompts_reuse_the_full_prompts_prefix(tiny_engine, monkeypatch):
    # Influence Score rows: the full context, each leave-one-out, each single document
    # one batch; no prompt kept from earlier calls, so the count is the batch's own prefix tree
    monkeypatch.setattr(tiny_engine, "config", replace(tiny_engine.config, min_batch_fill=0.0, retain_prefix_tokens=0))
    query, docs = _docs(5, 5)
    pb = PromptBuilder(tiny_engine.tokenizer, tiny_engine.max_context_tokens, 8)
    rows = [pb.grounded_ids(query, docs)]
    rows += [pb.grounded_ids(query, docs[:i] + docs[i + 1 :]) for i in range(5)]
    rows += [pb.grounded_ids(query, [d]) for d in docs]
    groups = prefix_groups(
        rows,
        [len(r) - 1 for r in rows],
        min_shared_prefix=tiny_engine.config.min_shared_prefix,
        group_overhead_tokens=tiny_engine.config.group_overhead_tokens,
    )
    assert sorted(i for g, _ in groups for i in g) == list(range(11))
    assert all(rows[i][:p] == rows[g[0]][:p] and p < len(rows[i]) for g, p in groups for i in g)
    # each group's prefix continues the longest agreement with an earlier group's prefix (a prefix tree)
    heads = [rows[g[0]][:p] for g, p in groups]
    encoded = sum(
        p - max([min(common_prefix(h, heads[j]), p) for j in range(n)], default=0) + sum(len(rows[i]) - p for i in g)
        for n, ((g, p), h) in enumerate(zip(groups, heads))
    )
    # the ideal: every row encodes only what it does not share with a row before it in token order
    order = sorted(rows)
    tree = len(order[0]) + sum(len(b) - min(common_prefix(a, b), len(b) - 1) for a, b in zip(order, order[1:]))
    assert encoded <= 1.05 * tree and tree < 0.7 * sum(map(len, rows))
    before = tiny_engine.prefill_tokens
    gens = tiny_engine.generate(rows, 8)
    assert tiny_engine.prefill_tokens - before == encoded
    for row, g in zip(rows, gens):  # each row exactly as when it is generated alone
        (alone,) = tiny_engine.generate([row], 8)
        assert g.token_ids == alone.token_ids
        torch.testing.assert_close(g.entropy, alone.entropy, atol=TOL, rtol=0)
        torch.testing.assert_close(g.logprob, alone.logprob, atol=TOL, rtol=0)
