"""The adaptive-optics loop after the wavefront sensor (loop.h): a deformable mirror, the
projection of a reconstructed wavefront onto it, the interaction and control matrices of the
matrix-vector reconstructor, controllers, the real-time chain from camera frame to commands, and
a closed-loop simulator, as ``spotwave loop``.

Methods: the mirror model, the global projection (Eq. 13) and the distributed projection inside
D-SABRE (Eq. 14-16) follow Brunner E., de Visser C. C., Vuik C., Verhaegen M. (2018), "GPU
implementation for spline-based wavefront reconstruction", J. Opt. Soc. Am. A 35(6), 859-872,
section 4 (the simulator reproduces its section 4.B setting by default); the actuators sit in the
Fried geometry (Fried D. L. (1977), "Least-square fitting a wave-front distortion estimate to an
array of phase-difference measurements", J. Opt. Soc. Am. 67(3), 370-375); the centroids and the
loop after them (controllers) after Mocci J., Busato F., Bombieri N., Bonora S., Muradore R.
(2020), "An efficient implementation of the Shack-Hartmann centroids extraction for edge
computing", J. Opt. Soc. Am. A 37(10), 1548-1556 (section 6); turbulence screens after Lane,
Glindemann & Dainty (1992), Waves in Random Media 2(3), 209-224, and Assémat, Wilson & Gendron
(2006), Opt. Express 14(3), 988-999.

Conventions. Everything sits on the lenslet lattice: lenslet (ix, iy) (0-based) is centred on
lattice position (ix, iy), one unit = one lenslet pitch, x along the pupil's +u, y along +v. For
an nx x ny lenslet array the mirror has (nx + 1)(ny + 1) actuators at the lenslet corners,
actuator a = cy (nx + 1) + cx at (cx - 1/2, cy - 1/2); command arrays are flat (nact,) float32 in
that order (reshape to (ny + 1, nx + 1)). Commands are micrometres of optical path; the mirror's
surface is phi_u(x, y) = sum_a u_a f(x - x_a) f(y - y_a) (Eq. 12) with the separable influence
f of coupling c (its value one pitch away): "gaussian" f(r) = c^(r^2), or "bezier" (OOMAO's
"monotonic" shape of two cubic Bezier curves, stretched to pass through c at one pitch; zero
from 2.97 pitches on at c = 0.3; see loop.h). The residual the sensor sees is W - phi_u. Every
reconstructor returns r, the commands whose mirror shape best matches the wavefront that
produced the slopes; an integrator adds g r. Slopes are the centroid stage's: pixels, x block then y block over the
lenslets of the mask (nslopes per axis).
"""

import math

import numpy as np

from . import _arrays, _context, _spotwave, sabre as _sabre
from ._centroid import manual_geometry
from ._find import _mask, pixel_type

__all__ = ["DM", "DMShaper", "Projector", "ControlMatrix", "Controller", "RTC", "Simulator",
           "interaction_matrix", "control_matrix", "simulate", "max_gain", "CONFIG_KEYS",
           "defaults", "unseen_modes", "modal_gains"]

_INFLUENCE = ("gaussian", "bezier")


# ------------------------------------------------------------------ the mirror

class DM:
    """A deformable mirror in the Fried geometry of an (nx, ny) lenslet array (loop.h):
    ``DM(grid, *, influence="gaussian", coupling=0.3)``; 0 < coupling < 1, 1..1024 lenslets per
    side. ``nact`` = (nx + 1)(ny + 1)."""

    def __init__(self, grid, *, influence="gaussian", coupling=0.3):
        nx, ny = _sabre._grid(grid, None)
        if influence not in _INFLUENCE:
            raise ValueError(f"influence: '{influence}' is not 'gaussian' or 'bezier'")
        self.grid, self.influence, self.coupling = (nx, ny), influence, float(coupling)
        _spotwave.dm_check(self._dict())

    def _dict(self):
        nx, ny = self.grid
        return dict(nx=nx, ny=ny, influence=self.influence, coupling=self.coupling)

    @property
    def nact(self):
        nx, ny = self.grid
        return (nx + 1) * (ny + 1)

    def positions(self):
        """The actuators' lattice positions (x, y), each (ny + 1, nx + 1)."""
        nx, ny = self.grid
        cy, cx = np.mgrid[0:ny + 1, 0:nx + 1]
        return cx - 0.5, cy - 0.5

    def profile(self, r):
        """The 1-D influence profile f(r) (r in actuator pitches, any shape)."""
        r = np.asarray(r, np.float64)
        return _spotwave.dm_profile(self.influence, self.coupling,
                                    np.ascontiguousarray(r).ravel()).reshape(r.shape)

    def shaper(self, *, samples=8, margin=0, memory="host", ctx=None):
        """A :class:`DMShaper` sampling the surface at `samples` points per lenslet side."""
        return DMShaper(self, samples=samples, margin=margin, memory=memory, ctx=ctx)

    def surface(self, commands, *, samples=8, margin=0, ctx=None):
        """The surface of `commands` (um) on samples per lenslet side (see :class:`DMShaper`)."""
        return self.shaper(samples=samples, margin=margin, ctx=ctx)(
            np.ascontiguousarray(commands, np.float32))

    def __repr__(self):
        return (f"spotwave.loop.DM(grid={self.grid}, influence='{self.influence}', "
                f"coupling={self.coupling})")


class DMShaper:
    """The mirror's surface on a grid, two matrix products (loop.h, ``sw_dm_shaper``):
    ``DMShaper(dm, *, samples=8, margin=0, grid=None, memory="host", ctx=None)``. The grid:
    `samples` points per lenslet side over the array plus `margin` on every side (sample (i, k)
    at lattice (x0 + i step, y0 + k step), step 1 / samples), or grid=dict(width, height, x0, y0,
    step). ``shaper(commands, out=None)``: commands (nact,) float32 (NumPy, or CuPy with
    memory="device") -> (height, width) float32 in um, on the commands' side."""

    def __init__(self, dm, *, samples=8, margin=0, grid=None, memory="host", ctx=None):
        self.ctx = _context.resolve(ctx)
        if not isinstance(dm, DM):
            raise TypeError(f"dm: expected a spotwave.loop.DM, got {type(dm).__name__}")
        if memory not in ("host", "device"):
            raise ValueError(f"memory: '{memory}' is not 'host' or 'device'")
        if memory == "device":
            _arrays.require_cuda(self.ctx, "memory='device'")
        self.dm, self.memory = dm, memory
        self.grid = (dict(grid) if grid is not None else
                     _spotwave.lattice_grid_lenslets(dm.grid[0], dm.grid[1], int(samples),
                                                     int(margin)))
        self._s = _spotwave.DMShaper(self.ctx, dm._dict(), self.grid)

    @property
    def shape(self):
        return (self.grid["height"], self.grid["width"])

    def __call__(self, commands, out=None):
        device = _arrays.is_device(commands)
        if out is None:
            out = _arrays.empty(self.shape, np.float32, device, self.ctx)
        u, device = _arrays.as_input(commands, "commands", self.ctx)
        o, _ = _arrays.as_output(out, "out", self.ctx)
        with _arrays.DeviceRun(self.ctx, device):
            self._s.run(u, o)
        return out


