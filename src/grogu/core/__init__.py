"""The core layer: what every other layer shares, with no model code.

Results (:mod:`.results`), prompt rendering (:mod:`.prompts`), input checks (:mod:`.checks`), the target
protocol (:mod:`.target`) and the token statistics a target returns (:mod:`.types`: ``Generation``,
``TokenStats``), file formats (:mod:`.files`), optional extras (:mod:`.extras`), the adapters that integrations
give for their frameworks (:mod:`.frameworks`) and the version. It imports no other layer of grogu, and no
integration.
"""
