"""The engine's plain-logic parts, without a model: configuration, batch planning, the prefix tree and
prompt-lookup drafting."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import re

import pytest
import torch

from grogu.runtime.engine import Engine, EngineConfig, PromptLookup
from grogu.runtime.engine.config import DEVICE_DEFAULTS, Configured, engine_config
from grogu.runtime.engine.planning import plan_batches, split_unpadded
from grogu.runtime.engine.prefixtree import common_prefix, prefix_groups

CPU = EngineConfig().resolved("cpu")


def _limits(config: EngineConfig = CPU) -> dict:
    """plan_batches' limits under a configuration."""
    return dict(
        max_batch_size=config.max_batch_size,
        max_batch_tokens=config.max_batch_tokens,
        min_batch_fill=config.min_batch_fill,
    )


# ---------------------------------------------------------------------------------------- configuration
def test_defaults_per_device():
    assert dataclasses.asdict(CPU) == dict(
        max_batch_size=32,
        max_batch_tokens=16384,
        logits_budget_mb=256,
        min_shared_prefix=8,
        retain_prefix_tokens=0,
        group_overhead_tokens=32,
        min_batch_fill=0.5,
        prompt_lookup=0,
        prompt_lookup_ngram=3,
        prompt_lookup_min_ngram=2,
        entropy_chunk_rows=64,
        cuda_graphs=False,
        cpu_linear="auto",
        cpu_linear_pack_limit_mb=2048,
    )
    for device in ("cuda", "cuda:1", torch.device("cuda", 0)):
        gpu = EngineConfig().resolved(device)
        assert (gpu.max_batch_size, gpu.max_batch_tokens, gpu.group_overhead_tokens, gpu.prompt_lookup) == (
            64,
            65536,
            256,
            0,
        )
        assert gpu.cuda_graphs is True
        assert dataclasses.replace(gpu, **DEVICE_DEFAULTS["cpu"]) == CPU  # nothing else depends on the device
    assert EngineConfig().resolved(torch.device("cpu")) == CPU
    # settings given are kept; resolving twice changes nothing
    mine = EngineConfig(max_batch_size=5, prompt_lookup=3, cuda_graphs=False).resolved("cuda")
    assert (mine.max_batch_size, mine.prompt_lookup, mine.max_batch_tokens, mine.cuda_graphs) == (5, 3, 65536, False)
    assert mine.resolved("cpu") == mine
    assert EngineConfig().max_batch_size is None and hash(CPU) == hash(EngineConfig().resolved("cpu"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        CPU.max_batch_size = 3


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("max_batch_size", 0, "max_batch_size must be a positive int, got 0"),
        ("max_batch_size", True, "max_batch_size must be a positive int, got True"),
        ("max_batch_tokens", 2.0, "max_batch_tokens must be a positive int, got 2.0"),
        ("logits_budget_mb", 0, "logits_budget_mb must be a positive int, got 0"),
        ("min_shared_prefix", -1, "min_shared_prefix must be an int >= 0, got -1"),
        ("prompt_lookup", -1, "prompt_lookup must be an int >= 0, got -1"),
        ("prompt_lookup_ngram", 1, "prompt_lookup_ngram must be an int >= 2, got 1"),
        ("prompt_lookup_min_ngram", 0, "prompt_lookup_min_ngram must be an int >= 1, got 0"),
        ("cpu_linear", "fast", "cpu_linear must be one of ('auto', 'onednn', 'default'), got 'fast'"),
        ("group_overhead_tokens", -1, "group_overhead_tokens must be an int >= 0, got -1"),
        ("min_batch_fill", math.nan, "min_batch_fill must be a finite number, got nan"),
        ("min_batch_fill", 1.5, "min_batch_fill must be in [0, 1], got 1.5"),
        ("min_batch_fill", -0.1, "min_batch_fill must be in [0, 1], got -0.1"),
        ("entropy_chunk_rows", 0, "entropy_chunk_rows must be a positive int, got 0"),
        ("cpu_linear_pack_limit_mb", -1, "cpu_linear_pack_limit_mb must be an int >= 0, got -1"),
    ],
)
def test_bad_settings_are_value_errors_naming_the_setting(name, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        EngineConfig(**{name: value})


def test_settings_are_validated_together_and_stored_canonically():
    with pytest.raises(ValueError, match="prompt_lookup_ngram must be an int >= 4, got 3"):
        EngineConfig(prompt_lookup_min_ngram=4)  # the longest n-gram is at least the shortest
    assert EngineConfig(prompt_lookup_min_ngram=1, prompt_lookup_ngram=2).prompt_lookup_min_ngram == 1
    fill = EngineConfig(min_batch_fill=1).min_batch_fill
    assert fill == 1.0 and type(fill) is float
    with pytest.raises(ValueError, match="max_batch_size"):  # assignment goes through validation too
        dataclasses.replace(CPU, max_batch_size=-3)


def test_keyword_settings_or_config_not_both():
    assert engine_config(None) == EngineConfig()
    assert engine_config(None, prompt_lookup=4, max_batch_size=None) == EngineConfig(prompt_lookup=4)
    mine = EngineConfig(min_batch_fill=0.0)
    assert engine_config(mine) is mine
    with pytest.raises(TypeError, match=r"not both \(got config= and prompt_lookup=, cpu_linear=\)"):
        engine_config(mine, prompt_lookup=4, cpu_linear="auto")
    with pytest.raises(TypeError, match="config must be an EngineConfig, got dict"):
        engine_config({"prompt_lookup": 4})
    # the Engine checks its settings before it loads a model: no model is needed to see these errors
    with pytest.raises(TypeError, match="not both"):
        Engine("no-such-model", config=mine, prompt_lookup=0)
    with pytest.raises(ValueError, match="prompt_lookup must be an int >= 0"):
        Engine("no-such-model", prompt_lookup=-1)
    with pytest.raises(ValueError, match="cpu_linear must be one of"):
        Engine("no-such-model", config=None, cpu_linear="fast")


class _Part(Configured):
    """The engine's configured part on its own."""

    def __init__(self, device: str, config: EngineConfig) -> None:
        self.device = torch.device(device)
        self.config = config


def test_engine_settings_read_and_assigned_through_config():
    part = _Part("cpu", EngineConfig(prompt_lookup=2))
    assert part.config == dataclasses.replace(CPU, prompt_lookup=2)
    assert part.logits_budget_bytes == 256 * 2**20
    part.config = dataclasses.replace(part.config, max_batch_size=6)  # e.g. the out-of-memory back-off
    assert (part.config.max_batch_size, part.config.prompt_lookup) == (6, 2)
    part.config = dataclasses.replace(part.config, max_batch_size=None)  # back to the device's default
    assert part.config.max_batch_size == 32
    with pytest.raises(ValueError, match="min_batch_fill must be in"):
        part.config = dataclasses.replace(part.config, min_batch_fill=2)
    assert part.config.min_batch_fill == 0.5
    with pytest.raises(TypeError, match="config must be an EngineConfig"):
        part.config = {"max_batch_size": 3}
    assert _Part("cuda:0", EngineConfig()).config.group_overhead_tokens == 256
    # a setting is not an attribute of the engine, and assigning one there would change nothing
    for field in dataclasses.fields(EngineConfig):
        assert not hasattr(part, field.name), field.name
        with pytest.raises(AttributeError, match=f"{field.name} is a setting of _Part.config"):
            setattr(part, field.name, getattr(part.config, field.name))
    assert part.config.max_batch_size == 32


# ---------------------------------------------------------------------------------------- batch planning
def test_short_rows_are_not_padded_to_a_much_wider_batch():
    # rows shorter than min_batch_fill x the batch's widest row start a new batch
    lengths = [100, 90, 60, 49, 30, 20]
    assert plan_batches(lengths, **_limits()) == [[0, 1, 2], [3, 4], [5]]
    assert plan_batches(lengths, **_limits(dataclasses.replace(CPU, min_batch_fill=0.0))) == [[0, 1, 2, 3, 4, 5]]


def test_plan_respects_size_token_and_logits_budgets():
    lengths = [10, 30, 20, 30, 25]
    assert plan_batches(lengths, **_limits()) == [[1, 3, 4, 2], [0]]  # longest first; 10 < 0.5 x 30
    assert plan_batches(lengths, **{**_limits(), "max_batch_size": 2}) == [[1, 3], [4, 2], [0]]
    assert plan_batches(lengths, **{**_limits(), "max_batch_tokens": 75}) == [[1, 3], [4, 2], [0]]
    # logits: rows x the most logit positions x bytes per position, within the budget
    budget = dict(logit_rows=[1, 5, 1, 1, 1], logit_bytes=100, logits_budget_bytes=1500)
    assert plan_batches(lengths, **_limits(), **budget) == [[1, 3, 4], [2, 0]]
    assert plan_batches(lengths, **_limits(), logit_rows=[5, 1, 1, 3, 5]) == plan_batches(lengths, **_limits())
    assert plan_batches([], **_limits()) == []


def test_logit_plan_is_in_token_order_and_not_length_bucketed():
    prompts = [[5, 9, 9, 9, 9, 9], [5, 1], [5, 9, 9, 9, 9, 9, 9, 9], [4]]
    lengths = [len(p) + 2 for p in prompts]
    # teacher forcing: token order ([4] < [5, 1] < [5, 9, ...] < [5, 9, ..., 9]) in one batch
    assert plan_batches(lengths, logit_rows=[2] * 4, prompts=prompts, **_limits()) == [[3, 1, 0, 2]]
    # decoding keeps the length buckets: short rows are not padded to the widest
    assert plan_batches(lengths, prompts=prompts, **_limits()) == [[2, 0], [1, 3]]
    # rows sharing a prompt share a batch, longest prompt first
    shared = [[7, 7, 7], [1, 2, 3, 4], [7, 7, 7], [1, 2, 3, 4]]
    assert plan_batches([5, 6, 5, 6], prompts=shared, **_limits()) == [[1, 3, 0, 2]]


def test_split_unpadded():
    assert split_unpadded([[0, 1, 2, 3], [4]], [5, 3, 5, 4, 9]) == [[0, 2], [1], [3], [4]]
    assert split_unpadded([[2, 0]], [4, 7, 4]) == [[2, 0]]
    assert split_unpadded([], []) == []


# ---------------------------------------------------------------------------------------- prefix tree
def test_common_prefix():
    assert common_prefix([], []) == 0
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2 == common_prefix((1, 2, 3), [1, 2])
    assert common_prefix([7], [8]) == 0
    assert common_prefix([1, 2, 3], [1, 2, 3]) == 3


def _groups(rows, limits, config=CPU):
    return prefix_groups(
        rows, limits, min_shared_prefix=config.min_shared_prefix, group_overhead_tokens=config.group_overhead_tokens
    )


def test_prefix_groups_minimise_encoded_tokens():
    a, b = list(range(100, 140)), list(range(200, 240))
    rows = [a + [1, 2], b + [3], a + [4], b + [5, 6, 7]]
    assert sorted(_groups(rows, [len(r) - 1 for r in rows])) == [([0, 2], 40), ([1, 3], 40)]  # each prefix once
    # a reuse limit is respected: row 2 may reuse only 10 tokens, so the prefix is not worth a group
    assert all(p <= 10 for g, p in _groups(rows, [41, 39, 10, 42]) if 2 in g)
    # nothing shared: one padded group (a group costs group_overhead_tokens), in token order
    assert _groups([[3, 4], [1, 2]], [1, 1]) == [([1, 0], 0)]
    # with groups free, rows of very different lengths are not padded together
    free = dataclasses.replace(CPU, group_overhead_tokens=0)
    assert _groups([[1] * 30, [2, 3]], [29, 1], free) == [([0], 29), ([1], 1)]
    assert _groups([[5, 6]], [1]) == [([0], 1)]


def _split_cost(seqs, limits, runs, min_shared_prefix, overhead):
    """(tokens computed, each run's prefix) of a split of the rows into runs (lists of row indices, in
    order): a run shares the prefix common to its rows (within their limits; a run of several rows only
    where it saves at least min_shared_prefix tokens) and pads its rows to its longest; the part of its
    prefix that the run before shares costs nothing; each run also costs ``overhead``."""
    total, prefixes, before = 0, [], None
    for run in runs:
        p = max(0, min(min(limits[i], len(seqs[i]), common_prefix(seqs[run[0]], seqs[i])) for i in run))
        if len(run) > 1 and (len(run) - 1) * p < min_shared_prefix:
            p = 0
        reuse = 0 if before is None else min(prefixes[-1], common_prefix(seqs[before[-1]], seqs[run[0]]))
        total += p - min(p, reuse) + len(run) * (max(len(seqs[i]) for i in run) - p) + overhead
        prefixes.append(p)
        before = run
    return total, prefixes


def test_prefix_groups_cost_is_the_minimum_over_all_splits():
    rnd = random.Random(0)
    for _ in range(300):
        n = rnd.randint(1, 7)
        stem = [rnd.randint(1, 3) for _ in range(6)]
        seqs = [stem[: rnd.randint(0, 6)] + [rnd.randint(1, 3) for _ in range(rnd.randint(1, 4))] for _ in range(n)]
        limits = [len(s) - rnd.randint(0, 2) for s in seqs]
        msp, overhead = rnd.choice([0, 2, 8]), rnd.choice([0, 1, 5, 32])
        groups = prefix_groups(seqs, limits, min_shared_prefix=msp, group_overhead_tokens=overhead)
        order = sorted(range(n), key=lambda i: seqs[i])
        runs = [g for g, _ in groups]
        assert [i for g in runs for i in g] == order  # contiguous runs of the token order, every row once
        got, prefixes = _split_cost(seqs, limits, runs, msp, overhead)
        assert [p for _, p in groups] == prefixes
        best = min(
            _split_cost(seqs, limits, [order[a:b] for a, b in zip((0, *cuts), (*cuts, n))], msp, overhead)[0]
            for k in range(n)
            for cuts in itertools.combinations(range(1, n), k)
        )
        assert got == best, (seqs, limits, msp, overhead)


# ---------------------------------------------------------------------------------------- drafting
def test_prompt_lookup_draft():
    lookup = PromptLookup(max_draft=3, max_ngram=3)
    assert lookup.propose([5, 6, 7, 8, 9, 1, 5, 6], 10) == [7, 8, 9]  # latest earlier copy of (5, 6)
    assert lookup.propose([5, 6, 7, 5, 6, 9, 5, 6], 10) == [9, 5, 6]  # the most recent copy wins
    assert lookup.propose([5, 6, 7, 5, 6], 1) == [7]  # budget caps the draft
    assert lookup.propose([5, 6, 7, 5, 6]) == [7, 5, 6]  # no budget: max_draft
    assert lookup.propose([1, 2, 3, 4], 5) == []  # no repeated bigram
    assert lookup.propose([1, 2, 3, 4], 0) == []
    assert lookup.propose([], 5) == [] and lookup.propose([5], 5) == []
    assert PromptLookup(0).propose([5, 6, 7, 5, 6]) == []
    # the longest n-gram matched wins over a later copy of a shorter one
    history = [1, 2, 3, 9, 5, 2, 3, 7, 1, 2, 3]
    assert PromptLookup(3, max_ngram=3).propose(history) == [9, 5, 2]
    assert PromptLookup(3, max_ngram=2).propose(history) == [7, 1, 2]
    assert PromptLookup(2, max_ngram=2, min_ngram=1).propose([4, 8, 1, 4]) == [8, 1]  # 1-grams when asked
    assert PromptLookup(2, max_ngram=2).propose([4, 8, 1, 4]) == []
    with pytest.raises(ValueError, match="max_draft must be an int >= 0"):
        PromptLookup(-1)
    with pytest.raises(ValueError, match="max_ngram must be an int >= 2"):
        PromptLookup(3, max_ngram=1)


def _reference_draft(history, budget, max_ngram, min_ngram):
    """The draft by definition: the latest earlier copy (ending before the last token) of the longest
    matching n-gram, n in [min_ngram, max_ngram]."""
    end = len(history)
    for n in range(max_ngram, min_ngram - 1, -1):
        if n > end - 1:
            continue
        ends = [s for s in range(n - 1, end - 1) if history[s - n + 1 : s + 1] == history[end - n :]]
        if ends:
            return history[max(ends) + 1 : max(ends) + 1 + budget]
    return []


def test_prompt_lookup_equals_its_definition():
    rnd = random.Random(1)
    for _ in range(500):
        history = [rnd.randint(1, 4) for _ in range(rnd.randint(0, 14))]
        max_draft, max_ngram = rnd.randint(0, 5), rnd.randint(2, 4)
        min_ngram = rnd.randint(1, max_ngram)
        budget = rnd.choice([None, 0, 1, 3, 9])
        want = _reference_draft(history, min(max_draft, max_draft if budget is None else budget), max_ngram, min_ngram)
        assert PromptLookup(max_draft, max_ngram, min_ngram).propose(history, budget) == want
