"""What the disk caches keep (SPEC 6 and 9): two figures, each from a fresh interpreter with a
fresh, empty ``SPECIALIZER_CACHE_DIR``.

1. Files written in precompile-output mode: ``specializer.precompile_output(True)`` first
   (before the back-ends are imported), then one OpenCL ``launch``, one ``clfunction`` and its
   call, and (where cuda-python is installed) one CUDA ``code_ptx`` through NVRTC (no GPU
   needed). SPEC 6: nothing generated
   is written to disk while the mode is on, so the figure is 0.
2. Files after 300 factory kernels of one signature (closures made by one factory function,
   each launched once on OpenCL). SPEC 9: the disk caches grow with what is distinct (a
   template and a signature's shape, a device source), not with each kernel, so the figure
   is a small constant, the same for 30 kernels as for 300.

Usage: python tools/bench_diskcache.py [--kernels N]   (about 10 s on a shared 2-core machine)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PRECOMPILE = """
import specializer as sp
sp.precompile_output(True)  # the switch, before anything renders

import numpy as np
import pyopencl.array as cla
from specializer.backends import opencl as cl

@cl.kernel
def fill(x: cl.Array[np.float32], v: np.float32) -> str:
    return "__kernel void fill(__global float *x, float v) { x[get_global_id(0)] = v; }"

x = cla.zeros(cl.default_queue(), 4, np.float32)
cl.launch(fill, x, np.float32(1), global_size=4)
hk = cl.clfunction(fill, (cl.Array[np.float32], np.float32))
hk(x, np.float32(2), global_size=4)
assert x.get().tolist() == [2.0] * 4
try:
    from specializer.backends import cuda
except ImportError:
    pass
else:
    @cuda.kernel
    def one(x: cuda.Array[np.float32]) -> str:
        return 'extern "C" __global__ void one(float *x) { x[0] = 1; }'

    assert ".entry one" in cuda.code_ptx(one, (cuda.Array[np.float32],), arch="sm_80")
"""

FACTORY = """
import sys
import numpy as np
import pyopencl.array as cla
from specializer.backends import opencl as cl

def make(v):
    @cl.kernel
    def fill(x: cl.Array[np.float32]) -> str:
        return f"__kernel void fill(__global float *x) {{ x[get_global_id(0)] = {v}.0f; }}"
    return fill

x = cla.zeros(cl.default_queue(), 4, np.float32)
for i in range(int(sys.argv[1])):
    cl.launch(make(i % 3), x, global_size=4)  # three device sources among them
assert x.get().tolist() == [float((int(sys.argv[1]) - 1) % 3)] * 4
"""


def files_after(program: str, *args: str) -> int:
    """How many files ``program`` leaves in a fresh cache directory."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "SPECIALIZER_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
        env.pop("SPECIALIZER_PRECOMPILE_OUTPUT", None)
        r = subprocess.run(
            [sys.executable, "-c", program, *args], env=env, capture_output=True, text=True
        )
        if r.returncode != 0:
            raise SystemExit(r.stderr)
        return sum(1 for p in Path(cache).rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=300)
    n = parser.parse_args().kernels
    print(f"files written in precompile-output mode: {files_after(PRECOMPILE)}")
    print(f"files after {n} factory kernels of one signature: {files_after(FACTORY, str(n))}")


if __name__ == "__main__":
    main()
