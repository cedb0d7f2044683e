"""Wavefront reconstruction from Shack-Hartmann slopes (sabre.h): distributed spline
reconstruction (D-SABRE), global SABRE, and Fried's zonal least squares, as ``spotwave sabre``.

Methods:

- D-SABRE: Brunner E., de Visser C. C., Vuik C., Verhaegen M. (2018), "GPU implementation for
  spline-based wavefront reconstruction", J. Opt. Soc. Am. A 35(6), 859-872: linear simplex
  B-splines on a four-directional triangulation of the lenslet grid (section 2.A), solved on
  k x k overlapping partitions (sections 2-3, Eq. 3-7 and 16) whose local pistons are equalised by
  hierarchical (H-PME, Eq. 10-11) or distributed (D-PME, Eq. 8-9) piston mode equalisation.
- Global SABRE: de Visser C. C., Verhaegen M. (2013), "Wavefront reconstruction in adaptive optics
  systems using nonlinear multivariate splines", J. Opt. Soc. Am. A 30(1), 82-95: one
  least-squares problem on the whole triangulation.
- Fried: Fried D. L. (1977), "Least-square fitting a wave-front distortion estimate to an array
  of phase-difference measurements", J. Opt. Soc. Am. 67(3), 370-375: the phase at the lenslet
  corners (the Fried geometry), with a light Laplacian regularisation against the waffle mode.

Conventions. Lenslet (ix, iy) is 0-based, x along the pupil's +u and y along +v; lattice
positions are in lenslet pitches with lenslet (ix, iy) centred on (ix, iy). Slopes are mean
wavefront gradients dW/du, dW/dv in radians (an OPD in micrometres over a pupil in micrometres),
or spot displacements in pixels converted with rad = px * pixel_um / (focal_mm * 1000). The
wavefront comes out in slope x pitch units: with ``lenslet_um`` (the lenslet pitch in the pupil,
micrometres) in micrometres of optical path, else in radians x pitch. Piston is not observable:
every output of :func:`reconstruct` has its piston removed (the mean over the corners of the valid
lenslets is 0), as the command's.

The Fried actuator grid is the (nx + 1) x (ny + 1) lenslet corners: corner (cx, cy) sits at
(cx - 1/2, cy - 1/2), between lenslets (cx - 1, cy - 1) and (cx, cy); arrays over it are
(ny + 1, nx + 1).
"""

import math

import numpy as np

from . import _arrays, _context, _spotwave

__all__ = ["Fried", "GlobalSabre", "Lattice", "Reconstruction", "SabrePlan", "SabreResult",
           "default_partitions", "reconstruct", "slopes_from"]

_PME = ("hierarchical", "distributed", "none")
_PADDING = ("zero", "nearest")


def default_partitions(nx, ny):
    """The command's default D-SABRE partitions: 8 per side, halved until below max(nx, ny)."""
    side = max(int(nx), int(ny))
    k = 8
    while k > 1 and k > side - 1:
        k //= 2
    return k


def _grid(grid, mask):
    if grid is None:
        if mask is None:
            raise TypeError("give grid=(nx, ny) or a mask of shape (ny, nx)")
        m = np.asarray(mask)
        if m.ndim != 2:
            raise ValueError(f"mask: expected a 2-D (ny, nx) array, got shape {m.shape}")
        return int(m.shape[1]), int(m.shape[0])
    try:
        nx, ny = grid
    except (TypeError, ValueError):
        raise TypeError(f"grid: expected (nx, ny), got {grid!r}") from None
    if int(nx) != nx or int(ny) != ny:
        raise TypeError(f"grid: expected whole numbers (nx, ny), got {grid!r}")
    return int(nx), int(ny)


