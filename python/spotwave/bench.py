"""python -m spotwave.bench: what a call from Python costs over the same call from C.

Every case runs one C plan on the same frames into the same outputs twice: from a C++ loop in
the extension (``_spotwave.bench_*``, python/src/bench.cpp: no Python between the calls) and
from Python (``plan(frame, out=...)`` in a ``for`` loop). Both time each call with the host clock
around the run and a synchronisation of the context (a no-op on the CPU; on CUDA it waits for
the queued work). The two alternate in two rounds; the difference of the medians (and of the
99th percentiles) is the Python overhead per call. Beside them, when CuPy (on CUDA) or SciPy (on
the CPU) is importable, array-library equivalents of the same work: the centre of gravity by
reshape-and-sum, and the DIALS dispersion threshold by box filters (uniform_filter) with
connected components and centroids.

Cases (frames rotate through a pool larger than the caches, as bench/ does):
  centroid  1000 x 1000 u8 frames of uniform random pixels, lenslets of 3.8, 4 and 29 px from
            pixel (0, 0) (bench/bench_centroid.c's case, after Mocci et al. 2020, J. Opt. Soc.
            Am. A 37(10), Table 1). CPU: NumPy frames and outputs. CUDA: CuPy frames and outputs
            (the device path; with CuPy's stream apart from the context's, and with CuPy on the
            context's stream), and NumPy frames (the copy path).
  find      u16 frames as bench/bench_find.c makes them: Gaussian spots (sigma 1 px, 30..3000
            counts, one per 8000 px) on a Poisson sky of 0.8 counts, an Eiger 16M's module gaps
            as 0xffff; 4148 x 4362 (Eiger 16M) and 2048 x 2048. NumPy frames on the CPU, CuPy
            frames on CUDA; the spot list comes back to the host either way.
  rtc       the real-time chain (spotwave.loop.RTC, where the package has it), frame to commands:
            40 x 40 lenslets of 6 px on 240 x 240 u16 frames of a simulated Shack-Hartmann
            pattern, an MVM with a random control matrix (1681 actuators x 3200 slopes) and an
            integrator (bench/bench_loop.c's 40 x 40 case; the latency does not depend on the
            matrix's values). Host frames, and CuPy frames on CUDA.
Targets (issue 21, on an H100): with CuPy device arrays, centroid within 3 us of the C plan's
time, and find on an Eiger 16M frame within 2 % of C.

Output: one JSON line per row on stdout (as bench/harness.c: median_us, p99_us, ...; Python
rows add overhead_us, overhead_p99_us, overhead_pct and the target where one applies), and a
table on stderr (unless --json-only). --quick: small sizes and few repetitions (a smoke run).
"""

import argparse
import json
import math
import sys
import time

import numpy as np

import spotwave
from spotwave import _arrays, _spotwave

SEED = 0x5EED000


def stats(samples):
    """median, p99 (nearest rank: the ceil(0.99 n)-th smallest), min, mean of per-call us."""
    t = np.sort(np.asarray(samples, np.float64))
    n = len(t)
    return dict(median_us=float(np.median(t)), p99_us=float(t[math.ceil(0.99 * n) - 1]),
                min_us=float(t[0]), mean_us=float(t.mean()), reps=n)


def time_python(call, frames, sync, opt):
    """Per-call us of call(frame) + sync() from Python, frames rotating as the C side's."""
    t = []
    spent = 0.0
    for i in range(opt.warmup + opt.reps):
        f = frames[i % len(frames)]
        t0 = time.perf_counter_ns()
        call(f)
        sync()
        us = (time.perf_counter_ns() - t0) * 1e-3
        if i >= opt.warmup:
            t.append(us)
            spent += us
            if len(t) >= 3 and spent > opt.budget * 1e6:
                break
    return t


