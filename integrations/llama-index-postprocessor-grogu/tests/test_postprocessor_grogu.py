"""The base-class check LlamaIndex's integration packages carry (``test_class``): GroguRerank is a
node postprocessor, so query engines, ``node_postprocessors=[...]`` and LlamaHub take it as one."""

from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.postprocessor.grogu import GroguRerank


def test_class():
    names_of_base_classes = [b.__name__ for b in GroguRerank.__mro__]
    assert BaseNodePostprocessor.__name__ in names_of_base_classes
    assert issubclass(GroguRerank, BaseNodePostprocessor)
    assert GroguRerank.class_name() == "GroguRerank"