def _mask_u8(mask, nx, ny):
    if mask is None:
        return None
    m = _arrays.host_array(mask, "mask")
    if m.shape != (ny, nx):
        raise ValueError(f"mask: shape {m.shape}, the grid is ({ny}, {nx}) (ny, nx)")
    if m.dtype not in (np.bool_, np.uint8):
        raise TypeError(f"mask: expected a bool or uint8 array (non-zero = valid), got {m.dtype}")
    return np.ascontiguousarray(m != 0, np.uint8)


class Lattice:
    """A linear spline's lattice (sabre.h): sx x sy unit squares, each cut by both diagonals into
    four triangles; corner vertex (I, J) at lattice position (I - offx, J - offy) (a lenslet
    centre), centre vertex (I, J) at (I + 1/2 - offx, J + 1/2 - offy) (a lenslet corner, a Fried
    actuator). A spline is its ``nvalues`` vertex values: the corners row by row, then the
    centres."""

    __slots__ = ("sx", "sy", "offx", "offy")

    def __init__(self, sx, sy, offx=0, offy=0):
        self.sx, self.sy, self.offx, self.offy = int(sx), int(sy), int(offx), int(offy)

    @classmethod
    def _from(cls, d):
        return cls(d["sx"], d["sy"], d["offx"], d["offy"])

    def _dict(self):
        return dict(sx=self.sx, sy=self.sy, offx=self.offx, offy=self.offy)

    @property
    def nvalues(self):
        """(sx + 1)(sy + 1) + sx sy."""
        return (self.sx + 1) * (self.sy + 1) + self.sx * self.sy

    def positions(self):
        """(kind, I, J, x, y) of every vertex in value order: kind 0 corner, 1 centre; x, y
        lattice positions (float64)."""
        J, I = np.mgrid[0:self.sy + 1, 0:self.sx + 1]
        Jc, Ic = np.mgrid[0:self.sy, 0:self.sx]
        kind = np.r_[np.zeros(I.size, np.uint8), np.ones(Ic.size, np.uint8)]
        II = np.r_[I.ravel(), Ic.ravel()].astype(np.int32)
        JJ = np.r_[J.ravel(), Jc.ravel()].astype(np.int32)
        x = np.r_[I.ravel() - self.offx, Ic.ravel() + 0.5 - self.offx].astype(np.float64)
        y = np.r_[J.ravel() - self.offy, Jc.ravel() + 0.5 - self.offy].astype(np.float64)
        return kind, II, JJ, x, y

    def _values(self, values):
        v = np.ascontiguousarray(_arrays.host_array(values, "values"), np.float64).ravel()
        if v.size != self.nvalues:
            raise ValueError(f"values: {v.size} values, the lattice has {self.nvalues}")
        return v

    def eval(self, values, x, y):
        """The spline at lattice positions (x, y) (arrays of one shape): the linear interpolation
        on the triangle holding the point; outside, the nearest quadrant's plane extended."""
        x = np.asarray(x, np.float64)
        y = np.broadcast_to(np.asarray(y, np.float64), x.shape)
        out = _spotwave.sabre_eval(self._dict(), self._values(values),
                                   np.ascontiguousarray(x).ravel(),
                                   np.ascontiguousarray(y).ravel())
        return out.reshape(x.shape)

    def corners(self, values, grid):
        """The spline at the lenslet corners of an (nx, ny) grid (the Fried actuators),
        (ny + 1, nx + 1) float64."""
        nx, ny = _grid(grid, None)
        return _spotwave.sabre_eval_corners(self._dict(), self._values(values), nx,
                                            ny).reshape(ny + 1, nx + 1)

    def map(self, values, grid, size, *, ctx=None):
        """The spline on a (height, width) pixel grid spanning the (nx, ny) lenslet array's
        footprint: pixel (i, k) at x = -1/2 + (i + 1/2) nx / width, y likewise (float64)."""
        nx, ny = _grid(grid, None)
        width, height = (int(v) for v in size)
        ctx = _context.resolve(ctx)
        return _spotwave.sabre_map(ctx, self._dict(), self._values(values), nx, ny, width,
                                   height).reshape(height, width)

    def __repr__(self):
        return (f"spotwave.sabre.Lattice(sx={self.sx}, sy={self.sy}, offx={self.offx}, "
                f"offy={self.offy})")


