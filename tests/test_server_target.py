"""grogu.ServerTarget against a real OpenAI-compatible server: llama-cpp-python's server on this machine
serving the embedded SmolLM2 GGUF (started for this module, stopped after).

The reference for every number the server path computes is llama.cpp itself in this process
(``llama_cpp.Llama`` on the same GGUF, all logits kept): the same token log-probabilities, and the
entropy of the same top-k with the same tail correction. Against grogu's own engine (transformers,
de-quantised weights) the answers and rankings agree where quantisation does not move them.
"""

from __future__ import annotations

import asyncio
import json
import math
import warnings

import numpy as np
import pytest
import torch
from grogu_research import testing

import grogu
import grogu.rerank.pipeline
from grogu.core.target import Target
from grogu.metrics.influence import InfluenceScorer
from grogu.runtime.inference_server import ServerCapabilityError, ServerError, ServerTarget, topk_entropy

# a real server: not in the fast subset (-m "not slow")
# one worker starts this module's servers once (--dist loadgroup)
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.slow,
    pytest.mark.xdist_group("server_target"),
]

QUERY = "What is the capital city of Australia?"
DOCS = [
    "Canberra is the capital city of Australia.",
    "Sydney is the largest city in Australia.",
    "Paris is the capital of France.",
]
K = 20
BUDGET = 12
AUDIT_BUDGET = 6  # the audit scores its contexts twice (the CLI, then the replay)
#: llama-cpp-python keeps the KV cache of the previous request's longest common prefix and evaluates the
#: rest in another split, which rounds its quantised kernels differently: the same request after other
#: requests gives the same tokens and log-probabilities within about 0.05 (seen: 0.076), not bit for bit
SERVER_RTOL = 0.1


@pytest.fixture(scope="module")
def server():
    testing.require_llama_cpp()
    with testing.LlamaCppServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def target(server):
    return ServerTarget(server.url, tokenizer=grogu.DEFAULT_MODEL, top_logprobs=K, retries=1)


@pytest.fixture(scope="module")
def reference():
    """llama.cpp in process on the same GGUF: full logits at every position."""
    return testing.reference_llama()


@pytest.fixture(scope="module")
def served_scores(target):
    scorer = grogu.UtilityScorer(target, max_new_tokens=BUDGET)
    return scorer, scorer.score(QUERY, DOCS, return_details=True)


def reference_stats(llm, target: ServerTarget, prompt: list[int], cont: list[int], tail: str):
    """(entropy with top-K and ``tail``, log-probability) of each ``cont`` token after ``prompt`` by llama.cpp."""
    text = target.tokenizer.decode(prompt + cont, skip_special_tokens=False)
    ids = llm.tokenize(text.encode(), add_bos=False, special=True)
    llm.reset()
    llm.eval(ids)
    logits = np.asarray(llm.scores[: len(ids)], dtype=np.float64)
    rows = torch.log_softmax(torch.from_numpy(logits[len(ids) - len(cont) - 1 : len(ids) - 1]), dim=-1)
    tail_ids = ids[len(ids) - len(cont) :]
    ent = [topk_entropy(torch.topk(r, K).values.tolist(), target.vocab_size, tail) for r in rows]
    lp = [float(r[t]) for r, t in zip(rows, tail_ids)]
    return ent, lp


def test_api_detected_and_window(target, smol_engine):
    assert target.api == "llama-cpp"  # told from /v1/models (owned_by "me")
    assert target.model_name == grogu.DEFAULT_MODEL
    assert target.device == "server"
    # both implement the Target protocol; only the chat API is grounded-only or takes messages
    assert isinstance(target, Target) and isinstance(smol_engine, Target)
    assert (target.grounded_only, target.takes_messages) == (smol_engine.grounded_only, smol_engine.takes_messages)
    assert target.grounded_only is False and target.takes_messages is False
    assert target.stop_token_ids == smol_engine.stop_token_ids


