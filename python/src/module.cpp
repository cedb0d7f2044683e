// spotwave Python binding: the extension module spotwave._spotwave. Each stage's binding is in
// its own file (<stage>.cpp) and registers itself here; the public API is the Python package
// python/spotwave/, which wraps these with documentation and defaults.
#include "common.h"

NB_MODULE(_spotwave, m)
{
    // Contexts held by module globals (the default context) outlive nanobind's exit-time check.
    nb::set_leak_warnings(false);
    m.doc() = "spotwave's C library, bound with nanobind (private: use the spotwave package).";
    swpy::bind_core(m);
    swpy::bind_io(m);
    swpy::bind_find(m);
    swpy::bind_centroid(m);
    swpy::bind_zernike(m);
    swpy::bind_sim(m);
    swpy::bind_pupil(m);
    swpy::bind_sabre(m);
    swpy::bind_loop(m);
    swpy::bind_sim_eye(m);
    swpy::bind_aberrometry(m);
    swpy::bind_h5write(m);
    swpy::bind_bench(m);
    swpy::bind_stream(m);
}
