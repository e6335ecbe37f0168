"""Name → function registries, the verl way: every option is a small function picked by name.

A registry owns the list of valid names for one config field, so the config, the error messages
and the docs never disagree. Built-in names are also spelled out as ``Literal`` types next to the
functions (``PgVariant``, ``AdvEstimator``, ...); the registry additionally knows the names users
added with the ``register_*`` decorators.

Registries live in one process. Ray's learners and env runners import rllib_llm afresh, so the
entries a user registered in the driver would be unknown there: each registry tells them apart
from its built-ins (``user_entries``), the config carries them to the other processes, and
``restore`` files them there (see ``rllib_llm.core.names``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

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
        self._info: dict[str, Any] = {}  # what an entry declares about itself (None: nothing)
        self._builtins: dict[str, tuple[F, Any]] = {}  # name -> (function, info)

    def register(
        self, name: str, *aliases: str, override: bool = False, info: Any = None
    ) -> Callable[[F], F]:
        """Decorator that files a function under ``name`` (and any ``aliases``).

        Re-registering a taken name raises unless ``override=True``: silently replacing a
        built-in loss would change results without a trace. ``info`` is what the entry declares
        about itself for config validation (an estimator's ``AdvEstimatorInfo``), read back with
        ``info(name)``.
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
                self._info[key] = info
            return fn

        return decorator

    def info(self, name: str, *, field: str | None = None) -> Any:
        """What entry ``name`` declared when it was registered (``ValueError`` if unknown)."""
        self.check(name, field=field)
        return self._info[name]

    def mark_builtins(self) -> None:
        """Record the entries registered so far as built-in: every later one is a user's."""
        self._builtins = {name: (fn, self._info[name]) for name, fn in self._entries.items()}

    def user_entries(self) -> dict[str, tuple[F, Any]]:
        """``name -> (function, info)`` of the entries users registered (or overrode) after
        ``mark_builtins``: what another process must ``restore`` to know them."""
        return {name: (fn, self._info[name]) for name, fn in self._entries.items()
                if self._builtins.get(name, (None,))[0] is not fn}

    def unregister(self, name: str) -> None:
        """Remove the entry a user registered as ``name``; a built-in it overrode comes back."""
        if name not in self.user_entries():
            raise ValueError(
                f"{self.field}={name!r} is not a user registration (user registrations: "
                f"{sorted(self.user_entries())}); built-in names cannot be removed."
            )
        if name in self._builtins:
            self._entries[name], self._info[name] = self._builtins[name]
        else:
            del self._entries[name], self._info[name]

    def restore(self, entries: dict[str, tuple[F, Any]]) -> None:
        """File ``entries`` (from ``user_entries`` in another process) here, replacing a built-in
        of the same name as that process did; what users registered in this process stays (in
        the driver, that is where the entries came from)."""
        own = self.user_entries()
        for name, (fn, info) in entries.items():
            if name not in own:
                self._entries[name] = fn
                self._info[name] = info

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
