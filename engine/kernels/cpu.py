"""The engine's C kernels for the CPU: built with the system's C compiler on first use, kept in a
cache keyed by the source, the flags, the compiler and the CPU, and called through ctypes.

They are plain C over raw float32 buffers (no torch headers), so a build takes about a second;
where no compiler is found or the build fails, `load()` says why and the engine keeps to its
torch ops (the same arithmetic, more calls). `TOKDRIFT_CPU_KERNELS=0` switches them off, for
comparisons (benchmarks/decode_paths.py) and tests.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

SOURCES = ("gdn_recurrent.c", "small_gemm.c", "moe_decode.c", "rms_norm.c", "paged_attention.c")
HEADERS = ("vmath.h",)
# -ffp-contract=fast: a * b + c as one fused multiply-add, which -std=c11 alone switches off
# (an extend's recurrence 7.4 -> 6.2 us a token a layer)
FLAGS = ("-O3", "-march=native", "-ffp-contract=fast", "-shared", "-fPIC", "-std=c11")
# With more than one torch thread, moe_decode shares out its experts, small_gemm its columns and
# paged_attention its requests. libgomp is torch's own OpenMP runtime (its wheel ships
# libgomp.so.1, which the library then shares by name), so the threads are torch's pool.
OPENMP = "-fopenmp"
_HERE = Path(__file__).resolve().parent

_lib: ctypes.CDLL | None = None
_why_not: str | None = None
_loaded = False

# typed as what argtypes lists hold (the stubs' generic base, not subscriptable at run time)
_i64: type[ctypes._SimpleCData[Any]] = ctypes.c_int64
_f32: type[ctypes._SimpleCData[Any]] = ctypes.c_float
_ptr: type[ctypes._SimpleCData[Any]] = ctypes.c_void_p
GDN_RECURRENT_ARGTYPES = (
    [_i64] * 7  # batch, tokens, hk, r, dk, dv, kernel
    + [_ptr, _i64]  # p, p_stride
    + [_ptr, _ptr, _ptr, _i64]  # conv_w, conv_buf, rec_buf, num_slots
    + [_ptr, _ptr, _ptr, _ptr, _ptr]  # slots, fresh, neg_a, dt_bias, norm_w
    + [_f32] * 5  # l2_scale, l2_eps, q_scale, norm_eps, decay_floor
    + [_ptr] * 5  # y, sq, sk, delta, out
    + [_ptr, _ptr]  # conv_wt, ybuf
)
MOE_DECODE_ARGTYPES = (
    [_i64] * 6  # tokens, hidden, inter, num_experts, top_k, norm_topk
    + [_ptr, _i64, _ptr, _ptr, _ptr, _ptr]  # p, ldp, h, x, gate_up addresses, down addresses
    + [_i64, _ptr, _ptr, _ptr, _i64]  # shared_inter, shared_down, scratch, out, threads
)
MOE_DECODE_MAX_TOKENS = 8  # moe_decode.c's MAX_TOKENS
PAGED_ATTENTION_ARGTYPES = (
    [_i64] * 4  # batch, hq, hkv, d
    + [_f32, _ptr, _i64]  # scale, q, q_stride
    + [_ptr, _ptr, _i64, _ptr, _ptr]  # k_buf, v_buf, num_slots, kv_indptr, kv_slots
    + [_ptr, _ptr, _i64]  # scores, out, threads
)
RMS_NORM_ARGTYPES = [
    _i64,
    _i64,
    _ptr,
    _i64,
    _ptr,
    _f32,
    _ptr,
    _i64,
]  # rows, dim, x, ldx, scale, eps, out, ldo
SMALL_GEMM_ARGTYPES = (
    [_i64] * 3  # m, k, n
    + [_ptr, _i64, _ptr, _i64, _ptr, _i64]  # x, ldx, w, ldw, out, ldo
    + [_i64]  # threads
)


class SmallGemmRule(NamedTuple):
    """The products small_gemm takes instead of torch's (MKL's): x of min_rows to max_rows rows, a
    weight at least min_columns wide."""

    min_rows: int
    max_rows: int
    min_columns: int


# On an Intel Xeon VM (AVX-512, and with it switched off, as on AVX2 hosts), weights cycled through
# 150 MB: [8, 512] x [512, 1552] 248-319 us against MKL's 532-554 (1.7-2.2x), 2 rows 1.3-1.45x;
# 512 columns gained 1.05-1.27x, 256-273 columns lost (0.73-0.91x), and one row lost (0.89-0.98x:
# MKL's matrix-vector product is at the memory's rate already).
INTEL_RULE = SmallGemmRule(min_rows=2, max_rows=8, min_columns=1024)
# MKL runs its generic code on other vendors' CPUs. On an AMD EPYC VM (Zen 5, AVX-512), each of the
# default checkpoint's decode weights cycled through 60 MB: torch.mm 1.6-3.6x slower than small_gemm
# at one row and 1.9-5.9x at 2-8, at every width from 512 to 2,048 columns; over a whole batch-1
# step's products 1.38-1.82x (1.6-2.0 ms against 1.1-1.2 ms for 46.6 MB).
AMD_RULE = SmallGemmRule(min_rows=1, max_rows=8, min_columns=0)


def small_gemm_rule() -> SmallGemmRule:
    """This CPU's rule: measured on Intel and AMD; the Intel one (the narrower) elsewhere."""
    return AMD_RULE if cpu_vendor() == "AuthenticAMD" else INTEL_RULE