class Projector:
    """Least-squares projection of a linear spline (:mod:`spotwave.sabre`'s lattice values) onto
    mirror commands, u = P c with P = (F^T F + lambda I)^-1 F^T B (Brunner et al. 2018 Eq. 13,
    and Eq. 14-15 for one D-SABRE window): F the influence functions and B the spline at
    samples x samples fitting points per lattice square, lambda = regularisation x
    trace(F^T F) / nact.

    ``Projector(dm, lattice, *, actuators=None, samples=4, square_mask=None,
    regularisation=1e-6, ctx=None)``: dm a :class:`DM` (influence and coupling); lattice a
    :class:`spotwave.sabre.Lattice`; actuators (nax, nay, ax0, ay0), a rectangular actuator grid
    with actuator (0, 0) at lattice (ax0, ay0) (default: the dm's Fried corners, the global
    projection); square_mask (sy, sx) bool, the squares whose points are fitted.
    :meth:`window` makes the local projection of one D-SABRE window (for
    :meth:`spotwave.sabre.SabrePlan.set_projection` or the chain's projection="local").
    ``P = proj.matrix`` ((nact, nvalues) float32); ``proj(values, out=None)`` = P values.
    """

    def __init__(self, dm, lattice, *, actuators=None, samples=4, square_mask=None,
                 regularisation=1e-6, ctx=None, _params=None):
        self.ctx = _context.resolve(ctx)
        if not isinstance(dm, DM):
            raise TypeError(f"dm: expected a spotwave.loop.DM, got {type(dm).__name__}")
        if _params is None:
            if not isinstance(lattice, _sabre.Lattice):
                raise TypeError(f"lattice: expected a spotwave.sabre.Lattice, got "
                                f"{type(lattice).__name__}")
            params = _spotwave.projector_params_global(dm._dict(), lattice._dict())
            if actuators is not None:
                nax, nay, ax0, ay0 = actuators
                params.update(nax=int(nax), nay=int(nay), ax0=float(ax0), ay0=float(ay0))
        else:
            params = _params
        params.update(samples=int(samples), regularisation=float(regularisation))
        if square_mask is not None:
            lat = params["lattice"]
            m = np.asarray(_mask(square_mask, "square_mask"))
            if m.shape != (lat["sy"], lat["sx"]):
                raise ValueError(f"square_mask: shape {m.shape}, the lattice has "
                                 f"({lat['sy']}, {lat['sx']}) squares")
            params["square_mask"] = np.ascontiguousarray(m)
        self._p = _spotwave.Projector(self.ctx, params)
        self.params = {k: v for k, v in params.items() if k != "square_mask"}
        self.lattice = _sabre.Lattice._from(params["lattice"])

    @classmethod
    def window(cls, dm, window, *, samples=4, regularisation=1e-6, ctx=None):
        """The local projection of one D-SABRE window of `window` x `window` squares (its
        window^2 actuators at the square centres; Brunner et al. 2018 Eq. 14-15)."""
        params = _spotwave.projector_params_window(dm._dict(), int(window))
        return cls(dm, None, samples=samples, regularisation=regularisation, ctx=ctx,
                   _params=params)

    @property
    def shape(self):
        return (self._p.rows, self._p.cols)

    @property
    def matrix(self):
        """P, (actuators, values) float32 (a copy)."""
        return self._p.matrix().reshape(self.shape)

    def __call__(self, values, out=None):
        device = _arrays.is_device(values)
        if out is None:
            out = _arrays.empty((self._p.rows,), np.float32, device, self.ctx)
        v, device = _arrays.as_input(values, "values", self.ctx)
        o, _ = _arrays.as_output(out, "out", self.ctx)
        with _arrays.DeviceRun(self.ctx, device):
            self._p.run(v, o)
        return out


# ------------------------------------------------------------------ calibration

def interaction_matrix(measure, nact, nslopes, *, amp=0.05):
    """The interaction matrix by push-pull (loop.h, ``sw_interaction_matrix``): column a =
    (s(+amp e_a) - s(-amp e_a)) / (2 amp), the other commands 0. measure(commands) gets a fresh
    (nact,) float32 NumPy array of commands (um) and returns the nslopes slopes it measures (any
    array-like; CuPy arrays are copied to the host). Returns D, (nslopes, nact) float32. An
    exception raised by measure stops the calibration and propagates."""
    nact, nslopes = int(nact), int(nslopes)

    def m(u):
        s = measure(u)
        if _arrays.is_device(s):
            s = s.get()
        s = np.ascontiguousarray(np.asarray(s, np.float32)).ravel()
        if s.size != nslopes:
            raise ValueError(f"measure: returned {s.size} slopes, expected {nslopes}")
        return s

    im = _spotwave.interaction_matrix(nact, nslopes, float(amp), m)
    return im.reshape(nact, nslopes).T


class ControlMatrix:
    """What :func:`control_matrix` returns: ``cm`` (nact, nslopes) float32 (the chain's layout),
    ``kept`` (modes kept), ``singular`` (the singular values, descending), ``modes``
    (nact, kept) float32, the kept right singular vectors (an orthonormal modal basis for the PI
    controller)."""

    def __init__(self, cm, kept, singular, modes):
        self.cm, self.kept, self.singular, self.modes = cm, kept, singular, modes

    def __array__(self, dtype=None, copy=None):
        return self.cm if dtype is None else self.cm.astype(dtype)