def test_token_stats_equal_llama_cpp_in_process(server, target, reference, served_scores):
    scorer, scores = served_scores
    answer = scores[0].details.token_ids
    prompt = scorer.prompts.ungrounded_ids(QUERY)
    server.forget()  # one pass, as the reference evaluates it
    st = target.token_stats([prompt], [answer])[0]
    ent, lp = reference_stats(reference, target, prompt, answer, target.tail)
    assert st.token_ids == answer
    np.testing.assert_allclose(st.logprob.numpy(), lp, atol=2e-4)
    np.testing.assert_allclose(st.entropy.numpy(), ent, atol=2e-4)
    # the tail correction is part of the value: without it the entropy is smaller wherever mass is left
    plain, _ = reference_stats(reference, target, prompt, answer, "none")
    assert all(p <= e + 1e-9 for p, e in zip(plain, ent)) and sum(ent) > sum(plain)


def test_characters_split_over_byte_tokens(target, reference):
    """An answer whose characters span several byte tokens (the server echoes those pieces empty) and
    ends with the end-of-turn token: still the server's numbers, position by position."""
    prompt = target.encode("<|im_start|>user\nSay something.<|im_end|>\n<|im_start|>assistant\n")
    answer = target.encode("東京は日本の首都です 🎉 Café") + [target.end_of_turn]
    st = target.token_stats([prompt], [answer])[0]
    ent, lp = reference_stats(reference, target, prompt, answer, target.tail)
    assert len(st.token_ids) == len(answer) > 10
    np.testing.assert_allclose(st.logprob.numpy(), lp, atol=2e-4)
    # llama-cpp-python keys the alternatives by their text, and byte tokens of one character all read ""
    # there: where the top K read as K distinct texts the entropy is llama.cpp's, elsewhere alternatives
    # merge and the tail correction takes their mass (documented in the README)
    text = target.tokenizer.decode(prompt + answer, skip_special_tokens=False)
    ids = reference.tokenize(text.encode(), add_bos=False, special=True)
    reference.reset()
    reference.eval(ids)
    rows = np.asarray(reference.scores[len(ids) - len(answer) - 1 : len(ids) - 1], dtype=np.float64)
    distinct = [
        len({reference.detokenize([int(i)]).decode("utf-8", errors="ignore") for i in np.argsort(-r)[:K]}) == K
        for r in rows
    ]
    assert 0 < sum(distinct) < len(distinct)
    np.testing.assert_allclose(st.entropy.numpy()[distinct], np.array(ent)[distinct], atol=2e-4)


def test_generation_is_llama_cpp_greedy(target, reference, served_scores):
    scorer, scores = served_scores
    prompt = scorer.prompts.grounded_ids(QUERY, [grogu.Document(DOCS[0])])
    gen = target.generate([prompt], BUDGET)[0]
    text = target.tokenizer.decode(prompt, skip_special_tokens=False)
    out = reference.create_completion(text, max_tokens=BUDGET, temperature=0.0, top_k=1, repeat_penalty=1.0)
    assert gen.text == out["choices"][0]["text"].strip()
    ent, lp = reference_stats(reference, target, prompt, gen.token_ids, target.tail)
    # decode steps and one whole-sequence pass round llama.cpp's quantised kernels differently (seen:
    # equal to 1e-6 but for one token, 0.02 apart); the teacher-forced test above is the exact one
    np.testing.assert_allclose(gen.logprob.numpy(), lp, atol=0.05)
    np.testing.assert_allclose(gen.entropy.numpy(), ent, atol=0.05)
    assert np.median(np.abs(gen.logprob.numpy() - np.array(lp))) < 1e-3


def test_scores_follow_the_metric(served_scores):
    """Each served score is the metric of the served statistics (the scorer's own arithmetic)."""
    _, scores = served_scores
    for s in scores:
        d = s.details
        value = grogu.metrics.compute(
            "key_entropy",
            d.grounded_entropy,
            d.grounded_logprob,
            d.ungrounded_entropy,
            logp_u=d.ungrounded_logprob,
            copied=d.copied,
        )
        assert math.isclose(s.score, value.utility, rel_tol=1e-6)


