"""One shape for async openers: ``x = await open_...(...)`` or ``async with open_...(...) as x``."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, Protocol, TypeVar


class _Closable(Protocol):
    async def aclose(self) -> None: ...


T = TypeVar("T", bound=_Closable)


class Opening(Generic[T]):
    """An open operation: awaitable, or an async context manager that closes what it opened.

    Args:
        open_: makes the coroutine that opens the thing; called once per await or ``async with``.
    """

    def __init__(self, open_: Callable[[], Coroutine[Any, Any, T]]) -> None:
        self._open = open_
        self._value: T | None = None

    def __await__(self) -> Generator[Any, None, T]:
        return self._open().__await__()

    async def __aenter__(self) -> T:
        self._value = await self._open()
        return self._value

    async def __aexit__(self, *exc: object) -> None:
        if self._value is not None:
            await self._value.aclose()
