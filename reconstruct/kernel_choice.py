"""Which kernels a census fit runs when its settings say ``kernel="auto"`` (the default): measured, on the card.

A census plan's parts run on XLA's ops or on the fused kernels of :mod:`reconstruct.fused`, which never write the
product rows (half the 85-block step's bytes on the GPU's own count). Fewer bytes are the means; the measure is
the time a step takes on the card that runs it, and a kernel of ours is a Triton program that has to be right on
that card. So on a GPU, the first time a fit of a census plan runs a shape (the plan, the settings that enter its
program, the batch, the devices), :func:`choose`:

1. **checks** the fused kernels against XLA's ops on one pair: the answers and the loss's gradient at the fit's
   first state, each within :data:`TOLERANCE` of XLA's (relative, in norm: float rounding, TF32's included, is
   ~1e-4; a wrong share or tile is of order one), in a process of its own (:func:`run_apart`): a kernel that
   read or wrote out of bounds on a card could leave the GPU unusable to the process that ran it, and must not
   end the run that asked. A compile or run failure, a process that dies or does not answer within
   :data:`CHECK_TIMEOUT_S`, or a disagreement: XLA's ops, and a warning that says why;
2. **times** the first block of steps of the fit on both, each compiled ahead of the timed call, and keeps the
   fused kernels only where their block runs in at most :data:`MARGIN` of XLA's time. The fit goes on from the
   kept block's state: nothing is fitted twice but the other kernel's first block.

Everywhere else ``auto`` is XLA's ops with nothing run: a CPU (the kernels would run in Pallas's interpreter),
a marginal plan (no product rows). The choice is remembered for the process, and across processes in
``kernel_choices.json`` beside the compiled programs when the command line keeps them
(:mod:`reconstruct.compile_cache`); its key holds the card, JAX's version and the kernels' source, so a new card,
JAX or kernel measures again. :func:`choices` lists what this process chose and why (a run's metadata records
it), and every fit says which kernels it ran (:attr:`reconstruct.rap.RAPRankResult.kernel`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np

from censusrecon.microdata.dataset import atomic_write_text

log = logging.getLogger(__name__)

#: the fused kernels are kept where their first block takes at most this share of XLA's time (a choice within
#: timing noise keeps XLA's ops, the path every backend runs and every figure before them was measured on)
MARGIN = 0.95
#: the largest relative difference (in norm) of the fused kernels' answers and gradient from XLA's that passes
TOLERANCE = 5e-3
#: remembered choices on disk, at most (the oldest dropped first)
MAX_REMEMBERED = 256
FILE = "kernel_choices.json"
#: the check runs in a process of its own (tests of the choice's logic run it in theirs, to inject faults)
APART = True
#: seconds the check's process has to answer (it starts JAX and compiles the check on both kernels)
CHECK_TIMEOUT_S = 600.0


class CheckFailed(RuntimeError):
    """The check's process failed, died or did not answer in time."""


@dataclass(frozen=True)
class Choice:
    """The kernels a shape's fits run, and why: ``reason`` is ``"auto on a CPU"``, ``"marginal plan"``,
    ``"measured"``, ``"remembered"``, ``"fused kernels failed"`` or ``"fused kernels disagree"``; ``seconds``
    the first block's time on each kernel where measured, ``difference`` the checked relative difference."""

    kernel: str
    reason: str
    seconds: dict | None = None
    difference: float | None = None
    detail: str = ""


_CHOSEN: dict[str, Choice] = {}
_LOCK = threading.Lock()


def on_gpu() -> bool:
    """Whether the fits of this process run on a GPU (tests replace it to exercise the GPU's path)."""
    return jax.default_backend() == "gpu"


@functools.lru_cache(maxsize=1)
def _kernels_source() -> str:
    from censusrecon.reconstruct import fused, product_plan

    h = hashlib.sha256()
    for mod in (fused, product_plan):
        h.update(Path(mod.__file__).read_bytes())
    return h.hexdigest()[:12]


