// spotwave Python binding: the C side of `python -m spotwave.bench` (python/spotwave/bench.py),
// which measures the Python call overhead over the C call.
//
// Each function here makes the C plan from the parameters the Python plan was made with (the
// same size, pixel type, geometry, path and options), runs it in a C++ loop, with no Python
// between the calls and without the GIL, and returns the time of every call in microseconds:
// the host clock around the run and a sw_context_synchronize (a no-op on the CPU; on CUDA it
// waits for the queued work), which is what the Python side times around plan(frame) and
// ctx.synchronize(). Frames rotate through a stack (frames, height, width): call i (warm-ups
// counted first) reads frame i % frames, as the Python side does, so that no call finds its frame
// in a cache. Outputs are the arrays the Python side writes.
#include "common.h"

#include <chrono>

namespace swpy
{

namespace
{

double now_us()
{
    using namespace std::chrono;
    return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

using Times = nb::ndarray<nb::numpy, double, nb::ndim<1>>;

// Runs run(frame) `warmup` times untimed, then `reps` times timed, each call followed by a
// synchronisation; stops early once the timed calls have taken budget_s seconds (at least 3).
template <class F>
Times time_calls(Context &c, const ImageArg &im, int warmup, int reps, double budget_s, F &&run)
{
    if (warmup < 0 || reps < 3)
        value_error("warmup, reps: %d, %d: give warmup >= 0 and reps >= 3", warmup, reps);
    std::vector<double> t;
    t.reserve((size_t)reps);
    call(c, [&] {
        double spent = 0.0;
        for (int i = 0; i < warmup + reps; i++) {
            sw_image one = im.img; // frame i % frames of the stack
            one.height = im.rows;
            one.data = (char *)im.img.data + (size_t)(i % im.frames) * im.rows * im.img.stride;
            const double t0 = now_us();
            sw_status st = run(&one);
            if (st == SW_OK)
                st = sw_context_synchronize(c.ctx);
            const double us = now_us() - t0;
            if (st != SW_OK)
                return st;
            if (i < warmup)
                continue;
            t.push_back(us);
            spent += us;
            if (t.size() >= 3 && spent > budget_s * 1e6)
                break;
        }
        return SW_OK;
    });
    double *out;
    auto a = new_array<double>(t.size(), &out);
    for (size_t i = 0; i < t.size(); i++)
        out[i] = t[i];
    return a;
}

// The centroid parameters bench.py passes (a plan without conditioning): frame size and type,
// geometry, path.
void centroid_params(Params &q, sw_centroid_params &p)
{
    sw_centroid_params_default(&p);
    p.width = (int32_t)q.integer("width", 0);
    p.height = (int32_t)q.integer("height", 0);
    std::string t = q.str("pixel_type", "u8");
    if (sw_pixel_type_parse(t.c_str(), &p.type) != SW_OK)
        value_error("pixel_type: '%s' is not u8, u16 or f32", t.c_str());
    sw_sh_geometry &g = p.geometry;
    g.x0 = q.num("x0", g.x0);
    g.y0 = q.num("y0", g.y0);
    g.pitch_px = q.num("pitch", g.pitch_px);
    g.nx = (int32_t)q.integer("nx", g.nx);
    g.ny = (int32_t)q.integer("ny", g.ny);
    g.pixel_um = q.num("pixel_um", g.pixel_um);
    g.focal_mm = q.num("focal_mm", g.focal_mm);
    std::string path = q.str("path", "auto");
    if (sw_centroid_path_parse(path.c_str(), &p.path) != SW_OK)
        value_error("path: '%s' is not a centroid path", path.c_str());
}

Times bench_centroid(nb::object ctx_obj, nb::dict params, nb::handle frames, nb::handle x,
                     nb::handle y, nb::handle intensity, nb::handle valid, nb::handle slopes,
                     int warmup, int reps, double budget_s)
{
    Context &c = context_of(ctx_obj);
    Params q(params, "bench_centroid");
    sw_centroid_params p;
    centroid_params(q, p);
    q.done();
    ImageArg im = image_arg(frames, "frames", true, PIX_U8 | PIX_U16 | PIX_F32);
    check_side(c, im.where, im.device_id, "frames");
    sw_centroid_plan *plan = nullptr;
    call(c, [&] { return sw_centroid_create(c.ctx, &p, &plan); });
    struct Destroy {
        sw_centroid_plan *p;
        ~Destroy()
        {
            sw_centroid_destroy(p);
        }
    } destroy{plan};
    sw_centroid_result r{};
    r.lenslets = sw_centroid_plan_lenslets(plan);
    r.nslopes = sw_centroid_plan_slopes(plan);
    r.frames = 1;
    const size_t nl = (size_t)r.lenslets, ns = 2 * (size_t)r.nslopes;
    FlatArg ox = flat_arg<float>(x, "x", nl, true), oy = flat_arg<float>(y, "y", nl, true);
    FlatArg oi = flat_arg<float>(intensity, "intensity", nl, true);
    FlatArg ov = flat_arg<uint8_t>(valid, "valid", nl, true);
    FlatArg os = flat_arg<float>(slopes, "slopes", ns, true);
    for (const FlatArg *a : {&oy, &oi, &ov, &os})
        if (a->where != ox.where)
            type_error("x, y, intensity, valid, slopes: give all outputs in one kind of memory");
    check_side(c, ox.where, ox.device_id, "x");
    r.memory = where_memory(ox.where);
    r.x = (float *)ox.data;
    r.y = (float *)oy.data;
    r.intensity = (float *)oi.data;
    r.valid = (uint8_t *)ov.data;
    r.slopes = (float *)os.data;
    return time_calls(c, im, warmup, reps, budget_s,
                      [&](const sw_image *f) { return sw_centroid_run(plan, f, &r); });
}

Times bench_find(nb::object ctx_obj, nb::dict params, nb::handle frames, int warmup, int reps,
                 double budget_s)
{
    Context &c = context_of(ctx_obj);
    ImageArg im = image_arg(frames, "frames", true, PIX_ALL);
    check_side(c, im.where, im.device_id, "frames");
    Params q(params, "bench_find");
    sw_find_params p;
    sw_find_params_default(&p, im.width, im.rows, im.img.type);
    std::string alg = q.str("algorithm", sw_find_algorithm_string(p.algorithm));
    if (sw_find_algorithm_parse(alg.c_str(), &p.algorithm) != SW_OK)
        value_error("algorithm: '%s' is not a find algorithm", alg.c_str());
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
    q.done();
    sw_find_plan *plan = nullptr;
    call(c, [&] { return sw_find_create(c.ctx, &p, &plan); });
    sw_spot_list spots{};
    struct Destroy {
        sw_find_plan *p;
        sw_spot_list *l;
        ~Destroy()
        {
            sw_find_destroy(p);
            sw_spot_list_free(l);
        }
    } destroy{plan, &spots};
    return time_calls(c, im, warmup, reps, budget_s, [&](const sw_image *f) {
        spots.count = 0; // the list is reused, as the Python plan's
        return sw_find_run(plan, f, 0, &spots, nullptr, nullptr);
    });
}

// The real-time chain with an MVM reconstructor and an integrator (gain), commands into a host
// buffer, no telemetry: what bench.py makes spotwave.loop.RTC with.
Times bench_rtc(nb::object ctx_obj, nb::dict params, nb::handle cm, nb::handle frames, int warmup,
                int reps, double budget_s)
{
    Context &c = context_of(ctx_obj);
    Params q(params, "bench_rtc");
    sw_rtc_params p;
    sw_rtc_params_default(&p);
    centroid_params(q, p.centroid);
    p.recon = SW_RTC_MVM;
    p.nact = (int32_t)q.integer("nact", 0);
    sw_controller_params_default(&p.controller);
    p.controller.nact = p.nact;
    p.controller.gain = q.num("gain", p.controller.gain);
    p.telemetry = 0;
    q.done();
    const size_t ns = (size_t)p.centroid.geometry.nx * (size_t)p.centroid.geometry.ny;
    FlatArg m = flat_arg<float>(cm, "cm", (size_t)(p.nact > 0 ? p.nact : 0) * 2 * ns, false);
    if (m.where == Where::device)
        type_error("cm: a host (NumPy) array is needed");
    p.cm = (const float *)m.data;
    ImageArg im = image_arg(frames, "frames", true, PIX_U8 | PIX_U16 | PIX_F32);
    check_side(c, im.where, im.device_id, "frames");
    sw_rtc *rtc = nullptr;
    call(c, [&] { return sw_rtc_create(c.ctx, &p, &rtc); });
    struct Destroy {
        sw_rtc *r;
        ~Destroy()
        {
            sw_rtc_destroy(r);
        }
    } destroy{rtc};
    std::vector<float> commands((size_t)p.nact);
    return time_calls(c, im, warmup, reps, budget_s, [&](const sw_image *f) {
        return sw_rtc_run(rtc, f, commands.data(), nullptr);
    });
}

} // namespace

void bind_bench(nb::module_ &m)
{
    m.def("bench_centroid", &bench_centroid, nb::arg("ctx"), nb::arg("params"), nb::arg("frames"),
          nb::arg("x"), nb::arg("y"), nb::arg("intensity"), nb::arg("valid"), nb::arg("slopes"),
          nb::arg("warmup"), nb::arg("reps"), nb::arg("budget_s"),
          "Times sw_centroid_run called from C++ (see bench.cpp): per-call microseconds.");
    m.def("bench_find", &bench_find, nb::arg("ctx"), nb::arg("params"), nb::arg("frames"),
          nb::arg("warmup"), nb::arg("reps"), nb::arg("budget_s"),
          "Times sw_find_run called from C++ (see bench.cpp): per-call microseconds.");
    m.def("bench_rtc", &bench_rtc, nb::arg("ctx"), nb::arg("params"), nb::arg("cm"),
          nb::arg("frames"), nb::arg("warmup"), nb::arg("reps"), nb::arg("budget_s"),
          "Times sw_rtc_run called from C++ (see bench.cpp): per-call microseconds.");
}

} // namespace swpy
