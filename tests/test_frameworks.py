"""Framework adapters (grogu.core.frameworks): grogu reads LangChain and LlamaIndex objects through the adapter
each integration registers and advertises as an entry point, and imports no integration itself. A missing
integration is an ImportError naming the package; a third party's adapter is found the same way."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

import pytest

from grogu.apps.tune.api import prompt_template
from grogu.core import frameworks
from grogu.core.frameworks import ENTRY_POINT_GROUP, FrameworkAdapter, adapter_for, register_framework
from grogu.core.prompts import template_from_text


def _run(code: str) -> dict:
    """``code`` in a fresh interpreter; it prints one JSON line."""
    out = subprocess.run([sys.executable, "-c", code], check=True, timeout=300, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_each_integration_advertises_the_adapter_it_registers():
    import langchain_grogu
    import llama_index.postprocessor.grogu as llama_grogu

    advertised = {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert {"langchain", "llama_index"} <= set(advertised)
    assert advertised["langchain"].load() is langchain_grogu.framework.FRAMEWORK
    assert advertised["llama_index"].load() is llama_grogu.framework.FRAMEWORK
    registered = frameworks.registered_frameworks()
    assert registered["langchain"] is langchain_grogu.framework.FRAMEWORK
    assert registered["llama_index"] is llama_grogu.framework.FRAMEWORK


def test_objects_find_their_framework_and_others_none():
    from langchain_core.prompts import ChatPromptTemplate
    from llama_index.core.prompts import PromptTemplate as LlamaPrompt

    chat = ChatPromptTemplate.from_messages([("system", "Be brief."), ("human", "{context}\n\nQ: {question}")])
    llama = LlamaPrompt("Context: {context_str}\nQ: {query_str}\nA:")
    assert adapter_for(chat).name == "langchain" and adapter_for(llama).name == "llama_index"
    for other in ("smollm2-135m-instruct", None, 3, template_from_text("{context} {question}")):
        assert adapter_for(other) is None
    # what tune reads, through the adapters
    from_chat = prompt_template(chat)
    assert from_chat.system == "Be brief." and from_chat.grounded == "{context}\n\nQ: {query}"
    assert prompt_template(llama).grounded == "Context: {context}\nQ: {query}\nA:"
    with pytest.raises(TypeError, match="FrameworkAdapter"):
        register_framework(object())


@pytest.mark.slow  # a fresh interpreter
def test_adapters_load_lazily_and_only_the_framework_asked_for():
    """Importing grogu loads no integration; a model name loads none; a LangChain prompt loads LangChain's."""
    found = _run(
        "import sys, json\n"
        "from grogu.apps.tune.api import prompt_template, _engine_and_budget\n"
        "from grogu.core.frameworks import adapter_for\n"
        "seen = []\n"
        "def loaded():\n"
        "    return [m for m in ('langchain_grogu', 'llama_index.postprocessor.grogu') if m in sys.modules]\n"
        "seen.append(loaded())\n"
        "adapter_for('smollm2-135m-instruct', 'LLM')\n"
        "seen.append(loaded())\n"
        "from langchain_core.prompts import ChatPromptTemplate\n"
        "t = prompt_template(ChatPromptTemplate.from_messages([('human', '{context} {question}')]))\n"
        "seen.append(loaded())\n"
        "print(json.dumps({'seen': seen, 'grounded': t.grounded}))\n"
    )
    assert found == {"seen": [[], [], ["langchain_grogu"]], "grounded": "{context} {query}"}


