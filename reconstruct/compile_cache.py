"""JAX's persistent compilation cache for the command line, and the seconds a process spends compiling.

A census step's program takes from seconds (a CPU) to over a minute (the 2010-sized tract's on a GPU) to
compile, and every run of a config compiled it again. The CLI turns JAX's own persistent cache on before its
first computation (:func:`use_compilation_cache`): the compiled programs are kept in a folder, least recently
used dropped past a size bound, and a second run of the same shapes loads them instead of compiling. Library
code never turns it on by itself. :func:`compile_facts` says how long this process spent compiling and how many
programs came from the cache, so a run reports its compile time apart from its fitting time.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

#: the cache's default bound, MiB: a 2010-sized tract's census programs are a few MiB each
DEFAULT_MAX_MB = 2048

#: programs that compile faster than this are not worth a file (JAX's own default)
MIN_COMPILE_SECONDS = 1.0

_OFF = ("", "0", "off", "none", "false")


def cache_dir() -> Path | None:
    """The folder the CLI keeps compiled programs in: ``$CENSUSRECON_JAX_CACHE`` (``off`` turns the cache off),
    else JAX's own ``$JAX_COMPILATION_CACHE_DIR``, else ``$XDG_CACHE_HOME/censusrecon/jax``
    (``~/.cache/censusrecon/jax``).

    >>> import os; os.environ["CENSUSRECON_JAX_CACHE"] = "off"; print(cache_dir())
    None
    >>> os.environ["CENSUSRECON_JAX_CACHE"] = "/tmp/cr-cache"; print(cache_dir())
    /tmp/cr-cache
    >>> del os.environ["CENSUSRECON_JAX_CACHE"]
    """
    env = os.environ.get("CENSUSRECON_JAX_CACHE")
    if env is not None:
        return None if env.strip().lower() in _OFF else Path(env).expanduser()
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return Path(os.environ["JAX_COMPILATION_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "censusrecon" / "jax"


def cache_max_bytes() -> int:
    """The cache's size bound: ``$CENSUSRECON_JAX_CACHE_MB`` MiB, else :data:`DEFAULT_MAX_MB`."""
    return int(float(os.environ.get("CENSUSRECON_JAX_CACHE_MB", DEFAULT_MAX_MB)) * (1 << 20))


_FACTS = {"compile_seconds": 0.0, "compiles": 0, "cache_hits": 0, "cache_dir": None}
_LOCK = threading.Lock()
_LISTENING = {"on": False}


def _on_duration(event: str, seconds: float, **_) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        with _LOCK:
            _FACTS["compile_seconds"] += float(seconds)
            _FACTS["compiles"] += 1


def _on_event(event: str, **_) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        with _LOCK:
            _FACTS["cache_hits"] += 1


def listen() -> None:
    """Start counting this process's compiles (once; what compiled before is not counted)."""
    import jax

    if not _LISTENING["on"]:
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        jax.monitoring.register_event_listener(_on_event)
        _LISTENING["on"] = True


def use_compilation_cache(path: Path | None | str = "default", max_bytes: int | None = None) -> Path | None:
    """Keep compiled programs in ``path`` (default :func:`cache_dir`; None: no cache), at most ``max_bytes``
    (default :func:`cache_max_bytes`), least recently used dropped first. Must run before JAX's first
    compile to cover it. Returns the folder, or None when off or when JAX refuses it (logged, never fatal: a
    run without the cache only compiles again)."""
    import logging

    import jax

    listen()
    folder = cache_dir() if path == "default" else (None if path is None else Path(path))
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(folder))
        jax.config.update("jax_compilation_cache_max_size", cache_max_bytes() if max_bytes is None else max_bytes)
        if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:  # the user's own choice stands
            jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    except Exception as exc:  # noqa: BLE001 - an unwritable folder or an older JAX: run without the cache
        logging.getLogger(__name__).warning("compilation cache %s not used (%s)", folder, exc)
        return None
    _FACTS["cache_dir"] = str(folder)
    return folder


def compile_facts() -> dict:
    """What this process compiled since :func:`listen`: ``compile_seconds`` (XLA's own compile time, summed),
    ``compiles``, ``cache_hits`` (programs loaded from the persistent cache instead) and ``cache_dir``."""
    with _LOCK:
        out = dict(_FACTS)
    out["compile_seconds"] = round(out["compile_seconds"], 2)
    return out
