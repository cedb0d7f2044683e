"""Device arrays: CuPy in gives CuPy out, the same numbers as the NumPy path, read in place (no
copy through the host). Skipped, with the reason, without CuPy, a CUDA build or a GPU."""

import numpy as np
import pytest

import spotwave
from spotwave import _spotwave

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
def sh(gpu):
    z = np.zeros(10)
    z[4], z[3], z[7] = 0.3, 0.1, -0.05
    img, truth, ref = spotwave.sim.sh(grid=(16, 12), pitch=16, zernike=z, pupil_mm=1.3,
                                      read_noise_e=2, seed=4, reference=True, ctx=gpu)
    return img, truth, ref


def test_device_arrays_are_read_in_place(gpu):
    a = cp.arange(40 * 64, dtype=cp.uint16).reshape(40, 64)
    view = a[3:20, 5:37]
    d = _spotwave._describe_image(view.__dlpack__(stream=gpu.stream), "image", True)
    assert d["memory"] == "device" and d["device_id"] == gpu.device
    assert d["ptr"] == view.data.ptr
    assert (d["width"], d["height"], d["stride"]) == (32, 17, 128)


def test_find_cupy_is_the_numpy_path(gpu):
    # A star field with sky: the dispersion threshold's setting (an SH frame's near-empty
    # background under read noise is not: most of its pixels are over-dispersed at gain 1).
    img, truth = spotwave.sim.stars(random=150, size=(256, 192), sigma=1.2, sky_e=50,
                                    read_noise_e=3, zero_point=1e7, mag_range=(5, 10), seed=4,
                                    ctx=gpu)
    host = spotwave.find(img, ctx=gpu)
    dev = spotwave.find(cp.asarray(img), ctx=gpu)
    cpu = spotwave.find(img, ctx=spotwave.Context("cpu"))
    assert len(host) == len(dev) == len(cpu) > 50
    for name in ("frame", "npix", "bbox_x0", "bbox_x1", "bbox_y0", "bbox_y1"):
        assert np.array_equal(dev[name], host[name]) and np.array_equal(dev[name], cpu[name])
    for name in ("x_px", "y_px", "x_var", "y_var", "intensity"):
        assert np.allclose(dev[name], cpu[name], rtol=1e-12, atol=0), name


def test_centroid_cupy_in_cupy_out_bit_identical(gpu, sh):
    img, truth, ref = sh
    host = spotwave.centroid(img, grid=(16, 12), pitch=16, reference=ref,
                             ctx=spotwave.Context("cpu"))
    dev = spotwave.centroid(cp.asarray(img), grid=(16, 12), pitch=16,
                            reference=cp.asarray(ref), ctx=gpu)
    assert isinstance(dev, dict)
    for name in host.dtype.names:
        assert isinstance(dev[name], cp.ndarray), name
        # Integer frames without conditioning: exact sums on both backends (centroid.h).
        assert np.array_equal(cp.asnumpy(dev[name]), host[name], equal_nan=True), name


def test_centroid_plan_device_path_writes_the_given_device_arrays(gpu, sh):
    img = cp.asarray(sh[0])
    plan = spotwave.CentroidPlan(img.shape, img.dtype, grid=(16, 12), pitch=16,
                                 memory="device", max_frames=4, ctx=gpu)
    assert plan.path == "device"
    out = plan.result()
    assert isinstance(out.x, cp.ndarray)
    ptrs = [a.data.ptr for a in (out.x, out.y, out.intensity, out.valid, out.slopes)]
    stack = cp.stack([img, img[::-1]])
    plan(stack, out=out)
    assert out.frames == 2
    assert ptrs == [a.data.ptr for a in (out.x, out.y, out.intensity, out.valid, out.slopes)]
    cpu_plan = spotwave.CentroidPlan(img.shape, img.dtype, grid=(16, 12), pitch=16,
                                     max_frames=4, ctx=spotwave.Context("cpu"))
    want = cpu_plan(cp.asnumpy(stack))
    assert np.array_equal(cp.asnumpy(out.x[:2]), want.x[:2], equal_nan=True)
    assert np.array_equal(cp.asnumpy(out.slopes[:2]), want.slopes[:2])
    # Host frames to a device plan are refused by name (no hidden copy).
    with pytest.raises(TypeError, match="image: host memory"):
        plan(cp.asnumpy(img))


def test_shared_stream(gpu, sh):
    img = cp.asarray(sh[0])
    with cp.cuda.ExternalStream(gpu.stream):
        dev = spotwave.centroid(img, grid=(16, 12), pitch=16, ctx=gpu)
        total = float(dev["intensity"].sum())
    host = spotwave.centroid(sh[0], grid=(16, 12), pitch=16, ctx=gpu)
    assert total == pytest.approx(float(host["intensity"].sum()), rel=1e-6)


def test_sim_device_output_is_the_host_one(gpu):
    img, truth = spotwave.sim.stars(random=50, size=(128, 96), seed=5, read_noise_e=2, ctx=gpu)
    dimg, dtruth = spotwave.sim.stars(random=50, size=(128, 96), seed=5, read_noise_e=2,
                                      device=True, ctx=gpu)
    assert isinstance(dimg, cp.ndarray) and dimg.dtype == cp.uint16
    assert np.array_equal(cp.asnumpy(dimg), img)
    assert np.array_equal(dtruth, truth)