class SabreResult:
    """The outputs of a :class:`SabrePlan` run: ``values`` (nvalues,) float32, the spline on the
    plan's extended lattice, and ``actuators`` (ny + 1, nx + 1) float32, the spline at the
    lenslet corners (or the projected commands after :meth:`SabrePlan.set_projection`); NumPy
    (host plans) or CuPy (device plans). Either may be None (not computed). Piston is arbitrary
    (set by each plan's anchor)."""

    __slots__ = ("values", "actuators")

    def __init__(self, values, actuators):
        self.values, self.actuators = values, actuators


class SabrePlan:
    """A D-SABRE plan (sabre.h, ``sw_sabre_create``): the partitioning, the local matrices and Q,
    made once; calls reconstruct one frame each, allocating nothing.

    ``SabrePlan(grid=None, *, mask=None, pitch=1.0, partitions=None, overlap=1,
    pme="hierarchical", dpme_iterations=0, padding="zero", fill=0, extend_eq17=False,
    memory="host", ctx=None)``

    grid: (nx, ny) lenslets, 2..4096 each (default: the mask's shape). mask: (ny, nx) bool, the
    lenslets with data (default all); fixed for the plan. pitch: the lenslet pitch in the pupil
    (the wavefront comes out in slope x pitch units). partitions: k per side, 1 .. max(nx, ny) - 1,
    a power of two for H-PME (default: :func:`default_partitions`). overlap: squares of overlap
    on each side of a partition's core, 0..64. pme: "hierarchical" (H-PME, Brunner et al. 2018
    Eq. 10-11), "distributed" (D-PME, Eq. 8-9) or "none". dpme_iterations: 0 for L_D. padding:
    "zero" (the paper's zero padding, section 3.B.2) or "nearest" (the nearest valid lenslet's
    slopes). fill: fill iterations 0..16 (the padded slopes replaced by the solution's own and
    solved again). extend_eq17: Eq. 17's extended array (needed by :meth:`set_projection`).
    memory: "host" (NumPy slopes) or "device" (CuPy slopes; the whole run on the GPU).

    ``plan(slopes, out=None)``: slopes float32 with 2 nx ny elements, x block then y block in
    lenslet order (shape (2, ny, nx)), radians; those of lenslets outside the mask are not read;
    a NaN or infinite slope of a valid lenslet raises :class:`spotwave.RangeError`. Returns a
    :class:`SabreResult`.
    """

    def __init__(self, grid=None, *, mask=None, pitch=1.0, partitions=None, overlap=1,
                 pme="hierarchical", dpme_iterations=0, padding="zero", fill=0,
                 extend_eq17=False, memory="host", ctx=None):
        self.ctx = _context.resolve(ctx)
        nx, ny = _grid(grid, mask)
        if pme not in _PME:
            raise ValueError(f"pme: '{pme}' is not 'hierarchical', 'distributed' or 'none'")
        if padding not in _PADDING:
            raise ValueError(f"padding: '{padding}' is not 'zero' or 'nearest'")
        if memory not in ("host", "device"):
            raise ValueError(f"memory: '{memory}' is not 'host' or 'device'")
        if memory == "device":
            _arrays.require_cuda(self.ctx, "memory='device'")
        if partitions is None:
            partitions = default_partitions(nx, ny)
        self.mask = (np.ones((ny, nx), bool) if mask is None
                     else _mask_u8(mask, nx, ny).astype(bool))
        params = dict(nx=nx, ny=ny, pitch=pitch, partitions=partitions, overlap=overlap, pme=pme,
                      dpme_iterations=dpme_iterations, padding=padding, fill_iterations=fill,
                      extend_eq17=bool(extend_eq17),
                      mask=None if mask is None else _mask_u8(mask, nx, ny))
        self._plan = _spotwave.SabrePlan(self.ctx, params)
        self.grid = (nx, ny)
        self.pitch = float(pitch)
        self.memory = memory
        self.pme = pme
        self.overlap = int(overlap)
        self._info = self._plan.info()
        self.lattice = Lattice._from(self._info["lattice"])

    @property
    def info(self):
        """dict(k, m, window, extended, local_values, local_slopes, dpme_iterations, lattice,
        null_check, nvalues): partitions per side, core and window squares, the extended array's
        side, Q's size, D-PME's iterations, the extended lattice, the LAPACK null-space check
        (-1: not run) and the number of values."""
        return dict(self._info)

    nvalues = property(lambda self: self._info["nvalues"], doc="Values of the extended lattice.")
    kernel_us = property(lambda self: self._plan.kernel_us,
                         doc="Device time of the last GPU run (us); -1 on the CPU.")

    def result(self):
        """A :class:`SabreResult` with room for one frame on the plan's side, to give as out=."""
        nx, ny = self.grid
        dev = self.memory == "device"
        return SabreResult(_arrays.empty((self.nvalues,), np.float32, dev, self.ctx),
                           _arrays.empty((ny + 1, nx + 1), np.float32, dev, self.ctx))

    def __call__(self, slopes, out=None):
        if out is None:
            out = self.result()
        s, device = _arrays.as_input(slopes, "slopes", self.ctx)
        v = None if out.values is None else _arrays.as_output(out.values, "out.values",
                                                              self.ctx)[0]
        a = None if out.actuators is None else _arrays.as_output(out.actuators, "out.actuators",
                                                                 self.ctx)[0]
        with _arrays.DeviceRun(self.ctx, device):
            self._plan.run(s, v, a)
        return out

    def set_projection(self, P):
        """The distributed DM projection inside the run (Brunner et al. 2018 Eq. 14-16): P is
        the local projection of one window, (window^2, local_values) float32 (as
        :meth:`spotwave.loop.Projector.window` gives); afterwards ``actuators`` are the
        projected commands. Needs extend_eq17=True. None removes it."""
        if P is not None:
            P = np.ascontiguousarray(_arrays.host_array(P, "P"))
        self._plan.set_projection(P)

    def local_matrix(self):
        """Q, the local solve of one window: (local_values, local_slopes) float32."""
        i = self._info
        return self._plan.local_matrix().reshape(i["local_values"], i["local_slopes"])

    def __repr__(self):
        i = self._info
        return (f"spotwave.sabre.SabrePlan(grid={self.grid}, partitions={i['k']}, m={i['m']}, "
                f"window={i['window']}, pme='{self.pme}', memory='{self.memory}')")


