"""grogu.ServerTarget with api="llama-server" against llama.cpp itself.

No llama-server binary runs in the tests (one built from the same llama.cpp is checked by hand:
``benchmarks/llama_server_real.py``). The server is :class:`grogu_research.llama_server_standin.LlamaServerStandIn`:
llama-server's ``/completion``, ``/v1/completions`` and ``/v1/models`` over HTTP, transcribed from
llama.cpp as vendored in llama-cpp-python 0.3.36, decoding with llama.cpp in this process on the embedded
SmolLM2 GGUF. Teacher forcing goes through the real GBNF token grammar (``llama_sampler_init_grammar``).

The reference is a second ``llama_cpp.Llama`` on the same GGUF: its own greedy decoding
(``Llama.generate``) and the log-softmax of its raw logits, the prompt in one batch and then one token a
step, as llama-server decodes. The request bodies' fields: ``tests/test_server_requests.py``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from grogu_research import testing

import grogu
from grogu.runtime.inference_server import ServerCapabilityError, ServerTarget, topk_entropy
from grogu.runtime.inference_server.llama_server import FORCE_BIAS, NEUTRAL

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.slow]

QUERY = "What is the capital city of Australia?"
DOCS = [
    "Canberra is the capital city of Australia.",
    "Sydney is the largest city in Australia.",
    "Paris is the capital of France.",
]
K = 20
BUDGET = 12
#: float32 softmax on the server against float64 log-softmax here, on the same logits
ATOL = 1e-5


@pytest.fixture(scope="module")
def server():
    testing.require_llama_cpp()
    from grogu_research.llama_server_standin import LlamaServerStandIn

    with LlamaServerStandIn() as srv:
        yield srv


@pytest.fixture(scope="module")
def target(server):
    return ServerTarget(server.url, tokenizer=grogu.DEFAULT_MODEL, top_logprobs=K, retries=0)  # forcing by default


@pytest.fixture(scope="module")
def reference():
    llm = testing.reference_llama()
    yield llm
    llm.close()


@pytest.fixture(scope="module")
def prompts(target):
    scorer = grogu.UtilityScorer(target, max_new_tokens=BUDGET)
    return scorer.prompts.grounded_ids(QUERY, [grogu.Document(DOCS[0])]), scorer.prompts.ungrounded_ids(QUERY)


def stats(rows: list[np.ndarray], cont: list[int], vocab: int, tail: str) -> tuple[list[float], list[float]]:
    """(top-K entropy with ``tail``, log-probability) of each token."""
    ent = [topk_entropy(torch.topk(torch.from_numpy(r), K).values.tolist(), vocab, tail) for r in rows]
    return ent, [float(r[t]) for r, t in zip(rows, cont)]


def test_told_from_its_models_listing(target, server):
    assert (target.api, target.backend, target.grounded_only) == ("llama-server", "llama-server", False)
    assert target.vocab_size == server.llm.n_vocab() and target.max_context_tokens == server.llm.n_ctx()


def test_generation_is_llama_cpp_greedy(target, reference, prompts):
    """The same tokens as llama.cpp's own greedy decoding in process, with the same log-probabilities and
    top-k entropies, the end-of-turn token's included."""
    grounded, _ = prompts
    gen = target.generate([grounded], BUDGET)[0]
    reference.reset()
    ids = []
    for t in reference.generate(grounded, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
        ids.append(t)
        if t in target.stop_token_ids or len(ids) == BUDGET:
            break
    answer = ids[:-1] if ids[-1] in target.stop_token_ids else ids
    assert gen.token_ids == answer and len(answer) > 3 and "Canberra" in gen.text
    assert gen.finished == (ids[-1] in target.stop_token_ids) and gen.stop_token_id in (None, ids[-1])
    rows = testing.stepwise_rows(reference, grounded, ids)
    ent, lp = stats(rows, ids, target.vocab_size, target.tail)
    np.testing.assert_allclose(gen.logprob.numpy(), lp[: len(answer)], atol=ATOL)
    np.testing.assert_allclose(gen.entropy.numpy(), ent[: len(answer)], atol=ATOL)
    if gen.finished:
        assert gen.stop_logprob == pytest.approx(lp[-1], abs=ATOL) and gen.stop_entropy == pytest.approx(
            ent[-1], abs=ATOL
        )


def test_grammar_forcing_gives_the_models_own_distribution(target, reference, prompts):
    """A wrong answer and its end-of-turn token, forced under the query-only prompt where the model would
    not choose them: each token's log-probability and top-k are those of the unconstrained model, exactly
    as llama.cpp computes them in process, not the grammar's (which leaves one token)."""
    _, ungrounded = prompts
    cont = target.encode("Sydney is the capital of Australia.") + [target.end_of_turn]
    st, eot = target.token_stats([ungrounded, ungrounded], [cont, [target.end_of_turn]])
    rows = testing.stepwise_rows(reference, ungrounded, cont)
    ent, lp = stats(rows, cont, target.vocab_size, target.tail)
    assert st.token_ids == cont
    np.testing.assert_allclose(st.logprob.numpy(), lp, atol=ATOL)
    np.testing.assert_allclose(st.entropy.numpy(), ent, atol=ATOL)
    forced_off_greedy = [int(np.argmax(r)) != t for r, t in zip(rows, cont)]
    assert any(forced_off_greedy)  # the grammar bound tokens the model would not pick
    assert all(e > 0.01 for e in st.entropy.tolist())  # whole distributions, never the grammar's one token
    # an empty answer: the end-of-turn token alone, first under the prompt
    (row,) = testing.stepwise_rows(reference, ungrounded, [target.end_of_turn])
    assert eot.token_ids == [target.end_of_turn] and float(eot.logprob[0]) == pytest.approx(
        row[target.end_of_turn], abs=ATOL
    )


def test_a_character_split_over_byte_tokens_is_an_error(target, server):
    """llama-server reports no probabilities for a token that ends inside a UTF-8 character, and its token
    grammar cannot force one: refused before any request (llama.cpp's grammar would abort the process)."""
    prompt = target.encode("<|im_start|>user\nSay something.<|im_end|>\n<|im_start|>assistant\n")
    answer = target.encode("東京は日本の首都です")
    assert len(answer) > len("東京は日本の首都です")  # some characters take several tokens
    sent = len(server.bodies)
    with pytest.raises(ServerCapabilityError, match="token 0 of the answer .* ends inside a UTF-8 character"):
        target.token_stats([prompt], [answer])
    assert len(server.bodies) == sent
    st = target.token_stats([prompt], [target.encode("本の")])[0]  # whole characters in single tokens
    assert len(st.token_ids) == 2 and np.isfinite(st.logprob.numpy()).all()


def test_a_generated_character_split_over_byte_tokens_is_an_error(target):
    prompt = target.encode("<|im_start|>user\nWrite one emoji.<|im_end|>\n<|im_start|>assistant\n")
    with pytest.raises(ServerCapabilityError, match="returned probabilities for .* inside a UTF-8 character"):
        target.generate([prompt], 30)


def test_scores_and_every_request_body(target, reference, server):
    """UtilityScorer through the server: each score's ungrounded statistics are llama.cpp's in process, and
    every request sent the neutral sampler fields."""
    scorer = grogu.UtilityScorer(target, max_new_tokens=BUDGET)
    scores = scorer.score(QUERY, DOCS, return_details=True)
    ungrounded = scorer.prompts.ungrounded_ids(QUERY)
    for s in scores:
        d = s.details
        cont = d.token_ids if d.token_ids else [target.end_of_turn]
        _, lp = stats(testing.stepwise_rows(reference, ungrounded, cont), cont, target.vocab_size, target.tail)
        np.testing.assert_allclose(np.asarray(d.ungrounded_logprob), lp, atol=ATOL)
    assert min(range(3), key=lambda i: scores[i].score) == 2  # the off-topic document last
    bodies = [b for path, b in server.bodies if path == "/completion"]
    fields = [k for k in NEUTRAL if k != "logit_bias"]  # a forced end-of-turn token's bias, else none
    assert bodies and all({k: b[k] for k in fields} == {k: NEUTRAL[k] for k in fields} for b in bodies)
    assert {json.dumps(b["logit_bias"]) for b in bodies} <= {"[]", json.dumps([[target.end_of_turn, FORCE_BIAS]])}


def test_grounded_only_without_grammar_forcing(server):
    target = ServerTarget(server.url, tokenizer=grogu.DEFAULT_MODEL, top_logprobs=K, retries=0, grammar_forcing=False)
    assert target.grounded_only and target.capabilities == {"generate"}
    scorer = grogu.UtilityScorer(target, max_new_tokens=BUDGET)  # the grounded metric
    assert all(np.isfinite(s.score) for s in scorer.score(QUERY, DOCS))
    with pytest.raises(ServerCapabilityError, match="grammar_forcing at its default"):
        grogu.UtilityScorer(target, metric="key_entropy")


def test_vllm_api_on_llama_server_is_an_error(server):
    """api="vllm" against llama-server's /v1/completions: its log-probabilities come as {"content": [...]}.
    Generating and teacher forcing both raise, naming api="llama-server"."""
    target = ServerTarget(server.url, tokenizer=grogu.DEFAULT_MODEL, api="vllm", top_logprobs=K, retries=0)
    prompt = target.encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    with pytest.raises(ServerCapabilityError, match="api='llama-server'"):
        target.generate([prompt], 4)
    with pytest.raises(ServerCapabilityError, match="api='llama-server'"):
        target.token_stats([prompt], [target.encode("Paris")])