def test_zernike_fit_plan_on_device_slopes(gpu, sh):
    img, truth, ref = sh
    plan = spotwave.CentroidPlan(img.shape, img.dtype, grid=(16, 12), pitch=16,
                                 memory="device", ctx=gpu)
    r = plan(cp.asarray(ref))
    rx = np.where(cp.asnumpy(r.valid[0]) != 0, cp.asnumpy(r.x[0]), np.nan)
    ry = np.where(cp.asnumpy(r.valid[0]) != 0, cp.asnumpy(r.y[0]), np.nan)
    mask = np.isfinite(rx)
    plan = spotwave.CentroidPlan(img.shape, img.dtype, grid=(16, 12), pitch=16, mask=mask,
                                 memory="device", ctx=gpu)
    rx0, ry0 = plan.reference_positions()
    plan.set_reference(np.where(mask, rx, rx0), np.where(mask, ry, ry0))
    res = plan(cp.asarray(img))
    fit = spotwave.zernike.FitPlan(grid=(16, 12), pitch=16, pupil_radius_px=1300 / 2 / 5.5,
                                   mask=mask, order=4, ctx=gpu)
    coef = fit(res.slopes.reshape(1, -1), res.valid.reshape(1, -1))
    assert isinstance(coef, cp.ndarray)
    fit_cpu = spotwave.zernike.FitPlan(grid=(16, 12), pitch=16, pupil_radius_px=1300 / 2 / 5.5,
                                       mask=mask, order=4, ctx=spotwave.Context("cpu"))
    want = fit_cpu(cp.asnumpy(res.slopes).reshape(1, -1), cp.asnumpy(res.valid).reshape(1, -1))
    assert np.allclose(cp.asnumpy(coef), want, atol=1e-7)


def test_device_array_on_a_cpu_context_is_refused_by_name():
    with pytest.raises(TypeError, match="image: a device array needs a CUDA context"):
        spotwave.find(cp.zeros((32, 32), cp.uint16), ctx=spotwave.Context("cpu"))


def test_centroid_real_time_path_is_the_general_path(gpu, sh):
    # The same plan and result, frames on the context's stream: one C call per frame
    # (CentroidPlan._run_fast), the numbers of the general path.
    img = cp.asarray(sh[0])
    plan = spotwave.CentroidPlan(img.shape, img.dtype, grid=(16, 12), pitch=16,
                                 memory="device", max_frames=2, ctx=gpu)
    general = plan(img, out=plan.result(1))
    out = plan.result(2)
    with cp.cuda.ExternalStream(gpu.stream):
        assert plan._run_fast(img, out) is out  # the path was taken
        fast = plan(img, out=out)
        stack = cp.stack([img, img[::-1].copy()])
        plan(stack, out=out)
    gpu.synchronize()
    assert fast is out and out.frames == 2
    assert np.array_equal(cp.asnumpy(out.x[0]), cp.asnumpy(general.x[0]), equal_nan=True)
    flipped = plan(img[::-1].copy(), out=plan.result(1))
    assert np.array_equal(cp.asnumpy(out.x[1]), cp.asnumpy(flipped.x[0]), equal_nan=True)
    # A frame of another layout (a strided view) is not taken by the fast path, and still right.
    with cp.cuda.ExternalStream(gpu.stream):
        wide = cp.zeros((img.shape[0], img.shape[1] * 2), img.dtype)
        wide[:, ::2] = img
        assert plan._run_fast(wide[:, ::2], out) is None


