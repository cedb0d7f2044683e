"""The package's foundation: the context, errors, and the array conversion layer."""

import numpy as np
import pytest

import spotwave
from spotwave import _spotwave


def test_context_cpu(cpu):
    assert cpu.backend == "cpu"
    assert cpu.device is None
    assert cpu.stream == 0
    assert cpu.threads >= 1
    assert isinstance(cpu.reason, str) and cpu.reason
    cpu.synchronize()
    assert "cpu" in repr(cpu)


def test_context_auto_says_why():
    ctx = spotwave.Context("auto")
    assert ctx.backend in ("cpu", "cuda")
    assert ctx.reason
    if ctx.backend == "cuda":
        assert ctx.device == 0 and ctx.stream != 0
        info = ctx.device_info()
        assert info["name"] and info["total_memory"] > 0
    else:
        with pytest.raises(spotwave.NoDeviceError):
            ctx.device_info()


def test_context_bad_arguments():
    with pytest.raises(ValueError, match="backend: 'gpu'"):
        spotwave.Context("gpu")
    with pytest.raises(ValueError, match="threads"):
        spotwave.Context("cpu", threads=-1)


def test_cuda_context_without_gpu_is_a_no_device_error():
    if spotwave.cuda_device_count() > 0:
        pytest.skip("a GPU is usable here")
    with pytest.raises(spotwave.NoDeviceError) as e:
        spotwave.Context("cuda")
    assert isinstance(e.value, RuntimeError)
    assert e.value.code == 6 and e.value.status
    assert "CUDA" in str(e.value)


def test_error_hierarchy():
    assert issubclass(spotwave.InvalidArgumentError, spotwave.Error)
    assert issubclass(spotwave.InvalidArgumentError, ValueError)
    assert issubclass(spotwave.FileError, OSError)
    assert issubclass(spotwave.FormatError, ValueError)
    assert issubclass(spotwave.RangeError, ValueError)
    assert issubclass(spotwave.NoDeviceError, RuntimeError)
    assert issubclass(spotwave.UnsupportedError, NotImplementedError)


def test_default_context_and_ctx_keyword(cpu):
    spotwave.set_default_context(cpu)
    try:
        assert spotwave.default_context() is cpu
    finally:
        spotwave.set_default_context(None)
    assert spotwave.default_context() is spotwave.default_context()
    with pytest.raises(TypeError, match="ctx: expected a spotwave.Context"):
        spotwave.find(np.zeros((8, 8), np.uint8), ctx="cpu")


def test_data_dir_holds_the_ocular_statistics():
    import os
    d = spotwave.data_dir()
    assert os.path.isfile(os.path.join(d, "ocular", "thibos2002_pupil6.0mm_stats.csv"))


def test_seeds_take_64_bits(cpu):
    a, _ = spotwave.sim.stars(random=5, size=(32, 32), seed=2**64 - 1, ctx=cpu)
    b, _ = spotwave.sim.stars(random=5, size=(32, 32), seed=np.uint64(2**64 - 1), ctx=cpu)
    c, _ = spotwave.sim.stars(random=5, size=(32, 32), seed=2**64 - 2, ctx=cpu)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    with pytest.raises(TypeError, match="seed"):
        spotwave.sim.stars(random=5, size=(32, 32), seed=-1, ctx=cpu)


def test_version_and_build():
    assert spotwave.__version__.count(".") == 2
    assert isinstance(spotwave.build_info(), str)
    assert isinstance(spotwave.built_with_cuda(), bool)


# ------------------------------------------------------------------ array conversion (no copies)

def _describe(a, allow_3d=True):
    return _spotwave._describe_image(a, "image", allow_3d)


def test_views_are_read_in_place_with_their_row_stride():
    base = np.arange(40 * 64, dtype=np.uint16).reshape(40, 64)
    view = base[3:20, 5:37]  # a crop: rows padded by the parent's width
    d = _describe(view)
    assert d["ptr"] == view.__array_interface__["data"][0]
    assert (d["width"], d["height"], d["stride"]) == (32, 17, 64 * 2)
    assert d["type"] == "u16" and d["memory"] == "host"
    every_other_row = base[::2]
    d = _describe(every_other_row)
    assert d["stride"] == 2 * 64 * 2 and d["height"] == 20