class Report:
    """Collects rows, prints their JSON lines as they come, and the table at the end."""

    def __init__(self, ctx, opt):
        self.opt, self.rows = opt, []
        self.common = dict(backend=ctx.backend, device=device_name(ctx), threads=ctx.threads,
                           python=sys.version.split()[0], spotwave=spotwave.__version__)

    def note(self, text):
        if not self.opt.json_only:
            print(text, file=sys.stderr)

    def add(self, bench, config, side, samples, c_row=None, target=None, **extra):
        row = dict(bench=bench, config=config, side=side, **stats(samples), **self.common)
        if c_row is not None:
            row["overhead_us"] = row["median_us"] - c_row["median_us"]
            row["overhead_p99_us"] = row["p99_us"] - c_row["p99_us"]
            row["overhead_pct"] = 100.0 * row["overhead_us"] / c_row["median_us"]
            if target is not None:
                row["target"], ok = target
                row["meets_target"] = bool(ok(row))
        row.update(extra)
        self.rows.append(row)
        print(json.dumps(row), flush=True)
        return row

    def table(self):
        if self.opt.json_only or not self.rows:
            return
        c = self.common
        print(f"\nspotwave {c['spotwave']} Python {c['python']}: {c['backend']} on {c['device']}"
              f" ({c['threads']} threads); times per call, us", file=sys.stderr)
        head = (f"{'bench':<9} {'config':<18} {'side':<36} {'median':>10} {'p99':>10} "
                f"{'reps':>6} {'overhead (median / p99)':>26}  target")
        print(head + "\n" + "-" * len(head), file=sys.stderr)
        for r in self.rows:
            over = ""
            if "overhead_us" in r:
                over = (f"{r['overhead_us']:+9.2f} / {r['overhead_p99_us']:+8.2f} "
                        f"({r['overhead_pct']:+.1f}%)")
            tgt = ""
            if "target" in r:
                tgt = f"{r['target']}: {'met' if r['meets_target'] else 'NOT met'}"
            print(f"{r['bench']:<9} {r['config']:<18} {r['side']:<36} {r['median_us']:>10.2f} "
                  f"{r['p99_us']:>10.2f} {r['reps']:>6} {over:>26}  {tgt}", file=sys.stderr)


def device_name(ctx):
    if ctx.backend == "cuda":
        return ctx.device_info()["name"]
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU"


def exported(ctx, a):
    """What the binding takes for array a: a NumPy array as it is, a device array as a DLPack
    capsule for the context's stream (made anew for every call: a capsule is used once)."""
    return _arrays.as_input(a, "bench", ctx)[0]


def cupy_or_none(ctx):
    return _arrays.cupy_module() if ctx.backend == "cuda" else None


def ndimage_of(xp):
    """cupyx.scipy.ndimage for CuPy, scipy.ndimage for NumPy; None when missing."""
    try:
        if xp is np:
            import scipy.ndimage as ndi  # noqa: PLC0415
        else:
            import cupyx.scipy.ndimage as ndi  # noqa: PLC0415
        return ndi
    except ImportError:
        return None


# ------------------------------------------------------------------ array-library equivalents

def cog_equivalent(xp, frame, pitch, n):
    """Centre of gravity of n x n lenslets of `pitch` whole pixels from pixel (0, 0), by
    reshape-and-sum: (x, y, intensity), each (n, n)."""
    f = frame[:n * pitch, :n * pitch].astype(xp.float32).reshape(n, pitch, n, pitch)
    cols, rows = f.sum(axis=1), f.sum(axis=3)  # (n, n, pitch) and (n, pitch, n)
    k = xp.arange(pitch, dtype=xp.float32)
    total = cols.sum(axis=2)
    start = xp.arange(n, dtype=xp.float32) * pitch
    x = (cols * k).sum(axis=2) / total + start[None, :]
    y = (rows * k[None, :, None]).sum(axis=1) / total + start[:, None]
    return x, y, total


