// spotwave Python binding: exceptions, the Context, version and build information.
#include "common.h"

#include <nanobind/stl/string.h>

#include <cstdarg>
#include <cstdio>

namespace swpy
{

// ------------------------------------------------------------------ exceptions

namespace
{

// One class per status code (index = sw_status), all derived from spotwave.Error and from the
// built-in exception a Python user would catch for that kind of failure.
PyObject *g_error = nullptr;
PyObject *g_classes[SW_ECANCELED + 1] = {};

struct ErrorClass {
    sw_status status;
    const char *name;
    PyObject *builtin;
    const char *doc;
};

std::string vformat(const char *fmt, va_list ap)
{
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    return buf;
}

} // namespace

[[noreturn]] void raise_status(sw_status st, const std::string &message)
{
    const int k = (int)st;
    PyObject *cls = (k >= 1 && k <= SW_ECANCELED && g_classes[k]) ? g_classes[k] : g_error;
    const char *text = message.empty() ? sw_status_string(st) : message.c_str();
    nb::object inst = nb::steal(PyObject_CallFunction(cls, "s", text));
    if (!inst.is_valid())
        throw nb::python_error();
    inst.attr("status") = nb::str(sw_status_string(st));
    inst.attr("code") = nb::int_(k);
    PyErr_SetObject(cls, inst.ptr());
    throw nb::python_error();
}

[[noreturn]] void type_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    throw nb::type_error(s.c_str());
}

[[noreturn]] void value_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    throw nb::value_error(s.c_str());
}

static void make_exceptions(nb::module_ &m)
{
    g_error = PyErr_NewExceptionWithDoc(
        "spotwave.Error",
        "A failure reported by the spotwave library. The message is the library's "
        "(sw_context_error); `status` is the status name and `code` its number (core.h).",
        PyExc_Exception, nullptr);
    if (!g_error)
        throw nb::python_error();
    m.attr("Error") = nb::handle(g_error);
    static const ErrorClass classes[] = {
        {SW_EINVAL, "InvalidArgumentError", PyExc_ValueError,
         "An argument is invalid (SW_EINVAL): out of range, inconsistent sizes."},
        {SW_ENOMEM, "OutOfMemoryError", PyExc_MemoryError,
         "Host or device memory could not be allocated (SW_ENOMEM)."},
        {SW_EIO, "FileError", PyExc_OSError,
         "A file could not be opened, read or written (SW_EIO)."},
        {SW_EFORMAT, "FormatError", PyExc_ValueError,
         "A file or table is malformed, truncated or of an unsupported kind (SW_EFORMAT)."},
        {SW_ECUDA, "CudaError", PyExc_RuntimeError, "A CUDA call failed (SW_ECUDA)."},
        {SW_ENODEV, "NoDeviceError", PyExc_RuntimeError,
         "The requested backend or device is not usable here (SW_ENODEV)."},
        {SW_EUNSUPPORTED, "UnsupportedError", PyExc_NotImplementedError,
         "A valid request that this build or backend does not support (SW_EUNSUPPORTED)."},
        {SW_ERANGE, "RangeError", PyExc_ValueError,
         "A value (pixel, NaN/Inf, dimension) lies outside what is allowed (SW_ERANGE)."},
        {SW_EINTERNAL, "InternalError", PyExc_RuntimeError,
         "A bug in spotwave (SW_EINTERNAL): please report it."},
        {SW_ETIMEDOUT, "TimeoutError", PyExc_TimeoutError,
         "A wait ran out of time (SW_ETIMEDOUT): no new frame in a stream."},
        {SW_ECANCELED, "StoppedError", PyExc_RuntimeError,
         "A wait was stopped by the caller's stop flag (SW_ECANCELED)."},
    };
    for (const ErrorClass &c : classes) {
        nb::object bases = nb::steal(PyTuple_Pack(2, g_error, c.builtin));
        std::string full = std::string("spotwave.") + c.name;
        PyObject *cls = PyErr_NewExceptionWithDoc(full.c_str(), c.doc, bases.ptr(), nullptr);
        if (!cls)
            throw nb::python_error();
        g_classes[c.status] = cls;
        m.attr(c.name) = nb::handle(cls);
    }
}

