#!/usr/bin/env bash
# The quick starts of docs/quickstart.md run as written: every fenced block marked
# "```sh quickstart" is extracted and run by bash (-e -u -o pipefail) in an empty directory of
# its own, with this build's spotwave first on the PATH. A block that fails prints its output.
# Then the claims under each block's "What to expect" are checked on the files it left: the
# centroid error and the D-SABRE / global SABRE agreement (AO), the refraction against sim eye's
# truth at both magnifications (vision), the spot counts with the right and the wrong gain
# (crystallography), the stars found and the false spots (astronomy).
# Usage: test_cli_quickstart.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
doc=$(cd "$(dirname "$0")/../.." && pwd)/docs/quickstart.md
[[ -f $doc ]] || fail "no $doc"
export PATH="$(dirname "$SW"):$PATH"
[[ $(command -v spotwave) == "$SW" ]] || fail "spotwave on the PATH is not $SW"

# Extract the blocks into $tmp/block1.sh, block2.sh, ...
awk -v dir="$tmp" '
    /^```sh quickstart[ \t]*$/ { n++; f = dir "/block" n ".sh"; on = 1; printf "" > f; next }
    on && /^```[ \t]*$/ { on = 0; close(f); next }
    on { print > f }
    END { if (on) exit 1; print n > (dir "/count") }' "$doc" || fail "an unterminated block in $doc"
n=$(cat "$tmp/count")
((n == 4)) || fail "expected 4 quickstart blocks in $doc, found $n"

for i in $(seq 1 "$n"); do
    mkdir "$tmp/run$i"
    if ! (cd "$tmp/run$i" && bash -euo pipefail "$tmp/block$i.sh") >"$tmp/out$i" 2>&1; then
        cat "$tmp/out$i" >&2
        fail "quickstart block $i of $doc failed (its output is above)"
    fi
done

# 1. AO engineer: centroids within 0.1 px of the truth, D-SABRE within 8 % of global SABRE,
# the loop's Strehl printed.
out1=$(cat "$tmp/out1")
err=$(sed -n 's/^centroids against the truth: RMS error \([0-9.]*\) px.*/\1/p' <<<"$out1")
[[ -n $err ]] && awk -v e="$err" 'BEGIN { exit !(e < 0.1) }' ||
    fail "AO: centroid RMS error '$err' px (expected < 0.1): $out1"
rel=$(sed -n 's/^D-SABRE against global SABRE: \([0-9.]*\) % RMS/\1/p' <<<"$out1")
[[ -n $rel ]] && awk -v r="$rel" 'BEGIN { exit !(r < 8) }' ||
    fail "AO: D-SABRE differs from global SABRE by '$rel' %"
[[ $out1 == *"long exposure"* ]] || fail "AO: the loop printed no Strehl: $out1"

# 2. Vision scientist: each aberrometry refraction within 0.15 D (sphere, cylinder) of the truth
# sim eye printed just before it.
python3 - "$tmp/out2" <<'EOF' || fail "vision: refraction against the truth: $(cat "$tmp/out2")"
import re, sys
text = open(sys.argv[1]).read()
truths = re.findall(r"true refraction ([-+][0-9.]+) D ([-+][0-9.]+) D x ([0-9.]+) deg", text)
measured = re.findall(r"eye 1 +pupil ([0-9.]+) mm .* ([-+][0-9.]+) D ([-+][0-9.]+) D x ([0-9.]+) deg", text)
assert len(truths) == 2 and len(measured) == 2, (truths, measured)
for (ts, tc, ta), (pupil, ms, mc, ma) in zip(truths, measured):
    assert abs(float(pupil) - 5.12) < 0.05, pupil
    assert abs(float(ms) - float(ts)) < 0.15 and abs(float(mc) - float(tc)) < 0.15, (ts, tc, ms, mc)
    d = abs(float(ma) - float(ta)) % 180
    assert min(d, 180 - d) < 10, (ta, ma)
assert "second order only:" in text
EOF

# 3. Crystallographer: 200..400 spots with the right gain on both frames, > 1000 with gain 1.
cd "$tmp/run3"
rows() { echo $(($(wc -l <"$1") - 1)); }
e=$(rows eiger_spots.csv)
c=$(rows ccd_spots.csv)
c1=$(rows ccd_gain1.csv)
((e >= 200 && e <= 400 && c >= 200 && c <= 400 && c1 > 1000)) ||
    fail "crystallography: spots $e (Eiger), $c (CCD, the computed gain), $c1 (CCD, gain 1)"

# 4. Astronomer: >= 90 % of the stars to magnitude 8 found, <= 3 false spots; fewer with gain 1.
out4=$(cat "$tmp/out4")
read -r found bright false1 <<<"$(sed -n 's/.*stars (centroid RMS error [0-9.]* px), \([0-9]*\) false; \([0-9]*\) of \([0-9]*\) stars.*/\2 \3 \1/p' <<<"$out4" | head -1)"
read -r found1 _ _ <<<"$(sed -n 's/.*stars (centroid RMS error [0-9.]* px), \([0-9]*\) false; \([0-9]*\) of \([0-9]*\) stars.*/\2 \3 \1/p' <<<"$out4" | tail -1)"
[[ -n ${found:-} && -n ${found1:-} ]] || fail "astronomy: no match lines: $out4"
((10 * found >= 9 * bright && false1 <= 3 && found1 < found)) ||
    fail "astronomy: $found of $bright bright stars, $false1 false, $found1 with gain 1: $out4"

echo "test_cli_quickstart: $n blocks ran; AO error $err px, D-SABRE $rel %; eiger $e, ccd $c / $c1 spots; stars $found of $bright ($found1 with gain 1)"