def shape_key(plan, settings, batch: int) -> str:
    """The key of a choice: the plan, the settings that enter its compiled program, the batch, the devices the
    batch is split over, the card, JAX's version and the kernels' source (12 hex digits of a SHA-256)."""
    import dataclasses

    program = dataclasses.replace(settings, kernel="auto", steps=1, batch=None, draws=None)
    devices = jax.local_devices()
    facts = (repr(plan.key), repr(program), batch, len(devices), devices[0].device_kind, jax.__version__,
             _kernels_source())
    return hashlib.sha256(repr(facts).encode()).hexdigest()[:12]


def fixed(plan, settings) -> str | None:
    """The kernels a fit runs without measuring: the settings' own choice, or XLA's ops where ``auto`` has nothing
    to choose from (a CPU, a marginal plan); None where :func:`choose` must decide."""
    from censusrecon.reconstruct.product_plan import ProductPlan

    if settings.kernel != "auto":
        return settings.kernel
    if not isinstance(plan, ProductPlan):
        _note("marginal", Choice("xla", "marginal plan"))
        return "xla"
    if not on_gpu():
        _note("cpu", Choice("xla", "auto on a CPU"))
        return "xla"
    return None


def remembered(key: str) -> str | None:
    """The kernels chosen for ``key`` by this process or, with the compilation cache on, an earlier one."""
    with _LOCK:
        if key in _CHOSEN:
            return _CHOSEN[key].kernel
    entry = _read_file().get(key)
    if entry is None or entry.get("kernel") not in ("xla", "pallas"):
        return None
    _note(key, Choice(entry["kernel"], "remembered", entry.get("seconds"), entry.get("difference")))
    return entry["kernel"]


def relative_difference(a, b) -> float:
    """The largest, over paired arrays, of ‖a − b‖ / ‖a‖ (‖a‖ of zero: the norm of b).

    >>> relative_difference([np.array([3.0, 4.0])], [np.array([3.0, 4.5])])
    0.1
    """
    worst = 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        scale = np.linalg.norm(x) or np.linalg.norm(y) or 1.0
        worst = max(worst, float(np.linalg.norm(x - y) / scale))
    return worst


def choose(key: str, check: Callable[[], float], first_block: Callable[[str], Any]) -> tuple[str, Any]:
    """Decide a shape's kernels (see the module's text). ``check()``: the fused kernels' relative difference from
    XLA's ops on one pair (:func:`check_kernels`); ``first_block(kernel)``: ``(output, seconds)`` of the fit's
    first block, compiled before it is timed. Returns the kernel and the kept block's output (None where the fused
    kernels never ran a block)."""
    try:
        difference = check()
    except Exception as exc:  # noqa: BLE001 - any failure of our kernels on this card: XLA's ops
        return _decided(key, Choice("xla", "fused kernels failed", detail=_brief(exc))), None
    if not difference <= TOLERANCE:
        return _decided(key, Choice("xla", "fused kernels disagree", difference=difference,
                                    detail=f"relative difference {difference:.2e} > {TOLERANCE:g}")), None
    xla_out, xla_s = first_block("xla")
    try:
        fused_out, fused_s = first_block("pallas")
    except Exception as exc:  # noqa: BLE001
        return _decided(key, Choice("xla", "fused kernels failed", {"xla": xla_s}, difference, _brief(exc))), xla_out
    kernel = "pallas" if fused_s <= MARGIN * xla_s else "xla"
    seconds = {"xla": round(xla_s, 6), "pallas": round(fused_s, 6)}
    _decided(key, Choice(kernel, "measured", seconds, difference))
    return kernel, fused_out if kernel == "pallas" else xla_out


def kernels_difference(plan, settings, logits, target) -> float:
    """The fused kernels against XLA's ops on one pair: :func:`relative_difference` of the answers and of the
    loss's gradient at ``logits`` (one pair's state, per attribute) against ``target`` (its dense targets)."""
    import jax.numpy as jnp

    from censusrecon.reconstruct.kernels import usable_dtype

    dtype = usable_dtype(settings.precision)
    mask = jnp.asarray(plan.dense_mask)

    def on(kernel):
        def answers(lg):
            return plan.dense_answers_of_logits(lg, dtype, kernel)

        def loss(lg):
            return jnp.sum(((answers(lg) - target) * mask) ** 2)

        grads = jax.tree.leaves(jax.jit(jax.grad(loss))(logits))
        return [np.asarray(jax.jit(answers)(logits)), *map(np.asarray, grads)]

    return relative_difference(on("xla"), on("pallas"))


