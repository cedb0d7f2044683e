// spotwave Python binding: arrays in, sw_image descriptors out, without copies.
//
// sw_image describes row-major pixels with an explicit row stride in bytes (core.h); any array
// whose rows are contiguous runs of pixels at a positive, constant row stride maps onto it, and
// a 3-D stack onto frames stacked vertically when its frames are evenly spaced by whole frames of
// rows. Anything else is refused with a message that names the argument: the binding never copies
// to make an array fit (on the GPU path a copy would hide a cost the caller should see).
#include "common.h"

#include <nanobind/stl/string.h>

#include <climits>

namespace swpy
{

std::string dtype_name(nb::dlpack::dtype dt)
{
    const char *kind = "?";
    switch ((nb::dlpack::dtype_code)dt.code) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
    case nb::dlpack::dtype_code::Bool: return "bool";
    default: break;
    }
    std::string s = kind + std::to_string(dt.bits);
    if (dt.lanes != 1)
        s += "x" + std::to_string(dt.lanes);
    return s;
}

const char *where_name(Where w)
{
    return w == Where::device ? "device" : w == Where::pinned ? "pinned host" : "host";
}

sw_memory where_memory(Where w)
{
    return w == Where::device ? SW_MEM_DEVICE : w == Where::pinned ? SW_MEM_PINNED : SW_MEM_HOST;
}

static Where where_of(int device_type, const char *name)
{
    switch (device_type) {
    case nb::device::cpu::value: return Where::host;
    case nb::device::cuda_host::value: return Where::pinned;
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value: return Where::device;
    default:
        type_error("%s: arrays on DLPack device type %d are not supported (host memory or CUDA "
                   "device memory)",
                   name, device_type);
    }
}

static std::string types_text(unsigned types)
{
    std::string s;
    const char *names[] = {nullptr, "uint8", "uint16", "uint32", "float32"};
    int n = 0, total = 0;
    for (int t = SW_PIX_U8; t <= SW_PIX_F32; t++)
        total += (types >> t) & 1u;
    for (int t = SW_PIX_U8; t <= SW_PIX_F32; t++) {
        if (!((types >> t) & 1u))
            continue;
        if (n > 0)
            s += (n == total - 1) ? " or " : ", ";
        s += names[t];
        n++;
    }
    return s;
}

static bool pixel_type_of(nb::dlpack::dtype dt, sw_pixel_type *t)
{
    if (dt == nb::dtype<uint8_t>())
        *t = SW_PIX_U8;
    else if (dt == nb::dtype<uint16_t>())
        *t = SW_PIX_U16;
    else if (dt == nb::dtype<uint32_t>())
        *t = SW_PIX_U32;
    else if (dt == nb::dtype<float>())
        *t = SW_PIX_F32;
    else
        return false;
    return true;
}

template <class A> static std::string shape_text(const A &a)
{
    std::string s = "(";
    for (size_t i = 0; i < a.ndim(); i++) {
        s += std::to_string(a.shape(i));
        if (a.ndim() == 1 || i + 1 < a.ndim())
            s += ", ";
    }
    if (a.ndim() > 1)
        s.pop_back(), s.pop_back();
    return s + ")";
}

template <class A>
static void fill_image(ImageArg &r, const A &a, const char *name, bool allow_3d, unsigned types);

ImageArg image_arg(nb::handle obj, const char *name, bool allow_3d, unsigned types, bool writable)
{
    ImageArg r;
    if (writable) {
        if (!nb::try_cast<ArrayRW>(obj, r.keep_rw, false)) {
            if (nb::try_cast<Array>(obj, r.keep, false))
                value_error("%s: the array is read-only", name);
            type_error("%s: expected a writable NumPy array or device array, got %s", name,
                       nb::type_name(obj.type()).c_str());
        }
        fill_image(r, r.keep_rw, name, allow_3d, types);
    } else {
        if (!nb::try_cast<Array>(obj, r.keep, false))
            type_error("%s: expected a NumPy array or a device array (__dlpack__ / "
                       "__cuda_array_interface__), got %s",
                       name, nb::type_name(obj.type()).c_str());
        fill_image(r, r.keep, name, allow_3d, types);
    }
    return r;
}

