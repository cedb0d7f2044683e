"""An adaptive-optics loop written in Python, driven by spotwave's reconstructor (for users of
HCIPy, OOPAO or aotools): a turbulence screen blown across a 2 m pupil, a Shack-Hartmann sensor,
spotwave's real-time chain (centroids, D-SABRE of Brunner et al. 2018 J. Opt. Soc. Am. A 35(6)
859, the distributed projection onto the mirror, an integrator) and the mirror's surface
subtracted from the next frame's turbulence.

    python3 ao_loop.py [FRAMES]
"""
import sys

import numpy as np

import spotwave

frames = int(sys.argv[1]) if len(sys.argv) > 1 else 200
nx, pitch, q = 8, 16, 8                 # lenslets per side, pixels and OPD samples per lenslet
lens_um = pitch * 5.5                   # the lenslet pitch at the array (5.5 um pixels)
dm = spotwave.loop.DM((nx, nx), coupling=0.3)  # (nx + 1)^2 actuators at the lenslet corners
shaper = dm.shaper(samples=q, margin=1)  # its surface on the OPD grid (um), a sample beyond
screen = spotwave.sim.InfiniteScreen(nx * q + 2, 0.25 / q, r0=0.15, seed=3)  # 25 cm lenslets
rtc = spotwave.loop.RTC((nx * pitch, nx * pitch), np.uint16, pitch=pitch, grid=(nx, nx),
                        recon="sabre", sabre=dict(pitch=lens_um, partitions=2),
                        projection="local", dm=dm, gain=0.4)
u = rtc.commands                        # the chain's own command array (um), updated in place
turb, resid = [], []
for k in range(frames):
    screen.advance(10.0 / 500)          # 10 m/s wind, 500 frames/s
    w = screen.window()                 # the turbulence's optical path, um
    r = w - shaper(u)                   # what the sensor sees: turbulence minus the mirror
    frame, _ = spotwave.sim.sh(grid=(nx, nx), pitch=pitch, screen=r, flux=2e4, read_noise_e=2,
                               screen_spacing_um=lens_um / q, seed=k + 1)
    rtc(frame)                          # centroids -> D-SABRE -> projection -> integrator
    turb.append(np.std(w) * 1e3)
    resid.append(np.std(r) * 1e3)
half = frames // 2
print(f"turbulence {np.mean(turb[half:]):.1f} nm RMS, residual {np.mean(resid[half:]):.1f} nm "
      f"RMS over the last {frames - half} frames")
