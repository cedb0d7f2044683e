// spotwave Python binding: shared-memory image streams in ImageStreamIO's layout (stream.h).
// The class _Stream owns the mapping through a shared pointer; every NumPy view of the shared
// memory holds a reference too, so closing the stream while views are alive keeps the mapping
// until the last view goes (no dangling memory).
#include "common.h"

#include <Python.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <memory>

namespace swpy
{
namespace
{

struct Mapping {
    sw_stream *s = nullptr;
    ~Mapping()
    {
        sw_stream_close(s);
    }
};

nb::dlpack::dtype dtype_of(sw_stream_type t)
{
    using C = nb::dlpack::dtype_code;
    const uint8_t bits = (uint8_t)(8 * sw_stream_type_size(t));
    switch (t) {
    case SW_STREAM_U8:
    case SW_STREAM_U16:
    case SW_STREAM_U32:
    case SW_STREAM_U64: return {(uint8_t)C::UInt, bits, 1};
    case SW_STREAM_I8:
    case SW_STREAM_I16:
    case SW_STREAM_I32:
    case SW_STREAM_I64: return {(uint8_t)C::Int, bits, 1};
    case SW_STREAM_F16:
    case SW_STREAM_F32:
    case SW_STREAM_F64: return {(uint8_t)C::Float, bits, 1};
    default: return {(uint8_t)C::Complex, bits, 1};
    }
}

struct Stream {
    std::shared_ptr<Mapping> m;

    sw_stream *get() const
    {
        if (!m)
            throw nb::value_error("the stream is closed");
        return m->s;
    }

    // For calls that release the GIL: a reference that keeps the mapping alive until the call
    // returns, even when another thread closes the stream meanwhile.
    std::shared_ptr<Mapping> hold() const
    {
        if (!m)
            throw nb::value_error("the stream is closed");
        return m;
    }

    static Stream create(const std::string &name, const std::vector<uint32_t> &size, int type,
                         int semaphores, int keywords, bool circular, nb::object dir)
    {
        sw_stream_params p;
        sw_stream_params_default(&p);
        p.name = name.c_str();
        if (size.empty() || size.size() > 3)
            value_error("a stream has 1 to 3 axes, not %zu", size.size());
        p.naxis = (int32_t)size.size();
        for (size_t a = 0; a < size.size(); a++)
            p.size[a] = size[a];
        p.type = (sw_stream_type)type;
        p.semaphores = semaphores;
        p.keywords = keywords;
        p.circular = circular ? 1 : 0;
        std::string d = dir.is_none() ? std::string() : nb::cast<std::string>(dir);
        sw_stream *s = nullptr;
        call_noctx(
            [&] { return sw_stream_create(nullptr, d.empty() ? nullptr : d.c_str(), &p, &s); });
        Stream r;
        r.m = std::make_shared<Mapping>();
        r.m->s = s;
        return r;
    }

    static Stream open(const std::string &name, nb::object dir)
    {
        std::string d = dir.is_none() ? std::string() : nb::cast<std::string>(dir);
        sw_stream *s = nullptr;
        call_noctx([&] {
            return sw_stream_open(nullptr, d.empty() ? nullptr : d.c_str(), name.c_str(), &s);
        });
        Stream r;
        r.m = std::make_shared<Mapping>();
        r.m->s = s;
        return r;
    }

    nb::dict info() const
    {
        sw_stream_info in;
        sw_stream_get_info(get(), &in);
        nb::dict d;
        d["name"] = in.name;
        d["path"] = sw_stream_path(get());
        nb::list size;
        for (int a = 0; a < in.naxis; a++)
            size.append(in.size[a]);
        d["size"] = size;
        d["naxis"] = in.naxis;
        d["type"] = sw_stream_type_string(in.type);
        d["type_code"] = (int)in.type;
        d["semaphores"] = in.semaphores;
        d["keyword_slots"] = in.keywords;
        d["circular"] = (bool)in.circular;
        d["cnt0"] = in.cnt0;
        d["cnt1"] = in.cnt1;
        d["write_flag"] = in.write_flag;
        d["creation_time"] = in.creation_time;
        d["write_time"] = in.write_time;
        d["acquire_time"] = in.acquire_time;
        d["access_time"] = in.access_time;
        d["creator_pid"] = in.creator_pid;
        d["owner_pid"] = in.owner_pid;
        d["frame_bytes"] = in.frame_bytes;
        d["file_bytes"] = in.file_bytes;
        d["image_type"] = in.image_type;
        return d;
    }

    // The whole data array (numpy order: slowest axis first), a view kept alive by the mapping.
    nb::object array() const
    {
        sw_stream *s = get();
        sw_stream_info in;
        sw_stream_get_info(s, &in);
        size_t shape[3];
        for (int a = 0; a < in.naxis; a++)
            shape[a] = in.size[in.naxis - 1 - a];
        auto *keep = new std::shared_ptr<Mapping>(m);
        nb::capsule owner(
            keep, [](void *q) noexcept { delete static_cast<std::shared_ptr<Mapping> *>(q); });
        nb::ndarray<nb::numpy> a(sw_stream_data(s), (size_t)in.naxis, shape, owner, nullptr,
                                 dtype_of(in.type));
        return nb::cast(a);
    }

    void write(nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> a)
    {
        const auto keep = hold();
        sw_stream *s = keep->s;
        const void *p = a.data();
        const size_t n = a.nbytes();
        call_noctx([&] { return sw_stream_write(s, p, n); });
    }

    uint64_t read(nb::ndarray<nb::c_contig, nb::device::cpu> out)
    {
        const auto keep = hold();
        sw_stream *s = keep->s;
        void *p = out.data();
        const size_t n = out.nbytes();
        uint64_t c = 0;
        call_noctx([&] { return sw_stream_read(s, p, n, &c); });
        return c;
    }