def control_matrix(D, *, max_condition=0.0, max_modes=0, ctx=None):
    """The truncated pseudo-inverse of an interaction matrix D (nslopes, nact) (loop.h,
    ``sw_control_matrix``: LAPACK's SVD in double): singular values sigma_i >= sigma_0 /
    max_condition are kept (0: no limit), at most max_modes (0: no limit). Returns a
    :class:`ControlMatrix`."""
    ctx = _context.resolve(ctx)
    D = _arrays.host_array(D, "D")
    if D.ndim != 2:
        raise ValueError(f"D: expected a 2-D (nslopes, nact) array, got shape {D.shape}")
    nslopes, nact = D.shape
    if D.dtype != np.float32:
        D = D.astype(np.float32)
    im = np.ascontiguousarray(D.T)  # nslopes x nact column-major
    cm, kept, sv, modes = _spotwave.control_matrix(ctx, im, nslopes, nact, float(max_condition),
                                                   int(max_modes))
    return ControlMatrix(cm.reshape(nact, nslopes), kept, sv, modes.reshape(kept, nact).T)


# ------------------------------------------------------------------ controllers

_KINDS = ("integrator", "leaky", "pi")


def _param(v, name):
    """A parameter array (copied by the library): anything NumPy takes, on the host, as float32."""
    if _arrays.is_device(v):
        raise TypeError(f"{name}: a host array or sequence is needed (the plan copies it)")
    try:
        return np.asarray(v, np.float32)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected numbers, got {type(v).__name__}") from None


_UNSEEN = {"none": 0, "piston": 1, "waffle": 2, "piston-waffle": 3}


def unseen_modes(nx, ny, valid=None, which="piston-waffle"):
    """The modes a Shack-Hartmann sensor on the Fried geometry cannot see (loop.h,
    ``sw_unseen_modes``): piston and / or waffle over the corners of the valid lenslets (valid:
    (ny, nx), default all), orthonormal, zero elsewhere. Returns ((nx + 1)(ny + 1), n) float32, the
    `filter` of :class:`Controller` and :class:`RTC`."""
    if which not in _UNSEEN:
        raise ValueError(f"which: '{which}' is not " + ", ".join(_UNSEEN))
    nx, ny = int(nx), int(ny)
    v = None if valid is None else np.ascontiguousarray(_mask(valid, "valid"))
    if v is not None and v.shape != (ny, nx):
        raise ValueError(f"valid: expected ({ny}, {nx}), got {v.shape}")
    nact = (nx + 1) * (ny + 1)
    z = np.zeros((2, nact), np.float32)
    n = _spotwave.unseen_modes(nx, ny, v, _UNSEEN[which], z)
    return np.ascontiguousarray(z[:n].T)


def modal_gains(y, gains, *, delay_frames=1, leak=0.0, segment=256, margin=0.9, candidates=400,
                noise_band=0.75, pol=False, ctx=None):
    """Modal gain optimisation from closed-loop telemetry (loop.h, ``sw_modal_gains``; Gendron &
    Lena 1994, Astron. Astrophys. 291, 337): y (nframes, nmodes), each mode's measured residual
    taken with the integral gains `gains` (nmodes) acting delay_frames later. pol=True: y holds
    pseudo-open-loop measurements instead (the measured residual plus what the commands on the
    mirror took out, ``sw_modal_gains_pol``). Returns dict(gains, noise, predicted): the gains
    minimising the predicted residual of disturbance and noise, the noise variance per frame found
    on the PSD's high-frequency plateau, and the residual variance predicted at the new gains."""
    c = _context.resolve(ctx)
    y = np.ascontiguousarray(_param(y, "y"))
    if y.ndim != 2:
        raise ValueError(f"y: expected (nframes, nmodes), got {y.shape}")
    g = np.ascontiguousarray(_param(gains, "gains").ravel())
    if g.size != y.shape[1]:
        raise ValueError(f"gains: {g.size} values for {y.shape[1]} modes")
    out = np.empty(g.size, np.float32)
    noise, pred = np.empty(g.size), np.empty(g.size)
    params = dict(delay_frames=int(delay_frames), leak=float(leak), segment=int(segment),
                  margin=float(margin), candidates=int(candidates), noise_band=float(noise_band),
                  pol=int(bool(pol)))
    _spotwave.modal_gains(c, params, y, y.shape[0], y.shape[1], g, out, noise, pred)
    return dict(gains=out, noise=noise, predicted=pred)


def _controller_params(nact, kind, gain, leak, modes, kp, ki, clip, filter=None):
    if kind not in _KINDS:
        raise ValueError(f"controller: '{kind}' is not 'integrator', 'leaky' or 'pi'")
    p = dict(kind=kind, nact=int(nact), gain=float(gain), leak=float(leak), clip=float(clip))
    if kind != "pi" and (modes is not None or kp is not None or ki is not None):
        raise TypeError("modes, kp and ki apply to the 'pi' controller only")
    if modes is not None:
        B = _param(modes, "modes")
        if B.ndim != 2 or B.shape[0] != nact:
            raise ValueError(f"modes: expected (nact, nmodes) = ({nact}, n), got {B.shape}")
        p.update(nmodes=B.shape[1], modes=np.ascontiguousarray(B.T))
    for name, v in (("kp", kp), ("ki", ki)):
        if v is not None:
            p[name] = np.ascontiguousarray(_param(v, name).ravel())
    if filter is not None:
        Z = _param(filter, "filter")
        if Z.ndim != 2 or Z.shape[0] != nact:
            raise ValueError(f"filter: expected (nact, n) = ({nact}, n), got {Z.shape}")
        p.update(nfilter=Z.shape[1], filter=np.ascontiguousarray(Z.T))
    return p


