"""Kernels on a Dask cluster of process workers: each worker imports this module, and with it
the kernels, and launches them on its own PoCL queue (kernels pickle by reference)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyopencl")
distributed = pytest.importorskip("dask.distributed")

import pyopencl.array as cla  # noqa: E402

from specializer.backends import opencl as cl  # noqa: E402


@cl.kernel
def fill_on_dask(x: cl.Array[np.float32], v: np.float32) -> str:
    return "__kernel void fill_on_dask(__global float *x, float v) { x[get_global_id(0)] = v; }"


def _fill(kernel, v):
    x = cla.zeros(cl.default_queue(), 8, np.float32)
    cl.launch(kernel, x, np.float32(v), global_size=8)
    return x.get().tolist()


@pytest.mark.slow
def test_a_local_cluster_of_process_workers_launches_kernels_and_kernel_instances():
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        futures = client.map(_fill, [fill_on_dask] * 3, [1, 2, 3])
        assert client.gather(futures) == [[1.0] * 8, [2.0] * 8, [3.0] * 8]
        pids = client.run(lambda: __import__("os").getpid())
        assert len(set(pids.values())) == 2
