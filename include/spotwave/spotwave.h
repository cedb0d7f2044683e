/*
 * spotwave: processing images of point sources ("spots") on NVIDIA GPUs and CPUs.
 * The umbrella header: include this one. See DESIGN.md for the architecture and conventions.
 */
#ifndef SPOTWAVE_H
#define SPOTWAVE_H

#include "spotwave/core.h"
#include "spotwave/io.h"
#include "spotwave/geometry.h"
#include "spotwave/zernike.h"
#include "spotwave/sim.h"
#include "spotwave/sim_sh.h"
#include "spotwave/sim_eye.h"
#include "spotwave/turbulence.h"
#include "spotwave/centroid.h"
#include "spotwave/zernike_fit.h"
#include "spotwave/quality.h"
#include "spotwave/find.h"
#include "spotwave/refine.h"
#include "spotwave/diffraction.h"
#include "spotwave/pupil.h"
#include "spotwave/search.h"
#include "spotwave/aberrometry.h"
#include "spotwave/sabre.h"
#include "spotwave/loop.h"
#include "spotwave/stream.h"

#endif /* SPOTWAVE_H */