class Controller:
    """A controller on the CPU (loop.h, ``sw_controller``; the chain runs the same update on
    the GPU): ``Controller(nact, kind="integrator", *, gain=0.5, leak=0.01, modes=None, kp=None,
    ki=None, clip=0.0, filter=None, ctx=None)``.

    kind "integrator": u_k = u_{k-1} + g r_k; "leaky": u_k = (1 - leak) u_{k-1} + g r_k; "pi",
    per mode: e = B^T r_k, I_k = I_{k-1} + e, u_k = B (kp e + ki I_k), with B = modes
    (nact, nmodes) orthonormal columns (default: one mode per actuator), kp (default 0) and ki
    (default gain) per mode; with a clip, anti-windup by back-calculation. clip > 0 clips every
    command to [-clip, clip]. filter (nact, n): orthonormal modes removed from every r first
    (:func:`unseen_modes`). The state starts at 0. ``ctl.step(r, out=None)`` -> the commands (nact,) float32; a non-finite r raises
    :class:`spotwave.RangeError` with the state unchanged."""

    def __init__(self, nact, kind="integrator", *, gain=0.5, leak=0.01, modes=None, kp=None,
                 ki=None, clip=0.0, filter=None, ctx=None):
        self.ctx = _context.resolve(ctx)
        self.nact, self.kind = int(nact), kind
        self._c = _spotwave.Controller(self.ctx, _controller_params(nact, kind, gain, leak,
                                                                     modes, kp, ki, clip, filter))

    def set_gains(self, kp=None, ki=None):
        """PI: new per-mode gains (nmodes each; None keeps them) between steps, bumpless (the
        integrals rescaled by ki_old / ki_new)."""
        self._c.set_gains(None if kp is None else _param(kp, "kp").ravel(),
                          None if ki is None else _param(ki, "ki").ravel())

    def step(self, r, out=None):
        if out is None:
            out = np.empty(self.nact, np.float32)
        self._c.step(_arrays.host_array(r, "r"), out)
        return out

    def reset(self):
        """The state back to 0."""
        self._c.reset()


# ------------------------------------------------------------------ the real-time chain

