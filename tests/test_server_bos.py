"""What llama-cpp-python's server adds to a text prompt (grogu.runtime.inference_server.bos), on real servers.

The embedded SmolLM2 GGUF is copied with its tokenizer flags flipped (``grogu_research.testing.gguf_with_flags``):

- ``add_bos_token`` true: the server puts a BOS (``<|im_start|>``, id 1) in front of every text prompt.
  SmolLM2's chat template renders that same token first, so a prompt sent whole would read two. grogu
  leaves its own out of the text: the model reads the prompt's ids exactly. The reference is llama.cpp
  in this process fed those ids.
- ``add_eos_token`` true as well: the server appends an EOS to every prompt. grogu refuses to score.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import torch
from grogu_research import testing

import grogu
from grogu.core.prompts import Document, PromptBuilder, PromptTemplate
from grogu.runtime.inference_server import ServerCapabilityError, ServerError, ServerTarget, topk_entropy
from grogu.runtime.inference_server.bos import PROBE, leading

# one worker starts this module's servers once (--dist loadgroup)
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.slow,
    pytest.mark.xdist_group("server_bos"),
]

K = 20
BUDGET = 8
N_CTX = 1024
QUERY = "What is the capital city of Australia?"
DOC = "Canberra is the capital city of Australia."


@pytest.fixture(scope="module")
def bos_gguf(tmp_path_factory):
    testing.require_llama_cpp()
    return testing.gguf_with_flags(str(tmp_path_factory.mktemp("gguf") / "smol-bos.gguf"), add_bos_token=True)


@pytest.fixture(scope="module")
def server(bos_gguf):
    with testing.LlamaCppServer(bos_gguf, n_ctx=N_CTX) as srv:
        yield srv


@pytest.fixture(scope="module")
def target(server):
    return ServerTarget(server.url, tokenizer=grogu.DEFAULT_MODEL, top_logprobs=K, retries=1, context_window=N_CTX)


@pytest.fixture(scope="module")
def reference(bos_gguf):
    return testing.reference_llama(bos_gguf, n_ctx=N_CTX)


def server_tokens(server, text: str) -> list[int]:
    root = server.url[: -len("/v1")]
    r = httpx.post(root + "/extras/tokenize", json={"input": text, "model": server.alias}, timeout=60)
    return r.json()["tokens"]


def forced_reference(llm, target, prompt: list[int], cont: list[int]) -> tuple[list[float], list[float]]:
    """(top-K entropy, log-probability) of each ``cont`` token after the ids ``prompt``, by llama.cpp."""
    llm.reset()
    llm.eval(prompt + cont)
    rows = np.asarray(llm.scores[len(prompt) - 1 : len(prompt) + len(cont) - 1], dtype=np.float64)
    rows = torch.log_softmax(torch.from_numpy(rows), dim=-1)
    ent = [topk_entropy(torch.topk(r, K).values.tolist(), target.vocab_size, target.tail) for r in rows]
    return ent, [float(r[t]) for r, t in zip(rows, cont)]


def test_one_bos_and_the_in_process_statistics(server, target, reference):
    bos = target.tokenizer.bos_token_id
    builder = PromptBuilder.for_target(target, BUDGET)
    grounded, ungrounded = builder.grounded_ids(QUERY, [Document(DOC)]), builder.ungrounded_ids(QUERY)
    assert leading(grounded, bos) == leading(ungrounded, bos) == 1  # the template renders the BOS token
    gen = target.generate([grounded], BUDGET)[0]
    assert target.server_api.prompts.server_bos is True  # decided on the first token of the server's reading
    # what the server reads: the text sent gives grogu's ids, one BOS; the whole prompt's text would give two
    assert server_tokens(server, target.server_api.prompts.text(grounded)) == grounded
    whole = server_tokens(server, target.tokenizer.decode(grounded, skip_special_tokens=False))
    assert leading(whole, bos) == 2
    # the greedy answer is llama.cpp's to the same ids (a token-id prompt gets no BOS added in process)
    out = reference.create_completion(grounded, max_tokens=BUDGET, temperature=0.0, top_k=1, repeat_penalty=1.0)
    assert gen.text == out["choices"][0]["text"].strip() and gen.token_ids
    ent, lp = forced_reference(reference, target, grounded, gen.token_ids)
    np.testing.assert_allclose(gen.logprob.numpy(), lp, atol=0.05)  # decode steps against one pass
    # teacher-forced under the ungrounded prompt: llama.cpp's numbers on the same ids, in one pass as the
    # server evaluates it after forget() (the first call also runs the echo probe, which leaves a split)
    target.token_stats([ungrounded], [gen.token_ids])
    server.forget()
    st = target.token_stats([ungrounded], [gen.token_ids])[0]
    ent, lp = forced_reference(reference, target, ungrounded, gen.token_ids)
    np.testing.assert_allclose(st.logprob.numpy(), lp, atol=2e-4)
    np.testing.assert_allclose(st.entropy.numpy(), ent, atol=2e-4)


def test_a_prompt_without_the_bos_is_refused(target):
    """A plain prompt (no chat template: no BOS rendered) would be read after a BOS it does not hold."""
    plain = PromptBuilder(target.tokenizer, N_CTX, BUDGET, PromptTemplate(chat=False))
    prompt = plain.ungrounded_ids(QUERY)
    assert leading(prompt, target.tokenizer.bos_token_id) == 0
    with pytest.raises(
        ServerCapabilityError, match=r"add_bos_token is true\), and this prompt does not start with one"
    ):
        target.generate([prompt], BUDGET)
    with pytest.raises(ServerCapabilityError, match="would read a BOS that grogu's prompt does not hold"):
        target.token_stats([prompt], [target.encode(" Canberra")])


def other_split(tok, word: str) -> list[int]:
    """Token ids of ``word`` split otherwise than its tokenizer does, as many tokens: they decode to
    ``word``, which the tokenizer reads back as its own split."""
    canonical = tok.encode(word, add_special_tokens=False)
    for k in range(2, len(word) - 1):
        ids = tok.encode(word[:k], add_special_tokens=False) + tok.encode(word[k:], add_special_tokens=False)
        if len(ids) == len(canonical) and ids != canonical and tok.decode(ids) == word:
            return ids
    raise AssertionError(f"no other split of {word!r}")


def test_the_round_trip_checks_the_ids(target):
    prompt = PromptBuilder.for_target(target, BUDGET).ungrounded_ids(QUERY)
    word = " Kinshasa"
    canonical, odd = target.encode(word), other_split(target.tokenizer, word)
    first = next(i for i, (a, b) in enumerate(zip(canonical, odd)) if a != b)
    # as many tokens as the server reads: a count check passes, the ids check does not
    with pytest.raises(ServerError, match=f"first difference at position {len(prompt) + first} "):
        target.token_stats([prompt], [odd])
    target.token_stats([prompt], [canonical])
    sent = target.requests_sent
    target.token_stats([prompt], [canonical])  # checked once per target: the echo request alone
    assert target.requests_sent == sent + 1


@pytest.fixture(scope="module")
def eos_server(tmp_path_factory):
    testing.require_llama_cpp()
    path = str(tmp_path_factory.mktemp("gguf") / "smol-bos-eos.gguf")
    with testing.LlamaCppServer(testing.gguf_with_flags(path, add_bos_token=True, add_eos_token=True)) as srv:
        yield srv


def test_a_server_that_appends_an_eos_is_refused(eos_server):
    target = ServerTarget(eos_server.url, tokenizer=grogu.DEFAULT_MODEL, top_logprobs=K, retries=1)
    tok = target.tokenizer
    theirs = server_tokens(eos_server, PROBE)
    # the BOS first and an EOS last: the rest is not the probe's own tokens, the first token still decides
    assert theirs[0] == tok.bos_token_id and theirs[-1] == tok.eos_token_id and theirs[1:] != target.encode(PROBE)
    prompt = PromptBuilder.for_target(target, BUDGET).ungrounded_ids(QUERY)
    with pytest.raises(ServerCapabilityError, match="appends a token to every prompt .*add_eos_token is true"):
        target.generate([prompt], BUDGET)
    with pytest.raises(ServerCapabilityError, match="add_eos_token"):
        target.token_stats([prompt], [target.encode(" Canberra")])


@pytest.fixture(scope="module")
def sep_server(tmp_path_factory):
    testing.require_llama_cpp()
    path = str(tmp_path_factory.mktemp("gguf") / "smol-sep.gguf")
    with testing.LlamaCppServer(testing.gguf_with_flags(path, seperator_token_id=2)) as srv:
        yield srv


@pytest.mark.heavy  # the EOS case above starts its own server and checks the same refusal
def test_a_server_that_appends_a_sep_is_refused(sep_server):
    """A vocabulary with a SEP token: llama-cpp-python's completions append it to every text prompt, and
    /extras/tokenize does not show it. The probe's one-token completion counts one prompt token more."""
    target = ServerTarget(sep_server.url, tokenizer=grogu.DEFAULT_MODEL, top_logprobs=K, retries=1)
    assert server_tokens(sep_server, PROBE) == target.encode(PROBE)  # no BOS, no EOS shown
    prompt = PromptBuilder.for_target(target, BUDGET).ungrounded_ids(QUERY)
    with pytest.raises(ServerCapabilityError, match="appends a token to every prompt .not shown by /extras/tokenize"):
        target.generate([prompt], BUDGET)
