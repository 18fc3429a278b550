"""Every route of a running ``grogu serve`` fuzzed from its own OpenAPI schema, with schemathesis.

:func:`fuzz_routes` reads ``/openapi.json``, has schemathesis generate ``examples`` requests for each route
(valid and not; hypothesis, generation phase only) and sends them. A request fails the check when its
status is 500 or more, when it takes longer than ``budget_s``, when an error body is not the
documented ``{"detail", "message", "error"}`` (``detail`` a string, ``message`` the same), or when a 200
answer does not fit the route's documented answer (the wire schema's response model; schemathesis's
``response_schema_conformance``). Used by
``tests/test_serve.py`` and ``benchmarks/fuzz_routes.py``.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field


@dataclass
class FuzzOutcome:
    """statuses: route label -> status -> count; slowest: route label -> the longest request (s);
    failures: one dict per request that failed the check (route, status, seconds, body's start); misfits:
    why each 200 answer that failed the schema check did not fit."""

    statuses: dict = field(default_factory=lambda: collections.defaultdict(collections.Counter))
    slowest: dict = field(default_factory=lambda: collections.defaultdict(float))
    failures: list = field(default_factory=list)
    misfits: list = field(default_factory=list)  # 200 answers that did not fit their documented schema

    @property
    def requests(self) -> int:
        return sum(sum(c.values()) for c in self.statuses.values())

    def count(self, status: int) -> int:
        return sum(c[status] for c in self.statuses.values())


def error_shape_ok(body: dict) -> bool:
    """The service's documented error body: ``detail`` a string, ``message`` the same, and ``error``."""
    return isinstance(body.get("detail"), str) and body.get("message") == body["detail"] and bool(body.get("error"))


def fuzz_routes(
    url: str, headers: dict, examples: int, budget_s: float = 30.0, derandomize: bool = False
) -> FuzzOutcome:
    """Fuzz every route of the service at ``url`` (see the module docstring). ``derandomize``: the same
    requests on every run (hypothesis's fixed seed), as a CI check wants; otherwise new ones each run. A
    request over ``budget_s`` fails; the client waits twice that before it gives up."""
    import httpx
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis.core.failures import FailureGroup
    from schemathesis.specs.openapi.checks import response_schema_conformance

    schema = schemathesis.openapi.from_dict(httpx.get(f"{url}/openapi.json", timeout=30).json())
    out = FuzzOutcome()
    for operation in schema.get_all_operations():
        op = operation.ok()

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=derandomize,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=op.as_strategy())
        def call(case):
            start = time.perf_counter()
            response = case.call(base_url=url, headers=headers, timeout=2 * budget_s)
            seconds = time.perf_counter() - start
            out.statuses[op.label][response.status_code] += 1
            out.slowest[op.label] = max(out.slowest[op.label], seconds)
            bad_shape = response.status_code >= 400 and not error_shape_ok(response.json())
            if response.status_code == 200:
                try:
                    case.validate_response(response, checks=[response_schema_conformance])
                except (FailureGroup, Exception) as exc:  # noqa: BLE001 - a misfit, as schemathesis reports it
                    bad_shape = True
                    out.misfits.append(f"{op.label}: {str(exc)[:300]}")
            if response.status_code >= 500 or seconds > budget_s or bad_shape:
                out.failures.append(
                    {"route": op.label, "status": response.status_code, "seconds": seconds, "body": response.text[:200]}
                )

        call()
    return out