class RTC:
    """The real-time chain frame -> centroids -> slopes -> reconstruction -> controller ->
    commands as one plan (loop.h, ``sw_rtc``): on CUDA one CUDA graph per frame, allocating
    nothing; on the CPU the same stages in turn.

    ``RTC(shape, dtype, *, pitch, grid=None, origin=None, pixel_um=5.5, focal_mm=3.5,
    mask=None, threshold=None, threshold_mode="subtract", threshold_fraction=None, gamma=1.0,
    window=0, dark=None, flat=None, lut=None, recon="mvm", cm=None, fp16=False, sabre=None,
    slope_scale=None, projection="corners", projection_matrix=None, dm=None,
    controller="integrator", gain=0.5, leak=0.01, modes=None, kp=None, ki=None, clip=0.0,
    filter=None, nact=None, telemetry=0, ctx=None)``

    Frames and centroids: as :class:`spotwave.CentroidPlan` (shape (height, width); dtype uint8,
    uint16 or float32; the lenslet grid; mask (ny, nx) of the lenslets whose slopes are used;
    the conditioning). Reconstruction: recon "mvm", r = cm s with cm (nact, 2 nslopes) float32
    (:func:`control_matrix`'s ``cm``; fp16 stores it in half precision on the GPU); or "sabre",
    the D-SABRE wavefront of the slopes (sabre: a dict of :class:`spotwave.sabre.SabrePlan`'s
    options pitch, partitions, overlap, pme, dpme_iterations, padding, fill_iterations,
    extend_eq17; the wavefront in units of pitch, so pitch = the lenslet pitch in um gives um of
    OPD) of the slopes x slope_scale (default pixel_um / (focal_mm 1000): radians), projected
    by projection "corners" (the spline at the Fried corners), "global" (Brunner et al. 2018
    Eq. 13 over the plan's extended lattice), "local" (the distributed Eq. 14-16, each window
    fitted whole with one matrix: Fig. 14's "MM") or "local-pupil" (the distributed projection
    on the pupil only, section 4.A: a matrix per partition fitting the window's squares centred
    on a lenslet corner the sensor sees by the actuators it sees, the others' commands 0; Fig.
    14's "MV"; the matrices as ``sw_rtc_params_sabre`` builds them, as ``spotwave rtc``'s
    projection = local-pupil does); without projection_matrix the projector is made from dm (a
    :class:`DM`, default gaussian 0.3).
    nact: the commands (default: the Fried corners, (nx + 1)(ny + 1)). Controller: as
    :class:`Controller`. telemetry: ring slots (0: none).

    ``rtc(frame, out=None, slopes=None)``: one frame (NumPy, or CuPy / device array on a CUDA
    context; the plan's shape and dtype) -> the commands, float32 (nact,) in host memory: into
    `out`, or into the plan's own array (``rtc.commands``, overwritten by the next frame; no
    allocation either way). slopes: an optional (2 nslopes,) float32 array for the frame's
    slopes (pixels).
    """

    def __init__(self, shape, dtype, *, pitch, grid=None, origin=None, pixel_um=5.5,
                 focal_mm=3.5, mask=None, threshold=None, threshold_mode="subtract",
                 threshold_fraction=None, gamma=1.0, window=0, dark=None, flat=None, lut=None,
                 recon="mvm", cm=None, fp16=False, sabre=None, slope_scale=None,
                 projection="corners", projection_matrix=None, dm=None,
                 controller="integrator", gain=0.5, leak=0.01, modes=None, kp=None, ki=None,
                 clip=0.0, filter=None, nact=None, telemetry=0, ctx=None):
        from ._centroid import _float32_map  # noqa: PLC0415

        self.ctx = _context.resolve(ctx)
        if len(shape) != 2:
            raise ValueError(f"shape: expected (height, width), got {shape!r}")
        height, width = (int(n) for n in shape)
        geom = manual_geometry((height, width), pitch, grid, origin)
        nx, ny = geom["nx"], geom["ny"]
        cen = dict(geom, width=width, height=height, pixel_um=pixel_um, focal_mm=focal_mm,
                   pixel_type=pixel_type(dtype, "dtype", {np.dtype(np.uint8): "u8",
                                                          np.dtype(np.uint16): "u16",
                                                          np.dtype(np.float32): "f32"}),
                   gamma=gamma, window=window)
        if threshold is not None and threshold_fraction is not None:
            raise ValueError("threshold, threshold_fraction: give one, not both")
        if threshold_mode not in ("subtract", "zero"):
            raise ValueError(f"threshold_mode: '{threshold_mode}' is not 'subtract' or 'zero'")
        if threshold is not None or threshold_fraction is not None:
            cen.update(threshold_mode=threshold_mode,
                       threshold_kind="absolute" if threshold is not None else "fraction",
                       threshold=threshold if threshold is not None else threshold_fraction)
        if mask is not None:
            cen["mask"] = np.ascontiguousarray(_mask(mask, "mask"))
        for name, v in (("dark", dark), ("flat", flat), ("lut", lut)):
            if v is not None:
                cen[name] = _float32_map(v, name)
        if recon not in ("mvm", "sabre"):
            raise ValueError(f"recon: '{recon}' is not 'mvm' or 'sabre'")
        if projection not in ("corners", "global", "local", "local-pupil"):
            raise ValueError(f"projection: '{projection}' is not 'corners', 'global', 'local' "
                             f"or 'local-pupil'")
        nact = (nx + 1) * (ny + 1) if nact is None else int(nact)
        params = dict(centroid=cen, recon=recon, nact=nact, fp16=bool(fp16),
                      projection=projection, telemetry=int(telemetry),
                      controller=_controller_params(nact, controller, gain, leak, modes, kp, ki,
                                                    clip, filter))
        if recon == "mvm":
            if cm is None:
                raise TypeError("recon='mvm' needs cm, the (nact, 2 nslopes) control matrix")
            c = np.asarray(_arrays.host_array(np.asarray(cm) if isinstance(cm, ControlMatrix)
                                              else cm, "cm"))
            if c.ndim != 2 or c.shape[0] != nact:
                raise ValueError(f"cm: expected (nact, 2 nslopes) = ({nact}, ...), got {c.shape}")
            params["cm"] = np.ascontiguousarray(c, np.float32)
        else:
            if cm is not None:
                raise TypeError("cm goes with recon='mvm'")
            sp = dict(sabre or {})
            unknown = set(sp) - {"pitch", "partitions", "overlap", "pme", "dpme_iterations",
                                 "padding", "fill_iterations", "extend_eq17"}
            if unknown:
                raise TypeError("sabre: unexpected option " + ", ".join(map(repr, sorted(unknown))))
            sp.setdefault("partitions", _sabre.default_partitions(nx, ny))
            if projection != "corners":
                sp.setdefault("extend_eq17", True)
            params["sabre"] = sp
            params["slope_scale"] = (float(pixel_um) / (float(focal_mm) * 1000.0)
                                     if slope_scale is None else float(slope_scale))
            if projection != "corners":
                if projection_matrix is None:
                    projection_matrix = self._projection(nx, ny, cen.get("mask"), sp,
                                                         projection, dm)
                params["projection_matrix"] = np.ascontiguousarray(
                    _arrays.host_array(projection_matrix, "projection_matrix"), np.float32)
        self._r = _spotwave.RTC(self.ctx, params)
        self.shape, self.dtype, self.grid, self.recon = (height, width), np.dtype(dtype), (nx, ny), recon
        self.nact, self.nslopes = self._r.nact, self._r.nslopes
        self.commands = np.zeros(self.nact, np.float32)
        self._telemetry = int(telemetry)

    def _projection(self, nx, ny, mask, sp, projection, dm):
        dm = DM((nx, ny)) if dm is None else dm
        if not isinstance(dm, DM):
            raise TypeError(f"dm: expected a spotwave.loop.DM, got {type(dm).__name__}")
        if projection == "local-pupil":
            # the partitions' matrices stacked, built by the C library (sw_rtc_params_sabre)
            flat, rows, cols = _spotwave.rtc_projection_matrix(self.ctx, sp, dm._dict(), nx, ny,
                                                               mask, projection, None)
            return flat.reshape(rows, cols)
        opts = {k: v for k, v in sp.items() if k != "fill_iterations"}
        opts["fill"] = sp.get("fill_iterations", 0)
        tmp = _sabre.SabrePlan((nx, ny), mask=None if mask is None else mask.astype(bool),
                               ctx=_spotwave.Context("cpu"), **opts)
        if projection == "global":
            return Projector(dm, tmp.lattice, ctx=self.ctx).matrix
        return Projector.window(dm, tmp.info["window"], ctx=self.ctx).matrix

    def __call__(self, frame, out=None, slopes=None):
        if out is None:
            out = self.commands
        obj, device = _arrays.as_input(frame, "frame", self.ctx)
        with _arrays.DeviceRun(self.ctx, device):
            self._r.run(obj, out, slopes)
        return out

    def telemetry(self):
        """The newest telemetry slot: (frame, slopes (2 nslopes,), commands (nact,)); frame 0
        when nothing was recorded yet. Safe from another thread while frames run."""
        s = np.empty(2 * self.nslopes, np.float32)
        c = np.empty(self.nact, np.float32)
        frame = self._r.telemetry(s, c)
        return frame, s, c

    def set_gains(self, kp=None, ki=None):
        """PI: new per-mode gains between frames (as :meth:`Controller.set_gains`; on CUDA the
        device's integrals are rescaled too)."""
        self._r.set_gains(None if kp is None else _param(kp, "kp").ravel(),
                          None if ki is None else _param(ki, "ki").ravel())

    def reset(self):
        """The controller's state back to 0 (the telemetry is kept)."""
        self._r.reset()

    last_us = property(lambda self: self._r.last_us,
                       doc="Wall time of the last frame (host clock, us).")

    def __repr__(self):
        return (f"spotwave.loop.RTC(shape={self.shape}, dtype={self.dtype}, grid={self.grid}, "
                f"recon='{self.recon}', nact={self.nact}, nslopes={self.nslopes})")


# ------------------------------------------------------------------ the closed-loop simulator

