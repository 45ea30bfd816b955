"""What every compiled stage of the round shares: numba's compile options (:data:`jit`),
numpy's pairwise sum (:func:`numpy_sum`) and the insertion sorts of a few tens of tenants."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numba as nb
import numpy as np

_PACKAGE = Path(__file__).resolve().parents[1]
#: The sources whose module globals compiled code reads as compile-time constants (the kernel's
#: layout, the catalog's tables, each compiled module's own constants).
_COMPILED_SOURCES = ("kernel/*.py", "catalog/*.py", "environment/*.py", "fairness/*.py", "workloads.py")


def _drop_stale_caches() -> None:
    """Delete numba's on-disk caches of this package when any source its compiled code reads
    changed since they were written. numba keys a cached function on its own file's time stamp
    only, so a change to another module's constants (``layout``'s column numbers, say) would
    otherwise load machine code compiled against the old ones. A digest of the sources' names,
    sizes and time stamps is kept beside the kernel's caches; where the package folder is
    read-only nothing is done (an installed wheel's files do not change)."""
    digest = hashlib.sha1()
    for pattern in _COMPILED_SOURCES:
        for f in sorted(_PACKAGE.glob(pattern)):
            st = f.stat()  # a changed file has a new time stamp or size: no need to read it
            digest.update(f"{f.name} {st.st_size} {st.st_mtime_ns}\n".encode())
    stamp = _PACKAGE / "kernel" / "__pycache__" / "compiled_sources.sha1"
    try:
        if stamp.is_file() and stamp.read_text() == digest.hexdigest():
            return
        for pattern in _COMPILED_SOURCES:
            folder = (_PACKAGE / pattern).parent / "__pycache__"
            for cached in (*folder.glob("*.nbi"), *folder.glob("*.nbc")):
                cached.unlink(missing_ok=True)
        stamp.parent.mkdir(exist_ok=True)
        stamp.write_text(digest.hexdigest())
    except OSError:  # a read-only install: its sources never change under its caches
        pass


_drop_stale_caches()

#: numba's compile options for every kernel function that allocates nothing: cached on disk, no
#: GIL, numpy's division semantics (x / 0 is inf or nan, as in the model's formulas), and no
#: reference counting (numba's ``_nrt=False``): the stages only read and write arrays their
#: caller owns, and counting the references of a helper's array arguments at each call in a loop
#: was most of some stages' time (docs/benchmarks.md, "Issue 47"). A function compiled so cannot
#: allocate; those that do use :data:`jit_alloc`.
jit = nb.njit(cache=True, nogil=True, error_model="numpy", _nrt=False)
#: The same, inlined by numba into every caller (a small function called in a loop of a stage).
jit_inline = nb.njit(cache=True, nogil=True, error_model="numpy", inline="always", _nrt=False)
#: The options of a kernel function that allocates arrays (the round's scratch, its one-row
#: entry point): reference counted, as numba's default.
jit_alloc = nb.njit(cache=True, nogil=True, error_model="numpy")


@jit
def _pairwise_block(x, lo, hi):
    """numpy's pairwise sum of at most 128 numbers: sequential below 8, else eight
    accumulators over blocks of 8, combined as a tree, then the remainder in order."""
    n = hi - lo
    if n < 8:
        res = 0.0
        for i in range(lo, hi):
            res += x[i]
        return res
    r0, r1, r2, r3 = x[lo], x[lo + 1], x[lo + 2], x[lo + 3]
    r4, r5, r6, r7 = x[lo + 4], x[lo + 5], x[lo + 6], x[lo + 7]
    i = lo + 8
    end = hi - n % 8
    while i < end:
        r0 += x[i]
        r1 += x[i + 1]
        r2 += x[i + 2]
        r3 += x[i + 3]
        r4 += x[i + 4]
        r5 += x[i + 5]
        r6 += x[i + 6]
        r7 += x[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < hi:
        res += x[i]
        i += 1
    return res


@jit_alloc
def numpy_sum(x, lo, hi):
    """``x[lo:hi].sum()`` in numpy's order (pairwise: halves rounded to multiples of 8 down
    to blocks of at most 128), so that sums over tenants are bit-identical to fleet_marl
    0.2's numpy kernel: a difference reward ``G(z) - G(z_-i)`` cancels almost all of ``G``,
    and a last-bit change of ``G`` would show in it. The halving runs on an explicit stack
    (numba caches recursive functions poorly)."""
    if hi - lo <= 128:
        return _pairwise_block(x, lo, hi)
    # post-order walk of the halving tree: (lo, hi, children done) on one stack, sums on another
    s_lo = np.empty(128, np.int64)
    s_hi = np.empty(128, np.int64)
    s_done = np.empty(128, np.bool_)
    vals = np.empty(128)
    top, nv = 0, 0
    s_lo[0], s_hi[0], s_done[0] = lo, hi, False
    while top >= 0:
        a, b = s_lo[top], s_hi[top]
        if b - a <= 128:
            vals[nv] = _pairwise_block(x, a, b)
            nv += 1
            top -= 1
        elif s_done[top]:
            vals[nv - 2] = vals[nv - 2] + vals[nv - 1]
            nv -= 1
            top -= 1
        else:
            s_done[top] = True
            n2 = (b - a) // 2
            n2 -= n2 % 8
            s_lo[top + 1], s_hi[top + 1], s_done[top + 1] = a + n2, b, False  # right half, summed second
            s_lo[top + 2], s_hi[top + 2], s_done[top + 2] = a, a + n2, False  # left half, summed first
            top += 2
    return vals[0]


@jit
def before(i, j, k1, k2, k3, n_keys):
    """Does element i sort before j: keys k1 (desc), k2 (desc), k3 (asc) (the first
    ``3 - n_keys`` are skipped), then the index (asc)."""
    if n_keys == 3 and k1[i] != k1[j]:
        return k1[i] > k1[j]
    if n_keys >= 2 and k2[i] != k2[j]:
        return k2[i] > k2[j]
    if k3[i] != k3[j]:
        return k3[i] < k3[j]
    return i < j


@jit
def sort_by(order, k1, k2, k3, n_keys):
    """Insertion sort of ``order`` (0..n-1) by :func:`before` (fine for the tens of tenants of a round)."""
    n = order.shape[0]
    for i in range(n):
        order[i] = i
    for i in range(1, n):
        x = order[i]
        j = i - 1
        while j >= 0 and before(x, order[j], k1, k2, k3, n_keys):
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = x


@jit_inline
def copy_row(out, j, row):
    """``out[:, j, :] = row`` for a (C, n) ``row``, element by element: the fields of a batch
    row's outputs, each contiguous along ``out``'s last axis."""
    for c in range(row.shape[0]):
        for t in range(row.shape[1]):
            out[c, j, t] = row[c, t]


@jit
def argsort_asc(order, key):
    """Stable ascending argsort of a float key (ties by index): :func:`sort_by` on that one key."""
    sort_by(order, key, key, key, 1)


__all__ = ["argsort_asc", "before", "copy_row", "jit", "jit_alloc", "jit_inline", "numpy_sum", "sort_by"]
