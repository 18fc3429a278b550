"""grogu.ServerTarget with api="sglang" against llama.cpp itself.

No SGLang server runs here. The server is :class:`grogu_research.sglang_standin.SglangStandIn`: SGLang's
``/generate`` and ``/v1/models`` over HTTP, transcribed from SGLang 0.5.23, decoding with llama.cpp in this
process on the embedded SmolLM2 GGUF.

The reference is a second ``llama_cpp.Llama`` on the same GGUF: its own greedy decoding and the
log-softmax of its raw logits (generation: the prompt in one batch, then one token a step; teacher
forcing: prompt and answer in one batch, as SGLang's prefill). The request bodies' fields:
``tests/test_server_requests.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from grogu_research import testing

import grogu
from grogu.runtime.inference_server import ServerError, ServerTarget, topk_entropy
from grogu.runtime.inference_server.sglang import NEUTRAL

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.slow]

QUERY = "What is the capital city of Australia?"
DOCS = [
    "Canberra is the capital city of Australia.",
    "Sydney is the largest city in Australia.",
    "Paris is the capital of France.",
]
K = 20
BUDGET = 12
#: a float32 log-softmax on the server (as SGLang's) against float64 here, on the same logits; a top-k
#: entropy sums 20 such terms
ATOL = 5e-5


@pytest.fixture(scope="module")
def server():
    testing.require_llama_cpp()
    from grogu_research.sglang_standin import SglangStandIn

    with SglangStandIn() as srv:
        yield srv


@pytest.fixture(scope="module")
def target(server):
    return ServerTarget(server.url, top_logprobs=K, retries=0)  # api="auto", the tokenizer from the model name


@pytest.fixture(scope="module")
def reference():
    llm = testing.reference_llama()
    yield llm
    llm.close()


@pytest.fixture(scope="module")
def prompts(target):
    scorer = grogu.UtilityScorer(target, max_new_tokens=BUDGET)
    return scorer.prompts.grounded_ids(QUERY, [grogu.Document(DOCS[0])]), scorer.prompts.ungrounded_ids(QUERY)


def _log_softmax(logits) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    return x - np.logaddexp.reduce(x)


def forced_steps(llm, prompt: list[int], cont: list[int]) -> list[np.ndarray]:
    """The log-softmax before each token of ``cont``, prompt and answer in one batch (a prefill)."""
    llm.reset()
    llm.eval(list(prompt) + list(cont))
    return [_log_softmax(llm.scores[len(prompt) - 1 + j]) for j in range(len(cont))]


def stats(rows: list[np.ndarray], cont: list[int], vocab: int, tail: str) -> tuple[list[float], list[float]]:
    """(top-K entropy with ``tail``, log-probability) of each token."""
    ent = [topk_entropy(torch.topk(torch.from_numpy(r), K).values.tolist(), vocab, tail) for r in rows]
    return ent, [float(r[t]) for r, t in zip(rows, cont)]


def test_told_from_its_models_listing(target, server):
    assert (target.api, target.backend, target.grounded_only) == ("sglang", "sglang", False)
    assert target.max_context_tokens == server.llm.n_ctx() and target.capabilities == {
        "generate",
        "teacher_force",
        "next_token",
    }


def test_generation_is_llama_cpp_greedy(target, reference, prompts, server):
    """The same tokens as llama.cpp's own greedy decoding in process, with the same log-probabilities and
    top-k entropies, the end-of-turn token's included; every request carried the neutral fields."""
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
    ent, lp = stats(testing.stepwise_rows(reference, grounded, ids), ids, target.vocab_size, target.tail)
    np.testing.assert_allclose(gen.logprob.numpy(), lp[: len(answer)], atol=ATOL)
    np.testing.assert_allclose(gen.entropy.numpy(), ent[: len(answer)], atol=ATOL)
    if gen.finished:
        assert gen.stop_logprob == pytest.approx(lp[-1], abs=ATOL)
        assert gen.stop_entropy == pytest.approx(ent[-1], abs=ATOL)
    body = server.bodies[-1][1]
    assert body["input_ids"] == [grounded] and {k: body["sampling_params"][0][k] for k in NEUTRAL} == NEUTRAL


