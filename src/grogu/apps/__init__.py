"""The apps layer: what a user runs.

The command line (:mod:`.cli`), the scoring service on Ray Serve (:mod:`.serve`), the retrieval audit
(:mod:`.audit`), and the settings the framework integrations share (:mod:`.integration_settings`). It may
import every other layer; none imports it.
"""
