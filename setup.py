"""The one compiled part of kb: common/_kernels.c, the in-place query encoder's int8 products
(common/query_encoder.py), cosines over float16 vectors (runtime/cosines.py) and crc32
(formats/checksum.py). Everything else is declared in pyproject.toml. The extension is optional:
where it cannot be compiled, the encoder runs numkong's or numpy's kernels instead, slower, with
the same query vectors bit for bit (tests/models/test_kernels.py), cosines come from numkong and
crc32s from zlib-ng."""

import sys

from setuptools import Extension, setup

args = [] if sys.platform == "win32" else ["-O3", "-fno-math-errno"]
setup(ext_modules=[Extension("kb.common._kernels", ["common/_kernels.c"], extra_compile_args=args, optional=True)])
