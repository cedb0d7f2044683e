// spotwave Python binding: wavefront reconstruction from Shack-Hartmann slopes (sabre.h) — the
// D-SABRE plan, global SABRE, Fried's zonal least squares, and the spline's evaluation (vertex
// values, Fried corners, maps), plus the piston removal `spotwave sabre` applies to its outputs.
#include "common.h"

#include <nanobind/stl/string.h>

#include <cmath>
#include <string>
#include <vector>

namespace swpy
{

namespace
{

// ------------------------------------------------------------------ helpers

sw_sabre_lattice lattice_from(nb::dict d)
{
    Params q(d, "lattice");
    sw_sabre_lattice l{};
    l.sx = (int32_t)q.integer("sx", 0);
    l.sy = (int32_t)q.integer("sy", 0);
    l.offx = (int32_t)q.integer("offx", 0);
    l.offy = (int32_t)q.integer("offy", 0);
    q.done();
    if (l.sx < 1 || l.sy < 1 || l.sx > (1 << 20) || l.sy > (1 << 20))
        value_error("lattice: sx = %d, sy = %d squares (>= 1 each)", l.sx, l.sy);
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

// A host (NumPy) array of n elements of T, read in place.
template <class T> const T *host_in(nb::handle obj, const char *name, size_t n, FlatArg &keep)
{
    keep = flat_arg<T>(obj, name, n, false);
    if (keep.where == Where::device)
        type_error("%s: a host (NumPy) array is needed", name);
    return (const T *)keep.data;
}

// The valid mask: None (all lenslets) or nx * ny bytes, copied.
std::vector<uint8_t> mask_from(nb::handle obj, int32_t nx, int32_t ny)
{
    std::vector<uint8_t> v;
    if (obj.is_none())
        return v;
    if (nx < 1 || ny < 1)
        value_error("mask: the grid %d x %d has no lenslets", nx, ny);
    FlatArg a;
    const uint8_t *p = host_in<uint8_t>(obj, "mask", (size_t)nx * (size_t)ny, a);
    v.assign(p, p + (size_t)nx * ny);
    return v;
}

// ------------------------------------------------------------------ D-SABRE

struct SabrePlan {
    nb::object ctx_obj;
    Context *ctx = nullptr;
    sw_sabre *plan = nullptr;
    sw_sabre_params p{};
    std::vector<uint8_t> valid;
    sw_sabre_info info{};
    int64_t nvalues = 0;
    SabrePlan() = default;
    SabrePlan(const SabrePlan &) = delete;
    SabrePlan &operator=(const SabrePlan &) = delete;
    ~SabrePlan()
    {
        sw_sabre_destroy(plan);
    }
};

void sabre_init(SabrePlan *self, nb::object ctx_obj, nb::dict params)
{
    new (self) SabrePlan();
    self->ctx_obj = ctx_obj;
    self->ctx = &context_of(ctx_obj);
    sw_sabre_params &p = self->p;
    sw_sabre_params_default(&p);
    Params q(params, "SabrePlan");
    p.nx = (int32_t)q.integer("nx", 0);
    p.ny = (int32_t)q.integer("ny", 0);
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
    nb::object mask = q.get("mask");
    q.done();
    self->valid = mask_from(mask, p.nx, p.ny);
    p.valid = self->valid.empty() ? nullptr : self->valid.data();
    Context &c = *self->ctx;
    call(c, [&] { return sw_sabre_create(c.ctx, &p, &self->plan); });
    sw_sabre_get_info(self->plan, &self->info);
    self->nvalues = sw_sabre_lattice_values(&self->info.lattice);
}

// slopes: 2 nx ny floats; values: nvalues floats or None; actuators: (nx+1)(ny+1) or None. All
// host/pinned, or all device on a CUDA context.
void sabre_run(SabrePlan &sp, nb::handle slopes, nb::handle values, nb::handle actuators)
{
    const size_t n = (size_t)sp.p.nx * (size_t)sp.p.ny;
    const size_t nact = (size_t)(sp.p.nx + 1) * (size_t)(sp.p.ny + 1);
    if (values.is_none() && actuators.is_none())
        value_error("out: give values, actuators or both");
    FlatArg s = flat_arg<float>(slopes, "slopes", 2 * n, false);
    check_side(*sp.ctx, s.where, s.device_id, "slopes");
    FlatArg v, a;
    if (!values.is_none()) {
        v = flat_arg<float>(values, "out.values", (size_t)sp.nvalues, true);
        check_side(*sp.ctx, v.where, v.device_id, "out.values");
    }
    if (!actuators.is_none()) {
        a = flat_arg<float>(actuators, "out.actuators", nact, true);
        check_side(*sp.ctx, a.where, a.device_id, "out.actuators");
    }
    const bool dev = s.where == Where::device;
    if ((v.data && (v.where == Where::device) != dev) ||
        (a.data && (a.where == Where::device) != dev))
        type_error("out: the outputs must be in the slopes' kind of memory (%s)",
                   dev ? "device" : "host");
    const sw_memory mem = dev ? SW_MEM_DEVICE : where_memory(s.where);
    Context &c = *sp.ctx;
    call(c, [&] {
        return sw_sabre_run(sp.plan, (const float *)s.data, mem, (float *)v.data, (float *)a.data);
    });
}

void sabre_set_projection(SabrePlan &sp, nb::handle P)
{
    Context &c = *sp.ctx;
    if (P.is_none()) {
        call(c, [&] { return sw_sabre_set_projection(sp.plan, nullptr, 0, 0); });
        return;
    }
    Array m;
    if (!nb::try_cast<Array>(P, m, false) || m.ndim() != 2)
        type_error("P: a 2-D float32 array (rows = window squares, cols = local values) is needed");
    const int32_t rows = (int32_t)m.shape(0), cols = (int32_t)m.shape(1);
    FlatArg f;
    const float *d = host_in<float>(P, "P", 0, f);
    call(c, [&] { return sw_sabre_set_projection(sp.plan, d, rows, cols); });
}

nb::object sabre_local_matrix(SabrePlan &sp)
{
    const size_t rows = (size_t)sp.info.local_values, cols = (size_t)sp.info.local_slopes;
    const float *q = sw_sabre_local_matrix(sp.plan);
    float *d;
    auto a = new_array<float>(rows * cols, &d);
    // column-major rows x cols -> row-major
    for (size_t j = 0; j < cols; j++)
        for (size_t i = 0; i < rows; i++)
            d[i * cols + j] = q[j * rows + i];
    return nb::cast(a);
}

nb::dict sabre_info(SabrePlan &sp)
{
    const sw_sabre_info &i = sp.info;
    nb::dict d;
    d["k"] = i.k;
    d["m"] = i.m;
    d["window"] = i.window;
    d["extended"] = i.extended;
    d["local_values"] = i.local_values;
    d["local_slopes"] = i.local_slopes;
    d["dpme_iterations"] = i.dpme_iterations;
    d["lattice"] = lattice_dict(i.lattice);
    d["null_check"] = i.null_check;
    d["nvalues"] = sp.nvalues;
    return d;
}

// ------------------------------------------------------------------ global SABRE, Fried

struct SabreGlobal {
    nb::object ctx_obj;
    Context *ctx = nullptr;
    sw_sabre_global *g = nullptr;
    int32_t nx = 0, ny = 0;
    sw_sabre_lattice lattice{};
    int64_t nvalues = 0;
    SabreGlobal() = default;
    SabreGlobal(const SabreGlobal &) = delete;
    SabreGlobal &operator=(const SabreGlobal &) = delete;
    ~SabreGlobal()
    {
        sw_sabre_global_destroy(g);
    }
};

void global_init(SabreGlobal *self, nb::object ctx_obj, int32_t nx, int32_t ny, double pitch,
                 nb::handle mask)
{
    new (self) SabreGlobal();
    self->ctx_obj = ctx_obj;
    self->ctx = &context_of(ctx_obj);
    std::vector<uint8_t> valid = mask_from(mask, nx, ny);
    Context &c = *self->ctx;
    call(c, [&] {
        return sw_sabre_global_create(c.ctx, nx, ny, pitch, valid.empty() ? nullptr : valid.data(),
                                      &self->g);
    });
    self->nx = nx;
    self->ny = ny;
    sw_sabre_global_lattice(self->g, &self->lattice);
    self->nvalues = sw_sabre_lattice_values(&self->lattice);
}

void global_run(SabreGlobal &g, nb::handle slopes, nb::handle values)
{
    FlatArg s, v;
    const float *sd = host_in<float>(slopes, "slopes", 2 * (size_t)g.nx * g.ny, s);
    v = flat_arg<double>(values, "out", (size_t)g.nvalues, true);
    if (v.where == Where::device)
        type_error("out: a host (NumPy) array is needed (global SABRE runs on the CPU)");
    Context &c = *g.ctx;
    call(c, [&] { return sw_sabre_global_run(g.g, sd, (double *)v.data); });
}

struct Fried {
    nb::object ctx_obj;
    Context *ctx = nullptr;
    sw_fried *f = nullptr;
    int32_t nx = 0, ny = 0;
    Fried() = default;
    Fried(const Fried &) = delete;
    Fried &operator=(const Fried &) = delete;
    ~Fried()
    {
        sw_fried_destroy(f);
    }
};

void fried_init(Fried *self, nb::object ctx_obj, int32_t nx, int32_t ny, double pitch,
                nb::handle mask, double reg)
{
    new (self) Fried();
    self->ctx_obj = ctx_obj;
    self->ctx = &context_of(ctx_obj);
    std::vector<uint8_t> valid = mask_from(mask, nx, ny);
    Context &c = *self->ctx;
    call(c, [&] {
        return sw_fried_create(c.ctx, nx, ny, pitch, valid.empty() ? nullptr : valid.data(), reg,
                               &self->f);
    });
    self->nx = nx;
    self->ny = ny;
}

void fried_run(Fried &f, nb::handle slopes, nb::handle phase)
{
    FlatArg s, v;
    const float *sd = host_in<float>(slopes, "slopes", 2 * (size_t)f.nx * f.ny, s);
    v = flat_arg<double>(phase, "out", (size_t)(f.nx + 1) * (size_t)(f.ny + 1), true);
    if (v.where == Where::device)
        type_error("out: a host (NumPy) array is needed (Fried runs on the CPU)");
    Context &c = *f.ctx;
    call(c, [&] { return sw_fried_run(f.f, sd, (double *)v.data); });
}

// ------------------------------------------------------------------ evaluation

nb::object sabre_eval(nb::dict lat, nb::handle values, nb::handle x, nb::handle y)
{
    const sw_sabre_lattice l = lattice_from(lat);
    FlatArg va, xa, ya;
    const double *v = host_in<double>(values, "values", (size_t)sw_sabre_lattice_values(&l), va);
    const double *px = host_in<double>(x, "x", 0, xa);
    const double *py = host_in<double>(y, "y", xa.size, ya);
    double *d;
    auto out = new_array<double>(xa.size, &d);
    {
        nb::gil_scoped_release nogil;
        for (size_t i = 0; i < xa.size; i++)
            d[i] = sw_sabre_eval(&l, v, px[i], py[i]);
    }
    return nb::cast(out);
}

nb::object sabre_eval_corners(nb::dict lat, nb::handle values, int32_t nx, int32_t ny)
{
    const sw_sabre_lattice l = lattice_from(lat);
    if (nx < 1 || ny < 1 || nx > 65536 || ny > 65536)
        value_error("grid: %d x %d lenslets", nx, ny);
    FlatArg va;
    const double *v = host_in<double>(values, "values", (size_t)sw_sabre_lattice_values(&l), va);
    double *d;
    auto out = new_array<double>((size_t)(nx + 1) * (size_t)(ny + 1), &d);
    sw_sabre_eval_corners(&l, v, nx, ny, d);
    return nb::cast(out);
}

nb::object sabre_map(nb::object ctx_obj, nb::dict lat, nb::handle values, int32_t nx, int32_t ny,
                     int32_t width, int32_t height)
{
    Context &c = context_of(ctx_obj);
    const sw_sabre_lattice l = lattice_from(lat);
    FlatArg va;
    const double *v = host_in<double>(values, "values", (size_t)sw_sabre_lattice_values(&l), va);
    if (width < 1 || height < 1 || width > 65536 || height > 65536)
        value_error("size: %d x %d pixels", width, height);
    double *d;
    auto out = new_array<double>((size_t)width * (size_t)height, &d);
    call(c, [&] { return sw_sabre_map(c.ctx, &l, v, nx, ny, width, height, d); });
    return nb::cast(out);
}

nb::object fried_eval(int32_t nx, int32_t ny, nb::handle phase, nb::handle x, nb::handle y)
{
    if (nx < 1 || ny < 1)
        value_error("grid: %d x %d lenslets", nx, ny);
    FlatArg pa, xa, ya;
    const double *ph = host_in<double>(phase, "phase", (size_t)(nx + 1) * (size_t)(ny + 1), pa);
    const double *px = host_in<double>(x, "x", 0, xa);
    const double *py = host_in<double>(y, "y", xa.size, ya);
    double *d;
    auto out = new_array<double>(xa.size, &d);
    for (size_t i = 0; i < xa.size; i++)
        d[i] = sw_fried_eval(nx, ny, ph, px[i], py[i]);
    return nb::cast(out);
}

// ------------------------------------------------------------------ the command's finishing

// As `spotwave sabre`: corners of no valid lenslet become NaN; the mean over the others (the
// piston) is removed from the corners and the vertex values; returns (active, piston, rms, pv).
// act: (nx + 1)(ny + 1) doubles, values: doubles or None, both modified in place.
nb::tuple remove_piston(int32_t nx, int32_t ny, nb::handle mask, nb::handle act, nb::handle values)
{
    FlatArg ma, aa, va;
    const uint8_t *valid = host_in<uint8_t>(mask, "mask", (size_t)nx * ny, ma);
    aa = flat_arg<double>(act, "actuators", (size_t)(nx + 1) * (size_t)(ny + 1), true);
    double *w = (double *)aa.data;
    double *vals = nullptr;
    size_t nv = 0;
    if (!values.is_none()) {
        va = flat_arg<double>(values, "values", 0, true);
        vals = (double *)va.data;
        nv = va.size;
    }
    double sum = 0.0;
    int32_t n = 0;
    for (int32_t cy = 0; cy <= ny; cy++)
        for (int32_t cx = 0; cx <= nx; cx++) {
            double *p = &w[(size_t)cy * (nx + 1) + cx];
            bool active = false;
            for (int32_t iy = cy - 1; iy <= cy && !active; iy++)
                for (int32_t ix = cx - 1; ix <= cx; ix++)
                    if (ix >= 0 && iy >= 0 && ix < nx && iy < ny && valid[iy * nx + ix]) {
                        active = true;
                        break;
                    }
            if (!active) {
                *p = NAN;
                continue;
            }
            if (!std::isfinite(*p))
                raise_status(SW_EINTERNAL, "the wavefront at lenslet corner (" +
                                               std::to_string(cx) + "," + std::to_string(cy) +
                                               ") is not finite");
            sum += *p;
            n++;
        }
    if (n == 0)
        value_error("mask: no valid lenslet");
    const double piston = sum / (double)n;
    double ss = 0.0, lo = INFINITY, hi = -INFINITY;
    for (size_t k = 0; k < (size_t)(nx + 1) * (size_t)(ny + 1); k++) {
        if (std::isnan(w[k]))
            continue;
        const double v = w[k] - piston;
        w[k] = v;
        ss += v * v;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    for (size_t k = 0; k < nv; k++)
        vals[k] -= piston;
    return nb::make_tuple(n, piston, std::sqrt(ss / (double)n), hi - lo);
}

// As `spotwave sabre --map`: NaN where the pixel's lenslet is invalid (or the value is not
// finite), the mean of the others removed, as float32 (height, width), flat.
nb::object finish_map(int32_t nx, int32_t ny, nb::handle mask, nb::handle map, int32_t width,
                      int32_t height)
{
    FlatArg ma, mm;
    const uint8_t *valid = host_in<uint8_t>(mask, "mask", (size_t)nx * ny, ma);
    mm = flat_arg<double>(map, "map", (size_t)width * (size_t)height, true);
    double *m = (double *)mm.data;
    double sum = 0.0;
    int64_t n = 0;
    for (int32_t k = 0; k < height; k++) {
        const int32_t iy = (int32_t)std::floor((k + 0.5) * ny / (double)height);
        for (int32_t i = 0; i < width; i++) {
            const int32_t ix = (int32_t)std::floor((i + 0.5) * nx / (double)width);
            double *p = &m[(size_t)k * width + i];
            if (ix >= nx || iy >= ny || !valid[iy * nx + ix] || !std::isfinite(*p)) {
                *p = NAN;
                continue;
            }
            sum += *p;
            n++;
        }
    }
    const double mean = n > 0 ? sum / (double)n : 0.0;
    float *d;
    auto out = new_array<float>((size_t)width * (size_t)height, &d);
    for (size_t k = 0; k < (size_t)width * (size_t)height; k++)
        d[k] = (float)(m[k] - mean);
    return nb::cast(out);
}

} // namespace

void bind_sabre(nb::module_ &m)
{
    nb::class_<SabrePlan>(m, "SabrePlan", "The D-SABRE plan (sabre.h). Use spotwave.sabre.")
        .def("__init__", &sabre_init, nb::arg("ctx"), nb::arg("params"))
        .def("run", &sabre_run, nb::arg("slopes"), nb::arg("values").none(),
             nb::arg("actuators").none())
        .def("set_projection", &sabre_set_projection, nb::arg("P").none())
        .def("local_matrix", &sabre_local_matrix)
        .def("info", &sabre_info)
        .def_prop_ro("kernel_us", [](SabrePlan &sp) { return sw_sabre_kernel_us(sp.plan); })
        .def_prop_ro("ctx", [](SabrePlan &sp) { return sp.ctx_obj; });
    nb::class_<SabreGlobal>(m, "SabreGlobal", "Global SABRE (sabre.h). Use spotwave.sabre.")
        .def("__init__", &global_init, nb::arg("ctx"), nb::arg("nx"), nb::arg("ny"),
             nb::arg("pitch"), nb::arg("mask").none())
        .def("run", &global_run, nb::arg("slopes"), nb::arg("out"))
        .def_prop_ro("lattice", [](SabreGlobal &g) { return lattice_dict(g.lattice); })
        .def_prop_ro("nvalues", [](SabreGlobal &g) { return g.nvalues; });
    nb::class_<Fried>(m, "Fried", "Fried's zonal least squares (sabre.h). Use spotwave.sabre.")
        .def("__init__", &fried_init, nb::arg("ctx"), nb::arg("nx"), nb::arg("ny"),
             nb::arg("pitch"), nb::arg("mask").none(), nb::arg("reg"))
        .def("run", &fried_run, nb::arg("slopes"), nb::arg("out"));
    m.def("sabre_eval", &sabre_eval, nb::arg("lattice"), nb::arg("values"), nb::arg("x"),
          nb::arg("y"));
    m.def("sabre_eval_corners", &sabre_eval_corners, nb::arg("lattice"), nb::arg("values"),
          nb::arg("nx"), nb::arg("ny"));
    m.def("sabre_map", &sabre_map, nb::arg("ctx"), nb::arg("lattice"), nb::arg("values"),
          nb::arg("nx"), nb::arg("ny"), nb::arg("width"), nb::arg("height"));
    m.def("fried_eval", &fried_eval, nb::arg("nx"), nb::arg("ny"), nb::arg("phase"), nb::arg("x"),
          nb::arg("y"));
    m.def("sabre_remove_piston", &remove_piston, nb::arg("nx"), nb::arg("ny"), nb::arg("mask"),
          nb::arg("actuators"), nb::arg("values").none());
    m.def("sabre_finish_map", &finish_map, nb::arg("nx"), nb::arg("ny"), nb::arg("mask"),
          nb::arg("map"), nb::arg("width"), nb::arg("height"));
}

} // namespace swpy
