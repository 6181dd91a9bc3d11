"""A model's ``config.json`` (and a separate ``quantization_config.json``), read beside its weights.

Discovery asks for these files in the same round as ``model.safetensors`` and its index, so they
cost no extra round trip. A missing file is normal (``None``); a file that cannot be used (not
JSON, not an object, unreadable) becomes a problem message naming it, and the model opens anyway:
a config only refines what the headers say.

:func:`parse_config` is pure; :func:`read_configs` does the IO through a :class:`Place`.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigWarning, NotFoundError, RemoteFileChangedError, RemoteTensorsError
from ..sources.cache.source import read_metadata

if TYPE_CHECKING:
    from ..sources.resolve import Place

__all__ = ["ConfigFiles", "ConfigWarning", "parse_config", "read_configs", "read_small_file"]

CONFIG_FILE = "config.json"
QUANTIZATION_CONFIG_FILE = "quantization_config.json"
CONFIG_WINDOW_BYTES = 256 * 1024
"""First request for a config file; a longer one costs one more request for the rest."""
MAX_CONFIG_BYTES = 64 * 1024 * 1024
"""A config larger than this is not read (it would be no config)."""


@dataclass(frozen=True, slots=True)
class ConfigFiles:
    """What was found beside the weights.

    Attributes:
        config: ``config.json`` as a dict, or ``None`` when absent or unusable.
        quantization_config: a separate ``quantization_config.json``, or ``None``.
        config_location: where ``config.json`` was looked for (named in messages).
        quantization_config_location: where ``quantization_config.json`` was looked for.
        problems: one message per unusable file, each naming it.
    """

    config: dict[str, Any] | None = None
    quantization_config: dict[str, Any] | None = None
    config_location: str = CONFIG_FILE
    quantization_config_location: str = QUANTIZATION_CONFIG_FILE
    problems: tuple[str, ...] = ()


def parse_config(data: bytes, *, location: str) -> tuple[dict[str, Any] | None, str | None]:
    """A config file's bytes -> (the object, None), or (None, a message naming ``location``).

    Pure; never raises for bad input.
    """
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{location}: not JSON ({exc}); the count ignores it"
    if not isinstance(parsed, dict):
        kind = type(parsed).__name__
        return None, f"{location}: expected a JSON object, got {kind}; the count ignores it"
    return parsed, None


async def read_small_file(place: Place, name: str, *, window_bytes: int) -> bytes:
    """The whole of a small file: one request when it fits ``window_bytes``, else one more;
    none when a persistent cache holds it (it is kept there, see
    :func:`~..sources.cache.source.read_metadata`).

    Raises:
        NotFoundError, PermissionDeniedError, TransportError, BadResponseError (from the source).
        ValueError: the file is larger than :data:`MAX_CONFIG_BYTES`.
    """
    source = place.open(name)
    try:
        prefix = await source.open_prefix(window_bytes)
        data = prefix.data
        if prefix.size > MAX_CONFIG_BYTES:
            raise ValueError(
                f"{place.location(name)}: {prefix.size} bytes; expected at most "
                f"{MAX_CONFIG_BYTES} for a config"
            )
        # A small file is metadata whole: kept by a persistent cache.
        data = await read_metadata(source, 0, prefix.size, held=data)
    finally:
        await source.aclose()
    return data


async def _read_one(place: Place, name: str) -> tuple[dict[str, Any] | None, str | None]:
    # A config the cache knows to be missing (most repos' quantization_config.json) costs no
    # source: a revisit, or an offline one, builds none for it.
    if await place.known_absent(name):
        return None, None
    location = place.location(name)
    try:
        data = await read_small_file(place, name, window_bytes=CONFIG_WINDOW_BYTES)
    except NotFoundError:
        return None, None
    except RemoteFileChangedError:
        raise  # a config from another version than the weights: the model would mix them
    except (RemoteTensorsError, ValueError, OSError) as exc:
        return None, f"{location}: could not be read ({exc}); the count ignores it"
    return parse_config(data, location=location)


async def read_configs(place: Place) -> ConfigFiles:
    """Fetch ``config.json`` and ``quantization_config.json`` of ``place`` concurrently.

    Never raises for a missing or bad file (see :class:`ConfigFiles`); cancellation propagates.

    Raises:
        RemoteFileChangedError: a config came from another version than the files read
            before it (a hub repo pushed to meanwhile).
    """
    (config, config_problem), (quant, quant_problem) = await asyncio.gather(
        _read_one(place, CONFIG_FILE), _read_one(place, QUANTIZATION_CONFIG_FILE)
    )
    return ConfigFiles(
        config,
        quant,
        place.location(CONFIG_FILE),
        place.location(QUANTIZATION_CONFIG_FILE),
        tuple(p for p in (config_problem, quant_problem) if p is not None),
    )
