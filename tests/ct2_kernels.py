"""CTranslate2's own CPU kernels, called through ctypes from the shared library its wheel ships,
so that tests can hold kb's float steps (common/query_encoder.py, common/_kernels.c) against
them value by value. ``kernels()`` is None where the library or its symbols are not found, or
where CTranslate2 would not select its AVX2 kernels (an x86 CPU without AVX2 and FMA, or not
x86): the tests then skip."""

from __future__ import annotations

import ctypes
import glob
import os
import platform

import numpy as np
from bert_ref import cpu_flags

F = np.float32
AVX2 = 2  # ctranslate2::cpu::CpuIsa::AVX2, the one it selects on x86 CPUs with AVX2
GELU = 3  # ctranslate2::ops::ActivationType::GELU


def _x86_avx2_fma() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    return {"avx2", "fma"} <= cpu_flags()


class Kernels:
    def __init__(self, lib: ctypes.CDLL):
        isa = f"ILNS0_6CpuIsaE{AVX2}EEEv"
        self._ln = getattr(lib, f"_ZN11ctranslate23cpu10layer_norm{isa}PKfS4_S4_Pfllf")
        self._q = getattr(lib, f"_ZN11ctranslate23cpu11quantize_s8{isa}PKfPaPfllbb")
        self._dq = getattr(lib, f"_ZN11ctranslate23cpu22dequantize_gemm_output{isa}PKiPKfS6_llPfS6_PKNS_3ops14ActivationTypeE")
        self._gelu = getattr(lib, f"_ZN11ctranslate23cpu4gelu{isa}PKfPfl")
        self._softmax = getattr(lib, f"_ZN11ctranslate23cpu7softmax{isa}PKfPKiPfllb")

    @staticmethod
    def _p(a: np.ndarray):
        return ctypes.c_void_p(a.ctypes.data)

    def layer_norm(self, x, gamma, beta, eps: float) -> np.ndarray:
        x, g, b = (np.ascontiguousarray(a, F) for a in (x, gamma, beta))
        y = np.empty_like(x)
        self._ln(self._p(x), self._p(g), self._p(b), self._p(y), ctypes.c_long(x.shape[0]), ctypes.c_long(x.shape[1]), ctypes.c_float(eps))
        return y

    def quantize(self, x) -> tuple[np.ndarray, np.ndarray]:
        """(uint8 rows shifted by 128, as its u8s8 GEMM takes them, scales)."""
        x = np.ascontiguousarray(x, F)
        q, s = np.empty(x.shape, np.uint8), np.empty(x.shape[0], F)
        self._q(self._p(x), self._p(q), self._p(s), ctypes.c_long(x.shape[0]), ctypes.c_long(x.shape[1]), ctypes.c_bool(True), ctypes.c_bool(True))
        return q, s

    def dequantize(self, acc, a_scale, b_scale, bias, gelu: bool = False) -> np.ndarray:
        acc = np.ascontiguousarray(acc, np.int32)
        a, b, bias = (np.ascontiguousarray(v, F) for v in (a_scale, b_scale, bias))
        y = np.empty(acc.shape, F)
        act = ctypes.c_int(GELU)
        self._dq(self._p(acc), self._p(a), self._p(b), ctypes.c_long(acc.shape[0]), ctypes.c_long(acc.shape[1]), self._p(y), self._p(bias),
                 ctypes.byref(act) if gelu else None)
        return y

    def gelu(self, x) -> np.ndarray:
        x = np.ascontiguousarray(x, F)
        y = np.empty_like(x)
        self._gelu(self._p(x), self._p(y), ctypes.c_long(x.size))
        return y

    def softmax(self, x) -> np.ndarray:
        x = np.ascontiguousarray(x, F)
        y = np.empty_like(x)
        d = x.shape[-1]
        self._softmax(self._p(x), None, self._p(y), ctypes.c_long(x.size // d), ctypes.c_long(d), ctypes.c_bool(False))
        return y


def kernels() -> Kernels | None:
    if not _x86_avx2_fma() or os.environ.get("CT2_FORCE_CPU_ISA"):
        return None
    import ctranslate2

    here = os.path.dirname(ctranslate2.__file__)
    libs = sorted(glob.glob(os.path.join(here, "..", "ctranslate2.libs", "libctranslate2*.so*")) + glob.glob(os.path.join(here, "libctranslate2*.so*")))
    for path in libs:
        try:
            return Kernels(ctypes.CDLL(path))
        except (OSError, AttributeError):
            continue
    return None