def test_agrees_with_the_in_process_engine(served_scores, smol_engine):
    """Same answers as grogu's engine on the de-quantised weights, and the off-topic document last in both
    rankings (the two Australian ones are 0.08 apart in process: top-20 truncation may swap them)."""
    _, served = served_scores
    local = grogu.UtilityScorer(smol_engine, max_new_tokens=BUDGET).score(QUERY, DOCS)
    assert [s.answer for s in served] == [s.answer for s in local]
    assert min(range(3), key=lambda i: served[i].score) == min(range(3), key=lambda i: local[i].score) == 2


@pytest.mark.heavy  # each mode's logic is the library's; test_serve runs them all through a service
def test_rerank_every_mode(target, served_scores):
    scorer, scores = served_scores
    by_doc = scorer.rerank(QUERY, DOCS, mode="document")
    assert [r.score for r in by_doc] == sorted((r.score for r in by_doc), reverse=True)
    assert [r.answer for r in by_doc] == [scores[r.index].answer for r in by_doc]
    assert [r.score for r in by_doc] == pytest.approx([scores[r.index].score for r in by_doc], abs=SERVER_RTOL)
    rel = [0.9, 0.5, 0.1]
    # context mode, top 2 of 3: the default candidates scored through the server, then decided by hand
    ctx = scorer.rerank(QUERY, DOCS, top_n=2, relevance=rel, return_details=True)
    assert len(ctx) == 2 and ctx[0].context is not None
    plan = grogu.rerank.pipeline.plan(QUERY, DOCS, 2, None, None, rel, scorer.grounded_only)
    candidates = scorer.score_contexts(QUERY, [docs for _, docs in plan.context_documents()])
    want = grogu.rerank.decide(plan.settings, plan.base, plan.contexts, candidates, 2, None, rel, plan.support_texts())
    assert [r.index for r in ctx] == want.order and ctx[0].answer == candidates[want.chosen].answer
    # fusion: the utility ranks of the per-document scores fused with the relevance ranks (weight 0.6)
    fused = scorer.rerank(QUERY, DOCS, mode="fusion", relevance=rel)
    expected = grogu.rerank.selection.order_by(grogu.rerank.selection.fuse([s.score for s in scores], rel, 0.6))
    assert [r.index for r in fused] == expected
    pruned = scorer.rerank(QUERY, DOCS, mode="prune", relevance=rel)
    assert [r.index for r in pruned] == sorted(r.index for r in pruned)


@pytest.mark.heavy
def test_concurrent_queries_equal_sequential(target, served_scores):
    """Two queries batched, and the same two as concurrent coroutines, against one at a time."""
    scorer, first = served_scores
    items = [(QUERY, DOCS), ("What is the capital of France?", DOCS[2:])]
    together = scorer.score_batch(items)

    async def both():
        return await asyncio.gather(*(scorer.ascore(q, d) for q, d in items))

    concurrent = asyncio.run(both())
    assert [x.answer for x in together[0]] == [x.answer for x in first] == [x.answer for x in concurrent[0]]
    assert [x.answer for x in together[1]] == [x.answer for x in concurrent[1]]
    assert [x.score for x in together[0]] == pytest.approx([x.score for x in first], abs=SERVER_RTOL)
    assert [x.score for x in concurrent[1]] == pytest.approx([x.score for x in together[1]], abs=SERVER_RTOL)