class GlobalSabre:
    """Global SABRE (sabre.h, ``sw_sabre_global_create``; de Visser & Verhaegen 2013): one
    least-squares problem on the (nx - 1) x (ny - 1) squares of the lenslet lattice, factorised
    once (banded Cholesky). ``GlobalSabre(grid=None, *, mask=None, pitch=1.0, ctx=None)``;
    ``g(slopes)`` (host float32, 2 nx ny, as :class:`SabrePlan`) returns the vertex values
    (float64, NaN for vertices of no triangle with a valid corner); runs on the CPU."""

    def __init__(self, grid=None, *, mask=None, pitch=1.0, ctx=None):
        self.ctx = _context.resolve(ctx)
        nx, ny = _grid(grid, mask)
        m = _mask_u8(mask, nx, ny)
        self._g = _spotwave.SabreGlobal(self.ctx, nx, ny, float(pitch), m)
        self.grid = (nx, ny)
        self.mask = np.ones((ny, nx), bool) if m is None else m.astype(bool)
        self.lattice = Lattice._from(self._g.lattice)

    def __call__(self, slopes, out=None):
        if out is None:
            out = np.empty(self.lattice.nvalues)
        self._g.run(_arrays.host_array(slopes, "slopes"), out)
        return out


class Fried:
    """Fried's zonal least squares (sabre.h, ``sw_fried_create``; Fried 1977): the phase at the
    (nx + 1)(ny + 1) lenslet corners minimising the slope misfit plus reg x the discrete
    Laplacian squared (reg > 0 removes the waffle mode). ``Fried(grid=None, *, mask=None,
    pitch=1.0, reg=1e-3, ctx=None)``; ``f(slopes)`` returns (ny + 1, nx + 1) float64 (NaN at
    corners of no valid lenslet); runs on the CPU."""

    def __init__(self, grid=None, *, mask=None, pitch=1.0, reg=1e-3, ctx=None):
        self.ctx = _context.resolve(ctx)
        nx, ny = _grid(grid, mask)
        m = _mask_u8(mask, nx, ny)
        self._f = _spotwave.Fried(self.ctx, nx, ny, float(pitch), m, float(reg))
        self.grid = (nx, ny)
        self.mask = np.ones((ny, nx), bool) if m is None else m.astype(bool)

    def __call__(self, slopes, out=None):
        nx, ny = self.grid
        if out is None:
            out = np.empty((ny + 1, nx + 1))
        self._f.run(_arrays.host_array(slopes, "slopes"), out)
        return out

    def eval(self, phase, x, y):
        """Bilinear interpolation of corner phases at lattice positions (x, y)."""
        nx, ny = self.grid
        x = np.asarray(x, np.float64)
        y = np.broadcast_to(np.asarray(y, np.float64), x.shape)
        p = np.ascontiguousarray(phase, np.float64)
        return _spotwave.fried_eval(nx, ny, p, np.ascontiguousarray(x).ravel(),
                                    np.ascontiguousarray(y).ravel()).reshape(x.shape)