def cpu_vendor() -> str:
    """/proc/cpuinfo's vendor_id ("GenuineIntel", "AuthenticAMD"), or "" where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("vendor_id")), "")
    except OSError:
        return ""


def cache_dir() -> Path:
    """$TOKDRIFT_KERNEL_CACHE, else `kernels` beside the default checkpoint ($TOKDRIFT_HOME or
    ~/.cache/tokdrift)."""
    if os.environ.get("TOKDRIFT_KERNEL_CACHE"):
        return Path(os.environ["TOKDRIFT_KERNEL_CACHE"])
    home = os.environ.get("TOKDRIFT_HOME")
    return (Path(home) if home else Path.home() / ".cache" / "tokdrift") / "kernels"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith(("model name", "flags"))), "")
    except OSError:
        return platform.processor()


def _build(compiler: str) -> Path:
    """The shared library, with OpenMP where the compiler has it and without where it has not."""
    try:
        return _build_with(compiler, (*FLAGS, OPENMP))
    except OSError:
        return _build_with(compiler, FLAGS)


def _build_with(compiler: str, flags: tuple[str, ...]) -> Path:
    """The shared library for this source, flags, compiler and CPU: from the cache, or built into it."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    key = hashlib.sha256()
    for source in (*SOURCES, *HEADERS):
        key.update((_HERE / source).read_bytes())
    for part in (*flags, version, _cpu_model(), platform.machine()):
        key.update(part.encode())
    name = f"tokdrift_cpu_{key.hexdigest()[:16]}.so"
    target = cache_dir() / name
    if target.exists():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError:  # a home that cannot be written: the machine's temporary directory, per user
        target = Path(tempfile.gettempdir()) / f"tokdrift-kernels-{os.getuid()}" / name
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
    # built beside the target and renamed into place: processes starting together never load half a file
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.run(
            [compiler, *flags, "-o", tmp, *(str(_HERE / s) for s in SOURCES), "-lm"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode != 0:
            raise OSError(f"{compiler} failed: {proc.stderr.strip()[-500:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def load() -> ctypes.CDLL | None:
    """The kernels' library, or None (and `why_not()` says why): built once per process."""
    global _lib, _why_not, _loaded
    if _loaded:
        return _lib
    _loaded = True
    if os.environ.get("TOKDRIFT_CPU_KERNELS", "1") == "0":
        _why_not = "switched off by TOKDRIFT_CPU_KERNELS=0"
        return None
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        _why_not = "no C compiler found (cc, gcc or $CC)"
        return None
    try:
        lib = ctypes.CDLL(str(_build(compiler)))
    except (OSError, subprocess.SubprocessError) as exc:
        _why_not = f"the build failed: {exc}"
        return None
    lib.gdn_recurrent.argtypes = GDN_RECURRENT_ARGTYPES
    lib.gdn_recurrent.restype = ctypes.c_int
    lib.rms_norm.argtypes = RMS_NORM_ARGTYPES
    lib.rms_norm.restype = ctypes.c_int
    lib.moe_decode.argtypes = MOE_DECODE_ARGTYPES
    lib.moe_decode.restype = ctypes.c_int
    lib.small_gemm.argtypes = SMALL_GEMM_ARGTYPES
    lib.small_gemm.restype = ctypes.c_int
    lib.paged_attention.argtypes = PAGED_ATTENTION_ARGTYPES
    lib.paged_attention.restype = ctypes.c_int
    _lib = lib
    return lib


def why_not() -> str | None:
    """Why `load()` returned None; None where it did not (or has not run)."""
    return _why_not


def reset() -> None:
    """Forget the loaded state, so the next `load()` reads the environment again (tests)."""
    global _lib, _why_not, _loaded
    _lib, _why_not, _loaded = None, None, False