def dispersion_equivalent(xp, ndi, frame, kernel=3, sigma_b=6.0, sigma_s=3.0, min_local=2,
                          overload=0xFFFE):
    """The DIALS dispersion threshold (Kabsch 2010) by box filters, then 4-connected
    components and their intensity-weighted centroids: (x, y, intensity, strong pixels). Gain
    1, no size or separation filters."""
    f = frame.astype(xp.float32)
    valid = (frame < overload).astype(xp.float32)
    side = 2 * kernel + 1
    box = side * side

    def window_sum(a):
        return ndi.uniform_filter(a, side, mode="constant") * box

    n = xp.rint(window_sum(valid))
    s1 = window_sum(f * valid)
    s2 = window_sum(f * f * valid)
    n1 = xp.maximum(n - 1, 1)
    mean = s1 / xp.maximum(n, 1)
    var = (n * s2 - s1 * s1) / (xp.maximum(n, 1) * n1)
    strong = ((valid > 0) & (n >= min_local) & (mean > 0)
              & (var > mean * (1 + sigma_b * xp.sqrt(2 / n1)))
              & (f > mean + sigma_s * xp.sqrt(mean)))
    labels, count = ndi.label(strong)
    count = int(count)
    lab = labels.ravel()
    w = f.ravel()
    ys, xs = xp.divmod(xp.arange(f.size), f.shape[1])
    total = xp.bincount(lab, weights=w, minlength=count + 1)[1:]
    x = xp.bincount(lab, weights=w * xs, minlength=count + 1)[1:] / total
    y = xp.bincount(lab, weights=w * ys, minlength=count + 1)[1:] / total
    return x, y, total, int(strong.sum())


# ------------------------------------------------------------------ cases