def slopes_from(dx, dy, *, pixel_um=None, focal_mm=None, mask=None):
    """The slopes the plans take from two (ny, nx) maps: returns (slopes, valid), slopes float32
    (2, ny, nx) in radians (0 where not valid), valid (ny, nx) bool = finite in both (and in
    mask). dx, dy in radians, or in pixels when pixel_um and focal_mm are given
    (rad = px * pixel_um / (focal_mm * 1000), in double, then rounded to float32, as the
    command). An infinite slope raises ValueError naming it."""
    if (pixel_um is None) != (focal_mm is None):
        raise TypeError("pixel_um, focal_mm: give both (slopes in pixels) or neither (radians)")
    x = np.asarray(_arrays.host_array(dx, "dx"), np.float64)
    y = np.asarray(_arrays.host_array(dy, "dy"), np.float64)
    if x.ndim != 2:
        raise ValueError(f"dx: expected a 2-D (ny, nx) array, got shape {x.shape}")
    if y.shape != x.shape:
        raise ValueError(f"dy: shape {y.shape}, dx {x.shape}")
    for a, name in ((x, "dx"), (y, "dy")):
        if np.isinf(a).any():
            iy, ix = np.argwhere(np.isinf(a))[0]
            raise ValueError(f"{name}: lenslet ({ix},{iy}) has an infinite slope (NaN marks a "
                             f"lenslet without data)")
    if pixel_um is not None:
        if not (pixel_um > 0 and focal_mm > 0):
            raise ValueError(f"pixel_um, focal_mm: {pixel_um!r}, {focal_mm!r} must be > 0")
        scale = float(pixel_um) / (float(focal_mm) * 1000.0)
        x, y = x * scale, y * scale
    valid = np.isfinite(x) & np.isfinite(y)
    if mask is not None:
        ny, nx = x.shape
        valid &= _mask_u8(mask, nx, ny) != 0
    s = np.zeros((2,) + x.shape, np.float32)
    s[0][valid] = x[valid]
    s[1][valid] = y[valid]
    return s, valid