@pytest.mark.heavy  # test_server_chat runs the exact Influence Score through a server on every CI run
def test_influence_through_the_server(target):
    """Forward-only leave-one-out log-probabilities are the server's teacher-forced sums; exact
    Influence runs its 2k+1 generations on the server."""
    docs = DOCS[:2]
    fwd = InfluenceScorer(target, method="leave_one_out_logprob", max_new_tokens=BUDGET)
    res = fwd.score(QUERY, docs)
    assert res.answer and len(res.scores) == 2 and all(math.isfinite(x) for x in res.scores)
    # by hand: the full context's and each leave-one-out context's teacher-forced answer log-probability
    target_ids = res.forward.target_token_ids
    prompts = [fwd.prompts.grounded_ids(QUERY, [grogu.Document(d) for d in ds]) for ds in (docs, docs[1:], docs[:1])]
    sums = [float(st.logprob.double().sum()) for st in target.token_stats(prompts, [target_ids] * 3)]
    # sums over the answer's tokens: the server's request-order rounding (SERVER_RTOL per mean) adds up
    # over them; a misaligned or wrong token would be off by nats
    assert res.forward.logprobs == pytest.approx(sums, abs=max(SERVER_RTOL, 0.02 * len(target_ids)))
    lps = res.forward.logprobs
    assert res.scores == pytest.approx([lps[0] - lps[1], lps[0] - lps[2]], abs=1e-9)
    exact = InfluenceScorer(target, max_new_tokens=BUDGET)
    ex = exact.score(QUERY, docs)
    assert ex.answer == res.answer  # the same greedy full-context answer from the server
    assert len(ex.leave_one_out_answers) == len(ex.single_answers) == 2
    # IS_i by hand from the server's answers: cos(F(G(i)), F(G(all))) - cos(F(G(all without i)), F(G(all)))
    from grogu.runtime.embedders import load_embedder

    vectors = load_embedder(ex.embedder, device="cpu").encode(
        [ex.answer, *ex.leave_one_out_answers, *ex.single_answers], normalize_embeddings=True, convert_to_numpy=True
    )
    full, loo, one = vectors[0], vectors[1:3], vectors[3:5]
    assert ex.scores == pytest.approx([float(one[i] @ full - loo[i] @ full) for i in range(2)], abs=1e-5)


@pytest.mark.heavy  # test_audit_through_the_server drives the command line through the server too
def test_command_line_through_the_server(server, served_scores, tmp_path, capsys):
    """``grogu score --server URL``: the same answers and scores as the ServerTarget in Python."""
    import json

    from grogu.apps.cli import main

    _, scores = served_scores
    docs = tmp_path / "docs.txt"
    docs.write_text("\n\n".join(DOCS))
    assert (
        main(
            [
                "score",
                "--server",
                server.url,
                "--query",
                QUERY,
                "--docs",
                str(docs),
                "--json",
                "--max-new-tokens",
                str(BUDGET),
            ]
        )
        == 0
    )
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["model"] == grogu.DEFAULT_MODEL
    assert [r["answer"] for r in record["results"]] == [s.answer for s in scores]
    assert [r["score"] for r in record["results"]] == pytest.approx([s.score for s in scores], abs=SERVER_RTOL)
    with pytest.raises(SystemExit, match="--device/--dtype"):
        main(["score", "--server", server.url, "--query", QUERY, "--docs", str(docs), "--device", "cpu"])


