"""Handler registry: job handler name → the function that runs it, and how to call it.

Calling convention (one rule): a handler's first parameter is the `JobContext`. If the function
declares any other parameter (or `**kwargs`), the payload — which must then be a JSON object —
is passed as keyword arguments; otherwise it reads `ctx.payload` itself. A payload that does
not fit the signature fails the job without retrying (it will not fit next time either).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from jobyard.domain.errors import ConfigurationError, ValidationFailed
from jobyard.domain.schemas import RetryOverride
from jobyard.worker.context import JobContext

Handler = Callable[..., Any]


@dataclass(frozen=True)
class TaskSpec:
    """One registered handler and the defaults jobs deferred through it get."""

    name: str
    fn: Handler
    queue: str = "default"
    retry: RetryOverride | None = None
    timeout_s: float | None = None
    priority: int = 0
    max_attempts: int | None = None

    # Cached: inspecting the signature on every job was ~6% of a worker's CPU on no-op jobs.
    @functools.cached_property
    def body(self) -> Callable[..., Any]:
        """The function a call of the handler runs: the handler itself, or the `__call__` of a
        handler object (which `inspect.iscoroutinefunction` does not look into)."""
        fn = inspect.unwrap(self.fn)
        return fn if inspect.isroutine(fn) else type(fn).__call__

    @functools.cached_property
    def is_async(self) -> bool:
        # An object whose __call__ is `async def` is a coroutine function too: run in a thread,
        # it would return an unawaited coroutine as its result.
        return inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(self.body)

    @functools.cached_property
    def takes_payload(self) -> bool:
        return _takes_payload(self.fn)

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.fn)

    def arguments(self, ctx: JobContext) -> dict[str, Any]:
        """The keyword arguments besides ctx; ValidationFailed if the payload does not fit."""
        if not self.takes_payload:
            return {}
        payload = ctx.payload
        if not isinstance(payload, dict):
            raise ValidationFailed(
                f"handler {self.name!r} takes keyword arguments, so the payload must be a JSON "
                f"object, not {type(payload).__name__}",
                field="payload",
            )
        try:
            self.signature.bind(ctx, **payload)
        except TypeError as exc:
            raise ValidationFailed(
                f"payload does not fit handler {self.name!r}: {exc}", field="payload"
            ) from None
        return payload


def _takes_payload(fn: Handler) -> bool:
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise ConfigurationError(
            f"handler {getattr(fn, '__qualname__', fn)!r} must take the JobContext as its "
            "first positional parameter"
        )
    if not _may_be_context(params[0].annotation):
        # `async def f(n: int)` would otherwise register and then fail every job with a
        # TypeError: the payload goes in as keywords after the context, never first.
        name = getattr(fn, "__qualname__", fn)
        raise ConfigurationError(
            f"handler {name!r} must take the JobContext as its first parameter, but its first "
            f"parameter {params[0].name!r} is annotated {_annotation_text(params[0].annotation)}; "
            f"write it as ({'ctx: JobContext, ' + params[0].name + ': ...'})"
        )
    return len(params) > 1


def _may_be_context(annotation: Any) -> bool:
    """Whether a first parameter so annotated can receive the JobContext: unannotated, Any,
    JobContext or a base of it; a string annotation (PEP 563) by its last dotted name."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return True
    if isinstance(annotation, str):
        return annotation.strip("'\" ").rsplit(".", 1)[-1] in {"JobContext", "Any", "object"}
    return isinstance(annotation, type) and issubclass(JobContext, annotation)


def _annotation_text(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation)


def check_handler(fn: Handler) -> None:
    """Refuse at registration what could never be called the documented way."""
    if not callable(fn):
        raise ConfigurationError(f"{fn!r} is not callable")
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        raise ConfigurationError("a handler must be a function, not a generator")
    _takes_payload(fn)


class Registry:
    """Handlers by name. Registering a name twice is an error, not a silent override."""

    def __init__(self) -> None:
        self._specs: dict[str, TaskSpec] = {}

    def add(self, spec: TaskSpec) -> None:
        check_handler(spec.fn)
        existing = self._specs.get(spec.name)
        if existing is not None and existing.fn is not spec.fn:
            raise ConfigurationError(f"a handler named {spec.name!r} is already registered")
        self._specs[spec.name] = spec

    def get(self, name: str) -> TaskSpec | None:
        return self._specs.get(name)

    def names(self) -> list[str]:
        return sorted(self._specs)

    def merged(self, other: Registry) -> Registry:
        """A new registry with both sets of handlers (`other` may not redefine a name)."""
        out = Registry()
        for spec in (*self, *other):
            out.add(spec)
        return out

    def __iter__(self) -> Iterator[TaskSpec]:
        return iter(self._specs.values())

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __len__(self) -> int:
        return len(self._specs)
