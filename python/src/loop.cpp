// spotwave Python binding: the adaptive-optics loop (loop.h) — the deformable mirror and its
// shaper, the projection of a spline onto the mirror, the interaction matrix (push-pull through a
// Python callable) and the truncated-SVD control matrix, the controllers, the real-time chain
// (frame -> commands) with its telemetry, and the closed-loop simulator.
#include "common.h"

#include <nanobind/stl/string.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace swpy
{

namespace
{

template <class T> const T *host_in(nb::handle obj, const char *name, size_t n, FlatArg &keep)
{
    keep = flat_arg<T>(obj, name, n, false);
    if (keep.where == Where::device)
        type_error("%s: a host (NumPy) array is needed", name);
    return (const T *)keep.data;
}

template <class T> T *host_out(nb::handle obj, const char *name, size_t n, FlatArg &keep)
{
    keep = flat_arg<T>(obj, name, n, true);
    if (keep.where == Where::device)
        type_error("%s: a host (NumPy) array is needed", name);
    return (T *)keep.data;
}

sw_dm_influence influence_of(const std::string &s)
{
    sw_dm_influence f;
    if (sw_dm_influence_parse(s.c_str(), &f) != SW_OK)
        value_error("influence: '%s' is not 'gaussian' or 'bezier'", s.c_str());
    return f;
}

void dm_from(nb::dict d, sw_dm_params &p)
{
    Params q(d, "dm");
    sw_dm_params_default(&p);
    p.nx = (int32_t)q.integer("nx", 0);
    p.ny = (int32_t)q.integer("ny", 0);
    p.influence = influence_of(q.str("influence", "gaussian"));
    p.coupling = q.num("coupling", p.coupling);
    q.done();
}

sw_sabre_lattice lattice_from(nb::handle h)
{
    if (!nb::isinstance<nb::dict>(h))
        type_error("lattice: expected dict(sx, sy, offx, offy)");
    Params q(nb::borrow<nb::dict>(h), "lattice");
    sw_sabre_lattice l{};
    l.sx = (int32_t)q.integer("sx", 0);
    l.sy = (int32_t)q.integer("sy", 0);
    l.offx = (int32_t)q.integer("offx", 0);
    l.offy = (int32_t)q.integer("offy", 0);
    q.done();
    return l;
}

nb::dict lattice_dict(const sw_sabre_lattice &l)
{
    nb::dict d;
    d["sx"] = l.sx;
    d["sy"] = l.sy;
    d["offx"] = l.offx;
    d["offy"] = l.offy;
    return d;
}

// ------------------------------------------------------------------ the mirror

nb::object dm_profile(std::string influence, double coupling, nb::handle r)
{
    const sw_dm_influence f = influence_of(influence);
    FlatArg ra;
    const double *x = host_in<double>(r, "r", 0, ra);
    double *d;
    auto out = new_array<double>(ra.size, &d);
    for (size_t i = 0; i < ra.size; i++)
        d[i] = sw_dm_profile(f, coupling, x[i]);
    return nb::cast(out);
}

void dm_check(nb::dict dm)
{
    sw_dm_params p;
    dm_from(dm, p);
    call_noctx([&] { return sw_dm_check(nullptr, &p); });
}

nb::dict grid_lenslets(int32_t nx, int32_t ny, int32_t q, int32_t margin)
{
    if (nx < 1 || ny < 1 || q < 1 || margin < 0)
        value_error("grid: nx, ny, q >= 1 and margin >= 0 (got %d, %d, %d, %d)", nx, ny, q, margin);
    const sw_lattice_grid g = sw_lattice_grid_lenslets(nx, ny, q, margin);
    nb::dict d;
    d["width"] = g.width;
    d["height"] = g.height;
    d["x0"] = g.x0;
    d["y0"] = g.y0;
    d["step"] = g.step;
    return d;
}

struct Shaper {
    nb::object ctx_obj;
    Context *ctx = nullptr;
    sw_dm_shaper *s = nullptr;
    sw_dm_params dm{};
    sw_lattice_grid g{};
    Shaper() = default;
    Shaper(const Shaper &) = delete;
    Shaper &operator=(const Shaper &) = delete;
    ~Shaper()
    {
        sw_dm_shaper_destroy(s);
    }
};

void shaper_init(Shaper *self, nb::object ctx_obj, nb::dict dm, nb::dict grid)
{
    new (self) Shaper();
    self->ctx_obj = ctx_obj;
    self->ctx = &context_of(ctx_obj);
    dm_from(dm, self->dm);
    Params q(grid, "grid");
    self->g.width = (int32_t)q.integer("width", 0);
    self->g.height = (int32_t)q.integer("height", 0);
    self->g.x0 = q.num("x0", 0.0);
    self->g.y0 = q.num("y0", 0.0);
    self->g.step = q.num("step", 1.0);
    q.done();
    Context &c = *self->ctx;
    call(c, [&] { return sw_dm_shaper_create(c.ctx, &self->dm, &self->g, &self->s); });
}

// Host or device arrays, both on one side.
void shaper_run(Shaper &s, nb::handle commands, nb::handle out)
{
    const size_t nact = (size_t)(s.dm.nx + 1) * (size_t)(s.dm.ny + 1);
    FlatArg u = flat_arg<float>(commands, "commands", nact, false);
    FlatArg o = flat_arg<float>(out, "out", (size_t)s.g.width * (size_t)s.g.height, true);
    check_side(*s.ctx, u.where, u.device_id, "commands");
    check_side(*s.ctx, o.where, o.device_id, "out");
    if ((u.where == Where::device) != (o.where == Where::device))
        type_error("out: give it in the commands' kind of memory (%s)", where_name(u.where));
    const sw_memory mem = u.where == Where::device ? SW_MEM_DEVICE : SW_MEM_HOST;
    Context &c = *s.ctx;
    call(c, [&] { return sw_dm_shaper_run(s.s, (const float *)u.data, mem, (float *)o.data); });
}

// ------------------------------------------------------------------ projection

nb::dict projector_dict(const sw_projector_params &p)
{
    nb::dict d;
    d["influence"] = std::string(sw_dm_influence_string(p.influence));
    d["coupling"] = p.coupling;
    d["lattice"] = lattice_dict(p.lattice);
    d["nax"] = p.nax;
    d["nay"] = p.nay;
    d["ax0"] = p.ax0;
    d["ay0"] = p.ay0;
    d["samples"] = p.samples;
    d["regularisation"] = p.regularisation;
    return d;
}

nb::dict projector_global(nb::dict dm, nb::handle lattice)
{
    sw_dm_params p;
    dm_from(dm, p);
    const sw_sabre_lattice l = lattice_from(lattice);
    sw_projector_params pp;
    sw_projector_params_global(&pp, &p, &l);
    return projector_dict(pp);
}

nb::dict projector_window(nb::dict dm, int32_t w)
{
    sw_dm_params p;
    dm_from(dm, p);
    sw_projector_params pp;
    sw_projector_params_window(&pp, &p, w);
    return projector_dict(pp);
}

struct Projector {
    nb::object ctx_obj;
    Context *ctx = nullptr;
    sw_projector *p = nullptr;
    int32_t rows = 0, cols = 0;
    Projector() = default;
    Projector(const Projector &) = delete;
    Projector &operator=(const Projector &) = delete;
    ~Projector()
    {
        sw_projector_destroy(p);
    }
};

void projector_init(Projector *self, nb::object ctx_obj, nb::dict params)
{
    new (self) Projector();
    self->ctx_obj = ctx_obj;
    self->ctx = &context_of(ctx_obj);
    sw_projector_params pp;
    sw_projector_params_default(&pp);
    Params q(params, "Projector");
    pp.influence = influence_of(q.str("influence", "gaussian"));
    pp.coupling = q.num("coupling", 0.3);
    pp.lattice = lattice_from(q.get("lattice"));
    pp.nax = (int32_t)q.integer("nax", 0);
    pp.nay = (int32_t)q.integer("nay", 0);
    pp.ax0 = q.num("ax0", 0.0);
    pp.ay0 = q.num("ay0", 0.0);
    pp.samples = (int32_t)q.integer("samples", pp.samples);
    pp.regularisation = q.num("regularisation", pp.regularisation);
    nb::object sm = q.get("square_mask");
    q.done();
    std::vector<uint8_t> mask;
    if (!sm.is_none()) {
        if (pp.lattice.sx < 1 || pp.lattice.sy < 1)
            value_error("lattice: sx = %d, sy = %d squares", pp.lattice.sx, pp.lattice.sy);
        FlatArg m;
        const uint8_t *d =
            host_in<uint8_t>(sm, "square_mask", (size_t)pp.lattice.sx * pp.lattice.sy, m);
        mask.assign(d, d + (size_t)pp.lattice.sx * pp.lattice.sy);
        pp.square_mask = mask.data();
    }
    Context &c = *self->ctx;
    call(c, [&] { return sw_projector_create(c.ctx, &pp, &self->p); });
    sw_projector_matrix(self->p, &self->rows, &self->cols);
}

nb::object projector_matrix(Projector &p)
{
    int32_t rows, cols;
    const float *P = sw_projector_matrix(p.p, &rows, &cols);
    float *d;
    auto a = new_array<float>((size_t)rows * cols, &d);
    std::copy(P, P + (size_t)rows * cols, d);
    return nb::cast(a);
}

void projector_run(Projector &p, nb::handle values, nb::handle out)
{
    FlatArg v = flat_arg<float>(values, "values", (size_t)p.cols, false);
    FlatArg o = flat_arg<float>(out, "out", (size_t)p.rows, true);
    check_side(*p.ctx, v.where, v.device_id, "values");
    check_side(*p.ctx, o.where, o.device_id, "out");
    if ((v.where == Where::device) != (o.where == Where::device))
        type_error("out: give it in the values' kind of memory (%s)", where_name(v.where));
    const sw_memory mem = v.where == Where::device ? SW_MEM_DEVICE : SW_MEM_HOST;
    Context &c = *p.ctx;
    call(c, [&] { return sw_projector_run(p.p, (const float *)v.data, mem, (float *)o.data); });
}

// ------------------------------------------------------------------ calibration

struct Measure {
    nb::callable fn;
    int32_t nact = 0, nslopes = 0;
    std::unique_ptr<nb::python_error> error;
};

sw_status measure_cb(void *user, const float *commands, float *slopes)
{
    Measure *m = static_cast<Measure *>(user);
    nb::gil_scoped_acquire gil;
    try {
        float *u;
        auto arr = new_array<float>((size_t)m->nact, &u);
        std::copy(commands, commands + m->nact, u);
        nb::object r = m->fn(arr);
        nb::ndarray<nb::ro, float, nb::c_contig, nb::device::cpu> s;
        if (!nb::try_cast(r, s, false) || s.size() != (size_t)m->nslopes) {
            PyErr_Format(PyExc_ValueError,
                         "measure: must return %d float32 slopes in a C-contiguous host array",
                         (int)m->nslopes);
            throw nb::python_error();
        }
        std::copy(s.data(), s.data() + m->nslopes, slopes);
        return SW_OK;
    } catch (nb::python_error &e) {
        m->error.reset(new nb::python_error(e));
        return SW_EINVAL;
    } catch (const std::exception &e) { // nothing C++ may cross the C library
        PyErr_SetString(PyExc_RuntimeError, e.what());
        m->error.reset(new nb::python_error());
        return SW_EINVAL;
    }
}

nb::object interaction_matrix(int32_t nact, int32_t nslopes, double amp, nb::callable measure)
{
    if (nact < 1 || nslopes < 1)
        value_error("interaction_matrix: nact = %d, nslopes = %d (>= 1 each)", nact, nslopes);
    Measure m;
    m.fn = measure;
    m.nact = nact;
    m.nslopes = nslopes;
    float *d;
    auto im = new_array<float>((size_t)nact * nslopes, &d);
    // No context: the calibration uses none but for messages, and the callable may run any
    // spotwave call on any context (holding a context's lock here would deadlock it).
    sw_status st;
    std::string msg;
    {
        nb::gil_scoped_release nogil;
        st = sw_interaction_matrix(nullptr, nact, nslopes, amp, measure_cb, &m, d);
        if (st != SW_OK)
            msg = sw_context_error(nullptr);
    }
    if (m.error) {
        m.error->restore();
        throw nb::python_error();
    }
    if (st != SW_OK)
        raise_status(st, msg);
    return nb::cast(im);
}

nb::tuple control_matrix(nb::object ctx_obj, nb::handle im, int32_t nslopes, int32_t nact,
                         double max_condition, int32_t max_modes)
{
    Context &c = context_of(ctx_obj);
    if (nact < 1 || nslopes < 1)
        value_error("control_matrix: nact = %d, nslopes = %d (>= 1 each)", nact, nslopes);
    FlatArg a;
    const float *m = host_in<float>(im, "im", (size_t)nact * nslopes, a);
    float *cm, *modes;
    double *sv;
    auto cma = new_array<float>((size_t)nact * nslopes, &cm);
    const size_t k = (size_t)(nact < nslopes ? nact : nslopes);
    auto sva = new_array<double>(k, &sv);
    std::vector<float> mv((size_t)nact * nact);
    sw_cm_result res{};
    res.singular = sv;
    res.modes = mv.data();
    call(c, [&] {
        return sw_control_matrix(c.ctx, m, nslopes, nact, max_condition, max_modes, cm, &res);
    });
    // modes: nact x kept column-major = (kept, nact) row-major
    auto ma = new_array<float>((size_t)nact * res.kept, &modes);
    std::copy(mv.begin(), mv.begin() + (size_t)nact * res.kept, modes);
    return nb::make_tuple(cma, res.kept, sva, ma);
}

// ------------------------------------------------------------------ controllers

struct CtlArrays {
    std::vector<float> modes, kp, ki, filter;
};

void controller_from(nb::dict d, sw_controller_params &p, CtlArrays &keep, const char *what)
{
    Params q(d, what);
    sw_controller_params_default(&p);
    std::string kind = q.str("kind", "integrator");
    if (sw_controller_kind_parse(kind.c_str(), &p.kind) != SW_OK)
        value_error("kind: '%s' is not 'integrator', 'leaky' or 'pi'", kind.c_str());
    p.nact = (int32_t)q.integer("nact", 0);
    p.gain = q.num("gain", p.gain);
    p.leak = q.num("leak", p.leak);
    p.clip = q.num("clip", p.clip);
    p.nmodes = (int32_t)q.integer("nmodes", 0);
    nb::object modes = q.get("modes"), kp = q.get("kp"), ki = q.get("ki");
    p.nfilter = (int32_t)q.integer("nfilter", 0);
    nb::object filter = q.get("filter");
    q.done();
    if (p.nact < 1)
        value_error("nact: %d commands (>= 1)", p.nact);
    if (!modes.is_none()) {
        if (p.nmodes < 1 || p.nmodes > p.nact)
            value_error("modes: %d modes for %d actuators", p.nmodes, p.nact);
        FlatArg a;
        const float *m = host_in<float>(modes, "modes", (size_t)p.nact * p.nmodes, a);
        keep.modes.assign(m, m + (size_t)p.nact * p.nmodes);
        p.modes = keep.modes.data();
    } else if (p.kind == SW_CTRL_PI) {
        p.nmodes = p.nact;
    }
    const size_t nm = (size_t)(p.nmodes > 0 ? p.nmodes : 0);
    if (!kp.is_none()) {
        FlatArg a;
        const float *v = host_in<float>(kp, "kp", nm, a);
        keep.kp.assign(v, v + nm);
        p.kp = keep.kp.data();
    }
    if (!ki.is_none()) {
        FlatArg a;
        const float *v = host_in<float>(ki, "ki", nm, a);
        keep.ki.assign(v, v + nm);
        p.ki = keep.ki.data();
    }
    if (!filter.is_none()) { // Z, nfilter rows of nact (column-major nact x nfilter)
        if (p.nfilter < 1 || p.nfilter > p.nact)
            value_error("filter: %d modes for %d actuators", p.nfilter, p.nact);
        FlatArg a;
        const float *v = host_in<float>(filter, "filter", (size_t)p.nact * p.nfilter, a);
        keep.filter.assign(v, v + (size_t)p.nact * p.nfilter);
        p.filter = keep.filter.data();
    } else {
        p.nfilter = 0;
    }
}

struct Controller {
    nb::object ctx_obj;
    Context *ctx = nullptr;
    sw_controller *c = nullptr;
    int32_t nact = 0;
    Controller() = default;
    Controller(const Controller &) = delete;
    Controller &operator=(const Controller &) = delete;
    ~Controller()
    {
        sw_controller_destroy(c);
    }
};

void controller_init(Controller *self, nb::object ctx_obj, nb::dict params)
{
    new (self) Controller();
    self->ctx_obj = ctx_obj;
    self->ctx = &context_of(ctx_obj);
    sw_controller_params p;
    CtlArrays keep;
    controller_from(params, p, keep, "Controller");
    Context &c = *self->ctx;
    call(c, [&] { return sw_controller_create(c.ctx, &p, &self->c); });
    self->nact = p.nact;
}

// PI's new gains between steps (either may be None); nmodes floats each.
void controller_set_gains(Controller &ct, nb::handle kp, nb::handle ki)
{
    const int32_t nm = sw_controller_modes(ct.c);
    if (nm < 1)
        value_error("set_gains: per-mode gains need the 'pi' controller");
    FlatArg ka, ia;
    const float *kv = kp.is_none() ? nullptr : host_in<float>(kp, "kp", (size_t)nm, ka);
    const float *iv = ki.is_none() ? nullptr : host_in<float>(ki, "ki", (size_t)nm, ia);
    Context &c = *ct.ctx;
    call(c, [&] { return sw_controller_set_gains(ct.c, kv, iv); });
}

// sw_unseen_modes into z ((nx + 1)(ny + 1) x 2 floats, column-major); returns the count.
int32_t unseen_modes(int32_t nx, int32_t ny, nb::handle valid, int which, nb::handle z)
{
    if (nx < 1 || ny < 1 || nx > 1024 || ny > 1024)
        value_error("unseen_modes: %d x %d lenslets (1..1024 per side)", nx, ny);
    FlatArg va, za;
    const uint8_t *v =
        valid.is_none() ? nullptr : host_in<uint8_t>(valid, "valid", (size_t)nx * ny, va);
    float *zv = host_out<float>(z, "out", (size_t)(nx + 1) * (ny + 1) * 2, za);
    int32_t n = 0;
    call_noctx([&] { return sw_unseen_modes(nx, ny, v, which, zv, &n); });
    return n;
}

// sw_modal_gains (or, params pol = 1, sw_modal_gains_pol): y (nframes x nmodes float32), gains
// (nmodes) -> out, noise, predicted.
void modal_gains(nb::object ctx_obj, nb::dict params, nb::handle y, int64_t nframes,
                 int32_t nmodes, nb::handle gains, nb::handle out, nb::handle noise,
                 nb::handle predicted)
{
    Params q(params, "modal_gains");
    sw_modal_gains_params p;
    sw_modal_gains_params_default(&p);
    p.delay_frames = (int32_t)q.integer("delay_frames", p.delay_frames);
    p.leak = q.num("leak", p.leak);
    p.segment = (int32_t)q.integer("segment", p.segment);
    p.margin = q.num("margin", p.margin);
    p.candidates = (int32_t)q.integer("candidates", p.candidates);
    p.noise_band = q.num("noise_band", p.noise_band);
    const bool pol = q.integer("pol", 0) != 0; /* sw_modal_gains_pol: y is pseudo-open loop */
    q.done();
    if (nframes < 1 || nmodes < 1)
        value_error("modal_gains: %lld frames of %d modes", (long long)nframes, nmodes);
    FlatArg ya, ga, oa, na, pa;
    const float *yv = host_in<float>(y, "y", (size_t)nframes * nmodes, ya);
    const float *gv = host_in<float>(gains, "gains", (size_t)nmodes, ga);
    float *ov = host_out<float>(out, "out", (size_t)nmodes, oa);
    double *nv = host_out<double>(noise, "noise", (size_t)nmodes, na);
    double *pv = host_out<double>(predicted, "predicted", (size_t)nmodes, pa);
    Context &c = context_of(ctx_obj);
    call(c, [&] {
        return pol ? sw_modal_gains_pol(c.ctx, &p, yv, nframes, nmodes, gv, ov, nv, pv)
                   : sw_modal_gains(c.ctx, &p, yv, nframes, nmodes, gv, ov, nv, pv);
    });
}

void controller_step(Controller &ct, nb::handle r, nb::handle u)
{
    FlatArg ra, ua;
    const float *rv = host_in<float>(r, "r", (size_t)ct.nact, ra);
    float *uv = host_out<float>(u, "out", (size_t)ct.nact, ua);
    Context &c = *ct.ctx;
    call(c, [&] { return sw_controller_step(ct.c, rv, uv); });
}

// ------------------------------------------------------------------ the real-time chain

struct Rtc {
    nb::object ctx_obj;
    Context *ctx = nullptr;
    sw_rtc *r = nullptr;
    sw_centroid_params cen{};
    int32_t nact = 0, ns = 0;
    int32_t nmodes = 0; /* PI's modes, 0 for the other controllers */
    Rtc() = default;
    Rtc(const Rtc &) = delete;
    Rtc &operator=(const Rtc &) = delete;
    ~Rtc()
    {
        sw_rtc_destroy(r);
    }
};

struct CenArrays {
    std::vector<uint8_t> mask;
    std::vector<float> dark, flat, lut;
};

template <class T> void copy_host(nb::handle obj, const char *name, size_t n, std::vector<T> &v)
{
    FlatArg a;
    const T *d = host_in<T>(obj, name, n, a);
    v.assign(d, d + n);
}

void centroid_from(nb::dict d, sw_centroid_params &p, CenArrays &keep)
{
    Params q(d, "centroid");
    sw_centroid_params_default(&p);
    sw_sh_geometry &g = p.geometry;
    g.x0 = q.num("x0", g.x0);
    g.y0 = q.num("y0", g.y0);
    g.pitch_px = q.num("pitch", g.pitch_px);
    g.nx = (int32_t)q.integer("nx", g.nx);
    g.ny = (int32_t)q.integer("ny", g.ny);
    g.pixel_um = q.num("pixel_um", g.pixel_um);
    g.focal_mm = q.num("focal_mm", g.focal_mm);
    p.width = (int32_t)q.integer("width", p.width);
    p.height = (int32_t)q.integer("height", p.height);
    std::string t = q.str("pixel_type", "u8");
    if (sw_pixel_type_parse(t.c_str(), &p.type) != SW_OK)
        value_error("dtype: '%s' is not uint8, uint16 or float32", t.c_str());
    std::string mode = q.str("threshold_mode", "none");
    p.threshold_mode = mode == "subtract" ? SW_THRESHOLD_SUBTRACT
                       : mode == "zero"   ? SW_THRESHOLD_ZERO
                                          : SW_THRESHOLD_NONE;
    std::string kind = q.str("threshold_kind", "absolute");
    p.threshold_kind = kind == "fraction" ? SW_THRESHOLD_FRACTION : SW_THRESHOLD_ABSOLUTE;
    p.threshold = q.num("threshold", p.threshold);
    p.gamma = q.num("gamma", p.gamma);
    p.window = (int32_t)q.integer("window", p.window);
    nb::object mask = q.get("mask"), dark = q.get("dark"), flat = q.get("flat"), lut = q.get("lut");
    q.done();
    const int64_t nl = (int64_t)g.nx * g.ny;
    const size_t npix = (size_t)(p.width > 0 ? p.width : 0) * (size_t)(p.height > 0 ? p.height : 0);
    if (!mask.is_none()) {
        if (nl <= 0 || nl > (1 << 24))
            value_error("mask: the grid %d x %d has no valid lenslet count", g.nx, g.ny);
        copy_host<uint8_t>(mask, "mask", (size_t)nl, keep.mask);
        g.valid = keep.mask.data();
    }
    if (!dark.is_none()) {
        copy_host<float>(dark, "dark", npix, keep.dark);
        p.dark = keep.dark.data();
    }
    if (!flat.is_none()) {
        copy_host<float>(flat, "flat", npix, keep.flat);
        p.flat = keep.flat.data();
    }
    if (!lut.is_none()) {
        const size_t n = p.type == SW_PIX_U8 ? 256 : p.type == SW_PIX_U16 ? 65536 : 0;
        if (n == 0)
            value_error("lut: a look-up table needs uint8 or uint16 frames");
        copy_host<float>(lut, "lut", n, keep.lut);
        p.lut = keep.lut.data();
    }
}

void sabre_from(nb::dict d, sw_sabre_params &p)
{
    Params q(d, "sabre");
    sw_sabre_params_default(&p);
    p.pitch = q.num("pitch", p.pitch);
    p.partitions = (int32_t)q.integer("partitions", p.partitions);
    p.overlap = (int32_t)q.integer("overlap", p.overlap);
    std::string pme = q.str("pme", "hierarchical");
    if (sw_sabre_pme_parse(pme.c_str(), &p.pme) != SW_OK)
        value_error("pme: '%s' is not 'hierarchical', 'distributed' or 'none'", pme.c_str());
    p.dpme_iterations = (int32_t)q.integer("dpme_iterations", p.dpme_iterations);
    std::string pad = q.str("padding", "zero");
    if (sw_sabre_padding_parse(pad.c_str(), &p.padding) != SW_OK)
        value_error("padding: '%s' is not 'zero' or 'nearest'", pad.c_str());
    p.fill_iterations = (int32_t)q.integer("fill_iterations", p.fill_iterations);
    p.extend_eq17 = q.flag("extend_eq17", false) ? 1 : 0;
    q.done();
}

sw_rtc_projection projection_of(const std::string &s)
{
    if (s == "corners")
        return SW_RTC_PROJ_CORNERS;
    if (s == "global")
        return SW_RTC_PROJ_GLOBAL;
    if (s == "local")
        return SW_RTC_PROJ_LOCAL;
    if (s == "local-pupil")
        return SW_RTC_PROJ_LOCAL_PUPIL;
    value_error("projection: '%s' is not 'corners', 'global', 'local' or 'local-pupil'",
                s.c_str());
}

// The projection matrix of a D-SABRE chain as sw_rtc_params_sabre builds it (the plan of `sabre`
// on the nx x ny lenslets of `valid`, the mirror `dm`, the fitted squares `square_mask` over the
// extended lattice or None): (flat float32 matrix, rows, cols); None for "corners".
nb::object rtc_projection_matrix(nb::object ctx_obj, nb::dict sabre, nb::dict dm, int32_t nx,
                                 int32_t ny, nb::handle valid, std::string projection,
                                 nb::handle square_mask)
{
    Context &c = context_of(ctx_obj);
    const sw_rtc_projection proj = projection_of(projection);
    if (nx < 1 || ny < 1)
        value_error("grid: nx, ny >= 1 (got %d, %d)", nx, ny);
    sw_sabre_params sp;
    sabre_from(sabre, sp);
    sp.nx = nx;
    sp.ny = ny;
    sw_dm_params dp;
    dm_from(dm, dp);
    if (dp.nx != nx || dp.ny != ny)
        value_error("dm: a mirror of %d x %d lenslets, the chain has %d x %d", dp.nx, dp.ny, nx,
                    ny);
    FlatArg va, ma;
    if (!valid.is_none())
        sp.valid = host_in<uint8_t>(valid, "mask", (size_t)nx * ny, va);
    const uint8_t *sq = nullptr;
    if (!square_mask.is_none()) {
        // its size: the squares of the plan's extended lattice
        sw_sabre *tmp = nullptr;
        call(c, [&] { return sw_sabre_create(c.ctx, &sp, &tmp); });
        sw_sabre_info info;
        sw_sabre_get_info(tmp, &info);
        sw_sabre_destroy(tmp);
        sq = host_in<uint8_t>(square_mask, "square_mask",
                              (size_t)info.lattice.sx * info.lattice.sy, ma);
    }
    sw_rtc_params rp;
    sw_rtc_params_default(&rp);
    float *P = nullptr;
    call(c, [&] { return sw_rtc_params_sabre(c.ctx, &sp, &dp, proj, sq, 1.0, &rp, &P); });
    if (!P)
        return nb::none();
    // freed however this returns (new_array may throw)
    std::unique_ptr<float, decltype(&free)> own(P, &free);
    const size_t n = (size_t)rp.projection_rows * (size_t)rp.projection_cols;
    float *d;
    auto a = new_array<float>(n, &d);
    std::copy(P, P + n, d);
    return nb::make_tuple(a, rp.projection_rows, rp.projection_cols);
}

void rtc_init(Rtc *self, nb::object ctx_obj, nb::dict params)
{
    new (self) Rtc();
    self->ctx_obj = ctx_obj;
    self->ctx = &context_of(ctx_obj);
    sw_rtc_params p;
    sw_rtc_params_default(&p);
    Params q(params, "RTC");
    CenArrays cen_keep;
    nb::object cen = q.get("centroid");
    if (!nb::isinstance<nb::dict>(cen))
        type_error("centroid: expected the centroid parameters as a dict");
    centroid_from(nb::borrow<nb::dict>(cen), p.centroid, cen_keep);
    std::string recon = q.str("recon", "mvm");
    if (recon == "mvm")
        p.recon = SW_RTC_MVM;
    else if (recon == "sabre")
        p.recon = SW_RTC_SABRE;
    else
        value_error("recon: '%s' is not 'mvm' or 'sabre'", recon.c_str());
    p.nact = (int32_t)q.integer("nact", 0);
    p.fp16 = q.flag("fp16", false) ? 1 : 0;
    nb::object cm = q.get("cm"), sab = q.get("sabre"), pm = q.get("projection_matrix"),
               ctl = q.get("controller");
    p.slope_scale = q.num("slope_scale", p.slope_scale);
    p.projection = projection_of(q.str("projection", "corners"));
    p.telemetry = (int32_t)q.integer("telemetry", 0);
    q.done();
    if (p.nact < 1)
        value_error("nact: %d commands (>= 1)", p.nact);
    FlatArg cma, pma;
    if (!cm.is_none())
        p.cm = host_in<float>(cm, "cm", 0, cma);
    if (!sab.is_none()) {
        if (!nb::isinstance<nb::dict>(sab))
            type_error("sabre: expected the D-SABRE parameters as a dict");
        sabre_from(nb::borrow<nb::dict>(sab), p.sabre);
    }
    p.sabre.nx = p.centroid.geometry.nx;
    p.sabre.ny = p.centroid.geometry.ny;
    if (!pm.is_none()) {
        Array m;
        if (!nb::try_cast<Array>(pm, m, false) || m.ndim() != 2)
            type_error("projection_matrix: a 2-D float32 array is needed");
        p.projection_rows = (int32_t)m.shape(0);
        p.projection_cols = (int32_t)m.shape(1);
        p.projection_matrix = host_in<float>(pm, "projection_matrix", 0, pma);
    }
    CtlArrays ctl_keep;
    nb::dict cd = ctl.is_none() ? nb::dict() : nb::borrow<nb::dict>(ctl);
    if (!ctl.is_none() && !nb::isinstance<nb::dict>(ctl))
        type_error("controller: expected the controller parameters as a dict");
    if (!cd.contains("nact"))
        cd["nact"] = p.nact;
    controller_from(cd, p.controller, ctl_keep, "controller");
    self->nmodes = p.controller.kind == SW_CTRL_PI ? p.controller.nmodes : 0;
    Context &c = *self->ctx;
    // The control matrix's size needs the slope count: the centroid plan's, checked by a
    // throwaway plan when the matrix is given.
    if (!cm.is_none()) {
        sw_centroid_params cp = p.centroid;
        cp.path = SW_CENTROID_AUTO;
        sw_centroid_plan *tmp = nullptr;
        call(c, [&] { return sw_centroid_create(c.ctx, &cp, &tmp); });
        const int32_t ns = sw_centroid_plan_slopes(tmp);
        sw_centroid_destroy(tmp);
        if (cma.size != (size_t)p.nact * 2 * (size_t)ns)
            value_error("cm: %zu elements, the chain needs nact x 2 nslopes = %d x %d", cma.size,
                        p.nact, 2 * ns);
    }
    call(c, [&] { return sw_rtc_create(c.ctx, &p, &self->r); });
    self->cen = p.centroid;
    self->cen.geometry.valid = nullptr;
    self->nact = p.nact;
    self->ns = sw_rtc_slopes(self->r);
}

void rtc_run(Rtc &r, nb::handle frame, nb::handle commands, nb::handle slopes)
{
    ImageArg im = image_arg(frame, "frame", false, PIX_U8 | PIX_U16 | PIX_F32);
    if (im.width != r.cen.width || im.rows != r.cen.height || im.img.type != r.cen.type)
        value_error("frame: %s frames of %d x %d (width x height), the chain was made for %s "
                    "frames of %d x %d",
                    sw_pixel_type_string(im.img.type), im.width, im.rows,
                    sw_pixel_type_string(r.cen.type), r.cen.width, r.cen.height);
    check_side(*r.ctx, im.where, im.device_id, "frame");
    FlatArg ca, sa;
    float *cv = commands.is_none() ? nullptr : host_out<float>(commands, "out", (size_t)r.nact, ca);
    float *sv =
        slopes.is_none() ? nullptr : host_out<float>(slopes, "slopes", 2 * (size_t)r.ns, sa);
    Context &c = *r.ctx;
    call(c, [&] { return sw_rtc_run(r.r, &im.img, cv, sv); });
}

nb::object rtc_commands(Rtc &r)
{
    float *d;
    auto a = new_array<float>((size_t)r.nact, &d);
    const float *s = sw_rtc_commands(r.r);
    std::copy(s, s + r.nact, d);
    return nb::cast(a);
}

// Any thread, without the context's lock (sw_rtc_telemetry_read is lock-free).
int64_t rtc_telemetry(Rtc &r, nb::handle slopes, nb::handle commands)
{
    FlatArg sa, ca;
    float *sv =
        slopes.is_none() ? nullptr : host_out<float>(slopes, "slopes", 2 * (size_t)r.ns, sa);
    float *cv =
        commands.is_none() ? nullptr : host_out<float>(commands, "commands", (size_t)r.nact, ca);
    int64_t frame = 0;
    sw_status st;
    {
        nb::gil_scoped_release nogil;
        st = sw_rtc_telemetry_read(r.r, &frame, sv, cv);
    }
    if (st != SW_OK)
        raise_status(st, "telemetry: the chain was made without telemetry slots");
    return frame;
}

// ------------------------------------------------------------------ the simulator

struct LoopSim {
    nb::object ctx_obj;
    Context *ctx = nullptr;
    sw_loop *l = nullptr;
    sw_loop_params p{};
    LoopSim() = default;
    LoopSim(const LoopSim &) = delete;
    LoopSim &operator=(const LoopSim &) = delete;
    ~LoopSim()
    {
        sw_loop_destroy(l);
    }
};

nb::dict loop_defaults()
{
    sw_loop_params p;
    sw_loop_params_default(&p);
    nb::dict d;
    d["nx"] = p.nx;
    d["diameter_m"] = p.diameter_m;
    d["square_pupil"] = p.square_pupil != 0;
    d["obscuration"] = p.obscuration;
    d["px_per_lenslet"] = p.px_per_lenslet;
    d["wfs_wavelength_um"] = p.wfs_wavelength_um;
    d["nyquist_px"] = p.nyquist_px;
    d["model"] = std::string(sw_sh_model_string(p.model));
    d["magnitude"] = std::isnan(p.magnitude) ? nb::none() : nb::cast(p.magnitude);
    d["zero_point"] = p.zero_point;
    d["throughput"] = p.throughput;
    d["read_noise_e"] = p.read_noise_e;
    d["threshold_e"] = p.threshold_e;
    d["threshold_peak"] = p.threshold_peak;
    d["slope_calibration"] = p.slope_calibration != 0;
    d["negative_filter"] = p.negative_filter;
    d["r0_m"] = p.turbulence.r0_m;
    d["L0_m"] = p.turbulence.L0_m;
    d["r0_wavelength_um"] = p.turbulence.wavelength_um;
    d["subharmonics"] = p.turbulence.subharmonics;
    d["wind_m_s"] = p.wind_m_s;
    d["rate_hz"] = p.rate_hz;
    d["seed"] = p.seed;
    d["samples"] = p.samples;
    d["influence"] = std::string(sw_dm_influence_string(p.dm.influence));
    d["coupling"] = p.dm.coupling;
    d["recon"] = std::string(sw_loop_recon_string(p.recon));
    d["cm_condition"] = p.cm_condition;
    d["poke_um"] = p.poke_um;
    d["partitions"] = p.partitions;
    d["overlap"] = p.overlap;
    d["controller"] = std::string(sw_controller_kind_string(p.controller.kind));
    d["gain"] = p.controller.gain;
    d["leak"] = p.controller.leak;
    d["clip"] = p.controller.clip;
    d["unseen"] = std::string(sw_unseen_string(p.unseen));
    d["modal"] = std::string(p.modal == 2 ? "kl" : p.modal ? "im" : "actuators");
    d["kp"] = p.kp;
    d["gain_window"] = p.gain_window;
    d["delay"] = p.delay;
    d["science_wavelength_um"] = p.science_wavelength_um;
    d["warmup"] = p.warmup;
    return d;
}

void loop_init(LoopSim *self, nb::object ctx_obj, nb::dict params)
{
    new (self) LoopSim();
    self->ctx_obj = ctx_obj;
    self->ctx = &context_of(ctx_obj);
    sw_loop_params &p = self->p;
    sw_loop_params_default(&p);
    Params q(params, "loop");
    p.nx = (int32_t)q.integer("nx", p.nx);
    p.diameter_m = q.num("diameter_m", p.diameter_m);
    p.square_pupil = q.flag("square_pupil", p.square_pupil != 0) ? 1 : 0;
    p.obscuration = q.num("obscuration", p.obscuration);
    p.px_per_lenslet = (int32_t)q.integer("px_per_lenslet", p.px_per_lenslet);
    p.wfs_wavelength_um = q.num("wfs_wavelength_um", p.wfs_wavelength_um);
    p.nyquist_px = q.num("nyquist_px", p.nyquist_px);
    std::string model = q.str("model", sw_sh_model_string(p.model));
    if (sw_sh_model_parse(model.c_str(), &p.model) != SW_OK)
        value_error("model: '%s' is not 'geometric' or 'diffraction'", model.c_str());
    p.magnitude = q.num("magnitude", NAN);
    p.zero_point = q.num("zero_point", p.zero_point);
    p.throughput = q.num("throughput", p.throughput);
    p.read_noise_e = q.num("read_noise_e", p.read_noise_e);
    p.threshold_e = q.num("threshold_e", p.threshold_e);
    p.threshold_peak = q.num("threshold_peak", p.threshold_peak);
    p.slope_calibration = q.flag("slope_calibration", p.slope_calibration != 0) ? 1 : 0;
    p.negative_filter = (int)q.integer("negative_filter", p.negative_filter);
    p.turbulence.r0_m = q.num("r0_m", p.turbulence.r0_m);
    p.turbulence.L0_m = q.num("L0_m", p.turbulence.L0_m);
    p.turbulence.wavelength_um = q.num("r0_wavelength_um", p.turbulence.wavelength_um);
    p.turbulence.subharmonics = (int32_t)q.integer("subharmonics", p.turbulence.subharmonics);
    p.wind_m_s = q.num("wind_m_s", p.wind_m_s);
    p.rate_hz = q.num("rate_hz", p.rate_hz);
    p.seed = q.u64("seed", p.seed);
    p.samples = (int32_t)q.integer("samples", p.samples);
    p.dm.influence = influence_of(q.str("influence", sw_dm_influence_string(p.dm.influence)));
    p.dm.coupling = q.num("coupling", p.dm.coupling);
    std::string recon = q.str("recon", sw_loop_recon_string(p.recon));
    if (sw_loop_recon_parse(recon.c_str(), &p.recon) != SW_OK)
        value_error("recon: '%s' is not 'mvm', 'sabre', 'dsabre-global', 'dsabre-local' or "
                    "'dsabre-local-pupil'",
                    recon.c_str());
    p.cm_condition = q.num("cm_condition", p.cm_condition);
    p.poke_um = q.num("poke_um", p.poke_um);
    p.partitions = (int32_t)q.integer("partitions", p.partitions);
    p.overlap = (int32_t)q.integer("overlap", p.overlap);
    std::string kind = q.str("controller", sw_controller_kind_string(p.controller.kind));
    if (sw_controller_kind_parse(kind.c_str(), &p.controller.kind) != SW_OK)
        value_error("controller: '%s' is not 'integrator', 'leaky' or 'pi'", kind.c_str());
    p.controller.gain = q.num("gain", p.controller.gain);
    p.controller.leak = q.num("leak", p.controller.leak);
    p.controller.clip = q.num("clip", p.controller.clip);
    std::string unseen = q.str("unseen", sw_unseen_string(p.unseen));
    if (sw_unseen_parse(unseen.c_str(), &p.unseen) != SW_OK)
        value_error("unseen: '%s' is not 'none', 'piston', 'waffle' or 'piston-waffle'",
                    unseen.c_str());
    std::string modal = q.str("modal", p.modal == 2 ? "kl" : p.modal ? "im" : "actuators");
    if (modal != "im" && modal != "actuators" && modal != "kl")
        value_error("modal: '%s' is not 'actuators', 'im' or 'kl'", modal.c_str());
    p.modal = modal == "kl" ? 2 : modal == "im" ? 1 : 0;
    p.kp = q.num("kp", p.kp);
    p.gain_window = (int32_t)q.integer("gain_window", p.gain_window);
    p.delay = (int32_t)q.integer("delay", p.delay);
    p.science_wavelength_um = q.num("science_wavelength_um", p.science_wavelength_um);
    p.warmup = (int32_t)q.integer("warmup", p.warmup);
    q.done();
    p.dm.nx = p.dm.ny = p.nx;
    Context &c = *self->ctx;
    call(c, [&] { return sw_loop_create(c.ctx, &p, &self->l); });
}

nb::tuple loop_step(LoopSim &s)
{
    sw_loop_frame f{};
    Context &c = *s.ctx;
    call(c, [&] { return sw_loop_step(s.l, &f); });
    return nb::make_tuple(f.frame, f.turbulence_nm, f.residual_nm, f.strehl, f.marechal,
                          f.command_rms_um, sw_loop_long_strehl(s.l), sw_loop_clipped(s.l));
}

// n frames into the given float64 (n, 8) array (frame, turbulence_nm, residual_nm, strehl,
// marechal, command_rms_um, long_strehl, commands at the stroke limit), without the GIL. progress: None or a callable(k) run
// every `every` frames. Returns the seconds of the steps alone.
double loop_run(LoopSim &s, int64_t n, nb::handle out, nb::handle progress, int64_t every)
{
    FlatArg oa;
    double *o = host_out<double>(out, "out", (size_t)n * 8, oa);
    Context &c = *s.ctx;
    double seconds = 0.0;
    for (int64_t i = 0; i < n;) {
        const int64_t end = progress.is_none() || every < 1 ? n : std::min(n, i + every);
        sw_status st = SW_OK;
        std::string msg;
        int64_t failed = -1;
        {
            nb::gil_scoped_release nogil;
            std::lock_guard<std::mutex> lock(c.mu);
            for (; i < end; i++) {
                sw_loop_frame f{};
                const auto t0 = std::chrono::steady_clock::now();
                st = sw_loop_step(s.l, &f);
                seconds +=
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                if (st != SW_OK) {
                    failed = i;
                    msg = sw_context_error(c.ctx);
                    break;
                }
                double *r = o + (size_t)i * 8;
                r[0] = (double)f.frame, r[1] = f.turbulence_nm, r[2] = f.residual_nm;
                r[3] = f.strehl, r[4] = f.marechal, r[5] = f.command_rms_um;
                r[6] = sw_loop_long_strehl(s.l), r[7] = (double)sw_loop_clipped(s.l);
            }
        }
        if (st != SW_OK)
            raise_status(st, "frame " + std::to_string(failed + 1) + ": " + msg);
        if (!progress.is_none())
            progress(i);
    }
    return seconds;
}

nb::object loop_fitting_error(LoopSim &s)
{
    double rms = NAN;
    sw_status st;
    std::string msg;
    Context &c = *s.ctx;
    {
        nb::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(c.mu);
        st = sw_loop_fitting_error(s.l, &rms);
        if (st != SW_OK)
            msg = sw_context_error(c.ctx);
    }
    if (st == SW_EUNSUPPORTED)
        return nb::float_(NAN);
    if (st != SW_OK)
        raise_status(st, msg);
    return nb::float_(rms);
}

nb::tuple loop_maps(LoopSim &s)
{
    const size_t side = (size_t)s.p.samples * (size_t)s.p.nx;
    float *t, *cr, *r;
    auto ta = new_array<float>(side * side, &t);
    auto ca = new_array<float>(side * side, &cr);
    auto ra = new_array<float>(side * side, &r);
    int32_t got = 0;
    Context &c = *s.ctx;
    call(c, [&] { return sw_loop_maps(s.l, &got, t, cr, r); });
    if ((size_t)got != side)
        raise_status(SW_EINTERNAL,
                     "maps of side " + std::to_string(got) + ", expected " + std::to_string(side));
    return nb::make_tuple(ta, ca, ra, got);
}

} // namespace

void bind_loop(nb::module_ &m)
{
    m.def("dm_profile", &dm_profile, nb::arg("influence"), nb::arg("coupling"), nb::arg("r"));
    m.def("dm_check", &dm_check, nb::arg("dm"));
    m.def("lattice_grid_lenslets", &grid_lenslets, nb::arg("nx"), nb::arg("ny"), nb::arg("q"),
          nb::arg("margin"));
    nb::class_<Shaper>(m, "DMShaper", "The mirror's surface on a grid (loop.h).")
        .def("__init__", &shaper_init, nb::arg("ctx"), nb::arg("dm"), nb::arg("grid"))
        .def("run", &shaper_run, nb::arg("commands"), nb::arg("out"));
    m.def("projector_params_global", &projector_global, nb::arg("dm"), nb::arg("lattice"));
    m.def("projector_params_window", &projector_window, nb::arg("dm"), nb::arg("w"));
    nb::class_<Projector>(m, "Projector", "Spline -> mirror commands (loop.h).")
        .def("__init__", &projector_init, nb::arg("ctx"), nb::arg("params"))
        .def("matrix", &projector_matrix)
        .def("run", &projector_run, nb::arg("values"), nb::arg("out"))
        .def_prop_ro("rows", [](Projector &p) { return p.rows; })
        .def_prop_ro("cols", [](Projector &p) { return p.cols; });
    m.def("interaction_matrix", &interaction_matrix, nb::arg("nact"), nb::arg("nslopes"),
          nb::arg("amp"), nb::arg("measure"));
    m.def("control_matrix", &control_matrix, nb::arg("ctx"), nb::arg("im"), nb::arg("nslopes"),
          nb::arg("nact"), nb::arg("max_condition"), nb::arg("max_modes"));
    nb::class_<Controller>(m, "Controller", "A controller (loop.h).")
        .def("__init__", &controller_init, nb::arg("ctx"), nb::arg("params"))
        .def("step", &controller_step, nb::arg("r"), nb::arg("out"))
        .def("set_gains", &controller_set_gains, nb::arg("kp").none(), nb::arg("ki").none())
        .def("reset", [](Controller &c) { sw_controller_reset(c.c); });
    nb::class_<Rtc>(m, "RTC", "The real-time chain (loop.h).")
        .def("__init__", &rtc_init, nb::arg("ctx"), nb::arg("params"))
        .def("run", &rtc_run, nb::arg("frame"), nb::arg("commands").none(),
             nb::arg("slopes").none())
        .def("commands", &rtc_commands)
        .def("telemetry", &rtc_telemetry, nb::arg("slopes").none(), nb::arg("commands").none())
        .def("reset",
             [](Rtc &r) {
                 Context &c = *r.ctx;
                 call(c, [&] { return sw_rtc_reset(r.r); });
             })
        .def("set_gains",
             [](Rtc &r, nb::handle kp, nb::handle ki) {
                 if (r.nmodes < 1)
                     value_error("set_gains: per-mode gains need the 'pi' controller");
                 FlatArg ka, ia;
                 const float *kv =
                     kp.is_none() ? nullptr : host_in<float>(kp, "kp", (size_t)r.nmodes, ka);
                 const float *iv =
                     ki.is_none() ? nullptr : host_in<float>(ki, "ki", (size_t)r.nmodes, ia);
                 Context &c = *r.ctx;
                 call(c, [&] { return sw_rtc_set_gains(r.r, kv, iv); });
             },
             nb::arg("kp").none(), nb::arg("ki").none())
        .def_prop_ro("nslopes", [](Rtc &r) { return r.ns; })
        .def_prop_ro("nact", [](Rtc &r) { return r.nact; })
        .def_prop_ro("last_us", [](Rtc &r) { return sw_rtc_last_us(r.r); });
    m.def("rtc_projection_matrix", &rtc_projection_matrix, nb::arg("ctx"), nb::arg("sabre"),
          nb::arg("dm"), nb::arg("nx"), nb::arg("ny"), nb::arg("valid").none(),
          nb::arg("projection"), nb::arg("square_mask").none());
    m.def("loop_defaults", &loop_defaults);
    m.def("unseen_modes", &unseen_modes, nb::arg("nx"), nb::arg("ny"), nb::arg("valid").none(),
          nb::arg("which"), nb::arg("out"));
    m.def("modal_gains", &modal_gains, nb::arg("ctx"), nb::arg("params"), nb::arg("y"),
          nb::arg("nframes"), nb::arg("nmodes"), nb::arg("gains"), nb::arg("out"),
          nb::arg("noise"), nb::arg("predicted"));
    m.def("controller_max_gain", &sw_controller_max_gain, nb::arg("delay_frames"),
          nb::arg("leak") = 0.0);
    nb::class_<LoopSim>(m, "LoopSim", "The closed-loop simulator (loop.h).")
        .def("__init__", &loop_init, nb::arg("ctx"), nb::arg("params"))
        .def("step", &loop_step)
        .def("run", &loop_run, nb::arg("n"), nb::arg("out"), nb::arg("progress").none(),
             nb::arg("every"))
        .def("fitting_error", &loop_fitting_error)
        .def("maps", &loop_maps)
        .def_prop_ro("modes", [](LoopSim &s) { return sw_loop_modes(s.l); })
        .def_prop_ro("negative_modes",
                     [](LoopSim &s) {
                         double g = NAN;
                         const int32_t n = sw_loop_negative_modes(s.l, &g);
                         return nb::make_tuple(n, g);
                     })
        .def_prop_ro("actuators", [](LoopSim &s) { return sw_loop_actuators(s.l); })
        .def_prop_ro("long_strehl", [](LoopSim &s) { return sw_loop_long_strehl(s.l); })
        .def_prop_ro("slope_gain",
                     [](LoopSim &s) {
                         double g[2] = {1.0, 1.0};
                         const int applied = sw_loop_slope_gain(s.l, g);
                         return nb::make_tuple(g[0], g[1], applied != 0);
                     })
        .def_prop_ro("threshold_e", [](LoopSim &s) { return sw_loop_threshold_e(s.l); })
        .def("gains", [](LoopSim &s) {
            int32_t nm = 0, rounds = 0;
            const float *ki = sw_loop_gains(s.l, &nm, &rounds);
            nb::list v;
            for (int32_t i = 0; ki && i < nm; i++)
                v.append((double)ki[i]);
            return nb::make_tuple(v, rounds, ki != nullptr);
        });
}

} // namespace swpy