# The configuration keys of `spotwave loop` (its --config / --set names), in its order: kind and
# range as the command checks them.
_RANGES = {
    "pos": ("a number > 0", lambda v: v > 0),
    "nonneg": ("a number >= 0", lambda v: v >= 0),
    "open01": ("a number between 0 and 1 (both excluded)", lambda v: 0 < v < 1),
    "halfopen": ("a number in [0, 1)", lambda v: 0 <= v < 1),
    "unit": ("a number in (0, 1]", lambda v: 0 < v <= 1),
    "cond": ("0 (no limit) or a number >= 1", lambda v: v == 0 or v >= 1),
    "any": ("a finite number", lambda v: True),
}
CONFIG_KEYS = {
    "nx": ("int", 2, 1024), "diameter_m": ("pos",), "square_pupil": ("bool",),
    "obscuration": ("halfopen",), "px_per_lenslet": ("int", 2, 128),
    "wfs_wavelength_um": ("pos",), "nyquist_px": ("pos",),
    "model": ("choice", "geometric", "diffraction"), "magnitude": ("magnitude",),
    "zero_point": ("pos",), "throughput": ("unit",), "read_noise_e": ("nonneg",),
    "threshold_e": ("nonneg",), "threshold_peak": ("halfopen",), "slope_calibration": ("bool",),
    "negative_filter": ("int", 0, 2),
    "r0_m": ("pos",), "L0_m": ("pos",),
    "r0_wavelength_um": ("pos",), "subharmonics": ("int", 0, 8), "wind_m_s": ("nonneg",),
    "rate_hz": ("pos",), "seed": ("u64",), "samples": ("int", 1, 32),
    "influence": ("choice", "gaussian", "bezier"), "coupling": ("open01",),
    "recon": ("choice", "mvm", "sabre", "dsabre-global", "dsabre-local", "dsabre-local-pupil"),
    "cm_condition": ("cond",), "poke_um": ("pos",), "partitions": ("int", 1, 1024),
    "overlap": ("int", 0, 64), "controller": ("choice", "integrator", "leaky", "pi"),
    "gain": ("nonneg",), "leak": ("halfopen",), "clip": ("nonneg",),
    "unseen": ("choice", "none", "piston", "waffle", "piston-waffle"),
    "modal": ("choice", "actuators", "im", "kl"), "kp": ("any",), "gain_window": ("int", 0, 65536),
    "delay": ("int", 0, 1000),
    "science_wavelength_um": ("pos",), "warmup": ("int", 0, 1000000),
    "frames": ("int", 1, 1000000),
}


def defaults():
    """The simulator's defaults (Brunner et al. 2018 section 4.B: 32 x 32 lenslets, D = 12 m,
    square pupil, diffraction, noise-free, r0 0.15 m at 0.5 um, L0 25 m, 10 km/h, 500 Hz,
    Gaussian coupling 0.3, D-SABRE 4 x 4 with the distributed projection, integrator gain 0.5,
    J band, 20 warm-up frames) and the command's 200 frames, by configuration key."""
    d = _spotwave.loop_defaults()
    d["frames"] = 200
    return {k: d[k] for k in CONFIG_KEYS}


def _check_key(key, v):
    spec = CONFIG_KEYS.get(key)
    if spec is None:
        raise TypeError(f"loop: unexpected keyword argument '{key}'")
    kind = spec[0]
    if kind in ("int", "u64"):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) and not (
                isinstance(v, float) and v.is_integer()):
            raise TypeError(f"{key}: {v!r} is not a whole number")
        v = int(v)
        lo, hi = (spec[1], spec[2]) if kind == "int" else (0, 2 ** 64 - 1)
        if not lo <= v <= hi:
            raise ValueError(f"{key}: {v} is not a whole number in {lo}..{hi}")
        return v
    if kind == "bool":
        if v not in (0, 1, True, False):
            raise ValueError(f"{key}: {v!r} is not True or False")
        return bool(v)
    if kind == "choice":
        if v not in spec[1:]:
            raise ValueError(f"{key}: {v!r} is not " + ", ".join(spec[1:-1]) + " or " + spec[-1])
        return v
    if kind == "magnitude":
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not math.isfinite(v):
            raise ValueError(f"{key}: {v!r} is not a magnitude, or None (noise-free)")
        return float(v)
    text, ok = _RANGES[kind]
    if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
        raise TypeError(f"{key}: {v!r} is not a number")
    v = float(v)
    if not math.isfinite(v) or not ok(v):
        raise ValueError(f"{key}: {v!r} is not {text}")
    return v


# The physics guards of ``spotwave loop`` (cli/cmd_loop.c): gains above GAIN_MAX are refused; a
# residual above DIVERGE_X x the turbulence for DIVERGE_K frames running (DIVERGE_HUGE x once, or
# not finite) is a divergence from the first of them; a frame with more than half of the commands
# at the stroke limit is a saturated one; the trend over TREND_WINDOWS windows after the warm-up
# (watch_trend); an uncalibrated SABRE / D-SABRE slope gain below SLOPE_GAIN_WARN.
GAIN_MAX, DIVERGE_K, DIVERGE_X, DIVERGE_HUGE = 10.0, 5, 2.0, 100.0
TREND_WINDOWS, TREND_MIN, TREND_GROW, TREND_CMD, TREND_RES = 8, 10, 0.2, 1.0, 0.5
SLOPE_GAIN_WARN = 0.95


def max_gain(delay=0, controller="integrator", leak=0.01):
    """The largest stable gain of the loop's controller (sw_controller_max_gain): the integrator
    (and PI with kp = 0) with the loop's delay of delay + 1 frames, 2 sin(pi / (2 (2d - 1))); the
    leaky integrator's limit for its leak."""
    return _spotwave.controller_max_gain(int(delay) + 1,
                                         float(leak) if controller == "leaky" else 0.0)


def _config(config, open_loop=False):
    cfg = defaults()
    for k, v in config.items():
        cfg[k] = _check_key(k, v)
    if open_loop:
        cfg["gain"] = 0.0
    if cfg["gain"] > GAIN_MAX:
        raise ValueError(f"gain {cfg['gain']:g} is far outside the stable range (this loop's "
                         f"limit is {max_gain(cfg['delay'], cfg['controller'], cfg['leak']):.4g} "
                         f"for a delay of {cfg['delay'] + 1} frame"
                         f"{'' if cfg['delay'] == 0 else 's'}; gains above {GAIN_MAX:g} are "
                         f"refused)")
    if cfg["frames"] <= cfg["warmup"]:
        raise ValueError(f"frames ({cfg['frames']}) must be more than warmup ({cfg['warmup']}): "
                         f"the long exposure starts after the warm-up")
    return cfg


REPORT = np.dtype([("frame", np.int64), ("turbulence_nm", np.float64),
                   ("residual_nm", np.float64), ("strehl", np.float64), ("marechal", np.float64),
                   ("command_rms_um", np.float64), ("long_strehl", np.float64)])


