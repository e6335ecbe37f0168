"""Name → function registries, the verl way: every option is a small function picked by name.

A registry owns the list of valid names for one config field, so the config, the error messages
and the docs never disagree. Built-in names are also spelled out as ``Literal`` types next to the
functions (``PgVariant``, ``AdvEstimator``, ...); the registry additionally knows the names users
added with the ``register_*`` decorators.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """A name → function table for one config field.

    Args:
        field: the config field whose values name the entries (``"pg_variant"``); error
            messages quote it so a user knows which setting to fix.
        register_hint: the public decorator that adds entries (``"register_pg_variant"``),
            quoted in the error for an unknown name.
    """

    def __init__(self, field: str, register_hint: str) -> None:
        self.field = field
        self.register_hint = register_hint
        self._entries: dict[str, F] = {}

    def register(self, name: str, *aliases: str, override: bool = False) -> Callable[[F], F]:
        """Decorator that files a function under ``name`` (and any ``aliases``).

        Re-registering a taken name raises unless ``override=True``: silently replacing a
        built-in loss would change results without a trace.
        """

        def decorator(fn: F) -> F:
            for key in (name, *aliases):
                if key in self._entries and not override:
                    raise ValueError(
                        f"{self.field}={key!r} is already registered (by "
                        f"{self._entries[key].__qualname__}); names must be unique. Pick another "
                        f"name or pass override=True to {self.register_hint} to replace it."
                    )
                self._entries[key] = fn
            return fn

        return decorator

    def get(self, name: str, *, field: str | None = None) -> F:
        """The function registered as ``name``; ``ValueError`` listing valid names otherwise."""
        self.check(name, field=field)
        return self._entries[name]

    def check(self, name: str, *, field: str | None = None) -> None:
        """Raise ``ValueError`` naming the field, the value and the valid names if unknown.

        Config classes call this when they are built, so a typo fails before any training;
        ``field`` overrides the field named in the message (``kl_penalty`` and
        ``kl_loss_kind`` share the KL registry).
        """
        if name not in self._entries:
            raise ValueError(
                f"{field or self.field}={name!r} is not registered; valid names: "
                f"{', '.join(repr(n) for n in self.names())}. Pick one of them, or register "
                f"your own with @{self.register_hint}({name!r})."
            )

    def names(self) -> tuple[str, ...]:
        """All registered names (aliases included), sorted."""
        return tuple(sorted(self._entries))

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __repr__(self) -> str:
        return f"Registry({self.field!r}, names={self.names()})"