def check_kernels(plan, settings, logits, target) -> float:
    """:func:`kernels_difference`, in a process of its own where :data:`APART` (see :func:`run_apart`)."""
    if not APART:
        return kernels_difference(plan, settings, logits, target)
    return run_apart(kernels_difference, (plan, settings, logits, target), CHECK_TIMEOUT_S)


def run_apart(fn: Callable, args: tuple, timeout: float):
    """``fn(*args)`` computed in a new process (started afresh, so it holds no device of this one's; on a GPU it
    takes memory as it needs it, beside what this process holds), its value returned here. A failure in it, its
    death or no answer within ``timeout`` seconds (it is then killed) raise :class:`CheckFailed`, naming which.

    >>> run_apart(divmod, (7, 2), 60)
    (3, 1)
    """
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_apart, args=(send, fn, args), daemon=True)
    proc.start()
    send.close()  # the child holds the only writer: its end closes when it ends, however it ends
    try:
        if not receive.poll(timeout):
            raise CheckFailed(f"no answer within {timeout:g} s")
        ok, value = receive.recv()
    except EOFError:
        proc.join(10)
        raise CheckFailed(f"its process ended with exit code {proc.exitcode} before answering") from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(10)
        receive.close()
    if not ok:
        raise CheckFailed(value)
    return value


def _apart(send, fn, args) -> None:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the asking process holds the card's memory
    try:
        send.send((True, fn(*args)))
    except BaseException as exc:  # noqa: BLE001 - reported to the asking process, which decides
        send.send((False, _brief(exc)))
    finally:
        send.close()


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()``'s output, computed to the end, and the seconds it took (tests replace it to decide a timing)."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - t0


def choices() -> dict:
    """What this process chose, by shape key: ``{"kernel", "reason", ...}`` (a run's metadata holds it)."""
    with _LOCK:
        return {k: {f: v for f, v in asdict(c).items() if v not in (None, "")} for k, c in _CHOSEN.items()}


def forget() -> None:
    """Forget this process's choices (the file on disk stays)."""
    with _LOCK:
        _CHOSEN.clear()


def _brief(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"


def _note(key: str, choice: Choice) -> None:
    with _LOCK:
        _CHOSEN[key] = choice


def _decided(key: str, choice: Choice) -> str:
    _note(key, choice)
    said = f"kernel auto: {choice.kernel} ({choice.reason}" + (f"; {choice.detail}" if choice.detail else "") + (
        f"; first block {choice.seconds}" if choice.seconds else "") + ")"
    (log.warning if choice.reason.startswith("fused kernels") else log.info)(said)
    _write_file(key, choice)
    return choice.kernel


def _path() -> Path | None:
    from censusrecon.reconstruct.compile_cache import compile_facts

    folder = compile_facts().get("cache_dir")
    return None if folder is None else Path(folder) / FILE


def _read_file() -> dict:
    path = _path()
    if path is None or not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError) as exc:  # a damaged file only means measuring again
        log.warning("kernel choices in %s not read (%s)", path, exc)
        return {}


def _write_file(key: str, choice: Choice) -> None:
    path = _path()
    if path is None:
        return
    entries = _read_file()
    entries[key] = dict(asdict(choice), when=time.time())
    if len(entries) > MAX_REMEMBERED:
        entries = dict(sorted(entries.items(), key=lambda kv: kv[1].get("when", 0))[-MAX_REMEMBERED:])
    try:
        atomic_write_text(path, json.dumps(entries, indent=1, sort_keys=True))
    except OSError as exc:
        log.warning("kernel choice not remembered in %s (%s)", path, exc)