@pytest.mark.heavy  # tests/test_audit.py runs the audit in process; this one through the server
def test_audit_through_the_server(server, tmp_path):
    """``grogu audit --server URL``: each set-up's context scored as the ServerTarget scores it in Python."""
    import json

    from grogu.apps.cli import main

    setups = {"good": DOCS[:2], "bad": DOCS[2:]}
    server.forget()  # the audit's requests meet the server as the reference's below do
    for name, docs in setups.items():
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({"query": QUERY, "documents": docs}) + "\n")
    out = tmp_path / "report"
    assert (
        main(
            [
                "audit",
                "--server",
                server.url,
                *[f"--setup={n}={tmp_path / n}.jsonl" for n in setups],
                "--max-new-tokens",
                str(AUDIT_BUDGET),
                "--no-documents",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == grogu.DEFAULT_MODEL and summary["timing"]["contexts"] == 3  # with no document
    # in Python: the target the CLI builds, the audit's default short answers, its contexts in its order
    # (no document first) and one batch, so the server sees the same requests in the same order
    scorer = grogu.UtilityScorer(
        ServerTarget(server.url, tokenizer=grogu.DEFAULT_MODEL), max_new_tokens=AUDIT_BUDGET, answer_style="short"
    )
    server.forget()
    ((none, *want),) = scorer.score_contexts_batch([(QUERY, [[], *setups.values()])])
    assert summary["queries"][0]["baseline"]["answer"] == none.answer
    for name, w in zip(setups, want):
        got = summary["queries"][0]["setups"][name]
        assert got["answer"] == w.answer and got["utility"] == pytest.approx(w.score, abs=1e-6)
    assert (out / "report.html").stat().st_size > 10_000


@pytest.mark.heavy  # test_server_sglang checks ACU's one-token forcing against llama.cpp by hand too
def test_acu_through_the_server_equals_llama_cpp_by_hand(server, reference, tiny_engine, capsys):
    """ACU's label-token probabilities by one-token teacher forcing equal llama.cpp's next-token log-softmax
    in process, for label tokens far outside the top k too; ACU follows from them by hand. A fresh target:
    its echo probe sees a forced answer after which the model stops at once (it read the wrong entry)."""
    from grogu.metrics.acu import ACUScorer

    target = ServerTarget(server.url, tokenizer=grogu.DEFAULT_MODEL, top_logprobs=K, retries=1)
    assert target.capabilities == tiny_engine.capabilities == {"generate", "teacher_force", "next_token"}
    assert not hasattr(target, "model") and not hasattr(target, "dtype")  # no Engine attributes to pass for one
    scorer = ACUScorer(target)
    claim, evidence = "Canberra is the capital of Australia.", "Canberra has been the capital since 1913."
    got = scorer.score(claim, evidence, "SUPPORTS")
    p = {}
    for key, text in (
        ("with", scorer.prompt_with.format(claim=claim, evidence=evidence)),
        ("without", scorer.prompt_without.format(claim=claim)),
    ):
        ids = scorer._prompt(text)
        reference.reset()
        reference.eval(ids)
        row = torch.log_softmax(torch.tensor(np.asarray(reference.scores[len(ids) - 1]), dtype=torch.float64), -1)
        rank = {int(t): r for r, t in enumerate(torch.argsort(row, descending=True).tolist())}
        assert max(rank[t] for ts in scorer.label_tokens.values() for t in ts) > K
        p[key] = {lab: float(sum(row[t].exp() for t in ts)) for lab, ts in scorer.label_tokens.items()}
    dp = {}
    for lab in scorer.labels:
        w, wo = p["with"][lab], p["without"][lab]
        assert got.p_with[lab] == pytest.approx(w, abs=2e-4) and got.p_without[lab] == pytest.approx(wo, abs=2e-4)
        dp[lab] = (w - wo) / (1 - wo) if w >= wo else (w - wo) / wo
    assert got.acu == pytest.approx((dp["True"] - dp["None"] - dp["False"]) / 3, abs=1e-3)
    from grogu.apps.cli import main  # grogu acu --server URL: the same value

    capsys.readouterr()
    assert (
        main(
            ["acu", "--claim", claim, "--evidence", evidence, "--stance", "SUPPORTS", "--server", server.url, "--json"]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["acu"] == pytest.approx(got.acu, abs=1e-3)
    with pytest.raises(ServerCapabilityError, match="token_ids"):
        target.next_token_logprobs([ids])  # the whole distribution is not a server's
    with pytest.raises(ValueError, match="token_ids"):
        target.next_token_logprobs([ids], token_ids=[target.vocab_size])


def test_log_probabilities_do_not_depend_on_k(server, target, served_scores):
    """The forced tokens' log-probabilities are the server's own, whatever k; only the entropy is top-k."""
    scorer, scores = served_scores
    narrow = ServerTarget(server.url, tokenizer=grogu.DEFAULT_MODEL, top_logprobs=1, tail="none", retries=0)
    prompt, answer = scorer.prompts.ungrounded_ids(QUERY), scores[1].details.token_ids
    narrow.token_stats([prompt], [answer])  # its echo probe, which leaves the server's cache split
    server.forget()
    one = narrow.token_stats([prompt], [answer])[0]
    server.forget()
    wide = target.token_stats([prompt], [answer])[0]
    assert one.logprob.tolist() == pytest.approx(wide.logprob.tolist(), abs=1e-5)
    # the scorer's own numbers came after other requests, evaluated in another split
    assert one.logprob.tolist() == pytest.approx(scores[1].details.ungrounded_logprob.tolist(), abs=SERVER_RTOL)
    # with no tail correction the entropy sums -p log p over the most likely token and the forced one
    # (llama-cpp-python adds the token itself to its top k): at most 2/e
    assert all(0 <= h <= 2 / math.e + 1e-6 for h in one.entropy.tolist())


def test_server_down_is_a_clear_error():
    """Making the target sends nothing; its first use says the server is not there."""
    target = ServerTarget(
        f"http://127.0.0.1:{testing.free_port()}",
        model="m",
        tokenizer=grogu.DEFAULT_MODEL,
        retries=1,
        backoff=0.01,
        timeout=2,
    )
    assert target.requests_sent == 0 and target.http.clients_made == 0
    with pytest.raises(ServerError, match="cannot reach the LLM server"):
        target.generate([[1, 2, 3]], 2)


def test_unknown_model_is_a_clear_error(server):
    with pytest.raises(ValueError, match="does not serve model 'no-such-model'"):
        ServerTarget(server.url, model="no-such-model", tokenizer=grogu.DEFAULT_MODEL, retries=0).connect()


def test_wrong_api_key_is_a_clear_error():
    testing.require_llama_cpp()
    with testing.LlamaCppServer(api_key="right-key") as srv:
        with pytest.raises(ServerError, match="refused the API key"):
            ServerTarget(srv.url, tokenizer=grogu.DEFAULT_MODEL, api_key="wrong-key", retries=0).connect()
        ok = ServerTarget(srv.url, tokenizer=grogu.DEFAULT_MODEL, api_key="right-key", retries=0)
        assert ok.model_name == grogu.DEFAULT_MODEL


def test_log_probabilities_switched_off_is_a_clear_error():
    testing.require_llama_cpp()
    with testing.LlamaCppServer(logits_all=False) as srv:
        target = ServerTarget(srv.url, tokenizer=grogu.DEFAULT_MODEL, retries=0)
        with pytest.raises(ServerCapabilityError, match="refused the log-probabilities"):
            target.generate([target.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")], 4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(base_url="localhost:8000"), "http"),
        (dict(api="tgi"), "api must be"),
        (dict(tail="gauss"), "tail must be"),
        (dict(top_logprobs=0), "top_logprobs"),
        (dict(timeout=float("nan")), "timeout"),
        (dict(max_concurrency=0), "max_concurrency"),
        (dict(retries=-1), "retries must be an int >= 0"),
        (dict(backoff=float("inf")), "backoff"),
    ],
)
def test_bad_settings(kwargs, message):
    args = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "tokenizer": grogu.DEFAULT_MODEL, **kwargs}
    with pytest.raises(ValueError, match=message):
        ServerTarget(args.pop("base_url"), **args)


def test_topk_entropy_by_hand():
    lp = [math.log(0.5), math.log(0.3)]
    head = -(0.5 * math.log(0.5) + 0.3 * math.log(0.3))
    assert topk_entropy(lp, 10, "none") == pytest.approx(head)
    assert topk_entropy(lp, 10, "min") == pytest.approx(head - 0.2 * math.log(0.3))
    assert topk_entropy(lp, 10, "uniform") == pytest.approx(head - 0.2 * math.log(0.2 / 8))
    full = [math.log(p) for p in (0.5, 0.3, 0.2)]
    assert topk_entropy(full, 3, "min") == pytest.approx(
        -(0.5 * math.log(0.5) + 0.3 * math.log(0.3) + 0.2 * math.log(0.2))
    )
    with pytest.raises(ValueError):
        topk_entropy([], 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert topk_entropy([0.0], 5, "uniform") == pytest.approx(0.0)
