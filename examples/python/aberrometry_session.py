"""An aberrometry session (vision science): a reference image calibrates the lenslet grid and
the spots of a flat wavefront; each eye of the Hartmann-Shack image gets its pupil, its Zernike
aberrations (OSA/ANSI j, micrometres, OSA sign) and its refraction (Mompean, Aragon, Prieto &
Artal 2019, Future Gener. Comput. Syst. 91, 177; Thibos et al. 2004, J. Vision 4(4), 329), and a
wavefront map written as FITS. Without files it simulates an eye first.

    python3 aberrometry_session.py [EYE.pgm REF.pgm [--binocular]]
"""
import sys

import spotwave

if len(sys.argv) >= 3:
    image, reference = sys.argv[1], sys.argv[2]
else:   # a synthetic eye: -1.50 D sphere, -0.75 D cylinder at 20 deg, population higher orders
    image, truth, reference = spotwave.sim.eye(sphere_d=-1.5, cyl_d=-0.75, axis_deg=20,
                                               max_order=4, seed=4, reference=True)
    print("simulated eye: -1.50 / -0.75 x 20 added to a population eye (orders <= 4)")
m = spotwave.aberrometry.aberrometry(image, reference=reference,
                                     binocular="--binocular" in sys.argv)
g = m.reference.geometry
print(f"grid {g['nx']}x{g['ny']} lenslets of {g['pitch']:.2f} px, {m.reference.found} spots")
for k, eye in enumerate(m.frames[0].eyes, 1):
    if not eye.valid:
        print(f"eye {k}: no result ({eye.failure})")
        continue
    rx = eye.rx
    print(f"eye {k}: pupil {eye.pupil_mm:.2f} mm, {eye.kept} spots, RMS {eye.rms_um:.3f} um "
          f"(higher orders {eye.hoa_rms_um:.3f} um), refraction {rx['sphere_d']:+.2f} / "
          f"{rx['cyl_d']:+.2f} x {rx['axis_deg']:.0f}")
    for j in range(3, 10):
        n, mm = spotwave.zernike.osa_to_nm(j)
        print(f"  j={j} Z({n},{mm:+d}) {eye.coef_um[j]:+.3f} um")
    spotwave.write_fits(f"wavefront_eye{k}.fits", spotwave.zernike.wavefront_map(eye.coef_um))
