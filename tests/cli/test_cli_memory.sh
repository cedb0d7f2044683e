#!/usr/bin/env bash
# The memory budget of the command (--max-memory SIZE, SPOTWAVE_MAX_MEMORY; core.h): inputs that
# ask for more than the limit fail with exit 1 before anything is allocated, with one line that
# says how much was asked, for what, the limit, and how to raise it; no output file is written.
#   - a 2 KB slopes table (100 frames, one lenslet at (4095,4095)) that made `fit` reserve
#     16.7 GB (100 frames x 4096^2 lenslets x 10 bytes);
#   - `sim stars --random 2000000000` (a 64 GB star list);
#   - a FITS header claiming a 4096 x 4096 x 1000 float cube (62.5 GiB) in a sparse file;
#   - a loop configuration whose MVM matrices need 4 GiB;
#   - a 2-row sabre table spanning 4096 x 4096 lenslets;
#   - a moderate table refused under a tiny limit and accepted once the limit is raised;
#   - usage errors: a size that does not parse (option or environment), the option after the
#     subcommand.
# The limits are given explicitly so that the outcome does not depend on the machine's memory.
# Usage: test_cli_memory.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to write the inputs"
cd "$tmp"

expect_budget() { # the last run failed with the budget's message
    [[ $rc == 1 ]] || fail "expected exit 1, got $rc; stderr: $err"
    expect_one_line
    for want in "$@" "above the memory limit of" "--max-memory SIZE" "SPOTWAVE_MAX_MEMORY"; do
        [[ $err == *"$want"* ]] || fail "the message lacks '$want': $err"
    done
}

python3 - <<'EOF'
with open("big.csv", "w") as f:
    f.write("frame,ix,iy,dx_px,dy_px\n")
    for k in range(100):
        f.write(f"{k},4095,4095,0.1,0.2\n")
with open("mod.csv", "w") as f:
    f.write("frame,ix,iy,dx_px,dy_px\n")
    for k in range(4):
        for y in range(16):
            for x in range(16):
                f.write(f"{k},{x},{y},{0.01 * x:.3f},{-0.01 * y:.3f}\n")
cards = ["SIMPLE  =                    T", "BITPIX  =                  -32",
         "NAXIS   =                    3", "NAXIS1  =                 4096",
         "NAXIS2  =                 4096", "NAXIS3  =                 1000", "END"]
with open("huge.fits", "wb") as f:
    f.write(b"".join(c.ljust(80).encode() for c in cards).ljust(2880))
    f.truncate(2880 + (4096 * 4096 * 1000 * 4 + 2879) // 2880 * 2880)  # a hole: nothing written
EOF
(($(wc -c <big.csv) < 3000)) || fail "the reproducer should stay a small file"

# fit: 100 frames x 16777216 lenslets x 10 bytes, from a 2 KB table.
run --max-memory 8G fit big.csv --pitch 10 --out big_fit.csv
expect_budget "slopes table 'big.csv': 100 frames x 16777216 lenslets" "(16777216000 bytes)" \
    "limit of 8 GiB"
[[ ! -e big_fit.csv ]] || fail "fit wrote its output despite the failure"
[[ -z $(find . -maxdepth 1 -name '.spotwave-*') ]] || fail "fit left its staging folder"
# the same through the environment
SPOTWAVE_MAX_MEMORY=1G run fit big.csv --pitch 10 --out big_fit.csv
expect_budget "16777216 lenslets" "limit of 1 GiB"
[[ ! -e big_fit.csv ]] || fail "fit wrote its output despite the failure"
# the option wins over the environment
SPOTWAVE_MAX_MEMORY=1G run --max-memory 2G fit big.csv --pitch 10 --out big_fit.csv
expect_budget "limit of 2 GiB"

# sim stars: the star list of --random N.
run --max-memory 4G sim stars --random 2000000000 --size 64x64 --out stars.fits
expect_budget "a list of 2000000000 stars" "(64000000000 bytes)"
[[ ! -e stars.fits ]] || fail "sim stars wrote its output despite the failure"

# A FITS header claiming a huge cube: refused before any frame is read.
run --max-memory 1G find huge.fits --out spots.csv
expect_budget "huge.fits: 1000 frames of 4096 x 4096 pixels" "(67108864000 bytes)"
[[ ! -e spots.csv ]] || fail "find wrote its output despite the failure"

# loop: the MVM matrices of a 127 x 127 mirror (4 GiB), refused before the simulator is built.
run --max-memory 1G loop --set nx=127 --recon mvm --frames 30
expect_budget "loop: 127 x 127 lenslets" "MVM matrices"

# sabre: a 2-row table spanning 4096 x 4096 lenslets (the grid, then the D-SABRE plan: 1.6 GiB).
printf 'ix,iy,dx_px,dy_px\n0,0,0.1,0.1\n4095,4095,0.1,0.2\n' >sab.csv
run --max-memory 100M sabre sab.csv --pixel-um 5 --focal-mm 5 --partitions 64 --values sab_out.csv
expect_budget "slopes table 'sab.csv': a grid of 4096x4096 lenslets"
run --max-memory 1G sabre sab.csv --pixel-um 5 --focal-mm 5 --partitions 64 --values sab_out.csv
expect_budget "sabre: a plan of 4096 x 4096 lenslets in 64 x 64 partitions"
[[ ! -e sab_out.csv ]] || fail "sabre wrote its output despite the failure"

# A moderate case: refused under a tiny limit, accepted once the limit is raised.
run --max-memory 4K fit mod.csv --pitch 10 --out mod_fit.csv
expect_budget "mod.csv, line" "rows x 5 columns"
[[ ! -e mod_fit.csv ]] || fail "fit wrote its output despite the failure"
expect 0 --max-memory 64M fit mod.csv --pitch 10 --out mod_fit.csv
[[ $(grep -c '^3,' mod_fit.csv) -gt 0 ]] || fail "the fit of the moderate table lacks frame 3"
expect 0 --max-memory unlimited fit mod.csv --pitch 10 --out mod_fit.csv

# Usage errors.
for bad in 0 -5 12Q 1e9 0x100 ""; do
    expect_usage --max-memory "$bad" info
    [[ $err == *"is not a size"* ]] || fail "--max-memory '$bad': $err"
done
SPOTWAVE_MAX_MEMORY=plenty run info
[[ $rc == 2 && $err == *"SPOTWAVE_MAX_MEMORY='plenty' is not a size"* ]] ||
    fail "a bad SPOTWAVE_MAX_MEMORY: exit $rc, $err"
expect_usage fit --max-memory 1G mod.csv --pitch 10
[[ $err == *"global option"* ]] || fail "--max-memory after the subcommand: $err"
expect 0 --help
[[ $out == *"--max-memory SIZE"* ]] || fail "--help does not list --max-memory"

echo "PASS"