    // Waits in slices of 0.1 s so that Ctrl-C (KeyboardInterrupt) is seen between them.
    uint64_t wait(int mode, int32_t index, uint64_t after, double timeout)
    {
        const auto keep = hold();
        sw_stream *s = keep->s;
        const auto t0 = std::chrono::steady_clock::now();
        for (;;) {
            double slice = 0.1;
            if (timeout >= 0) {
                const double used =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                slice = std::min(slice, std::max(0.0, timeout - used));
            }
            uint64_t c = 0;
            sw_status st;
            std::string msg;
            {
                nb::gil_scoped_release nogil;
                st = sw_stream_wait(s, (sw_stream_wait_mode)mode, index, after, slice, nullptr, &c);
                if (st != SW_OK)
                    msg = sw_context_error(nullptr);
            }
            if (st == SW_OK)
                return c;
            if (st != SW_ETIMEDOUT)
                raise_status(st, msg);
            if (PyErr_CheckSignals() != 0)
                throw nb::python_error();
            const double used =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (timeout >= 0 && used >= timeout)
                raise_status(SW_ETIMEDOUT, "stream " + std::string(sw_stream_path(s)) +
                                               ": no frame after " + std::to_string(after) +
                                               " within " + std::to_string(timeout) + " s");
        }
    }
};

} // namespace

void bind_stream(nb::module_ &m)
{
    nb::class_<Stream>(m, "_Stream")
        .def_static("create", &Stream::create, nb::arg("name"), nb::arg("size"), nb::arg("type"),
                    nb::arg("semaphores"), nb::arg("keywords"), nb::arg("circular"),
                    nb::arg("dir").none())
        .def_static("open", &Stream::open, nb::arg("name"), nb::arg("dir").none())
        .def("close", [](Stream &s) { s.m.reset(); })
        .def_prop_ro("closed", [](const Stream &s) { return !s.m; })
        .def_prop_ro("path", [](const Stream &s) { return std::string(sw_stream_path(s.get())); })
        .def("info", &Stream::info)
        .def("array", &Stream::array)
        .def("write", &Stream::write, nb::arg("a"))
        .def("read", &Stream::read, nb::arg("out"))
        .def("wait", &Stream::wait, nb::arg("mode"), nb::arg("index"), nb::arg("after"),
             nb::arg("timeout"))
        .def_prop_ro("cnt0", [](const Stream &s) { return sw_stream_cnt0(s.get()); })
        .def_prop_ro("cnt1", [](const Stream &s) { return sw_stream_cnt1(s.get()); })
        .def("stale", [](const Stream &s) { return sw_stream_stale(s.get()) != 0; })
        .def("claim_semaphore",
             [](Stream &s) {
                 int32_t k = -1;
                 const auto keep = s.hold();
                 call_noctx([&] { return sw_stream_claim_semaphore(keep->s, &k); });
                 return k;
             })
        .def("release_semaphore",
             [](Stream &s, int32_t k) { sw_stream_release_semaphore(s.get(), k); })
        .def("flush_semaphore", [](Stream &s, int32_t k) { sw_stream_flush_semaphore(s.get(), k); })
        .def("semaphore_value",
             [](const Stream &s, int32_t k) { return sw_stream_semaphore_value(s.get(), k); })
        .def("set_keyword_int",
             [](Stream &s, const std::string &n, int64_t v, const std::string &c) {
                 call_noctx(
                     [&] { return sw_stream_keyword_set_int(s.get(), n.c_str(), v, c.c_str()); });
             })
        .def("set_keyword_double",
             [](Stream &s, const std::string &n, double v, const std::string &c) {
                 call_noctx([&] {
                     return sw_stream_keyword_set_double(s.get(), n.c_str(), v, c.c_str());
                 });
             })
        .def("set_keyword_string",
             [](Stream &s, const std::string &n, const std::string &v, const std::string &c) {
                 call_noctx([&] {
                     return sw_stream_keyword_set_string(s.get(), n.c_str(), v.c_str(), c.c_str());
                 });
             })
        .def("keywords", [](const Stream &s) {
            nb::list out;
            const int32_t n = sw_stream_keyword_count(s.get());
            for (int32_t i = 0; i < n; i++) {
                char name[17], sv[17], cm[81], ty;
                int64_t iv;
                double dv;
                if (sw_stream_keyword_get(s.get(), i, name, &ty, &iv, &dv, sv, cm) != SW_OK)
                    continue;
                nb::object v = ty == 'L'   ? nb::object(nb::int_(iv))
                               : ty == 'D' ? nb::object(nb::float_(dv))
                                           : nb::object(nb::str(sv));
                out.append(nb::make_tuple(std::string(name), v, std::string(cm)));
            }
            return out;
        });
    m.def(
        "stream_dir",
        [](nb::object dir) {
            std::string d = dir.is_none() ? std::string() : nb::cast<std::string>(dir);
            char buf[4096];
            call_noctx([&] {
                return sw_stream_dir(nullptr, d.empty() ? nullptr : d.c_str(), buf, sizeof buf);
            });
            return std::string(buf);
        },
        nb::arg("dir").none() = nb::none());
    m.def(
        "stream_remove",
        [](const std::string &name, nb::object dir) {
            std::string d = dir.is_none() ? std::string() : nb::cast<std::string>(dir);
            call_noctx([&] {
                return sw_stream_remove(nullptr, d.empty() ? nullptr : d.c_str(), name.c_str());
            });
        },
        nb::arg("name"), nb::arg("dir").none() = nb::none());
}

} // namespace swpy