// ------------------------------------------------------------------ the context

Context &context_of(nb::handle ctx)
{
    Context *c = nullptr;
    if (!nb::try_cast<Context *>(ctx, c, false) || !c)
        type_error("ctx: expected a spotwave.Context, got %s", nb::type_name(ctx.type()).c_str());
    if (!c->ctx)
        value_error("ctx: the context is not initialised");
    return *c;
}

void check_side(const Context &c, Where where, int device_id, const char *name)
{
    if (where != Where::device)
        return;
    if (c.device < 0)
        type_error("%s: a device array needs a CUDA context (this context runs on the CPU: %s)",
                   name, sw_context_backend_reason(c.ctx));
    if (device_id != c.device)
        value_error("%s: the array is on CUDA device %d, the context on device %d", name, device_id,
                    c.device);
}

static nb::dict device_info(Context &c)
{
    sw_device_info info;
    call(c, [&] { return sw_context_device_info(c.ctx, &info); });
    nb::dict d;
    d["ordinal"] = info.ordinal;
    d["name"] = std::string(info.name);
    d["total_memory"] = info.total_memory;
    d["free_memory"] = info.free_memory;
    d["compute_capability"] = nb::make_tuple(info.cc_major, info.cc_minor);
    d["multiprocessors"] = info.multiprocessors;
    d["driver_version"] = info.driver_version;
    d["runtime_version"] = info.runtime_version;
    return d;
}