def test_stacks_map_onto_frames_stacked_vertically():
    stack = np.zeros((3, 10, 12), np.float32)
    d = _describe(stack)
    assert (d["frames"], d["rows"], d["height"], d["stride"]) == (3, 10, 30, 48)
    with pytest.raises(ValueError, match="frame stride"):
        _describe(np.zeros((3, 10, 12), np.float32)[:, :5, :])
    with pytest.raises(ValueError, match="2-D image"):
        _describe(stack, allow_3d=False)


@pytest.mark.parametrize("bad, exc, text", [
    (np.zeros((8, 8), np.int16), TypeError, "int16 pixels"),
    (np.zeros((8, 8), np.float64), TypeError, "float64 pixels"),
    (np.zeros((8, 8), np.uint16).T[:, :4], ValueError, "contiguous"),
    (np.zeros((8, 8), np.uint8)[:, ::2], ValueError, "contiguous"),
    (np.zeros((8, 8), np.uint8)[::-1], ValueError, "row stride"),
    (np.zeros((0, 8), np.uint8), ValueError, "empty"),
    (np.zeros(8, np.uint8), ValueError, "1-D array"),
    (np.zeros((2, 2, 2, 2), np.uint8), ValueError, "4-D array"),
    ([[1, 2], [3, 4]], TypeError, "expected a NumPy array"),
])
def test_arrays_the_descriptor_cannot_express_are_refused(bad, exc, text):
    with pytest.raises(exc, match=text) as e:
        _describe(bad)
    assert "image" in str(e.value)


def test_foreign_byte_order_is_refused_by_name(cpu):
    img = np.zeros((16, 16), ">u2")
    with pytest.raises(ValueError, match="image: >u2 is not in the machine's byte order"):
        spotwave.find(img, ctx=cpu)


def test_read_only_inputs_are_taken():
    a = np.zeros((4, 4), np.uint8)
    a.flags.writeable = False
    assert _describe(a)["ptr"] == a.__array_interface__["data"][0]


class _FakeDeviceArray:
    """Says it lives on CUDA device 0 (DLPack), without being anything."""
    shape, dtype = (8, 8), np.dtype(np.uint16)

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("a CPU context must refuse before exporting")


def test_device_arrays_on_a_cpu_context_are_refused_by_name(cpu):
    with pytest.raises(TypeError, match="image: a device array needs a CUDA context"):
        spotwave.find(_FakeDeviceArray(), ctx=cpu)
    with pytest.raises(TypeError, match="device=True: a device array needs a CUDA context"):
        spotwave.sim.stars(random=3, size=(16, 16), device=True, ctx=cpu)


def test_context_memory_limit():
    ctx = spotwave.Context("cpu")
    default = ctx.memory_limit
    assert isinstance(default, int) and default > 0
    ctx.memory_limit = "512M"
    assert ctx.memory_limit == 512 * 2**20
    ctx.memory_limit = 12345
    assert ctx.memory_limit == 12345
    ctx.memory_limit = "unlimited"
    assert ctx.memory_limit == 2**64 - 1
    ctx.memory_limit = 0  # back to the default
    assert ctx.memory_limit == default
    with pytest.raises(ValueError, match="not a memory size"):
        ctx.memory_limit = "lots"
    with pytest.raises(TypeError, match="memory_limit"):
        ctx.memory_limit = 1.5
    with pytest.raises(ValueError):
        ctx.memory_limit = -1
    assert ctx.memory_limit == default  # failed assignments leave it as it was

    # a star list of 10^8 stars (3.2 GB) is refused before anything is allocated ...
    ctx.memory_limit = "64M"
    with pytest.raises(spotwave.OutOfMemoryError, match=r"10+ stars: needs .*memory limit of 64 MiB"):
        spotwave.sim.stars(random=10**8, size=(16, 16), ctx=ctx)
    with pytest.raises(MemoryError):  # the built-in a Python user would catch
        spotwave.sim.stars(random=10**8, size=(16, 16), ctx=ctx)
    # ... and a moderate one passes
    image, truth = spotwave.sim.stars(random=100, size=(16, 16), ctx=ctx)
    assert image.shape == (16, 16) and len(truth["x_px"]) == 100