template <class A>
static void fill_image(ImageArg &r, const A &a, const char *name, bool allow_3d, unsigned types)
{
    const size_t nd = a.ndim();
    if (nd != 2 && !(allow_3d && nd == 3))
        value_error("%s: expected a 2-D image (height, width)%s, got a %zu-D array of shape %s",
                    name, allow_3d ? " or a 3-D stack (frames, height, width)" : "", nd,
                    shape_text(a).c_str());
    sw_pixel_type type;
    if (!pixel_type_of(a.dtype(), &type) || !((types >> type) & 1u))
        type_error("%s: %s pixels are not taken here; give %s (convert with .astype())", name,
                   dtype_name(a.dtype()).c_str(), types_text(types).c_str());
    r.where = where_of(a.device_type(), name);
    r.device_id = a.device_id();
    for (size_t i = 0; i < nd; i++) {
        if (a.shape(i) == 0)
            value_error("%s: the image is empty (shape %s)", name, shape_text(a).c_str());
        if (a.shape(i) > (size_t)INT32_MAX)
            value_error("%s: dimension %zu of shape %s is too large", name, i,
                        shape_text(a).c_str());
    }
    const size_t isz = sw_pixel_size(type);
    const size_t frames = nd == 3 ? a.shape(0) : 1;
    const size_t rows = a.shape(nd - 2), width = a.shape(nd - 1);
    const int64_t sx = a.stride(nd - 1), sy = a.stride(nd - 2);
    if (width > 1 && sx != 1)
        value_error("%s: the pixels of a row must be contiguous (column stride %lld bytes, "
                    "pixel size %zu bytes); use numpy.ascontiguousarray() or a view with "
                    "contiguous rows",
                    name, (long long)sx * (long long)isz, isz);
    int64_t row_stride = rows > 1 ? sy : (int64_t)width;
    if (row_stride < (int64_t)width)
        value_error("%s: row stride %lld bytes: rows must follow each other at a positive "
                    "stride of at least width x pixel size (%zu bytes)",
                    name, (long long)sy * (long long)isz, width * isz);
    if (nd == 3 && frames > 1 && a.stride(0) != (int64_t)rows * row_stride)
        value_error("%s: frame stride %lld bytes: the frames of a stack must follow each other "
                    "at height x row stride (%lld bytes), as frames stacked vertically",
                    name, (long long)a.stride(0) * (long long)isz,
                    (long long)rows * row_stride * (long long)isz);
    if ((unsigned long long)frames * rows > (unsigned long long)INT32_MAX)
        value_error("%s: %zu frames of %zu rows are too many for one stack", name, frames, rows);
    r.frames = (int32_t)frames;
    r.rows = (int32_t)rows;
    r.width = (int32_t)width;
    r.img.width = (int32_t)width;
    r.img.height = (int32_t)(frames * rows);
    r.img.stride = (size_t)row_stride * isz;
    r.img.type = type;
    r.img.memory = where_memory(r.where);
    r.img.owned = 0;
    r.img.data = const_cast<void *>((const void *)a.data());
}

template <class T> FlatArg flat_arg(nb::handle obj, const char *name, size_t count, bool writable)
{
    FlatArg r;
    const char *tname = nullptr;
    nb::dlpack::dtype want = nb::dtype<T>();
    if (writable) {
        if (!nb::try_cast<ArrayRW>(obj, r.keep_rw, false)) {
            if (nb::try_cast<Array>(obj, r.keep_ro, false))
                value_error("%s: the array is read-only", name);
            type_error("%s: expected a writable NumPy array or device array, got %s", name,
                       nb::type_name(obj.type()).c_str());
        }
    } else if (!nb::try_cast<Array>(obj, r.keep_ro, false)) {
        type_error("%s: expected a NumPy array or device array, got %s", name,
                   nb::type_name(obj.type()).c_str());
    }
    const size_t nd = writable ? r.keep_rw.ndim() : r.keep_ro.ndim();
    const nb::dlpack::dtype dt = writable ? r.keep_rw.dtype() : r.keep_ro.dtype();
    (void)tname;
    if (dt != want)
        type_error("%s: expected %s elements, got %s", name, dtype_name(want).c_str(),
                   dtype_name(dt).c_str());
    size_t n = 1;
    int64_t expect = 1;
    bool contiguous = true;
    for (size_t i = nd; i-- > 0;) {
        const size_t len = writable ? r.keep_rw.shape(i) : r.keep_ro.shape(i);
        const int64_t st = writable ? r.keep_rw.stride(i) : r.keep_ro.stride(i);
        if (len > 1 && st != expect)
            contiguous = false;
        expect *= (int64_t)len;
        n *= len;
    }
    if (count != 0 && n != count)
        value_error("%s: expected %zu elements, got %zu", name, count, n);
    r.size = n;
    if (!contiguous)
        value_error("%s: the array must be C-contiguous", name);
    const int dev = writable ? r.keep_rw.device_type() : r.keep_ro.device_type();
    r.where = where_of(dev, name);
    r.device_id = writable ? r.keep_rw.device_id() : r.keep_ro.device_id();
    r.data = writable ? r.keep_rw.data() : const_cast<void *>(r.keep_ro.data());
    return r;
}