def test_teacher_forcing_gives_the_models_own_distribution(target, reference, prompts):
    """A wrong answer and its end-of-turn token forced under the query-only prompt, in one batch with an
    empty answer: each token's log-probability and top-k entropy are llama.cpp's in process."""
    _, ungrounded = prompts
    cont = target.encode("Sydney is the capital of Australia.") + [target.end_of_turn]
    st, eot = target.token_stats([ungrounded, ungrounded], [cont, [target.end_of_turn]])
    rows = forced_steps(reference, ungrounded, cont)
    ent, lp = stats(rows, cont, target.vocab_size, target.tail)
    assert st.token_ids == cont
    np.testing.assert_allclose(st.logprob.numpy(), lp, atol=ATOL)
    np.testing.assert_allclose(st.entropy.numpy(), ent, atol=ATOL)
    assert any(int(np.argmax(r)) != t for r, t in zip(rows, cont))  # tokens the model would not pick
    assert eot.token_ids == [target.end_of_turn]
    assert float(eot.logprob[0]) == pytest.approx(rows[0][target.end_of_turn], abs=ATOL)


def test_scores_are_llama_cpps_statistics(target, reference):
    """UtilityScorer through the stand-in: each score's grounded answer is llama.cpp's greedy one, and its
    ungrounded statistics are llama.cpp's teacher-forced ones, in process."""
    scorer = grogu.UtilityScorer(target, max_new_tokens=BUDGET)
    scores = scorer.score(QUERY, DOCS, return_details=True)
    ungrounded = scorer.prompts.ungrounded_ids(QUERY)
    for doc, s in zip(DOCS, scores):
        d = s.details
        grounded = scorer.prompts.grounded_ids(QUERY, [grogu.Document(doc)])
        _, lp = stats(
            testing.stepwise_rows(reference, grounded, d.token_ids), d.token_ids, target.vocab_size, target.tail
        )
        np.testing.assert_allclose(np.asarray(d.grounded_logprob), lp, atol=ATOL)
        cont = d.token_ids if d.token_ids else [target.end_of_turn]
        ent, lp = stats(forced_steps(reference, ungrounded, cont), cont, target.vocab_size, target.tail)
        np.testing.assert_allclose(np.asarray(d.ungrounded_logprob), lp, atol=ATOL)
        np.testing.assert_allclose(np.asarray(d.ungrounded_entropy), ent, atol=ATOL)
    assert min(range(3), key=lambda i: scores[i].score) == 2  # the off-topic document last


def test_the_self_check_fires_on_other_ids(target, server, prompts):
    """A server that returns prompt log-probabilities for other ids than the forced ones is an error."""
    _, ungrounded = prompts

    def shift(answer: dict) -> None:
        entries = answer["meta_info"].get("input_token_logprobs") or []
        if len(entries) > 1:
            entries[-1][1] += 1

    server.tamper = shift
    try:
        with pytest.raises(ServerError, match="where grogu forced"):
            target.token_stats([ungrounded], [target.encode("Canberra.")])
    finally:
        server.tamper = None


@pytest.mark.heavy  # ACU is checked against hand-computed numbers in process on every CI run (tests/test_seper_acu.py)
def test_acu_through_sglang_equals_llama_cpp_by_hand(target, reference):
    """ACU's label-token probabilities by one-token teacher forcing equal llama.cpp's next-token
    log-softmax in process, for label tokens far outside the top k too; ACU follows from them by hand."""
    from grogu.metrics.acu import ACUScorer

    scorer = ACUScorer(target)
    claim, evidence = "Canberra is the capital of Australia.", "Canberra has been the capital since 1913."
    got = scorer.score_batch([(claim, evidence, "SUPPORTS"), (claim, "Sydney is the capital.", "REFUTES")])
    p = {}
    for key, text in (
        ("with0", scorer.prompt_with.format(claim=claim, evidence=evidence)),
        ("with1", scorer.prompt_with.format(claim=claim, evidence="Sydney is the capital.")),
        ("without", scorer.prompt_without.format(claim=claim)),
    ):
        row = forced_steps(reference, scorer._prompt(text), [0])[0]
        ranks = np.argsort(-row)
        assert max(int(np.where(ranks == t)[0][0]) for ts in scorer.label_tokens.values() for t in ts) > K
        p[key] = {lab: float(sum(np.exp(row[t]) for t in ts)) for lab, ts in scorer.label_tokens.items()}

    def by_hand(w: dict, wo: dict, raised: str) -> float:
        dp = {t: (w[t] - wo[t]) / (1 - wo[t]) if w[t] >= wo[t] else (w[t] - wo[t]) / wo[t] for t in w}
        return sum(dp[t] if t == raised else -dp[t] for t in dp) / len(dp)

    for res, key, raised in zip(got, ("with0", "with1"), ("True", "False")):
        assert res.raised == raised
        for lab in scorer.labels:
            assert res.p_with[lab] == pytest.approx(p[key][lab], abs=ATOL)
            assert res.p_without[lab] == pytest.approx(p["without"][lab], abs=ATOL)
        assert res.acu == pytest.approx(by_hand(p[key], p["without"], raised), abs=1e-3)