def pair(report, bench, config, side, run_c, run_py, sync, frames, opt, target=None, **extra):
    """The C loop and the Python loop, alternating in two rounds; adds both rows."""
    c, py = [], []
    half = argparse.Namespace(**{**vars(opt), "reps": max(3, opt.reps // 2),
                                 "budget": opt.budget / 2})
    for _ in range(2):
        c += list(run_c(half))
        py += time_python(run_py, frames, sync, half)
    c_row = report.add(bench, config, f"C ({side})", c, **extra)
    report.add(bench, config, f"Python ({side})", py, c_row=c_row, target=target)
    return c_row


def centroid_cases(ctx, report, opt):
    w = 100 if opt.quick else 1000
    pitches = (3.8, 29.0) if opt.quick else (3.8, 4.0, 29.0)
    count = 4 if opt.quick else max(8, (64 << 20) // (w * w))
    frames = np.random.default_rng(SEED).integers(0, 256, (count, w, w), dtype=np.uint8)
    cp = cupy_or_none(ctx)
    sides = [("host", np)] if ctx.backend == "cpu" else [("copy", np)]
    if cp is not None:
        sides.insert(0, ("device", cp))
    elif ctx.backend == "cuda":
        report.note("centroid: CuPy is not importable: no device-array rows")
    for d in pitches:
        n = int(w // d)
        config = f"w{w} d{d:g}"
        for side, xp in sides:
            stack = frames if xp is np else cp.asarray(frames)
            views = [stack[i] for i in range(count)]
            memory = "device" if side == "device" else "host"
            plan = spotwave.CentroidPlan((w, w), np.uint8, pitch=d, grid=(n, n), origin=(0, 0),
                                         memory=memory, ctx=ctx)
            out = plan.result(1)
            params = dict(plan.geometry, width=w, height=w, pixel_type="u8", path=plan.path)

            def run_c(o, stack=stack, params=params, out=out):
                outs = [exported(ctx, a) for a in (out.x, out.y, out.intensity, out.valid,
                                                   out.slopes)]
                return _spotwave.bench_centroid(ctx, params, exported(ctx, stack), *outs,
                                                o.warmup, o.reps, o.budget)

            def run_py(f, plan=plan, out=out):
                plan(f, out=out)

            target = ("within 3 us of C", lambda r: r["overhead_us"] <= 3.0)
            c_row = pair(report, "centroid", config, f"{side}, path {plan.path}", run_c, run_py,
                         ctx.synchronize, views, opt,
                         target=target if side == "device" else None, lenslets=n * n)
            if side == "device":
                # The same Python call with CuPy on the context's stream: no events to order
                # CuPy's stream and the context's (see the package's README).
                with cp.cuda.ExternalStream(ctx.stream):
                    t = time_python(run_py, views, ctx.synchronize, opt)
                report.add("centroid", config, "Python (device, CuPy on ctx.stream)", t,
                           c_row=c_row, target=target)
            if d == int(d) and side != "copy":  # reshape-and-sum needs whole pixels
                equivalent_cog(report, ctx, xp, plan, views, int(d), n, config, side, opt)


def equivalent_cog(report, ctx, xp, plan, views, pitch, n, config, side, opt):
    name = "CuPy" if xp is not np else "NumPy"
    x, y, _ = cog_equivalent(xp, views[0], pitch, n)
    r = plan(views[0])  # the same centroids, to the float32 rounding
    diff = float(abs(x - r.x[0]).max()) if xp is np else float(abs(x - r.x[0]).max().get())
    if not diff < 1e-2:
        raise AssertionError(f"the {name} centre of gravity differs from spotwave's by {diff}")
    sync = ctx.synchronize if xp is np else xp.cuda.get_current_stream().synchronize
    t = time_python(lambda f: cog_equivalent(xp, f, pitch, n), views, sync, opt)
    report.add("centroid", config, f"{name} reshape-and-sum ({side})", t, max_diff_px=diff)


def find_frames(w, h, count):
    """u16 frames as bench/bench_find.c's (not the same pixels): see the module's text."""
    cpu = spotwave.Context("cpu")
    out = np.empty((count, h, w), np.uint16)
    for i in range(count):
        out[i], _ = spotwave.sim.stars(random=w * h // 8000, size=(w, h), sigma=1.0, roi_side=9,
                                       mag_range=(0.0, 5.0), zero_point=3000.0, ratio=2.512,
                                       sky_e=0.8, seed=SEED + i, ctx=cpu)
    if w >= 4000 and h >= 4000:  # the module gaps of an Eiger 16M: 1030 x 514 px modules
        y, x = np.ogrid[:h, :w]
        out[:, (x % 1039 >= 1030) | (y % 551 >= 514)] = 0xFFFF
    return out


def find_cases(ctx, report, opt):
    sizes = [("256x256", 256, 256)] if opt.quick else [("eiger16m", 4148, 4362),
                                                       ("2048x2048", 2048, 2048)]
    cp = cupy_or_none(ctx)
    if ctx.backend == "cuda" and cp is None:
        report.note("find: CuPy is not importable: host frames on the CUDA context")
    xp = cp if cp is not None else np
    for name, w, h in sizes:
        host = find_frames(w, h, 2 if opt.quick else 4)
        stack = host if xp is np else xp.asarray(host)
        views = [stack[i] for i in range(len(host))]
        side = "device" if xp is not np else "host"
        plan = spotwave.FindPlan((h, w), np.uint16, ctx=ctx)
        params = dict(plan.params)
        params["kernel_x"], params["kernel_y"] = params.pop("kernel_size")
        spots = len(plan(views[0]))

        def run_c(o, stack=stack, params=params):
            return _spotwave.bench_find(ctx, params, exported(ctx, stack), o.warmup, o.reps,
                                        o.budget)

        def run_py(f, plan=plan):
            plan(f)

        target = None
        if name == "eiger16m" and side == "device":
            target = ("within 2% of C", lambda r: r["overhead_pct"] <= 2.0)
        pair(report, "find", f"{name} u16", side, run_c, run_py, ctx.synchronize, views, opt,
             target=target, spots=spots)
        ndi = ndimage_of(xp)
        if ndi is None:
            report.note(f"find: {'cupyx' if xp is not np else 'scipy'}.ndimage is not importable: "
                        f"no box-filter equivalent")
            continue
        basic = spotwave.FindPlan((h, w), np.uint16, algorithm="dispersion", ctx=ctx)
        basic(views[0])
        *_, strong = dispersion_equivalent(xp, ndi, views[0])
        lib = "CuPy" if xp is not np else "SciPy"
        sync = ctx.synchronize if xp is np else xp.cuda.get_current_stream().synchronize
        t = time_python(lambda f: dispersion_equivalent(xp, ndi, f), views, sync, opt)
        report.add("find", f"{name} u16", f"{lib} box-filter dispersion ({side})", t,
                   strong_px=strong, strong_px_spotwave=basic.stats["strong_pixels"])


def rtc_cases(ctx, report, opt):
    loop = getattr(spotwave, "loop", None)
    if loop is None:
        try:
            from spotwave import loop  # noqa: PLC0415
        except ImportError:
            loop = None
    if loop is None or not hasattr(loop, "RTC"):
        # The hook: once the package binds the real-time chain (spotwave.loop.RTC), this case
        # runs; the C side (_spotwave.bench_rtc) is there already.
        report.note("rtc: spotwave.loop.RTC is not in this build of the package: skipped")
        return
    nl, p = (8, 6) if opt.quick else (40, 6)
    w = nl * p
    nact, ns = (nl + 1) ** 2, nl * nl
    cpu = spotwave.Context("cpu")
    host = np.stack([spotwave.sim.sh(grid=(nl, nl), pitch=p, size=(w, w), origin=(0, 0),
                                     read_noise_e=2.0, bias=100.0, seed=SEED + i, ctx=cpu)[0]
                     for i in range(8)])
    cm = np.random.default_rng(SEED).uniform(-1e-3, 1e-3, (nact, 2 * ns)).astype(np.float32)
    cp = cupy_or_none(ctx)
    sides = [("host", np)] + ([("device", cp)] if cp is not None else [])
    for side, xp in sides:
        stack = host if xp is np else xp.asarray(host)
        views = [stack[i] for i in range(len(host))]
        rtc = loop.RTC((w, w), np.uint16, pitch=p, grid=(nl, nl), origin=(0, 0), recon="mvm",
                       cm=cm, nact=nact, gain=0.5, ctx=ctx)
        geom = spotwave.CentroidPlan((w, w), np.uint16, pitch=p, grid=(nl, nl), origin=(0, 0),
                                     ctx=cpu).geometry
        params = dict(geom, width=w, height=w, pixel_type="u16", nact=nact, gain=0.5)

        def run_c(o, stack=stack, params=params):
            return _spotwave.bench_rtc(ctx, params, cm, exported(ctx, stack), o.warmup, o.reps,
                                       o.budget)

        def run_py(f, rtc=rtc):
            rtc(f)

        pair(report, "rtc", f"{nl}x{nl} mvm-fp32", side, run_c, run_py, ctx.synchronize, views,
             opt, nact=nact, slopes=2 * ns)


CASES = {"centroid": centroid_cases, "find": find_cases, "rtc": rtc_cases}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m spotwave.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: all cores)")
    ap.add_argument("--cases", default="centroid,find,rtc",
                    help="comma-separated: centroid, find, rtc (default: all)")
    ap.add_argument("--reps", type=int, help="timed calls per row (default 2000; --quick 20)")
    ap.add_argument("--warmup", type=int, help="untimed calls first (default 20; --quick 2)")
    ap.add_argument("--budget", type=float,
                    help="seconds of timed calls per row at most (default 4; --quick 0.5)")
    ap.add_argument("--quick", action="store_true", help="small sizes, few repetitions")
    ap.add_argument("--json-only", action="store_true", help="JSON lines only (no table)")
    opt = ap.parse_args(argv)
    opt.reps = opt.reps or (20 if opt.quick else 2000)
    opt.warmup = opt.warmup if opt.warmup is not None else (2 if opt.quick else 20)
    opt.budget = opt.budget or (0.5 if opt.quick else 4.0)
    if opt.reps < 6:
        ap.error("--reps: at least 6 (two rounds of 3)")
    cases = [c.strip() for c in opt.cases.split(",") if c.strip()]
    unknown = set(cases) - set(CASES)
    if unknown:
        ap.error(f"--cases: unknown {', '.join(sorted(unknown))} (known: {', '.join(CASES)})")
    ctx = spotwave.Context(opt.backend, device=opt.device, threads=opt.threads)
    if not opt.json_only:
        print(f"spotwave.bench: {ctx.backend} ({ctx.reason}); cases {', '.join(cases)}",
              file=sys.stderr)
    report = Report(ctx, opt)
    for c in cases:
        CASES[c](ctx, report, opt)
    report.table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
