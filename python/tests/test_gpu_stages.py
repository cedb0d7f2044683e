"""Device arrays through the sabre, loop and aberrometry stages: CuPy in, CuPy (or the documented
host) out, the numbers of the CPU path to rounding (cuBLAS vs OpenBLAS), outputs written in
place. Skipped, with the reason, without CuPy, a CUDA build or a GPU."""

import numpy as np
import pytest

import spotwave

cp = pytest.importorskip("cupy", reason="CuPy is not installed (pip install cupy-cuda12x)")
if not spotwave.built_with_cuda():
    pytest.skip("spotwave was built without CUDA (no nvcc at configure time)",
                allow_module_level=True)
if spotwave.cuda_device_count() == 0:
    pytest.skip("no usable CUDA device", allow_module_level=True)


@pytest.fixture(scope="module")
def gpu():
    return spotwave.Context("cuda")


@pytest.fixture(scope="module")
def cpu1():
    return spotwave.Context("cpu", threads=1)


def test_dsabre_on_device_slopes(gpu, cpu1):
    rng = np.random.default_rng(2)
    n = 16
    s = (rng.normal(size=(2, n, n)) * 1e-3).astype(np.float32)
    host = spotwave.sabre.SabrePlan((n, n), partitions=4, ctx=cpu1)(s)
    plan = spotwave.sabre.SabrePlan((n, n), partitions=4, memory="device", ctx=gpu)
    out = plan.result()
    ptrs = (out.values.data.ptr, out.actuators.data.ptr)
    r = plan(cp.asarray(s), out=out)
    assert isinstance(r.values, cp.ndarray) and ptrs == (r.values.data.ptr,
                                                         r.actuators.data.ptr)
    scale = np.abs(host.actuators).max()
    assert np.allclose(r.actuators.get(), host.actuators, atol=1e-4 * scale)
    assert np.allclose(r.values.get(), host.values, atol=1e-4 * scale)
    # host slopes on the CUDA context: the whole run on the GPU, host outputs
    h = spotwave.sabre.SabrePlan((n, n), partitions=4, ctx=gpu)(s)
    assert isinstance(h.actuators, np.ndarray)
    assert np.allclose(h.actuators, r.actuators.get(), atol=1e-6 * scale)


def test_mirror_and_projector_on_device(gpu, cpu1):
    dm = spotwave.loop.DM((10, 10), coupling=0.3)
    u = np.random.default_rng(3).normal(size=dm.nact).astype(np.float32)
    ref = dm.shaper(samples=4, ctx=cpu1)(u)
    sh = dm.shaper(samples=4, memory="device", ctx=gpu)
    surf = sh(cp.asarray(u))
    assert isinstance(surf, cp.ndarray)
    assert np.allclose(surf.get(), ref, atol=1e-5 * np.abs(u).max())
    lat = spotwave.sabre.Lattice(9, 9)
    c = np.random.default_rng(4).normal(size=lat.nvalues).astype(np.float32)
    P = spotwave.loop.Projector(dm, lat, ctx=gpu)
    assert np.allclose(P(cp.asarray(c)).get(), P.matrix @ c, atol=1e-4)


def test_rtc_on_device_frames(gpu, cpu1):
    img, _ = spotwave.sim.sh(grid=(8, 8), pitch=12, zernike=[0, 0, 0, 0, 0.2, 0.1],
                             noise="none", ctx=cpu1)
    cm = (np.random.default_rng(5).normal(size=(81, 128)) * 0.01).astype(np.float32)
    kw = dict(pitch=12, grid=(8, 8), cm=cm, gain=0.5)
    ref = spotwave.loop.RTC(img.shape, img.dtype, ctx=cpu1, **kw)(img).copy()
    rtc = spotwave.loop.RTC(img.shape, img.dtype, telemetry=2, ctx=gpu, **kw)
    u = rtc(cp.asarray(img))
    assert isinstance(u, np.ndarray) and np.allclose(u, ref, atol=1e-5)
    rtc.reset()
    assert np.array_equal(rtc(img), u)  # host frames: the same chain on the GPU
    assert rtc.telemetry()[0] == 2
    srt = spotwave.loop.RTC(img.shape, img.dtype, pitch=12, grid=(8, 8), recon="sabre",
                            sabre=dict(partitions=2, pitch=66.0), projection="local", ctx=gpu)
    sref = spotwave.loop.RTC(img.shape, img.dtype, pitch=12, grid=(8, 8), recon="sabre",
                             sabre=dict(partitions=2, pitch=66.0), projection="local",
                             ctx=cpu1)(img).copy()
    assert np.allclose(srt(cp.asarray(img)), sref, atol=1e-4 * np.abs(sref).max())


def test_loop_simulator_on_the_gpu(gpu):
    s = spotwave.loop.simulate(nx=8, frames=15, warmup=3, model="geometric", samples=4,
                               recon="dsabre-local", partitions=2, ctx=gpu)
    assert s["backend"] == "cuda" and s["residual_nm_mean"] < s["turbulence_nm_mean"]


def test_aberrometry_on_device_frames(gpu, cpu1):
    img, truth, ref = spotwave.sim.eye(rms_um=1.0, seed=17, reference=True, ctx=cpu1)
    r_cpu = spotwave.aberrometry.reference(ref, ctx=cpu1)
    with pytest.raises(TypeError, match="reference: find_geometry reads a host image"):
        spotwave.aberrometry.reference(cp.asarray(ref), ctx=gpu)  # the grid is found on the host
    r_gpu = spotwave.aberrometry.reference(ref, ctx=gpu)
    assert np.array_equal(r_cpu.ref_x, r_gpu.ref_x, equal_nan=True)  # search.h: bit-identical
    plan = spotwave.aberrometry.AberrometryPlan(r_gpu, ctx=gpu)
    (e,) = plan(cp.asarray(img)).eyes
    (h,) = spotwave.aberrometry.AberrometryPlan(r_cpu, ctx=cpu1)(img).eyes
    assert e.valid and h.valid and e.kept == h.kept
    assert np.allclose(e.coef_um, h.coef_um, atol=1e-6)
    both = plan(cp.asarray(np.stack([img, img])))
    assert len(both) == 2 and np.allclose(both[1].eyes[0].coef_um, e.coef_um, atol=1e-9)