class Reconstruction:
    """What :func:`reconstruct` returns (the command's outputs, piston removed):

    - ``actuators``: (ny + 1, nx + 1) float64, the wavefront at the lenslet corners (the Fried
      actuator grid; NaN at corners of no valid lenslet; mean 0 over the others);
    - ``values``: the spline's vertex values (float64, dsabre and global; None for fried) on
      ``lattice`` (dsabre: the extended lattice of its partitions; global: NaN for vertices no
      valid lenslet reaches), the same piston removed;
    - ``map``: (height, width) float32 when map_size was given (NaN where the pixel's lenslet is
      invalid; mean 0 over the others), else None;
    - ``rms``, ``pv``: RMS and peak-to-valley over the active corners; ``piston``: the mean
      removed; ``active``: the corners of valid lenslets; ``valid``: the (ny, nx) mask used;
      ``method``, ``unit`` ("um" or "rad_pitch"), ``info`` (D-SABRE's plan information, else
      None).
    """

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def actuator_table(self):
        """The actuators as the command's ``--actuators`` CSV: a structured array cx, cy, w."""
        nx, ny = self.grid
        t = np.empty((ny + 1) * (nx + 1), np.dtype([("cx", np.int32), ("cy", np.int32),
                                                    ("w", np.float64)]))
        cy, cx = np.mgrid[0:ny + 1, 0:nx + 1]
        t["cx"], t["cy"], t["w"] = cx.ravel(), cy.ravel(), self.actuators.ravel()
        return t

    def values_table(self):
        """The vertex values as the command's ``--values`` CSV: a structured array kind
        ('corner' or 'centre'), I, J, x, y (lattice positions), w."""
        if self.values is None:
            raise ValueError("values_table: the fried method has no spline (use actuators)")
        kind, I, J, x, y = self.lattice.positions()
        t = np.empty(kind.size, np.dtype([("kind", "U6"), ("I", np.int32), ("J", np.int32),
                                          ("x", np.float64), ("y", np.float64),
                                          ("w", np.float64)]))
        t["kind"] = np.where(kind == 0, "corner", "centre")
        t["I"], t["J"], t["x"], t["y"], t["w"] = I, J, x, y, self.values
        return t

    def __repr__(self):
        return (f"spotwave.sabre.Reconstruction(method='{self.method}', grid={self.grid}, "
                f"rms={self.rms:.6g} {self.unit}, pv={self.pv:.6g})")