void bind_core(nb::module_ &m)
{
    make_exceptions(m);

    m.attr("__version__") = sw_version();
    m.def(
        "build_info", [] { return std::string(sw_build_info()); },
        "Build description: compiler, CUDA (and architectures), libraries.");
    m.def(
        "built_with_cuda", [] { return sw_built_with_cuda() != 0; },
        "True when the library was built with the CUDA backend.");
    m.def(
        "data_dir",
        [] {
            char buf[4096];
            call_noctx([&] { return sw_data_dir(nullptr, buf, sizeof buf); });
            return std::string(buf);
        },
        "The folder of spotwave's data files (ocular/, ...): $SPOTWAVE_DATA_DIR, else beside the "
        "library (the package's data/ folder for an installed wheel), else the build's source "
        "tree (core.h, sw_data_dir).");
    m.def(
        "cuda_device_count", [] { return sw_cuda_device_count(); },
        "Number of usable CUDA devices (0 without CUDA, a driver or a device).");

    // For the tests of the array layer: what the binding makes of an array (pointer, sizes,
    // stride, type, memory), without running anything.
    m.def(
        "_describe_image",
        [](nb::handle obj, const char *name, bool allow_3d) {
            ImageArg im = image_arg(obj, name, allow_3d, PIX_ALL);
            nb::dict d;
            d["ptr"] = (uintptr_t)im.img.data;
            d["width"] = im.img.width;
            d["height"] = im.img.height;
            d["stride"] = im.img.stride;
            d["type"] = std::string(sw_pixel_type_string(im.img.type));
            d["memory"] = std::string(where_name(im.where));
            d["frames"] = im.frames;
            d["rows"] = im.rows;
            d["device_id"] = im.device_id;
            return d;
        },
        nb::arg("image"), nb::arg("name") = "image", nb::arg("allow_3d") = true);

    nb::class_<Context>(
        m, "Context", nb::dynamic_attr(),
        "A spotwave context: the backend (CPU or CUDA), the CUDA device and stream, "
        "the CPU threads (sw_context, core.h).\n\n"
        "Context(backend='auto', device=0, threads=0)\n\n"
        "backend: 'auto' takes CUDA device `device` when the library was built with "
        "CUDA and the device is usable, the CPU otherwise (`reason` says why); "
        "'cuda' fails with NoDeviceError when no GPU is usable; 'cpu'.\n"
        "threads: CPU threads for the OpenMP regions (0: all cores).\n\n"
        "Work on device arrays is queued on the context's CUDA stream (`stream`, "
        "a cudaStream_t as an int). To share it with CuPy: "
        "`with cupy.cuda.ExternalStream(ctx.stream): ...`; otherwise spotwave "
        "orders its work after CuPy's current stream and CuPy's current stream "
        "after spotwave's, with CUDA events (no host synchronisation).\n"
        "A context may be shared by threads: calls on it are serialised.")
        .def(
            "__init__",
            [](Context *self, const std::string &backend, int device, int threads) {
                sw_context_params p;
                sw_context_params_default(&p);
                if (sw_backend_parse(backend.c_str(), &p.backend) != SW_OK)
                    value_error("backend: '%s' is not 'auto', 'cpu' or 'cuda'", backend.c_str());
                if (device < 0)
                    value_error("device: %d is not a CUDA device ordinal (>= 0)", device);
                if (threads < 0)
                    value_error("threads: %d is not a thread count (>= 0; 0 = all cores)", threads);
                p.device = device;
                p.threads = threads;
                new (self) Context();
                sw_context *ctx = nullptr;
                call_noctx([&] { return sw_context_create(&p, &ctx); });
                self->ctx = ctx;
                sw_device_info info;
                if (sw_context_backend(ctx) == SW_BACKEND_CUDA &&
                    sw_context_device_info(ctx, &info) == SW_OK)
                    self->device = info.ordinal;
            },
            nb::arg("backend") = "auto", nb::arg("device") = 0, nb::arg("threads") = 0)
        .def_prop_ro(
            "backend",
            [](Context &c) { return std::string(sw_backend_string(sw_context_backend(c.ctx))); },
            "The backend in use: 'cpu' or 'cuda' (never 'auto').")
        .def_prop_ro(
            "reason", [](Context &c) { return std::string(sw_context_backend_reason(c.ctx)); },
            "Why the backend was chosen, in words.")
        .def_prop_ro(
            "device",
            [](Context &c) -> nb::object {
                if (c.device < 0)
                    return nb::none();
                return nb::int_(c.device);
            },
            "The CUDA device ordinal, or None on the CPU.")
        .def_prop_ro(
            "stream", [](Context &c) { return (uintptr_t)sw_context_stream(c.ctx); },
            "The context's cudaStream_t as an int (0 on the CPU).")
        .def_prop_ro(
            "threads", [](Context &c) { return sw_context_threads(c.ctx); },
            "CPU threads of the parallel regions.")
        .def_prop_rw(
            "memory_limit", [](Context &c) { return (uint64_t)sw_context_memory_limit(c.ctx); },
            [](Context &c, nb::handle v) {
                uint64_t bytes = 0;
                if (nb::isinstance<nb::str>(v)) {
                    const std::string text = nb::cast<std::string>(v);
                    call_noctx([&] { return sw_memory_size_parse(text.c_str(), &bytes); });
                } else if (nb::isinstance<nb::int_>(v) && !nb::isinstance<nb::bool_>(v)) {
                    if (!nb::try_cast<uint64_t>(v, bytes))
                        value_error("memory_limit: expected a number of bytes in 0..2^64-1");
                } else {
                    type_error("memory_limit: expected bytes (an int) or a size such as '512M', "
                               "'8G', 'unlimited', got %s",
                               nb::type_name(v.type()).c_str());
                }
                call(c, [&] { return sw_context_set_memory_limit(c.ctx, bytes); });
            },
            "The most bytes one input-sized request may ask for (sw_context_set_memory_limit, "
            "core.h): larger requests (an image or cube a file header claims, a star count, ...) "
            "raise OutOfMemoryError before anything is allocated. Set an int (0: back to the "
            "default) or a size such as '512M', '8G', 'unlimited'. Default: "
            "$SPOTWAVE_MAX_MEMORY, else half of the memory the process may use.")
        .def("device_info", &device_info,
             "The device's name, memory, compute capability, ... as a dict "
             "(NoDeviceError on the CPU).")
        .def(
            "synchronize",
            [](Context &c) { call(c, [&] { return sw_context_synchronize(c.ctx); }); },
            "Waits until the work queued on the context's stream is done (no-op on the CPU).")
        .def("__repr__", [](Context &c) {
            return std::string("spotwave.Context(backend='") +
                   sw_backend_string(sw_context_backend(c.ctx)) + "', reason='" +
                   sw_context_backend_reason(c.ctx) + "')";
        });
}

} // namespace swpy