// ------------------------------------------------------------------ parameters

bool Params::has(const char *key)
{
    used.emplace_back(key);
    return d.contains(key) && !d[key].is_none();
}

nb::object Params::get(const char *key)
{
    used.emplace_back(key);
    if (!d.contains(key))
        return nb::none();
    return d[key];
}

double Params::num(const char *key, double def)
{
    nb::object v = get(key);
    if (v.is_none())
        return def;
    double x;
    if (PyBool_Check(v.ptr()) || !nb::try_cast<double>(v, x, true))
        type_error("%s: %s must be a number, got %s", what, key, nb::type_name(v.type()).c_str());
    return x;
}

// A whole number from a Python int or NumPy integer (PyNumber_Index), or a float holding a whole
// number (2.0), as the command's parsers take it; false for anything else.
static bool whole_number(nb::handle v, long long *s, unsigned long long *u, bool want_unsigned)
{
    if (PyBool_Check(v.ptr()))
        return false;
    PyObject *idx = PyNumber_Index(v.ptr());
    if (!idx) {
        PyErr_Clear();
        double f;
        if (!nb::try_cast<double>(v, f, true) || !(f == f) || f != (double)(long long)f)
            return false;
        if (want_unsigned && f < 0)
            return false;
        *s = (long long)f, *u = (unsigned long long)f;
        return true;
    }
    nb::object i = nb::steal(idx);
    if (want_unsigned)
        *u = PyLong_AsUnsignedLongLong(i.ptr());
    else
        *s = PyLong_AsLongLong(i.ptr());
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return false;
    }
    return true;
}

int64_t Params::integer(const char *key, int64_t def)
{
    nb::object v = get(key);
    if (v.is_none())
        return def;
    long long s = 0;
    unsigned long long u = 0;
    if (!whole_number(v, &s, &u, false))
        type_error("%s: %s must be a whole number (64-bit), got %s", what, key,
                   nb::repr(v).c_str());
    return (int64_t)s;
}

uint64_t Params::u64(const char *key, uint64_t def)
{
    nb::object v = get(key);
    if (v.is_none())
        return def;
    long long s = 0;
    unsigned long long u = 0;
    if (!whole_number(v, &s, &u, true))
        type_error("%s: %s must be a whole number in 0 .. 2^64 - 1, got %s", what, key,
                   nb::repr(v).c_str());
    return (uint64_t)u;
}

bool Params::flag(const char *key, bool def)
{
    nb::object v = get(key);
    if (v.is_none())
        return def;
    return PyObject_IsTrue(v.ptr()) == 1;
}

std::string Params::str(const char *key, const char *def)
{
    nb::object v = get(key);
    if (v.is_none())
        return def;
    if (!nb::isinstance<nb::str>(v))
        type_error("%s: %s must be a string, got %s", what, key, nb::type_name(v.type()).c_str());
    return nb::cast<std::string>(v);
}

void Params::done()
{
    std::string unknown;
    for (auto item : d) {
        std::string k = nb::cast<std::string>(nb::str(item.first));
        bool seen = false;
        for (const std::string &u : used)
            seen = seen || u == k;
        if (!seen)
            unknown += (unknown.empty() ? "'" : ", '") + k + "'";
    }
    if (!unknown.empty())
        type_error("%s: unexpected keyword argument %s", what, unknown.c_str());
}

template FlatArg flat_arg<float>(nb::handle, const char *, size_t, bool);
template FlatArg flat_arg<double>(nb::handle, const char *, size_t, bool);
template FlatArg flat_arg<uint8_t>(nb::handle, const char *, size_t, bool);
template FlatArg flat_arg<int32_t>(nb::handle, const char *, size_t, bool);

} // namespace swpy