def test_centroid_saturation_on_every_device_path(gpu):
    # A spot clipped at 255 on lenslet 9 of a 4 x 4 grid of 16 px (the others peak below): the
    # saturated flags of the general device path, the real-time path (bind_outputs /
    # run_device) and the host-frame path are the CPU's, kept and dropped.
    k = np.array([0.25, 0.5, 1.0, 0.5, 0.25])
    img = np.zeros((64, 64), np.float64)
    for l in range(16):
        cx, cy = 16 * (l % 4) + 8, 16 * (l // 4) + 8
        img[cy - 2:cy + 3, cx - 2:cx + 3] = np.minimum(
            np.floor((400.0 if l == 9 else 100.0 + 10 * l) * np.outer(k, k)), 255)
    img = img.astype(np.uint8)
    for drop in (False, True):
        kw = dict(pitch=16, drop_saturated=drop)
        want = spotwave.CentroidPlan(img.shape, img.dtype, ctx=spotwave.Context("cpu"), **kw)(img)
        assert list(np.flatnonzero(want.saturated[0])) == [9]
        assert bool(want.valid[0].ravel()[9]) is not drop
        dplan = spotwave.CentroidPlan(img.shape, img.dtype, memory="device", ctx=gpu, **kw)
        general = dplan(cp.asarray(img), out=dplan.result(1))
        out = dplan.result(1)
        with cp.cuda.ExternalStream(gpu.stream):
            frame = cp.asarray(img)
            assert dplan._run_fast(frame, out) is out  # the real-time path was taken
        gpu.synchronize()
        hplan = spotwave.CentroidPlan(img.shape, img.dtype, ctx=gpu, **kw)  # copy path
        host = hplan(img)
        for got in (general, out):
            assert np.array_equal(cp.asnumpy(got.saturated), want.saturated)
            assert np.array_equal(cp.asnumpy(got.valid), want.valid)
            assert np.array_equal(cp.asnumpy(got.x), want.x, equal_nan=True)
        assert np.array_equal(host.saturated, want.saturated)
        assert np.array_equal(host.valid, want.valid)
        table = spotwave.centroid(cp.asarray(img), ctx=gpu, **kw)
        assert list(cp.asnumpy(cp.flatnonzero(table["saturated"]))) == [9]


@pytest.mark.parametrize("method, kw", [
    ("wcog", dict(fwhm_px=4, iterations=3, gain=2, read_noise=3, min_snr=5)),
    ("local", dict(local_k=2.5, max_shift_px=3, edge_px=1)),
    ("brightest", dict(brightest_n=12, peak_border=True, edge_fraction=0.3)),
    ("quadcell", dict(fwhm_px=3)),
    ("correlation", dict(search_px=4)),
])
def test_centroid_methods_cupy_is_the_cpu(gpu, sh, method, kw):
    # The generic per-lenslet code is the same arithmetic on both backends (centroid.h): the
    # status the same, the numbers to float rounding.
    img, truth, ref = sh
    if method == "correlation":
        kw = dict(kw, reference=ref)
    host = spotwave.centroid(img, grid=(16, 12), pitch=16, method=method,
                             ctx=spotwave.Context("cpu"), **kw)
    if method == "correlation":
        kw = dict(kw, reference=cp.asarray(ref))
    dev = spotwave.centroid(cp.asarray(img), grid=(16, 12), pitch=16, method=method, ctx=gpu,
                            **kw)
    assert set(dev) == set(host.dtype.names)
    for name in ("ix", "iy", "valid", "saturated", "status"):
        assert np.array_equal(cp.asnumpy(dev[name]), host[name]), name
    assert (host["valid"] != 0).sum() > 50
    for name in ("x_px", "y_px", "intensity", "x_var", "y_var", "snr"):
        assert np.allclose(cp.asnumpy(dev[name]), host[name], rtol=1e-4, atol=1e-4,
                           equal_nan=True), name


def test_centroid_method_real_time_path_writes_status_and_error_bars(gpu, sh):
    img = sh[0]
    kw = dict(grid=(16, 12), pitch=16, method="wcog", fwhm_px=4, iterations=2, gain=1,
              max_shift_px=4)
    want = spotwave.CentroidPlan(img.shape, img.dtype, ctx=spotwave.Context("cpu"), **kw)(img)
    plan = spotwave.CentroidPlan(img.shape, img.dtype, memory="device", ctx=gpu, **kw)
    assert not plan.fast and plan.method == "wcog"
    out = plan.result(1)
    with cp.cuda.ExternalStream(gpu.stream):
        frame = cp.asarray(img)
        assert plan._run_fast(frame, out) is out  # bind_outputs / run_device took it
    gpu.synchronize()
    assert np.array_equal(cp.asnumpy(out.status), want.status)
    for name in ("x", "x_var", "snr"):
        assert np.allclose(cp.asnumpy(getattr(out, name)), getattr(want, name), rtol=1e-4,
                           atol=1e-4, equal_nan=True), name


@pytest.mark.parametrize("kw", [dict(refine="gauss", background="annulus", read_noise=3),
                                dict(refine="xwin", background="mesh", mesh_size=32)])
def test_find_refine_cupy_is_the_cpu(gpu, kw):
    # A group of lanes per spot on the GPU, the same per-pixel arithmetic as the CPU, its sums in
    # float added in another order (refine.h): positions to 1e-4 px here (error bars of 0.01-0.1
    # px; measured in the C test within ~1e-4 of them).
    img, truth = spotwave.sim.stars(random=150, size=(256, 192), sigma=1.5, sky_e=50,
                                    read_noise_e=3, zero_point=1e7, mag_range=(5, 10), seed=4,
                                    ctx=gpu)
    cpu = spotwave.find(img, ctx=spotwave.Context("cpu"), **kw)
    dev = spotwave.find(cp.asarray(img), ctx=gpu, **kw)
    host = spotwave.find(img, ctx=gpu, **kw)
    assert len(cpu) == len(dev) == len(host) > 50
    for got in (dev, host):
        assert got.dtype == cpu.dtype
        assert np.array_equal(got["refine_flags"], cpu["refine_flags"])
        for name in ("x_px", "y_px"):
            assert np.allclose(got[name], cpu[name], rtol=0, atol=1e-4), name
        for name in ("x_var", "y_var", "flux_adu", "sigma_px", "background_adu"):
            assert np.allclose(got[name], cpu[name], rtol=1e-3, atol=1e-9), name
