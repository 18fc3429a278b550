"""One background event loop per process, for grogu's HTTP clients, and sync methods made from async ones.

An ``httpx.AsyncClient`` belongs to the event loop it first ran on. So every request of every client runs
on one event loop, in a daemon thread of this process (:func:`background_loop`). Sync code reaches it with
:func:`run`; async code on any other loop with :func:`call`. A forked child starts its own loop.
:func:`blocking` makes the sync twin of an async method: written once, the sync one waits for it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import threading
from typing import Any, Callable, Coroutine, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_LOCK = threading.Lock()
_LOOP: dict[str, Any] = {"loop": None, "pid": None, "thread": None}


def background_loop() -> asyncio.AbstractEventLoop:
    """The event loop every request runs on: started on first use in a daemon thread, once per process."""
    with _LOCK:
        loop = _LOOP["loop"]
        if loop is None or _LOOP["pid"] != os.getpid() or loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="grogu-http", daemon=True)
            thread.start()
            _LOOP.update(loop=loop, pid=os.getpid(), thread=thread)
        return loop


def on_background_loop() -> bool:
    """True in the background loop's own thread."""
    return _LOOP["thread"] is threading.current_thread() and _LOOP["pid"] == os.getpid()


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine on the background loop and wait for its result, from sync code (also from inside
    another running event loop, whose thread waits)."""
    if on_background_loop():
        coro.close()
        raise RuntimeError("a sync call inside grogu's own event loop would wait on itself; await its async twin")
    return asyncio.run_coroutine_threadsafe(coro, background_loop()).result()


async def call(coro: Coroutine[Any, Any, Any]) -> Any:
    """Await a coroutine on the background loop from async code on any loop."""
    if on_background_loop():
        return await coro
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, background_loop()))


def close_soon(client: Any, loop: asyncio.AbstractEventLoop) -> None:
    """Close a dropped HTTP client on its loop, when that loop still runs (a finalizer's work)."""
    if not loop.is_closed() and loop.is_running():
        loop.call_soon_threadsafe(lambda: loop.create_task(client.aclose()))


def blocking(method: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """The sync twin of the async ``method`` (``score = blocking(ascore)``): the same arguments and
    signature; it runs ``method`` on the background loop and waits. Its name drops the leading ``a``."""
    if not inspect.iscoroutinefunction(method):
        raise TypeError(f"blocking() takes an async function, got {method!r}")

    @functools.wraps(method)
    def twin(*args: P.args, **kwargs: P.kwargs) -> T:
        return run(method(*args, **kwargs))

    name = method.__name__.removeprefix("a")
    twin.__name__, twin.__qualname__ = name, method.__qualname__.rsplit(".", 1)[0] + "." + name
    twin.__doc__ = f"Sync :meth:`{method.__name__}` (the same arguments; waits for its result)."
    return twin


__all__ = ["background_loop", "on_background_loop", "run", "call", "close_soon", "blocking"]