class Simulator:
    """The closed-loop simulator (loop.h, ``sw_loop``): an infinite turbulence screen moving with
    the wind (CPU), the Shack-Hartmann frame of a guide star, the real-time chain of the chosen
    reconstructor (MVM calibrated through the simulator's own sensor, global SABRE, or D-SABRE
    with the global or distributed projection), the controller, and the mirror's shape
    subtracted; the science camera's Strehl frame by frame.

    ``Simulator(*, open_loop=False, ctx=None, **config)``: config keys are those of
    ``spotwave loop`` (:data:`CONFIG_KEYS`, defaults in :func:`defaults`): nx, diameter_m,
    square_pupil, obscuration, px_per_lenslet, wfs_wavelength_um, nyquist_px, model
    ("geometric" | "diffraction"), magnitude (None: noise-free), zero_point, throughput,
    read_noise_e, threshold_e, threshold_peak, slope_calibration, negative_filter (sabre and
    dsabre-*: the loop's modes of negative gain, found at set-up from the eigenvalues of
    reconstructor x interaction matrix, filtered out too; 1: with at most 600 actuators, 2: at
    any size, O(nact^3) at set-up, 0: never), r0_m, L0_m, r0_wavelength_um,
    subharmonics, wind_m_s, rate_hz, seed, samples, influence, coupling, recon ("mvm" | "sabre" |
    "dsabre-global" | "dsabre-local" | "dsabre-local-pupil": the last two the distributed
    projection over whole windows with one matrix, or on the pupil only with a matrix per
    partition), cm_condition, poke_um, partitions, overlap, controller
    ("integrator" | "leaky" | "pi"), gain, leak, clip, unseen ("none" | "piston" | "waffle" |
    "piston-waffle": the modes the sensor cannot see, filtered out), modal ("actuators" | "im" | "kl":
    PI's basis; kl: the mirror's Karhunen-Loeve modes), kp (PI's proportional gain), gain_window (PI, mvm: frames per round of modal
    gain optimisation, Gendron & Lena 1994; 0: fixed gains), delay, science_wavelength_um,
    warmup, and frames (what :meth:`run` runs by default). open_loop: gain 0 (the mirror never
    moves).

    ``sim.run(frames=None, progress=None)`` -> the per-frame table (the command's --report
    columns) of the frames run; ``sim.summary()`` -> the dict ``spotwave loop --json`` prints
    for everything run so far; ``sim.step()`` one frame as a dict.
    """

    def __init__(self, *, open_loop=False, ctx=None, **config):
        self.ctx = _context.resolve(ctx)
        self.config = _config(config, open_loop)
        self.open_loop = bool(open_loop)
        params = {k: v for k, v in self.config.items() if k != "frames"}
        t0 = _now()
        self._l = _spotwave.LoopSim(self.ctx, params)
        self.create_s = _now() - t0
        self._rows = []
        self.run_s = 0.0

    def step(self):
        """One frame: dict(frame, turbulence_nm, residual_nm, strehl, marechal,
        command_rms_um, long_strehl)."""
        t0 = _now()
        row = self._l.step()
        self.run_s += _now() - t0
        self._rows.append(row)
        return dict(zip(REPORT.names, row))

    def run(self, frames=None, progress=None, every=10):
        """Runs `frames` frames (default: the config's frames less those run) without the GIL;
        progress(done, total) every `every` frames. Returns the table of these frames."""
        n = self.config["frames"] - len(self._rows) if frames is None else int(frames)
        out = np.empty((max(n, 0), 8))  # the report's columns, then the clipped commands
        if n > 0:
            cb = None if progress is None else (lambda k: progress(k, n))
            self.run_s += self._l.run(n, out, cb, int(every))
        self._rows.extend(tuple(r) for r in out)
        t = np.empty(n, REPORT)
        for i, name in enumerate(REPORT.names):
            t[name] = out[:, i]
        return t

    def report(self):
        """The table of every frame run so far (the command's --report columns)."""
        t = np.empty(len(self._rows), REPORT)
        for i, name in enumerate(REPORT.names):
            t[name] = [r[i] for r in self._rows]
        return t

    long_strehl = property(lambda self: self._l.long_strehl,
                           doc="The long-exposure Strehl since the warm-up (NaN before).")
    modes = property(lambda self: None if self._l.modes < 0 else self._l.modes,
                     doc="The control matrix's kept modes (mvm), else None.")

    @property
    def negative_modes(self):
        """(count, smallest gain): the modes of negative closed-loop gain the loop filters and
        the smallest real part of its eigenvalues before the filter (key negative_filter);
        (None, None) when it did not look (mvm, negative_filter 0, or 1 with > 600 actuators)."""
        n, g = self._l.negative_modes
        return (None, None) if n < 0 else (n, _finite(g))

    def fitting_error(self):
        """The mirror's best fit of the current turbulence, nm (NaN beyond 8100 actuators)."""
        return self._l.fitting_error()

    def maps(self):
        """The last frame's phase maps, um, NaN outside the pupil: dict(turbulence, correction,
        residual), each (samples nx, samples nx) float32."""
        t, c, r, side = self._l.maps()
        return dict(turbulence=t.reshape(side, side), correction=c.reshape(side, side),
                    residual=r.reshape(side, side))

    def summary(self):
        """The dict ``spotwave loop --json`` prints (the same keys, numbers that are not finite
        as None), over every frame run so far."""
        n = len(self._rows)
        w = self.config["warmup"]
        if n <= w:
            raise ValueError(f"summary: {n} frames run, not more than warmup ({w})")
        cfg = {}
        for k in CONFIG_KEYS:
            v = self.config[k] if k != "frames" else n
            cfg[k] = int(v) if isinstance(v, bool) else v
        sr = st = ss = sm = 0
        for r in self._rows[w:]:
            sr += r[2]
            st += r[1]
            ss += r[3]
            sm += r[4]
        m = n - w
        fe = self.fitting_error()
        last = self._rows[-1]
        guards = self._guards()
        return {
            "subcommand": "loop", "config_file": None, "config": cfg,
            "open_loop": self.open_loop, "frames": n, "warmup": w,
            "long_strehl": _finite(last[6]), "strehl_mean": _finite(ss / m),
            "marechal_mean": _finite(sm / m), "residual_nm_mean": _finite(sr / m),
            "turbulence_nm_mean": _finite(st / m), "residual_nm_last": _finite(last[2]),
            "turbulence_nm_last": _finite(last[1]), "fitting_error_nm": _finite(fe),
            "modes": self.modes, "negative_modes": self.negative_modes[0],
            "loop_min_gain": self.negative_modes[1], "pi_gains": self._pi_gains(),
            "create_s": self.create_s,
            "run_s": self.run_s,
            "frames_per_s": n / self.run_s if self.run_s > 0 else None,
            "backend": self.ctx.backend, **guards, "strict": False, "report": None,
            "plot": None, "maps": None,
        }

    def _pi_gains(self):
        """PI's integral gains at the end over the modes (min, median, max) and the rounds of
        modal gain optimisation, as the command reports them; None for other controllers."""
        ki, rounds, pi = self._l.gains()
        if not pi or not ki:
            return None
        k = sorted(ki)
        return {"modes": len(k), "rounds": rounds, "min": k[0], "median": k[len(k) // 2],
                "max": k[-1]}

    def _trend(self):
        """cli/cmd_loop.c's watch_trend: growth of the residual and the command RMS, alone and
        over the turbulence, across TREND_WINDOWS windows after the warm-up."""
        n, w = len(self._rows), self.config["warmup"]
        win = (n - w) // TREND_WINDOWS
        if win < TREND_MIN:
            return None
        res_w, cmd_w, rho, cmd = [], [], [], []
        for k in range(TREND_WINDOWS):
            res = turb = c = 0.0
            for r in self._rows[w + k * win:w + (k + 1) * win]:
                res += r[2]
                turb += r[1]
                c += r[5] * 1e3
            res_w.append(res)
            cmd_w.append(c)
            rho.append(res / turb if turb > 0 else 0.0)
            cmd.append(c / turb if turb > 0 else 0.0)

        def growth(x):
            sx = sy = sxx = sxy = 0.0
            for i, v in enumerate(x):
                sx += i
                sy += v
                sxx += float(i) * i
                sxy += i * v
            m = len(x)
            slope, mean = (m * sxy - sx * sy) / (m * sxx - sx * sx), sy / m
            return slope * (m - 1) / mean if mean > 0 else 0.0

        t = {"windows": TREND_WINDOWS, "window_frames": win, "residual_growth": growth(res_w),
             "residual_ratio_growth": growth(rho), "command_growth": growth(cmd_w),
             "command_ratio_growth": growth(cmd)}
        gr = min(t["residual_growth"], t["residual_ratio_growth"])
        gc = min(t["command_growth"], t["command_ratio_growth"])
        diverging = (gr > TREND_GROW and gc > TREND_GROW) or gc > TREND_CMD or gr > TREND_RES
        start = 0
        for k in range(1, TREND_WINDOWS):
            if diverging and not start and (rho[k] > (1 + TREND_GROW) * rho[0]
                                            or cmd[k] > (1 + TREND_GROW) * cmd[0]):
                start = w + k * win + 1
        if diverging and not start:  # no window stands out: the whole run
            start = w + 1
        return t, diverging, start

    def _guards(self):
        """The physics guards' keys of ``spotwave loop --json`` over the frames run so far."""
        c = self.config
        gmax = max_gain(c["delay"], c["controller"], c["leak"])
        nact = self._l.actuators
        diverged, above, saturated, first_sat = 0, 0, 0, 0
        for i, r in enumerate(self._rows):
            res, turb = r[2], r[1]
            if not diverged:
                if not math.isfinite(res) or res > DIVERGE_HUGE * turb:
                    diverged = i + 1
                else:
                    above = above + 1 if res > DIVERGE_X * turb else 0
                    if above >= DIVERGE_K:
                        diverged = i + 1 - (DIVERGE_K - 1)
            if 2 * int(r[7]) > nact:
                saturated += 1
                first_sat = first_sat or i + 1
        warnings = []
        if c["gain"] > gmax:
            d = c["delay"]
            warnings.append(f"gain {c['gain']:g} is above the stable limit {gmax:.4g} of the "
                            f"{c['controller']} with a loop delay of {d + 1} frame"
                            f"{'' if d == 0 else 's'} (delay {d} + 1): the loop is expected to "
                            f"diverge")
        if diverged:
            last = self._rows[-1]
            warnings.append(f"the loop diverged from frame {diverged}: residual above "
                            f"{DIVERGE_X:g} x the turbulence (last frame {int(last[0])}: residual "
                            f"{last[2]:.4g} nm, turbulence {last[1]:.4g} nm)")
        tr = self._trend()
        trend, diverging, start = tr if tr else ({}, False, 0)
        if diverging and not diverged:
            warnings.append(
                f"the loop is diverging: over the {len(self._rows) - c['warmup']} frames after "
                f"the warm-up the residual grew by {100 * trend['residual_growth']:.0f} % "
                f"({100 * trend['residual_ratio_growth']:.0f} % over the turbulence) and the "
                f"command RMS by {100 * trend['command_growth']:.0f} % "
                f"({100 * trend['command_ratio_growth']:.0f} %) (windows of "
                f"{trend['window_frames']} frames; from frame {start})")
        gx, gy, applied = self._l.slope_gain
        if c["recon"] != "mvm" and not applied and min(gx, gy) < SLOPE_GAIN_WARN:
            why = ("a gain outside 0.5..2 is not applied" if c["slope_calibration"]
                   else "slope_calibration = 0")
            warnings.append(f"the sensor's slope gain is {gx:.3f} along x and {gy:.3f} along y, "
                            f"not calibrated ({why}): the {c['recon']} reconstructor sees slopes "
                            f"{100 * (1 - min(gx, gy)):.0f} % short")
        if saturated:
            warnings.append(f"the mirror saturated in {saturated} of {len(self._rows)} frames "
                            f"(first: frame {first_sat}): more than half of the {nact} commands "
                            f"at the stroke limit clip = {c['clip']:g} um")
        return {"gain_max_stable": gmax, "loop_delay_frames": c["delay"] + 1,
                "diverged": diverged > 0 or diverging,
                "divergence_frame": diverged or (start if diverging and start else None),
                "divergence_reason": "residual" if diverged else ("trend" if diverging else None),
                "trend": trend, "saturated_frames": saturated, "slope_gain": [gx, gy],
                "warnings": warnings[:5]}


def _finite(v):
    v = float(v)
    return v if math.isfinite(v) else None


def _now():
    import time  # noqa: PLC0415

    return time.perf_counter()


def simulate(frames=None, *, open_loop=False, progress=None, ctx=None, **config):
    """Runs the closed-loop simulator (:class:`Simulator`) for `frames` frames (default 200, or
    config's frames) and returns its summary: the dict ``spotwave loop --json`` prints, with the
    same keys (the same numbers for the same configuration and seed on the same backend)."""
    if frames is not None:
        config["frames"] = frames
    sim = Simulator(open_loop=open_loop, ctx=ctx, **config)
    sim.run(progress=progress)
    return sim.summary()
