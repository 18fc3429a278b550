"""GROGU-ranked query-rewrite preference data (grogu_research.rewrite) and the rewriter trainer.

Pair selection and the drop-smallest-gap rule against hand-computed values; TRL-loadable JSONL;
BM25, dense, LlamaIndex and LangChain retrievers (real framework objects, tiny local embeddings);
an end-to-end run on a tiny random model checked against UtilityScorer.score_context one rewrite at
a time; the CLI; and train-rewriter (SFT then DPO with TRL) for a few steps when TRL is installed.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import warnings
import zlib

import pytest
import torch
from grogu_research import testing
from grogu_research.rewrite import (
    BM25Retriever,
    DenseRetriever,
    LangChainRetriever,
    LlamaIndexRetriever,
    PreferencePair,
    RewritePairs,
    ScoredRewrite,
    Turn,
    TurnResult,
    as_retriever,
    best_and_worst,
    build_rewrite_pairs,
    clean_rewrite,
    dedupe_candidates,
    drop_smallest_gaps,
    generate_candidates,
    read_turns,
    rewrite_prompt,
    summarize,
)

from grogu import Engine, UtilityScorer

CORPUS = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris, France.",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
    "The tower was built from 1887 to 1889 as the entrance to the 1889 World's Fair.",
    "Gustave Eiffel's engineering company designed and built the tower.",
    "Berlin is the capital and largest city of Germany.",
    "Paris is the capital and most populous city of France.",
    "Hamlet is a tragedy written by William Shakespeare around 1600.",
    "Shakespeare was born in Stratford-upon-Avon in 1564.",
    "The Rhine flows through Switzerland, Germany and the Netherlands.",
    "Bread is made from flour, water and yeast.",
    "The strong interaction is one of the four fundamental forces.",
    "Mount Everest is the highest mountain above sea level.",
]
ANSWER_TOKENS = 8


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tiny model is fastest on one thread (and the CPU is shared)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_scorer(tokenizer):
    engine = Engine(testing.tiny_model("llama", seed=0), tokenizer, device="cpu")
    return UtilityScorer(engine, max_new_tokens=ANSWER_TOKENS)


def _pair(i: int, chosen_score: float, rejected_score: float) -> PreferencePair:
    return PreferencePair(i, f"p{i}", f"c{i}", f"r{i}", chosen_score, rejected_score)


# ------------------------------------------------------------------------------ pure pair logic
def test_best_and_worst_hand_values():
    assert best_and_worst([-2.0, -1.5, -3.0, -1.25]) == (3, 2)
    assert best_and_worst([-2.0, -1.0, -2.0, -1.0]) == (1, 0)  # ties: the earlier candidate
    assert best_and_worst([-1.0]) is None  # one candidate: no pair
    assert best_and_worst([-1.5, -1.5, -1.5]) is None  # no gap: no pair
    assert best_and_worst([]) is None


def test_drop_smallest_gaps_hand_values():
    # gaps 0.75, 0.125, 1.5, 0.25 -> drop the two smallest (pairs 1 and 3); order kept
    pairs = [_pair(0, -1.0, -1.75), _pair(1, -2.0, -2.125), _pair(2, -0.5, -2.0), _pair(3, -1.0, -1.25)]
    assert [p.gap for p in pairs] == [0.75, 0.125, 1.5, 0.25]
    kept, dropped = drop_smallest_gaps(pairs)
    assert [p.turn_index for p in kept] == [0, 2]
    assert [p.turn_index for p in dropped] == [1, 3]
    # odd count: floor(0.5 * 5) = 2 dropped; equal gaps: the earlier pair goes first
    pairs = [_pair(0, 0.0, -0.5), _pair(1, 0.0, -0.25), _pair(2, 0.0, -0.25), _pair(3, 0.0, -2.0), _pair(4, 0.0, -1.0)]
    kept, dropped = drop_smallest_gaps(pairs, 0.5)
    assert [p.turn_index for p in dropped] == [1, 2] and [p.turn_index for p in kept] == [0, 3, 4]
    kept, dropped = drop_smallest_gaps(pairs, 0.2)  # configurable ratio: 1 of 5
    assert [p.turn_index for p in dropped] == [1]
    assert drop_smallest_gaps(pairs, 0.0) == (pairs, [])
    assert drop_smallest_gaps([], 0.5) == ([], [])
    with pytest.raises(ValueError, match="drop_ratio"):
        drop_smallest_gaps(pairs, 1.0)


def _result(question: str, rewrites: list[tuple[str, float]]) -> TurnResult:
    turn = Turn(question=question)
    return TurnResult(
        turn=turn,
        prompt=rewrite_prompt(turn),
        n_raw_candidates=len(rewrites),
        generated=True,
        rewrites=[
            ScoredRewrite(rewrite=r, score=s, passages=[], answer="", is_original=r == question) for r, s in rewrites
        ],
    )


def test_turn_results_to_records_and_summary(tmp_path):
    results = [
        _result("q0", [("q0", -2.0), ("a", -1.0), ("b", -2.5)]),  # pair (a, b), gap 1.5
        _result("q1", [("q1", -1.0)]),  # all candidates identical -> single
        _result("q2", [("q2", -1.0), ("c", -1.0)]),  # equal scores -> zero gap
        _result("q3", [("q3", -1.0), ("d", -1.25)]),  # pair (q3, d), gap 0.25 -> dropped
    ]
    assert [r.no_pair_reason for r in results] == [None, "single_candidate", "zero_gap", None]
    pairs = [p for i, r in enumerate(results) if (p := r.pair(i)) is not None]
    kept, dropped = drop_smallest_gaps(pairs, 0.5)
    out = RewritePairs(results=results, kept=kept, dropped=dropped, summary=summarize(results, kept, dropped, 0.5))
    assert out.sft_records() == [
        {"prompt": rewrite_prompt(Turn(question=q)), "completion": c}
        for q, c in (("q0", "a"), ("q1", "q1"), ("q2", "q2"), ("q3", "q3"))
    ]
    assert out.dpo_records() == [{"prompt": rewrite_prompt(Turn(question="q0")), "chosen": "a", "rejected": "b"}]
    s = out.summary
    assert s["turns"] == 4 and s["sft_records"] == 4 and s["sft_chose_original_question"] == 3
    assert s["turns_without_pair"] == {"single_candidate": 1, "zero_gap": 1}
    assert (s["pairs_before_drop"], s["pairs_dropped_small_gap"], s["pairs_kept"]) == (2, 1, 1)
    assert s["gap_kept"]["min"] == 1.5 and s["gap_dropped"]["max"] == 0.25
    paths = out.write(str(tmp_path))
    scores = [json.loads(line) for line in open(paths["scores.jsonl"])]
    assert [r["pair"] for r in scores] == ["kept", "single_candidate", "zero_gap", "dropped"]
    assert [json.loads(line) for line in open(paths["dpo.jsonl"])] == out.dpo_records()
    assert json.load(open(paths["summary.json"]))["turns_without_pair"] == {"single_candidate": 1, "zero_gap": 1}


def test_files_load_as_trl_expects(tmp_path):
    datasets = pytest.importorskip("datasets")
    trl_data = pytest.importorskip("trl.data_utils")
    results = [_result("q0", [("q0", -2.0), ("a", -1.0)]), _result("q1", [("q1", -1.0), ("b", -3.0)])]
    pairs = [p for i, r in enumerate(results) if (p := r.pair(i)) is not None]
    out = RewritePairs(results=results, kept=pairs, dropped=[], summary=summarize(results, pairs, [], 0.0))
    paths = out.write(str(tmp_path))
    dpo = datasets.load_dataset("json", data_files=paths["dpo.jsonl"], split="train")
    assert dpo.column_names == ["prompt", "chosen", "rejected"] and (dpo[0]["chosen"], dpo[1]["rejected"]) == ("a", "b")
    assert not trl_data.is_conversational(dpo[0])  # TRL's "standard" preference format
    sft = datasets.load_dataset("json", data_files=paths["sft.jsonl"], split="train")
    assert sft.column_names == ["prompt", "completion"] and sft["completion"] == ["a", "q1"]


# ------------------------------------------------------------------------------ turns and candidates
def test_turn_validation_and_reading(tmp_path):
    assert Turn(question=" Who? ", history=[]).question == "Who?"  # empty history is fine
    with pytest.raises(ValueError, match="question is empty"):
        Turn(question="   ")
    with pytest.raises(TypeError, match="history"):
        Turn(question="q", history="not a list")
    path = tmp_path / "turns.jsonl"
    path.write_text(json.dumps({"question": "q1", "history": ["h"]}) + "\n\n" + json.dumps({"question": ""}) + "\n")
    with pytest.raises(ValueError, match=r"turns.jsonl:3: .*empty"):
        read_turns(str(path))
    path.write_text(
        json.dumps({"question": "q1", "history": ["h", {"role": "assistant", "content": "a"}], "candidates": ["c"]})
        + "\n"
    )
    (turn,) = read_turns(str(path))
    assert turn.id == 1 and turn.candidates == ["c"]
    prompt = rewrite_prompt(turn)
    assert "h\nAssistant: a" in prompt and prompt.endswith("Last question: q1")
    assert "(no earlier turns)" in rewrite_prompt(Turn(question="q"))


def test_clean_and_dedupe_candidates():
    assert clean_rewrite('Rewritten question: "Who built the Eiffel Tower?"\nmore') == "Who built the Eiffel Tower?"
    assert clean_rewrite("\n\n  **Query:** when was it built  ") == "when was it built"
    assert clean_rewrite("   ") == ""
    assert dedupe_candidates("Who?", ["who?", "  Who? ", "", "Why?", "why?"]) == ["Who?", "Why?"]
    assert dedupe_candidates("Who?", ["Why?"], include_original=False) == ["Why?"]


def test_generate_candidates_batched_and_seeded(tiny_scorer):
    turns = [Turn(question="When was it built?", history=["Tell me about the Eiffel Tower."]), Turn(question="Who?")]
    a = generate_candidates(tiny_scorer.target, turns, 3, max_new_tokens=6, seed=1)
    b = generate_candidates(tiny_scorer.target, turns, 3, max_new_tokens=6, seed=1)
    assert a == b and [len(c) for c in a] == [3, 3]
    with pytest.raises(ValueError, match="positive"):
        generate_candidates(tiny_scorer.target, turns, 0)


# ------------------------------------------------------------------------------ retrievers
def test_bm25_ranks_the_passage_with_the_query_words_first():
    bm25 = BM25Retriever(CORPUS)
    assert bm25.retrieve("quantum chromodynamics quarks", 3)[0] == CORPUS[1]
    assert bm25.retrieve("Who wrote Hamlet?", 1) == [CORPUS[6]]
    assert len(bm25.retrieve("anything", 100)) == len(CORPUS)
    with pytest.raises(ValueError, match="corpus is empty"):
        BM25Retriever([])
    with pytest.raises(ValueError, match="empty"):
        BM25Retriever(["", "  "])
    with pytest.raises(ValueError, match="k must be"):
        bm25.retrieve("q", 0)


def test_dense_retriever():
    try:
        dense = DenseRetriever(CORPUS)  # the packaged all-MiniLM-L6-v2
    except ImportError as exc:
        pytest.skip(str(exc))
    assert dense.retrieve("What does quantum chromodynamics describe?", 2)[0] == CORPUS[1]
    assert dense.retrieve_batch(["Who wrote Hamlet?", "highest mountain"], 1) == [[CORPUS[6]], [CORPUS[11]]]


def _bag_of_words(text: str, dim: int = 16384) -> list[float]:
    """A tiny deterministic embedding: hashed word counts (no collisions among the test words), L2-normalised."""
    vec = [0.0] * dim
    for w in re.findall(r"\w+", text.lower()):
        vec[zlib.crc32(w.encode()) % dim] += 1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def test_llamaindex_retriever_through_the_adapter(tiny_scorer):
    pytest.importorskip("llama_index.core")
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding

    class BagOfWords(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return _bag_of_words(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return _bag_of_words(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return _bag_of_words(text)

    index = VectorStoreIndex.from_documents([Document(text=t) for t in CORPUS], embed_model=BagOfWords())
    retriever = as_retriever(index.as_retriever(similarity_top_k=4))
    assert isinstance(retriever, LlamaIndexRetriever)
    top = retriever.retrieve("quantum chromodynamics quarks gluons", 3)
    assert top[0] == CORPUS[1] and len(top) == 3
    out = build_rewrite_pairs(
        [{"question": "Who wrote Hamlet?", "candidates": ["Hamlet author", "quantum"]}],
        index.as_retriever(similarity_top_k=3),
        tiny_scorer,
        k=3,
    )
    assert out.summary["settings"]["retriever"] == "llama_index"
    assert out.results[0].rewrites[0].passages[0] == CORPUS[6]


def test_langchain_retriever_through_the_adapter(tiny_scorer):
    pytest.importorskip("langchain_core")
    from langchain_core.embeddings import Embeddings
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.vectorstores import InMemoryVectorStore

    class BagOfWords(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [_bag_of_words(t) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return _bag_of_words(text)

    base = InMemoryVectorStore.from_texts(CORPUS, BagOfWords()).as_retriever(search_kwargs={"k": 4})
    assert isinstance(base, BaseRetriever)
    retriever = as_retriever(base)
    assert isinstance(retriever, LangChainRetriever)
    assert retriever.retrieve("Who wrote Hamlet?", 2)[0] == CORPUS[6]
    out = build_rewrite_pairs(
        [{"question": "Capital of Germany?", "candidates": ["Berlin capital Germany"]}], base, tiny_scorer, k=3
    )
    assert out.summary["settings"]["retriever"] == "langchain"
    assert all(len(r.passages) == 3 for r in out.results[0].rewrites)


def test_as_retriever_rejects_other_objects():
    with pytest.raises(TypeError, match="cannot use"):
        as_retriever(object())


# ------------------------------------------------------------------------------ end to end (tiny model)
def test_end_to_end_matches_one_rewrite_at_a_time(tiny_scorer):
    retriever = BM25Retriever(CORPUS)
    turns = [
        Turn(question="When was it built?", history=["Tell me about the Eiffel Tower."], id="t0"),
        Turn(
            question="And who wrote it?",
            history=[{"role": "user", "content": "What is Hamlet?"}, {"role": "assistant", "content": "A tragedy."}],
            id="t1",
        ),
        Turn(
            question="What about Germany?",
            history=["What is the capital of France?"],
            id="t2",
            candidates=["What is the capital of Germany?", "Germany capital city", "what about germany?"],
        ),
        Turn(question="Tell me more.", id="t3", candidates=["tell me more.", "Tell me  more."]),  # all identical
    ]
    out = build_rewrite_pairs(turns, retriever, tiny_scorer, n_candidates=4, rewrite_max_new_tokens=10, k=10, seed=3)
    assert len(out.results) == 4 and len(out.sft_records()) == 4
    s = out.summary
    assert s["turns_generated_candidates"] == 2 and s["raw_candidates_generated"] == 8
    assert s["turns_without_pair"]["single_candidate"] == 1
    assert s["pairs_before_drop"] + sum(s["turns_without_pair"].values()) == 4
    assert s["pairs_kept"] == s["pairs_before_drop"] - math.floor(0.5 * s["pairs_before_drop"])

    for turn, res, sft in zip(turns, out.results, out.sft_records()):
        assert res.rewrites[0].rewrite == turn.question and res.rewrites[0].is_original
        assert sft["prompt"] == rewrite_prompt(turn)
        # independent check: each rewrite's top-10 scored alone as one context for the original question
        independent = []
        for r in res.rewrites:
            passages = retriever.retrieve(r.rewrite, 10)
            assert r.passages == passages
            independent.append(tiny_scorer.score_context(turn.question, passages).score)
        assert [r.score for r in res.rewrites] == pytest.approx(independent, abs=1e-4)
        best = max(range(len(independent)), key=lambda i: (independent[i], -i))
        assert sft["completion"] == res.rewrites[best].rewrite
    for p in out.kept:
        scores = [r.score for r in out.results[p.turn_index].rewrites]
        assert (p.chosen_score, p.rejected_score) == (max(scores), min(scores))
    assert min(p.gap for p in out.kept) >= max((p.gap for p in out.dropped), default=0.0)


def test_bad_input_to_build(tiny_scorer):
    with pytest.raises(ValueError, match="empty"):
        build_rewrite_pairs([{"question": ""}], BM25Retriever(CORPUS), tiny_scorer)
    with pytest.raises(ValueError, match="corpus is empty"):
        build_rewrite_pairs([{"question": "q"}], BM25Retriever([]), tiny_scorer)
    with pytest.raises(ValueError, match="no non-empty candidate"):
        build_rewrite_pairs(
            [{"question": "q", "candidates": [""]}], BM25Retriever(CORPUS), tiny_scorer, include_original=False
        )


# ------------------------------------------------------------------------------ CLI and training
@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, tokenizer):
    path = tmp_path_factory.mktemp("tiny-llama")
    testing.tiny_model("llama", seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def pairs_dir(tmp_path_factory, tiny_dir):
    from grogu_research import cli

    root = tmp_path_factory.mktemp("rewrite")
    turns = [
        {"question": "When was it built?", "history": ["Tell me about the Eiffel Tower."]},
        {"question": "Who wrote it?", "history": ["What is Hamlet?"]},
        {"question": "Capital of Germany?", "candidates": ["Berlin Germany capital", "bread recipe"]},
        {"question": "Highest mountain?", "candidates": ["Mount Everest", "strong interaction"]},
    ]
    (root / "turns.jsonl").write_text("".join(json.dumps(t) + "\n" for t in turns))
    (root / "corpus.jsonl").write_text("".join(json.dumps(p) + "\n" for p in CORPUS))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = cli.main(
            [
                "rewrite-pairs",
                "--turns",
                str(root / "turns.jsonl"),
                "--corpus",
                str(root / "corpus.jsonl"),
                "--out",
                str(root / "out"),
                "--model",
                tiny_dir,
                "--device",
                "cpu",
                "--n-candidates",
                "3",
                "--max-new-tokens",
                str(ANSWER_TOKENS),
                "--rewrite-max-new-tokens",
                "8",
                "-k",
                "4",
            ]
        )
    assert rc == 0
    return str(root / "out")


def test_cli_rewrite_pairs(pairs_dir):
    summary = json.load(open(os.path.join(pairs_dir, "summary.json")))
    assert summary["turns"] == 4 and summary["settings"]["k"] == 4 and summary["settings"]["retriever"] == "bm25"
    sft = [json.loads(line) for line in open(os.path.join(pairs_dir, "sft.jsonl"))]
    dpo = [json.loads(line) for line in open(os.path.join(pairs_dir, "dpo.jsonl"))]
    assert len(sft) == 4 and all(set(r) == {"prompt", "completion"} for r in sft)
    assert len(dpo) == summary["pairs_kept"] >= 1 and all(set(r) == {"prompt", "chosen", "rejected"} for r in dpo)


def test_train_rewriter_needs_the_train_extra(monkeypatch):
    from grogu_research.rewrite import train as train_rewriter

    monkeypatch.setitem(sys.modules, "trl", None)
    with pytest.raises(ImportError, match=r'pip install -e "research\[train\]"'):
        train_rewriter.require_trl()


@pytest.mark.slow
def test_train_rewriter_end_to_end(pairs_dir, tiny_dir, tmp_path):
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    from grogu_research import cli

    out = tmp_path / "rewriter"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = cli.main(
            [
                "train-rewriter",
                "--pairs",
                pairs_dir,
                "--model",
                tiny_dir,
                "--output",
                str(out),
                "--sft-steps",
                "2",
                "--dpo-steps",
                "2",
                "--batch-size",
                "2",
                "--device",
                "cpu",
                "--max-length",
                "512",
            ]
        )
    assert rc == 0
    log = json.load(open(out / "train_log.json"))
    assert log["chat_format"] and log["sft_steps"] == 2 and log["dpo_steps"] == 2
    assert all(math.isfinite(x) for x in log["sft_loss"] + log["dpo_loss"])
    # the DPO reference is the SFT model itself: at the first step policy == reference, loss = ln 2
    assert log["dpo_loss"][0] == pytest.approx(math.log(2), abs=1e-3)
    assert os.path.exists(out / "final" / "config.json")


def test_modules_are_light_to_import():
    code = (
        "import sys, grogu_research.rewrite, grogu_research.rewrite.train; "
        "print([m for m in ('trl', 'datasets', 'sentence_transformers', 'bm25s') if m in sys.modules])"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    )