@pytest.mark.slow  # a fresh interpreter
def test_a_missing_integration_names_the_package_to_install():
    """The integrations hidden (as if uninstalled, their entry points left behind): the same errors as before."""
    found = _run(
        "import sys, json\n"
        "sys.modules['langchain_grogu'] = None\n"
        "sys.modules['llama_index.postprocessor.grogu'] = None\n"
        "from langchain_core.prompts import ChatPromptTemplate\n"
        "from langchain_core.language_models.fake_chat_models import FakeListChatModel\n"
        "from llama_index.core.prompts import PromptTemplate\n"
        "from grogu.apps.tune.api import prompt_template, _engine_and_budget\n"
        "errors = []\n"
        "for call in (\n"
        "    lambda: prompt_template(ChatPromptTemplate.from_messages([('human', '{context} {question}')])),\n"
        "    lambda: prompt_template(PromptTemplate('{context_str} {query_str}')),\n"
        "    lambda: _engine_and_budget(FakeListChatModel(responses=['a']), None, None),\n"
        "):\n"
        "    try:\n"
        "        call()\n"
        "    except ImportError as exc:\n"
        "        errors.append(str(exc))\n"
        "print(json.dumps(errors))\n"
    )
    assert found == [
        "a LangChain prompt needs langchain-grogu: pip install langchain-grogu",
        "a LlamaIndex prompt needs llama-index-postprocessor-grogu: pip install llama-index-postprocessor-grogu",
        "a LangChain LLM needs langchain-grogu: pip install langchain-grogu",
    ]


@pytest.fixture
def third_party(tmp_path, monkeypatch):
    """An installed distribution of our own (its metadata on sys.path) that advertises four adapters: one
    that works, one whose dependency is missing, one that is not an adapter, and one whose module is gone."""
    dist = tmp_path / "thirdfw_adapters-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdfw-adapters\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nthirdfw = thirdfw_adapter:ADAPTER\nbrokenfw = brokenfw_adapter:ADAPTER\n"
        "wrongfw = wrongfw_adapter:ADAPTER\ngonefw = gonefw_adapter:ADAPTER\n"
    )
    (tmp_path / "thirdfw_adapter.py").write_text(
        "from grogu.core.frameworks import FrameworkAdapter\n"
        "from grogu.core.prompts import template_from_text\n"
        "ADAPTER = FrameworkAdapter(\n"
        "    name='thirdfw',\n"
        "    owns=lambda obj: type(obj).__module__.startswith('thirdfw'),\n"
        "    prompt_template=lambda prompt, llm: template_from_text(prompt.text + (llm.suffix if llm else '')),\n"
        "    resolve_engine=lambda llm, device, dtype: ('engine of', llm.name),\n"
        "    answer_budget=lambda llm: 12,\n"
        ")\n"
    )
    (tmp_path / "brokenfw_adapter.py").write_text("import a_dependency_that_is_not_installed\n")
    (tmp_path / "wrongfw_adapter.py").write_text("ADAPTER = 'not an adapter'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(frameworks, "_ADVERTISED", None)
    monkeypatch.setattr(frameworks, "_LOADED", set())
    monkeypatch.setattr(frameworks, "_REGISTERED", dict(frameworks._REGISTERED))


def _object_of(module: str, **fields):
    return type("Thing", (), {"__module__": module, **fields})()


def test_a_third_party_adapter_is_found_through_its_entry_point(third_party):
    from grogu.apps.tune.api import _engine_and_budget

    assert adapter_for("a model name") is None and frameworks._LOADED == set()  # nothing loaded for it
    prompt = _object_of("thirdfw.prompts", text="Docs: {context}\nQ: {question}")
    llm = _object_of("thirdfw.llms", name="m", suffix="\nA:")
    template = prompt_template(prompt, llm)
    assert template == template_from_text("Docs: {context}\nQ: {question}\nA:")
    assert frameworks._LOADED == {"thirdfw"}  # only the one asked for
    assert isinstance(frameworks.registered_frameworks()["thirdfw"], FrameworkAdapter)
    assert _engine_and_budget(llm, None, None) == (("engine of", "m"), 12)
    assert prompt_template(prompt, "not its llm") == template_from_text("Docs: {context}\nQ: {question}")


def test_a_broken_advertised_adapter_is_a_clear_error(third_party):
    with pytest.raises(ImportError, match="'brokenfw' .brokenfw_adapter:ADAPTER. failed to load") as err:
        adapter_for(_object_of("brokenfw.prompts"))
    assert isinstance(err.value.__cause__, ModuleNotFoundError)
    with pytest.raises(TypeError, match="'wrongfw' .* is a str, not a grogu FrameworkAdapter"):
        adapter_for(_object_of("wrongfw.prompts"))
    assert adapter_for(_object_of("gonefw.prompts")) is None  # advertised, not installed: no framework known
