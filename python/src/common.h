// spotwave Python binding: what every stage's binding shares — the context, the mapping of
// sw_status to Python exceptions, calls into the library without the GIL, and the conversion of
// NumPy / DLPack arrays into sw_image descriptors (no copies: the library reads the caller's
// memory through sw_image's explicit row stride).
//
// The binding is deliberately thin: it validates what the C API cannot see (array shapes, dtypes,
// strides, memory kinds), fills the C parameter structs, and calls the C plans. Parameter names,
// defaults and documentation live in the Python layer (python/spotwave/*.py).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "spotwave/spotwave.h"

namespace nb = nanobind;

namespace swpy
{

// ------------------------------------------------------------------ errors

// Raises spotwave.<Class>(message) for a failed status (the class follows the status: see
// core.cpp), with attributes `status` (sw_status_string) and `code` (the number).
[[noreturn]] void raise_status(sw_status st, const std::string &message);

// TypeError / ValueError with a printf-style message (for arguments the library never sees).
[[noreturn]] void type_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
[[noreturn]] void value_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

// ------------------------------------------------------------------ the context

// A sw_context owned by Python. The library wants one thread at a time on a context (core.h);
// calls run without the GIL, so the binding serialises them with `mu`.
struct Context {
    sw_context *ctx = nullptr;
    int device = -1; // the CUDA device ordinal; -1 on the CPU
    std::mutex mu;
    Context() = default;
    Context(const Context &) = delete;
    Context &operator=(const Context &) = delete;
    ~Context()
    {
        sw_context_destroy(ctx);
    }
};

// Runs f() (returning sw_status) on ctx without the GIL and under the context's lock; on failure
// raises the exception with sw_context_error(ctx), read under the same lock.
template <class F> void call(Context &c, F &&f)
{
    sw_status st;
    std::string msg;
    {
        nb::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(c.mu);
        st = f();
        if (st != SW_OK)
            msg = sw_context_error(c.ctx);
    }
    if (st != SW_OK)
        raise_status(st, msg);
}

// The same for calls made with ctx == NULL: the message is the calling thread's.
template <class F> void call_noctx(F &&f)
{
    sw_status st;
    std::string msg;
    {
        nb::gil_scoped_release nogil;
        st = f();
        if (st != SW_OK)
            msg = sw_context_error(nullptr);
    }
    if (st != SW_OK)
        raise_status(st, msg);
}

// ------------------------------------------------------------------ arrays

using Array = nb::ndarray<nb::ro>; // any array, read through; never written
using ArrayRW = nb::ndarray<>;     // an output the library writes

// The pixel types of sw_pixel_type, as a bit set for what a stage takes.
enum : unsigned {
    PIX_U8 = 1u << SW_PIX_U8,
    PIX_U16 = 1u << SW_PIX_U16,
    PIX_U32 = 1u << SW_PIX_U32,
    PIX_F32 = 1u << SW_PIX_F32,
    PIX_ALL = PIX_U8 | PIX_U16 | PIX_U32 | PIX_F32
};

// Where an array lives, from its DLPack device.
enum class Where { host, pinned, device };

// An image argument: a 2-D (rows, width) array, or 3-D (frames, rows, width) when the stage takes
// frames stacked vertically (frame f, row y is row f * rows + y of `img`, as centroid.h says).
struct ImageArg {
    sw_image img{};     // the whole stack (height = frames * rows)
    int32_t frames = 1; // 1 for a 2-D array
    int32_t rows = 0;   // rows of one frame
    int32_t width = 0;
    Where where = Where::host;
    int device_id = 0;
    Array keep;      // holds the memory while the descriptor is used (inputs)
    ArrayRW keep_rw; // the same for outputs
};

// Converts obj (a NumPy array, a DLPack capsule or any object with __dlpack__ / the buffer
// protocol) into an ImageArg without copying. `name` names the argument in every message.
// allow_3d: a 3-D stack of frames is accepted. types: the PIX_* the stage takes. writable: an
// output (read-only arrays are refused). A DLPack capsule can be consumed once only: convert each
// argument once.
// Raises TypeError (not an array, unsupported dtype or memory) or ValueError (dimensions, empty,
// strides the descriptor cannot express: pixels of a row not contiguous, negative or zero row
// strides, frames not evenly spaced).
ImageArg image_arg(nb::handle obj, const char *name, bool allow_3d, unsigned types,
                   bool writable = false);

// A flat array the library reads or writes as `count` elements of T (count 0: any number),
// C-contiguous (any shape). Checks dtype, contiguity, size and memory; returns the data pointer.
// For outputs writable arrays are required (read-only NumPy arrays are refused).
struct FlatArg {
    void *data = nullptr;
    size_t size = 0; // elements
    Where where = Where::host;
    int device_id = 0;
    ArrayRW keep_rw;
    Array keep_ro;
};
template <class T> FlatArg flat_arg(nb::handle obj, const char *name, size_t count, bool writable);

// Parameters given as a dict (the Python layer passes its keyword arguments through): typed
// getters with defaults, and done() refusing the keys nobody asked for (TypeError naming them).
struct Params {
    nb::dict d;
    const char *what;
    std::vector<std::string> used;
    Params(nb::dict dict, const char *owner) : d(std::move(dict)), what(owner)
    {
    }
    bool has(const char *key);       // present and not None
    nb::object get(const char *key); // None when missing
    double num(const char *key, double def);
    int64_t integer(const char *key, int64_t def);
    uint64_t u64(const char *key, uint64_t def);
    bool flag(const char *key, bool def);
    std::string str(const char *key, const char *def);
    void done();
};

// The pupil tracker's method and given ellipses from q (pupil.cpp; keys "pupil_method": "auto",
// "glow" or "spots"; "given": None or n_pupils (cx, cy, a, b, angle_deg) tuples), as
// `spotwave pupil --pupil-method` and --pupil-ellipse set them.
void pupil_extras(Params &q, sw_pupil_params &p);

// Names of dtypes for messages ("uint8", ...).
std::string dtype_name(nb::dlpack::dtype dt);

// Memory of an argument vs. what a plan was made for.
const char *where_name(Where w);
sw_memory where_memory(Where w);

// A new 1-D NumPy array of n elements owned by Python (the memory freed with the array).
template <class T> nb::ndarray<nb::numpy, T, nb::ndim<1>> new_array(size_t n, T **data)
{
    T *p = new T[n > 0 ? n : 1];
    nb::capsule owner(p, [](void *q) noexcept { delete[] static_cast<T *>(q); });
    *data = p;
    return nb::ndarray<nb::numpy, T, nb::ndim<1>>(p, {n}, owner);
}

// The Context behind a Python object (a spotwave.Context).
Context &context_of(nb::handle ctx);

// Refuses an argument in device memory on a CPU context or on another device than the context's.
void check_side(const Context &c, Where where, int device_id, const char *name);

// ------------------------------------------------------------------ stage bindings

void bind_core(nb::module_ &m);
void bind_io(nb::module_ &m);
void bind_find(nb::module_ &m);
void bind_centroid(nb::module_ &m);
void bind_zernike(nb::module_ &m);
void bind_sim(nb::module_ &m);
void bind_pupil(nb::module_ &m);
void bind_sabre(nb::module_ &m);
void bind_loop(nb::module_ &m);
void bind_stream(nb::module_ &m); // shared-memory streams (stream.cpp)
void bind_sim_eye(nb::module_ &m);
void bind_aberrometry(nb::module_ &m);
void bind_h5write(nb::module_ &m);
void bind_bench(nb::module_ &m); // python -m spotwave.bench: the C side (bench.cpp)

} // namespace swpy