def reconstruct(dx, dy, *, method="dsabre", pixel_um=None, focal_mm=None, lenslet_um=None,
                mask=None, partitions=None, pme="hierarchical", overlap=1, padding="zero",
                fill=0, dpme_iterations=0, fried_reg=1e-3, map_size=None, ctx=None):
    """The wavefront from two slope maps, as ``spotwave sabre`` (the same numbers on the same
    slopes). Returns a :class:`Reconstruction`.

    dx, dy: (ny, nx) arrays (the grid, 2..4096 lenslets per side), NaN for a lenslet left out; in
    radians, or in pixels with pixel_um and focal_mm (see :func:`slopes_from`). mask: (ny, nx)
    bool, lenslets to use (with finite slopes). lenslet_um: the lenslet pitch in the pupil,
    micrometres (the wavefront in micrometres of OPD); default 1 (radians x pitch).
    method: "dsabre" (Brunner et al. 2018; the D-SABRE options partitions, pme, overlap,
    padding, fill, dpme_iterations as :class:`SabrePlan`), "global" (de Visser & Verhaegen 2013)
    or "fried" (Fried 1977; fried_reg > 0, the Laplacian's weight). map_size: the map's longer
    side in pixels (the other keeps the pixels square; ``True``: 16 per lenslet, at most 2048,
    the command's default). D-SABRE runs on the context's backend; the baselines on the CPU.
    """
    if method not in ("dsabre", "global", "fried"):
        raise ValueError(f"method: '{method}' is not 'dsabre', 'global' or 'fried'")
    ctx = _context.resolve(ctx)
    slopes, valid = slopes_from(dx, dy, pixel_um=pixel_um, focal_mm=focal_mm, mask=mask)
    ny, nx = valid.shape
    if nx < 2 or ny < 2 or nx > 4096 or ny > 4096:
        raise ValueError(f"dx: a grid of {nx}x{ny} lenslets; sabre needs 2..4096 along each side")
    if not valid.any():
        raise ValueError("dx, dy: no valid lenslet (every slope is NaN or masked)")
    if method != "dsabre" and (partitions is not None or pme != "hierarchical" or overlap != 1
                               or padding != "zero" or fill != 0 or dpme_iterations != 0):
        raise TypeError("partitions, pme, overlap, padding, fill and dpme_iterations apply to "
                        "method='dsabre' only")
    if dpme_iterations and pme != "distributed":
        raise TypeError("dpme_iterations applies to pme='distributed' only")
    if fried_reg != 1e-3 and method != "fried":
        raise TypeError("fried_reg applies to method='fried' only")
    if lenslet_um is not None and not (lenslet_um > 0):
        raise ValueError(f"lenslet_um: {lenslet_um!r} is not a positive length")
    pitch = float(lenslet_um) if lenslet_um is not None else 1.0
    m8 = valid.astype(np.uint8)
    info, lattice, values = None, None, None
    if method == "dsabre":
        plan = SabrePlan((nx, ny), mask=valid, pitch=pitch, partitions=partitions,
                         overlap=overlap, pme=pme, dpme_iterations=dpme_iterations,
                         padding=padding, fill=fill, ctx=ctx)
        r = plan(slopes)
        info, lattice = plan.info, plan.lattice
        values = r.values.astype(np.float64)
        act = r.actuators.astype(np.float64).ravel()
    elif method == "global":
        g = GlobalSabre((nx, ny), mask=valid, pitch=pitch, ctx=ctx)
        lattice = g.lattice
        values = g(slopes)
        act = lattice.corners(values, (nx, ny)).ravel()
    else:
        if not (fried_reg > 0):
            raise ValueError(f"fried_reg: {fried_reg!r} is not a number > 0")
        act = Fried((nx, ny), mask=valid, pitch=pitch, reg=fried_reg, ctx=ctx)(slopes).ravel()
    act = np.ascontiguousarray(act)
    active, piston, rms, pv = _spotwave.sabre_remove_piston(nx, ny, m8, act, values)
    wmap = None
    if map_size is not None and map_size is not False:
        side = max(nx, ny)
        size = min(16 * side, 2048) if map_size is True else int(map_size)
        if not 1 <= size <= 8192:
            raise ValueError(f"map_size: {map_size!r} is not a whole number of pixels in 1..8192")
        w = max(1, math.floor(size * nx / side + 0.5))
        h = max(1, math.floor(size * ny / side + 0.5))
        if lattice is not None:
            raw = np.ascontiguousarray(lattice.map(values, (nx, ny), (w, h), ctx=ctx)).ravel()
        else:
            xs = -0.5 + (np.arange(w) + 0.5) * nx / w
            ys = -0.5 + (np.arange(h) + 0.5) * ny / h
            X, Y = np.meshgrid(xs, ys)
            raw = np.ascontiguousarray(_spotwave.fried_eval(nx, ny, act, X.ravel(), Y.ravel()))
        wmap = _spotwave.sabre_finish_map(nx, ny, m8, raw, w, h).reshape(h, w)
    return Reconstruction(method=method, grid=(nx, ny), actuators=act.reshape(ny + 1, nx + 1),
                          values=values, lattice=lattice, map=wmap, rms=rms, pv=pv,
                          piston=piston, active=active, valid=valid,
                          unit="um" if lenslet_um is not None else "rad_pitch", info=info)
