"""A census part's answers and cotangents as fused GPU kernels (Pallas, on Triton): the product rows are never
written to memory.

A part of a :class:`reconstruct.product_plan.ProductPlan` answers every (left row, right row) pair of its two
sides, each row a row-wise product of one set row per attribute of its side (the set sums S_a, n' floats each).
Written with XLA's ops, each side's rows are formed and written out (the 2010-sized tract's 823 × n' right side),
read by two matmuls, and the right side's cotangent written and read again: most of the step's memory traffic.
Here each kernel forms the tiles of both sides' rows it needs from the set rows (gathered loads of a few small
arrays, which stay in cache) inside the matmul's loop:

* :func:`answers`: A[l, r] = Σ_k L[l, k] R[r, k], L and R formed tile by tile;
* :func:`cotangents`: for each side, its rows' cotangent (G · R for the left, Gᵀ · L for the right) is a tile in
  registers; each attribute's share of it (times the side's other factors) is added into that attribute's set
  rows' cotangent with atomic adds (so the order of a sum over rows varies from run to run: float rounding).

The kernels are Triton programs: they run on NVIDIA GPUs (and are tested here in Pallas's interpreter, on the CPU,
against the plan's XLA path and autodiff). A tile is a short side whole (up to :data:`TILE_MAX` rows) or
:data:`TILE` rows of a long one, by :data:`TILE_K` columns; rows past a side's end (and the cotangent's), and
columns past n', are masked (read as zeros, never written). The sizes are chosen by a model of the gathers
(:func:`_rows_per_tile`), not yet by timing on a card.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

#: rows of a tile of either side (a power of two, at least 16: Triton's matmul)
TILE = 32
#: a side of at most this many rows is one tile (see :func:`_rows_per_tile`)
TILE_MAX = 128
#: columns (of the n' relaxed rows) of a tile
TILE_K = 64
#: Triton's launch settings of every kernel here
NUM_WARPS, NUM_STAGES = 4, 2
#: None: Pallas's interpreter where JAX's default backend is not a GPU (tests), Triton on a GPU; True or False
#: forces one (bench/step_cost_at.py compiles for a GPU from a machine whose default backend is its CPU)
INTERPRET: bool | None = None


def _interpret() -> bool:
    return jax.default_backend() != "gpu" if INTERPRET is None else INTERPRET


def _rows_per_tile(rows: int, other: int = 1) -> int:
    """Rows of a side's tile: a short side (at most :data:`TILE_MAX` rows) is one tile, so that the other side's
    tiles, gathered once per tile of this one, are gathered once (the 85 blocks of a 2010-sized tract against its
    823 right rows: 3 times fewer gathers of the long side); a long side is tiles of :data:`TILE` rows. A tile
    of ``other`` rows beside it bounds the two to TILE_MAX² / 2 products (the accumulator is in registers).

    >>> _rows_per_tile(85), _rows_per_tile(823), _rows_per_tile(85, 128), _rows_per_tile(10)
    (128, 32, 64, 32)
    """
    size = TILE if rows > TILE_MAX else max(TILE, 1 << max(0, rows - 1).bit_length())
    while size > TILE and size * other > TILE_MAX * TILE_MAX // 2:
        size //= 2
    return size


def _index(rows_of_set: np.ndarray, tile: int) -> jax.Array:
    """A side's (rows × attributes) set-row indices, padded with zero rows to whole tiles of ``tile`` rows."""
    idx = np.zeros((-(-len(rows_of_set) // tile) * tile, rows_of_set.shape[1]), np.int32)
    idx[:len(rows_of_set)] = rows_of_set
    return jnp.asarray(idx)


def _factors(s_refs, i_ref, rows, valid, cols, n) -> list:
    """Each attribute's gathered set rows for a side's rows ``rows``, (len(rows) × TILE_K) tiles; rows not ``valid``
    and columns past n' are zeros."""
    from jax.experimental.pallas import triton as plt

    mask = valid[:, None] & (cols < n)[None, :]
    return [plt.load(s_ref.at[i_ref[rows, t][:, None], cols[None, :]], mask=mask, other=0.0)
            for t, s_ref in enumerate(s_refs)]


def _tile(s_refs, i_ref, rows, valid, cols, n):
    """A tile of a side's rows ``rows``: the product of its attributes' gathered set rows (:func:`_factors`)."""
    return functools.reduce(jnp.multiply, _factors(s_refs, i_ref, rows, valid, cols, n))


def _all_but_each(tiles: list) -> list:
    """For each tile, the product of all the others (prefix and suffix products: each tile read once, no division;
    None where there is no other).

    >>> _all_but_each([2, 3, 5, 7]), _all_but_each([2])
    ([105, 70, 42, 30], [None])
    """
    prefix, suffix = [None], [None]
    for x in tiles[:-1]:
        prefix.append(x if prefix[-1] is None else prefix[-1] * x)
    for x in tiles[:0:-1]:
        suffix.append(x if suffix[-1] is None else suffix[-1] * x)
    suffix = suffix[::-1]
    return [p if q is None else q if p is None else p * q for p, q in zip(prefix, suffix)]


def _dot(a, b, dtype, contract=((1,), (1,))):
    return jax.lax.dot_general(a.astype(dtype), b.astype(dtype), (contract, ((), ())),
                               preferred_element_type=jnp.float32)


def _whole(x):
    from jax.experimental import pallas as pl

    return pl.BlockSpec(x.shape, lambda *_: (0,) * x.ndim)


def _params():
    from jax.experimental.pallas import triton as plt

    return None if _interpret() else plt.CompilerParams(num_warps=NUM_WARPS, num_stages=NUM_STAGES)


Side = tuple  # (the side's attributes' set sums, each (sets × n'), (side rows × attributes) set-row indices)


def answers(left: Side, right: Side, dtype=jnp.float32) -> jax.Array:
    """The (left rows × right rows) block of a part: row l of a side (set sums S, indices idx) is
    Π_t S_t[idx[l, t]]; float32, operands of the matmul in ``dtype``."""
    from jax.experimental import pallas as pl

    (left, left_idx), (right, right_idx) = left, right
    n = left[0].shape[1]
    ml, mr = len(left_idx), len(right_idx)
    tl = _rows_per_tile(ml)
    tr = _rows_per_tile(mr, tl)
    il, ir = _index(left_idx, tl), _index(right_idx, tr)
    nl = len(left)

    def kernel(*refs):
        sl, il_ref, sr, ir_ref, out = refs[:nl], refs[nl], refs[nl + 1:-2], refs[-2], refs[-1]
        a = pl.program_id(0) * tl + jnp.arange(tl)
        b = pl.program_id(1) * tr + jnp.arange(tr)

        def chunk(k, acc):
            cols = k * TILE_K + jnp.arange(TILE_K)
            return acc + _dot(_tile(sl, il_ref, a, a < ml, cols, n), _tile(sr, ir_ref, b, b < mr, cols, n), dtype)

        out[...] = jax.lax.fori_loop(0, -(-n // TILE_K), chunk, jnp.zeros((tl, tr), jnp.float32))

    ins = [*left, il, *right, ir]
    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((len(il), len(ir)), jnp.float32),
                         grid=(len(il) // tl, len(ir) // tr), in_specs=[_whole(x) for x in ins],
                         out_specs=pl.BlockSpec((tl, tr), lambda i, j: (i, j)), interpret=_interpret(),
                         compiler_params=_params(), name="census_part_answers")(*ins)
    return out[:ml, :mr]


def _side_cotangent(G, this: Side, other: Side, dtype, transposed: bool, into):
    """Each of this side's attributes' set rows' cotangent from the part's cotangent G (left rows × right rows):
    the side's rows' cotangent G · R (or Gᵀ · L, ``transposed``: this side is the right one), a tile at a time,
    times the side's other factors, added into the attribute's rows: into ``into``'s arrays (in place: each is
    the kernel's output), or zeros where it holds None."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plt

    (this, this_idx), (other, other_idx) = this, other
    n = this[0].shape[1]
    m, mo = len(this_idx), len(other_idx)
    tt = _rows_per_tile(m, TILE_K)  # this side's rows a tile (the other side is read TILE rows at a time)
    i_this, i_other = _index(this_idx, tt), _index(other_idx, TILE)
    nt, no = len(this), len(other)
    contract = ((0,), (0,)) if transposed else ((1,), (0,))
    interpret = _interpret()

    def kernel(*refs):
        g, st, it, so, io = refs[0], refs[1:1 + nt], refs[1 + nt], refs[2 + nt:2 + nt + no], refs[2 + nt + no]
        outs = refs[len(refs) - nt:]  # aliased with the starting arrays before them (zeros, or earlier parts')
        first_row = pl.program_id(0) * tt
        a = first_row + jnp.arange(tt)
        cols = pl.program_id(1) * TILE_K + jnp.arange(TILE_K)
        valid = a < m

        def chunk(j, acc):
            b = j * TILE + jnp.arange(TILE)
            # G's block of this side's rows a and the other side's rows b (G is left rows × right rows; rows past
            # either side's end are read as zeros: G is not padded)
            rows, cols_g, mask_g = (b, a, (b < mo)[:, None] & valid[None, :]) if transposed else \
                (a, b, valid[:, None] & (b < mo)[None, :])
            at = (jnp.minimum(rows, g.shape[0] - 1)[:, None], jnp.minimum(cols_g, g.shape[1] - 1)[None, :])
            gt = plt.load(g.at[at], mask=mask_g, other=0.0)
            return acc + _dot(gt, _tile(so, io, b, b < mo, cols, n), dtype, contract)

        d_rows = jax.lax.fori_loop(0, len(i_other) // TILE, chunk, jnp.zeros((tt, TILE_K), jnp.float32))
        mask = valid[:, None] & (cols < n)[None, :]
        # each attribute's share: the rows' cotangent times the side's other factors (each factor gathered once)
        others = _all_but_each(_factors(st, it, a, valid, cols, n))
        for t in range(nt):
            share = d_rows if others[t] is None else d_rows * others[t]
            where = (it[a, t][:, None], cols[None, :])
            if interpret:  # the interpreter's atomic add keeps one of equal addresses: a whole-array add here
                where = (where[0], jnp.minimum(where[1], n - 1))
                outs[t][...] = outs[t][...].at[where].add(jnp.where(mask, share, 0.0))
            else:
                plt.atomic_add(outs[t], where, share, mask=mask)

    start = [jnp.zeros(s.shape, jnp.float32) if x is None else x for s, x in zip(this, into)]
    ins = [G, *this, i_this, *other, i_other, *start]
    first = len(ins) - nt
    return pl.pallas_call(kernel, out_shape=[jax.ShapeDtypeStruct(s.shape, jnp.float32) for s in this],
                          grid=(len(i_this) // tt, -(-n // TILE_K)), in_specs=[_whole(x) for x in ins],
                          out_specs=[_whole(z) for z in start],
                          input_output_aliases={first + t: t for t in range(nt)}, interpret=interpret,
                          compiler_params=_params(), name="census_part_cotangent")(*ins)


def cotangents(G: jax.Array, left: Side, right: Side, dtype=jnp.float32, into=(None, None)):
    """The cotangents of the left and of the right attributes' set sums (lists in the order given) from the
    part's answers' cotangent G (left rows × right rows), each added to its array in ``into`` (a list per side,
    None for zeros) where given: a cotangent other parts began, summed in place (no zeros written and added)."""
    into_left = into[0] or [None] * len(left[0])
    into_right = into[1] or [None] * len(right[0])
    return (_side_cotangent(G, left, right, dtype, False, into_left),
            _side_cotangent(G, right, left, dtype, True, into_right))


def cache_reads(left: tuple[int, int], right: tuple[int, int], n: int) -> dict:
    """A model of the bytes the three kernels of a part read (from cache, mostly: the set sums and G are small),
    per run-step, with the tile sizes they use: ``left`` and ``right`` are (rows, attributes) of the two sides, n
    the relaxed rows. Each kernel re-gathers the rows of the side it loops over once per tile of the other
    (:func:`_rows_per_tile`), reads G once per column tile, and each factor of its own side once. What a lent GPU
    compares with its cache's bandwidth when the kernels are slower than their memory count says.

    By hand for the 2010-sized tract's block cells (85 blocks, one attribute; 823 right rows of four; n' = 1,000):
    the 85 blocks are one tile of 128 rows, the 823 rows 26 tiles of 32. Answers: 26 × 85 × 1 + 1 × 823 × 4 = 5,502
    rows of n' floats; the left cotangent: 823 × 4 right rows once, G (85 × 823) once per 16 column tiles, the
    85 block rows once: 4,496,280 floats; the right: 85 left rows 26 times, G 16 times, 823 × 4 rows once.

    >>> r = cache_reads((85, 1), (823, 4), 1000)
    >>> r["answers"], r["left_cotangent"], r["right_cotangent"]
    (22008000, 17985120, 26485120)
    """
    (ml, nl), (mr, nr) = left, right
    tl = _rows_per_tile(ml)
    tr = _rows_per_tile(mr, tl)
    col_tiles = -(-n // TILE_K)

    def cotangent(m, mine, mo, theirs):
        tt = _rows_per_tile(m, TILE_K)
        return 4 * (-(-m // tt) * mo * theirs * n + col_tiles * m * mo + m * mine * n)

    return {"answers": 4 * n * (-(-mr // tr) * ml * nl + -(-ml // tl) * mr * nr),
            "left_cotangent": cotangent(ml, nl, mr, nr), "right_cotangent": cotangent(mr, nr, ml, nl)}
