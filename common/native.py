"""kb's compiled kernels (common/_kernels.c, built by pip from setup.py) for every module that
uses them: None where the install could not build them. Each user asks for what it needs of them
(a CPU feature, a function an older build lacks) and keeps its own answer where it asks often."""

from __future__ import annotations


def kernels():
    try:
        from . import _kernels
    except ImportError:
        return None
    return _kernels
