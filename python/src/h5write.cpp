// spotwave Python binding: the Eiger-like HDF5 writer of io.h (sw_h5_write, sw_h5_write_linked):
// frames of a NumPy stack as one NeXus file or a master with linked data files.
#include "common.h"

#include <nanobind/stl/string.h>

#include <string>
#include <vector>

namespace swpy
{

namespace
{

void h5_write(const std::string &path, nb::handle image, int32_t frames_per_block,
              const std::string &compression, nb::handle mask, double overload, bool linked)
{
    ImageArg im = image_arg(image, "frames", true, PIX_U8 | PIX_U16 | PIX_U32);
    if (im.where == Where::device)
        type_error("frames: the writer takes host (NumPy) arrays; copy device arrays with .get()");
    std::vector<sw_image> frames((size_t)im.frames);
    for (int32_t k = 0; k < im.frames; k++) {
        frames[k] = im.img;
        frames[k].height = im.rows;
        frames[k].data = (char *)im.img.data + (size_t)k * im.rows * im.img.stride;
    }
    sw_h5_compression comp;
    if (compression == "auto")
        comp = sw_h5_bitshuffle_available() ? SW_H5_BSLZ4 : SW_H5_DEFLATE;
    else if (compression == "bslz4")
        comp = SW_H5_BSLZ4;
    else if (compression == "deflate")
        comp = SW_H5_DEFLATE;
    else if (compression == "none")
        comp = SW_H5_NONE;
    else
        value_error("compression: '%s' is not 'auto', 'bslz4', 'deflate' or 'none'",
                    compression.c_str());
    const uint8_t *valid = nullptr;
    FlatArg m;
    if (!mask.is_none()) {
        m = flat_arg<uint8_t>(mask, "mask", (size_t)im.width * (size_t)im.rows, false);
        if (m.where == Where::device)
            type_error("mask: a host (NumPy) array is needed");
        valid = (const uint8_t *)m.data;
    }
    call_noctx([&] {
        return (linked ? sw_h5_write_linked : sw_h5_write)(nullptr, path.c_str(), frames.data(),
                                                           im.frames, frames_per_block, comp, valid,
                                                           overload);
    });
}

} // namespace

void bind_h5write(nb::module_ &m)
{
    m.def("h5_write", &h5_write, nb::arg("path"), nb::arg("frames"), nb::arg("frames_per_block"),
          nb::arg("compression"), nb::arg("mask").none(), nb::arg("overload"), nb::arg("linked"));
    m.def("h5_bitshuffle_available", [] { return sw_h5_bitshuffle_available() != 0; });
}

} // namespace swpy
