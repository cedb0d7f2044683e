// spotwave Python binding: the find stage (find.h) — the dispersion spot finder's plan, run on
// one frame (host or device) or on a host stack through the library's double-buffered pipeline;
// with a refinement plan attached (refine.h), the refined positions and their details.
#include "common.h"

#include <nanobind/stl/string.h>

#include <cstring>
#include <stdexcept>

#include "spotwave/refine.h"

namespace swpy
{

namespace
{

struct FindPlan {
    nb::object ctx_obj;
    Context *ctx = nullptr;
    sw_find_plan *plan = nullptr;
    sw_find_params p{};
    std::vector<uint8_t> mask;
    std::vector<float> gain_map;
    sw_spot_list spots{}; // reused run after run: capacity kept, no allocation once grown
    sw_find_stats stats{};
    sw_refine_params rp{};            // rp.method NONE: no refinement
    sw_refine_plan *refine = nullptr; // attached to plan (sw_find_set_refine)
    sw_refine_list refined{};         // one result per spot of `spots`
    double moffat_beta = SW_REFINE_MOFFAT_BETA; // the refinement's Moffat exponent
    FindPlan() = default;
    FindPlan(const FindPlan &) = delete;
    FindPlan &operator=(const FindPlan &) = delete;
    ~FindPlan()
    {
        sw_find_destroy(plan); // before the refinement plan it uses
        sw_refine_destroy(refine);
        sw_spot_list_free(&spots);
        sw_refine_list_free(&refined);
    }
    void clear()
    {
        spots.count = 0;
        refined.count = 0;
        stats = sw_find_stats{};
    }
};

sw_pixel_type parse_pixel_type(const std::string &s)
{
    sw_pixel_type t;
    if (sw_pixel_type_parse(s.c_str(), &t) != SW_OK)
        value_error("pixel_type: '%s' is not uint8, uint16, uint32 or float32", s.c_str());
    return t;
}

// A per-pixel host map of the frame size copied into v (C-contiguous, the dtype T).
template <class T>
void copy_map(nb::handle obj, const char *name, int32_t w, int32_t h, std::vector<T> &v)
{
    FlatArg a = flat_arg<T>(obj, name, (size_t)w * (size_t)h, false);
    if (a.where == Where::device)
        type_error("%s: a host (NumPy) array is needed: the plan copies it when it is made", name);
    v.assign((const T *)a.data, (const T *)a.data + (size_t)w * (size_t)h);
}

// The spot list as columns (1-D NumPy arrays), for the Python layer to assemble its table;
// with a refinement, its flags, flux, width and background per spot too.
nb::dict spot_columns(const sw_spot_list &l, const sw_refine_list *refined)
{
    const size_t n = (size_t)l.count;
    double *x, *y, *z, *xv, *yv, *zv, *in, *pk;
    int64_t *np, *z0, *z1;
    int32_t *x0, *x1, *y0, *y1, *px, *py;
    nb::dict d;
    d["x"] = new_array(n, &x);
    d["y"] = new_array(n, &y);
    d["z"] = new_array(n, &z);
    d["x_var"] = new_array(n, &xv);
    d["y_var"] = new_array(n, &yv);
    d["z_var"] = new_array(n, &zv);
    d["intensity"] = new_array(n, &in);
    d["npix"] = new_array(n, &np);
    d["x0"] = new_array(n, &x0);
    d["x1"] = new_array(n, &x1);
    d["y0"] = new_array(n, &y0);
    d["y1"] = new_array(n, &y1);
    d["z0"] = new_array(n, &z0);
    d["z1"] = new_array(n, &z1);
    d["peak_x"] = new_array(n, &px);
    d["peak_y"] = new_array(n, &py);
    d["peak"] = new_array(n, &pk);
    for (size_t i = 0; i < n; i++) {
        const sw_spot &s = l.spots[i];
        x[i] = s.x, y[i] = s.y, z[i] = s.z;
        xv[i] = s.x_var, yv[i] = s.y_var, zv[i] = s.z_var;
        in[i] = s.intensity, np[i] = s.npix;
        x0[i] = s.x0, x1[i] = s.x1, y0[i] = s.y0, y1[i] = s.y1, z0[i] = s.z0, z1[i] = s.z1;
        px[i] = s.peak_x, py[i] = s.peak_y, pk[i] = s.peak;
    }
    if (refined) {
        if (refined->count != l.count)
            throw std::runtime_error("find: the refinement results do not match the spots");
        int32_t *fl;
        double *fx, *sg, *bg;
        d["refine_flags"] = new_array(n, &fl);
        d["flux_adu"] = new_array(n, &fx);
        d["sigma_px"] = new_array(n, &sg);
        d["background_adu"] = new_array(n, &bg);
        for (size_t i = 0; i < n; i++) {
            const sw_refine_result &r = refined->items[i];
            fl[i] = r.flags, fx[i] = r.flux, sg[i] = r.sigma, bg[i] = r.background;
        }
    }
    return d;
}

nb::dict stats_dict(const sw_find_stats &s)
{
    nb::dict d;
    d["frames"] = s.frames;
    d["valid_pixels"] = s.valid_pixels;
    d["strong_pixels"] = s.strong_pixels;
    d["components"] = s.components;
    d["spots"] = s.spots;
    d["rejected_small"] = s.rejected_small;
    d["rejected_large"] = s.rejected_large;
    d["rejected_separation"] = s.rejected_separation;
    return d;
}

void plan_init(FindPlan *self, nb::object ctx_obj, int32_t width, int32_t height,
               const std::string &pixel_type, nb::dict params)
{
    new (self) FindPlan();
    self->ctx_obj = ctx_obj;
    self->ctx = &context_of(ctx_obj);
    sw_find_params &p = self->p;
    sw_find_params_default(&p, width, height, parse_pixel_type(pixel_type));
    Params q(params, "FindPlan");
    std::string alg = q.str("algorithm", sw_find_algorithm_string(p.algorithm));
    if (sw_find_algorithm_parse(alg.c_str(), &p.algorithm) != SW_OK)
        value_error("algorithm: '%s' is not 'dispersion' or 'dispersion_extended'", alg.c_str());
    p.kernel_x = (int32_t)q.integer("kernel_x", p.kernel_x);
    p.kernel_y = (int32_t)q.integer("kernel_y", p.kernel_y);
    p.sigma_background = q.num("sigma_b", p.sigma_background);
    p.sigma_strong = q.num("sigma_s", p.sigma_strong);
    p.min_local = (int32_t)q.integer("min_local", p.min_local);
    p.global_threshold = q.num("global_threshold", p.global_threshold);
    p.gain = q.num("gain", p.gain);
    p.overload = q.num("overload", p.overload);
    p.connectivity = (int32_t)q.integer("connectivity", p.connectivity);
    p.min_spot_size = q.integer("min_spot_size", p.min_spot_size);
    p.max_spot_size = q.integer("max_spot_size", p.max_spot_size);
    p.max_separation = q.num("max_separation", p.max_separation);
    p.max_strong_fraction = q.num("max_strong_fraction", p.max_strong_fraction);
    p.max_components = (int32_t)q.integer("max_components", p.max_components);
    std::string win = q.str("window", "auto");
    if (win == "auto")
        p.window = SW_FIND_WINDOW_AUTO;
    else if (win == "brute")
        p.window = SW_FIND_WINDOW_BRUTE;
    else if (win == "tiled")
        p.window = SW_FIND_WINDOW_TILED;
    else
        value_error("window: '%s' is not 'auto', 'brute' or 'tiled'", win.c_str());
    if (q.has("mask")) {
        copy_map<uint8_t>(q.get("mask"), "mask", width, height, self->mask);
        p.mask = self->mask.data();
    }
    if (q.has("gain_map")) {
        copy_map<float>(q.get("gain_map"), "gain_map", width, height, self->gain_map);
        p.gain_map = self->gain_map.data();
    }
    // The refinement (refine.h), as `spotwave find --refine` makes it.
    sw_refine_params &rp = self->rp;
    sw_refine_params_default(&rp, width, height, p.type);
    rp.method = SW_REFINE_NONE;
    std::string method = q.str("refine", "none");
    if (sw_refine_method_parse(method.c_str(), &rp.method) != SW_OK)
        value_error("refine: '%s' is not 'none', 'xwin', 'gauss' or 'moffat'", method.c_str());
    std::string bg = q.str("background", "none");
    if (sw_refine_background_parse(bg.c_str(), &rp.background) != SW_OK)
        value_error("background: '%s' is not 'none', 'annulus' or 'mesh'", bg.c_str());
    rp.mesh_size = (int32_t)q.integer("mesh_size", rp.mesh_size);
    rp.radius = (int32_t)q.integer("stamp_radius", rp.radius);
    rp.gain = q.num("detector_gain", rp.gain);
    rp.read_noise = q.num("read_noise", rp.read_noise);
    rp.bias = q.num("bias", rp.bias);
    const bool have_beta = q.has("moffat_beta");
    self->moffat_beta = q.num("moffat_beta", SW_REFINE_MOFFAT_BETA);
    q.done();
    if (rp.method == SW_REFINE_NONE && rp.background != SW_BACKGROUND_NONE)
        value_error("background: needs refine='xwin', 'gauss' or 'moffat'");
    if (have_beta && rp.method != SW_REFINE_MOFFAT)
        value_error("moffat_beta: needs refine='moffat'");
    Context &c = *self->ctx;
    call(c, [&] { return sw_find_create(c.ctx, &p, &self->plan); });
    if (rp.method != SW_REFINE_NONE) {
        rp.mask = p.mask;
        // The find plan's overload, or the type's default (as the command sets it).
        rp.overload = p.overload > 0         ? p.overload
                      : p.type == SW_PIX_U8  ? 255.0
                      : p.type == SW_PIX_U16 ? 65534.0
                      : p.type == SW_PIX_U32 ? 4294967294.0
                                             : 0.0;
        call(c, [&] { return sw_refine_create(c.ctx, &rp, &self->refine); });
        call(c, [&] { return sw_refine_set_moffat_beta(self->refine, self->moffat_beta); });
        call(c, [&] { return sw_find_set_refine(self->plan, self->refine, &self->refined); });
    }
}

void check_frames(const FindPlan &fp, const ImageArg &im, const char *name)
{
    const sw_find_params &p = fp.p;
    if (im.width != p.width || im.rows != p.height || im.img.type != p.type)
        value_error("%s: %s frames of %d x %d (width x height), the plan was made for %s frames "
                    "of %d x %d",
                    name, sw_pixel_type_string(im.img.type), im.width, im.rows,
                    sw_pixel_type_string(p.type), p.width, p.height);
    check_side(*fp.ctx, im.where, im.device_id, name);
}

// One frame, or each frame of a stack, by sw_find_run (host or device memory).
nb::dict plan_run(FindPlan &fp, nb::handle frame, int64_t frame_index, nb::handle strong)
{
    ImageArg im = image_arg(frame, "image", true, PIX_ALL);
    check_frames(fp, im, "image");
    FlatArg st;
    if (!strong.is_none()) {
        st = flat_arg<uint8_t>(strong, "strong", (size_t)im.frames * im.rows * im.width, true);
        if (st.where == Where::device)
            type_error("strong: the strong-pixel mask is written on the host: give a NumPy "
                       "uint8 array");
    }
    fp.clear();
    Context &c = *fp.ctx;
    call(c, [&] {
        for (int32_t f = 0; f < im.frames; f++) {
            sw_image one = im.img;
            one.height = im.rows;
            one.data = (char *)im.img.data + (size_t)f * im.rows * im.img.stride;
            sw_image mask{}, *mp = nullptr;
            if (st.data) {
                const size_t plane = (size_t)im.rows * im.width;
                sw_status s = sw_image_wrap((uint8_t *)st.data + (size_t)f * plane, im.width,
                                            im.rows, 0, SW_PIX_U8, SW_MEM_HOST, &mask);
                if (s != SW_OK)
                    return s;
                mp = &mask;
            }
            sw_status s = sw_find_run(fp.plan, &one, frame_index + f, &fp.spots, mp, &fp.stats);
            if (s != SW_OK)
                return s;
        }
        return SW_OK;
    });
    return spot_columns(fp.spots, fp.refine ? &fp.refined : nullptr);
}

// A host stack through sw_find_sequence: the reader thread copies frames out of the stack while
// the previous ones are processed; three_d joins spots across frames.
struct SeqJob {
    const ImageArg *im = nullptr;
    int64_t first = 0;
    uint8_t *strong = nullptr; // frames * rows * width, or NULL
    nb::object progress;
    bool failed_callback = false;
    nb::object error; // the first exception a progress callback raised
};

sw_status seq_read(void *user, int64_t index, sw_image *dst)
{
    const SeqJob *j = (const SeqJob *)user;
    const ImageArg &im = *j->im;
    const int64_t k = index - j->first;
    const size_t row = (size_t)im.width * sw_pixel_size(im.img.type);
    for (int32_t y = 0; y < im.rows; y++)
        memcpy(sw_image_row(dst, y),
               (const char *)im.img.data + ((size_t)k * im.rows + (size_t)y) * im.img.stride, row);
    return SW_OK;
}

sw_status seq_strong(void *user, int64_t index, const sw_image *mask)
{
    const SeqJob *j = (const SeqJob *)user;
    const ImageArg &im = *j->im;
    const int64_t k = index - j->first;
    for (int32_t y = 0; y < im.rows; y++)
        memcpy(j->strong + ((size_t)k * im.rows + (size_t)y) * im.width, sw_image_row(mask, y),
               (size_t)im.width);
    return SW_OK;
}

void seq_progress(void *user, int64_t done, int64_t total)
{
    SeqJob *j = (SeqJob *)user;
    if (j->failed_callback)
        return;
    nb::gil_scoped_acquire gil;
    try {
        j->progress(done, total);
    } catch (nb::python_error &e) {
        j->failed_callback = true;
        j->error = nb::borrow(e.value());
    }
}

nb::dict plan_run_sequence(FindPlan &fp, nb::handle stack, int64_t first, bool three_d,
                           nb::handle strong, nb::object progress)
{
    ImageArg im = image_arg(stack, "image", true, PIX_ALL);
    check_frames(fp, im, "image");
    if (im.where == Where::device)
        type_error("image: a stack of device frames is run frame by frame (three_d=False); the "
                   "pipeline reads host frames");
    SeqJob job;
    job.im = &im;
    job.first = first;
    job.strong = nullptr;
    job.progress = progress;
    FlatArg st;
    if (!strong.is_none()) {
        st = flat_arg<uint8_t>(strong, "strong", (size_t)im.frames * im.rows * im.width, true);
        if (st.where == Where::device)
            type_error("strong: the strong-pixel mask is written on the host: give a NumPy "
                       "uint8 array");
        job.strong = (uint8_t *)st.data;
    }
    sw_find_source src{seq_read, job.strong ? seq_strong : nullptr,
                       progress.is_none() ? nullptr : seq_progress, &job};
    fp.clear();
    Context &c = *fp.ctx;
    call(c, [&] {
        return sw_find_sequence(fp.plan, first, im.frames, &src, three_d ? 1 : 0, &fp.spots,
                                &fp.stats);
    });
    if (job.failed_callback) {
        PyErr_SetObject((PyObject *)Py_TYPE(job.error.ptr()), job.error.ptr());
        throw nb::python_error();
    }
    return spot_columns(fp.spots, fp.refine ? &fp.refined : nullptr);
}

// CCD mode (sw_ccd_estimate_frame): the background statistics of one host frame.
nb::dict ccd_estimate(nb::object ctx_obj, nb::handle frame, nb::handle mask, double bias,
                      double read_noise)
{
    Context &c = context_of(ctx_obj);
    ImageArg im = image_arg(frame, "image", false, PIX_ALL);
    if (im.where == Where::device)
        type_error("image: the CCD estimate reads a host frame (a NumPy array)");
    std::vector<uint8_t> m;
    if (!mask.is_none())
        copy_map<uint8_t>(mask, "mask", im.width, im.rows, m);
    sw_ccd_estimate e{};
    call(c, [&] {
        return sw_ccd_estimate_frame(c.ctx, &im.img, m.empty() ? nullptr : m.data(), bias,
                                     read_noise, &e);
    });
    nb::dict d;
    d["mean"] = e.mean;
    d["variance"] = e.variance;
    d["npix"] = e.npix;
    d["dispersion_gain"] = e.dispersion_gain;
    d["gain"] = e.gain;
    return d;
}

} // namespace

void bind_find(nb::module_ &m)
{
    nb::class_<FindPlan>(m, "FindPlan",
                         "The find plan (find.h): FindPlan(ctx, width, height, pixel_type, "
                         "params). Use spotwave.FindPlan.")
        .def("__init__", &plan_init, nb::arg("ctx"), nb::arg("width"), nb::arg("height"),
             nb::arg("pixel_type"), nb::arg("params"))
        .def("run", &plan_run, nb::arg("image"), nb::arg("frame_index") = 0,
             nb::arg("strong") = nb::none())
        .def("run_sequence", &plan_run_sequence, nb::arg("image"), nb::arg("first") = 0,
             nb::arg("three_d") = false, nb::arg("strong") = nb::none(),
             nb::arg("progress") = nb::none())
        .def_prop_ro("stats", [](FindPlan &fp) { return stats_dict(fp.stats); })
        .def_prop_ro("width", [](FindPlan &fp) { return fp.p.width; })
        .def_prop_ro("height", [](FindPlan &fp) { return fp.p.height; })
        .def_prop_ro("pixel_type",
                     [](FindPlan &fp) { return std::string(sw_pixel_type_string(fp.p.type)); })
        .def_prop_ro("ctx", [](FindPlan &fp) { return fp.ctx_obj; })
        .def_prop_ro("refine",
                     [](FindPlan &fp) {
                         const sw_refine_params &r = fp.rp;
                         nb::dict d;
                         d["method"] = std::string(sw_refine_method_string(r.method));
                         d["background"] = std::string(sw_refine_background_string(r.background));
                         d["mesh_size"] = r.mesh_size;
                         d["stamp_radius"] = r.radius;
                         d["detector_gain"] = r.gain;
                         d["read_noise"] = r.read_noise;
                         d["bias"] = r.bias;
                         d["overload"] = r.overload;
                         d["moffat_beta"] = fp.moffat_beta;
                         return d;
                     })
        .def_prop_ro("params", [](FindPlan &fp) {
            const sw_find_params &p = fp.p;
            nb::dict d;
            d["algorithm"] = std::string(sw_find_algorithm_string(p.algorithm));
            d["kernel_size"] = nb::make_tuple(p.kernel_x, p.kernel_y);
            d["sigma_b"] = p.sigma_background;
            d["sigma_s"] = p.sigma_strong;
            d["min_local"] = p.min_local;
            d["global_threshold"] = p.global_threshold;
            d["gain"] = p.gain;
            d["overload"] = p.overload;
            d["connectivity"] = p.connectivity;
            d["min_spot_size"] = p.min_spot_size;
            d["max_spot_size"] = p.max_spot_size;
            d["max_separation"] = p.max_separation;
            d["max_strong_fraction"] = p.max_strong_fraction;
            return d;
        });
    m.def("ccd_estimate", &ccd_estimate, nb::arg("ctx"), nb::arg("image"), nb::arg("mask").none(),
          nb::arg("bias"), nb::arg("read_noise"));
}

} // namespace swpy
