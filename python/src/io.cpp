// spotwave Python binding: the readers and writers of io.h — FITS, PGM and Eiger/NeXus HDF5
// frames into NumPy arrays, and NumPy arrays out to FITS / PGM.
#include "common.h"

#include <nanobind/stl/string.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace swpy
{

namespace
{

nb::dlpack::dtype dlpack_of(sw_pixel_type t)
{
    switch (t) {
    case SW_PIX_U8: return nb::dtype<uint8_t>();
    case SW_PIX_U16: return nb::dtype<uint16_t>();
    case SW_PIX_U32: return nb::dtype<uint32_t>();
    default: return nb::dtype<float>();
    }
}

// A new C-contiguous NumPy array of frames x height x width pixels of type t (2-D when frames
// is 1 and squeeze is set), owned by Python.
nb::object new_frames(int64_t frames, int32_t height, int32_t width, sw_pixel_type t, bool squeeze,
                      void **data)
{
    const size_t n = (size_t)frames * (size_t)height * (size_t)width * sw_pixel_size(t);
    char *p = new char[n > 0 ? n : 1];
    nb::capsule owner(p, [](void *q) noexcept { delete[] static_cast<char *>(q); });
    *data = p;
    size_t shape[3] = {(size_t)frames, (size_t)height, (size_t)width};
    const bool two = squeeze && frames == 1;
    nb::ndarray<nb::numpy> a(p, two ? 2 : 3, two ? shape + 1 : shape, owner, nullptr, dlpack_of(t));
    return nb::cast(a);
}

enum class Format { fits, pgm, hdf5, unknown };

Format sniff(const std::string &path)
{
    FILE *f = fopen(path.c_str(), "rb");
    if (!f)
        raise_status(SW_EIO, "'" + path + "': " + strerror(errno));
    unsigned char head[8] = {0};
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    static const unsigned char h5[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    if (n >= 6 && memcmp(head, "SIMPLE", 6) == 0)
        return Format::fits;
    if (n >= 2 && head[0] == 'P' && head[1] == '5')
        return Format::pgm;
    if (n == 8 && memcmp(head, h5, 8) == 0)
        return Format::hdf5;
    return Format::unknown;
}

nb::object read_fits_pgm(const std::string &path, Format fmt)
{
    sw_frames fr{};
    call_noctx([&] {
        if (fmt == Format::fits)
            return sw_fits_read(nullptr, path.c_str(), &fr);
        fr.frames = (sw_image *)calloc(1, sizeof(sw_image));
        if (!fr.frames)
            return SW_ENOMEM;
        sw_status st = sw_pgm_read(nullptr, path.c_str(), &fr.frames[0]);
        if (st == SW_OK)
            fr.count = 1;
        else
            sw_frames_free(&fr);
        return st;
    });
    const sw_image &f0 = fr.frames[0];
    void *data = nullptr;
    nb::object out;
    try {
        out = new_frames(fr.count, f0.height, f0.width, f0.type, true, &data);
    } catch (...) {
        sw_frames_free(&fr);
        throw;
    }
    const size_t row = (size_t)f0.width * sw_pixel_size(f0.type);
    char *d = (char *)data;
    for (int32_t k = 0; k < fr.count; k++)
        for (int32_t y = 0; y < f0.height; y++, d += row)
            memcpy(d, sw_image_row(&fr.frames[k], y), row);
    sw_frames_free(&fr);
    return out;
}

struct H5 {
    sw_h5_reader *r = nullptr;
    ~H5()
    {
        sw_h5_close(r);
    }
};

nb::object read_hdf5(const std::string &path, const char *dataset)
{
    H5 h;
    sw_h5_info info{};
    call_noctx([&] {
        sw_status st = sw_h5_open(nullptr, path.c_str(), dataset, &h.r);
        return st == SW_OK ? sw_h5_get_info(h.r, &info) : st;
    });
    void *data = nullptr;
    nb::object out = new_frames(info.frames, info.height, info.width, info.type, true, &data);
    const size_t plane = (size_t)info.height * (size_t)info.width * sw_pixel_size(info.type);
    call_noctx([&] {
        for (int64_t k = 0; k < info.frames; k++) {
            sw_image dst;
            sw_status st = sw_image_wrap((char *)data + (size_t)k * plane, info.width, info.height,
                                         0, info.type, SW_MEM_HOST, &dst);
            if (st == SW_OK)
                st = sw_h5_read_frame(h.r, k, &dst);
            if (st != SW_OK)
                return st;
        }
        return SW_OK;
    });
    return out;
}

nb::object read(const std::string &path, nb::object dataset)
{
    const Format fmt = sniff(path);
    if (!dataset.is_none() && fmt != Format::hdf5)
        value_error("dataset: '%s' is not an HDF5 file; dataset goes with HDF5 files",
                    path.c_str());
    switch (fmt) {
    case Format::fits:
    case Format::pgm: return read_fits_pgm(path, fmt);
    case Format::hdf5: {
        std::string ds = dataset.is_none() ? std::string() : nb::cast<std::string>(dataset);
        return read_hdf5(path, dataset.is_none() ? nullptr : ds.c_str());
    }
    default: raise_status(SW_EFORMAT, "'" + path + "' is neither FITS, binary PGM (P5) nor HDF5");
    }
}

// What an HDF5 file holds: sizes, type, the overload and the pixel mask (True = good).
nb::dict h5_info(const std::string &path, nb::object dataset)
{
    H5 h;
    sw_h5_info info{};
    std::string ds = dataset.is_none() ? std::string() : nb::cast<std::string>(dataset);
    call_noctx([&] {
        sw_status st =
            sw_h5_open(nullptr, path.c_str(), dataset.is_none() ? nullptr : ds.c_str(), &h.r);
        return st == SW_OK ? sw_h5_get_info(h.r, &info) : st;
    });
    nb::dict d;
    d["frames"] = info.frames;
    d["width"] = info.width;
    d["height"] = info.height;
    d["pixel_type"] = std::string(sw_pixel_type_string(info.type));
    d["blocks"] = info.blocks;
    d["overload"] = info.overload;
    d["compressed"] = info.compressed != 0;
    if (info.has_pixel_mask) {
        void *data = nullptr;
        nb::object mask = new_frames(1, info.height, info.width, SW_PIX_U8, true, &data);
        call_noctx([&] { return sw_h5_read_pixel_mask(h.r, (uint8_t *)data); });
        d["pixel_mask"] = mask;
    } else {
        d["pixel_mask"] = nb::none();
    }
    return d;
}

// Writes a 2-D image or a 3-D stack (host memory) as FITS (a cube for several frames) or PGM.
void write(const std::string &path, nb::handle image, const std::string &format)
{
    ImageArg im = image_arg(image, "image", true, PIX_ALL);
    if (im.where == Where::device)
        type_error("image: the writers take host (NumPy) arrays; copy device arrays with .get()");
    std::vector<sw_image> frames((size_t)im.frames);
    for (int32_t k = 0; k < im.frames; k++) {
        frames[k] = im.img;
        frames[k].height = im.rows;
        frames[k].data = (char *)im.img.data + (size_t)k * im.rows * im.img.stride;
    }
    if (format == "fits") {
        call_noctx([&] { return sw_fits_write(nullptr, path.c_str(), frames.data(), im.frames); });
    } else if (format == "pgm") {
        if (im.frames != 1)
            value_error("image: a PGM file holds one frame, not %d", im.frames);
        call_noctx([&] { return sw_pgm_write(nullptr, path.c_str(), &frames[0]); });
    } else {
        value_error("format: '%s' is not 'fits' or 'pgm'", format.c_str());
    }
}

} // namespace

void bind_io(nb::module_ &m)
{
    m.def("read", &read, nb::arg("path"), nb::arg("dataset").none() = nb::none());
    m.def("h5_info", &h5_info, nb::arg("path"), nb::arg("dataset").none() = nb::none());
    m.def("write", &write, nb::arg("path"), nb::arg("image"), nb::arg("format"));
}

} // namespace swpy
