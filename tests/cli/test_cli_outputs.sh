#!/usr/bin/env bash
# Outputs are never inputs, and land all or nothing (cli/files.c). For every subcommand that
# writes files: an output that names an input (the same name, another spelling of it, a symbolic
# link to it) or two outputs naming one file are refused with exit 2 before any work; a folder, a
# device or a missing folder as an output with exit 1, also before any work; every file is left as
# it was. A run that fails after writing some
# outputs (a name made during the run that turns out to be an input or a folder) leaves the
# earlier outputs' old contents in place and no staging folder behind.
# Usage: test_cli_outputs.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
mkdir "$tmp/w"
cd "$tmp/w"

sums() { find . -type f ! -name '.sums' -print0 | sort -z | xargs -0 sha256sum; }
snapshot() { sums >.sums; }
unchanged() {
    diff <(sums) .sums >/dev/null || fail "files changed after 'spotwave $*': $(diff <(sums) .sums)"
    local left
    left=$(find . -name '.spotwave-*' | head -n 1)
    [[ -z $left ]] || fail "a staging folder was left behind: $left"
}
# refused CODE WORDS ARGS...: exit CODE, one line on stderr containing WORDS, no file changed
refused() {
    local want=$1 words=$2
    shift 2
    snapshot
    expect "$want" "$@"
    expect_one_line "$@"
    [[ $err == *"$words"* ]] || fail "'spotwave $*': stderr lacks '$words': $err"
    unchanged "$@"
}

# ---------------------------------------------------------------- inputs to protect
expect 0 --backend cpu sim stars --random 40 --size 128x128 --seed 3 --out in.fits --truth t.csv
geom=(--pitch 24 --grid 8x8 --origin 4,4)
printf 'n,m,coef_um\n2,0,0.2\n3,1,0.05\n' >z.csv
expect 0 --backend cpu sim sh --zernike z.csv "${geom[@]}" --size 200x200 --pupil-mm 1 \
    --noise none --bits 32f --out sh.fits --reference ref.fits --truth sht.csv
expect 0 --backend cpu centroid sh.fits "${geom[@]}" --reference ref.fits --out c.csv \
    --slopes s.csv
printf 'frames = 3\nwarmup = 1\n' >loop.cfg
ln -s in.fits link.fits
mkdir dir

# ---------------------------------------------------------------- refused before any work
refused 2 "names the input" find in.fits --out in.fits
refused 2 "names the input" find in.fits --out ./in.fits
refused 2 "names the input" find in.fits --out link.fits
refused 2 "names the input" find in.fits --out "$tmp/w/dir/../in.fits"
refused 2 "names the input" find in.fits --out s.csv --strong-mask in.fits
refused 2 "name the same file" find in.fits --out a.csv --strong-mask ./a.csv
refused 1 "is a folder" find in.fits --out dir
refused 1 "not a regular file" find in.fits --out /dev/null
refused 1 "does not exist" find in.fits --out nowhere/a.csv
refused 2 "names the input" centroid sh.fits "${geom[@]}" --reference ref.fits --out ref.fits
refused 2 "names the input" centroid sh.fits "${geom[@]}" --out c2.csv --slopes sh.fits
refused 2 "name the same file" centroid sh.fits "${geom[@]}" --reference ref.fits --out x.csv \
    --slopes x.csv
refused 2 "names the input" fit s.csv "${geom[@]}" --pupil-mm 1 --out s.csv
cp s.csv sl.png
refused 2 "names the input" fit sl.png "${geom[@]}" --pupil-mm 1 --out f.csv --map sl.png
refused 2 "names the input" sabre s.csv --actuators s.csv
refused 2 "name the same file" sabre s.csv --actuators a.csv --values a.csv
refused 2 "names the input" pupil sh.fits --out sh.fits
refused 2 "names the input" pupil sh.fits --out p.csv --overlay sh.fits
refused 2 "names the input" aberrometry sh.fits --reference ref.fits --out ref.fits
refused 2 "names the input" aberrometry sh.fits --reference ref.fits --out z2.csv --map sh.fits
refused 2 "names the input" loop --config loop.cfg --report loop.cfg
cp loop.cfg loop.png
refused 2 "names the input" loop --config loop.png --plot loop.png
refused 2 "name the same file" loop --config loop.cfg --report r.png --plot r.png
refused 2 "names the input" sim stars --catalog t.csv --size 128x128 --out x.fits --truth t.csv
refused 2 "name the same file" sim stars --random 5 --out x.fits --truth x.fits
refused 2 "names the input" sim sh --zernike z.csv "${geom[@]}" --size 200x200 --out x.fits \
    --truth z.csv
refused 2 "name the same file" sim sh "${geom[@]}" --size 200x200 --out x.fits --reference x.fits
cp z.csv zz.pgm
refused 2 "names the input" sim eye --zernike zz.pgm --bits 8 --out zz.pgm

# ---------------------------------------------------------------- all or nothing
# sim eye writes --out, then the --truth files, whose names it makes as it goes; the pupils table's
# name is a folder here, found only then: nothing lands, the old image stays.
echo "old image" >eye.pgm
mkdir T_pupils.csv
refused 1 "is a folder" --backend cpu sim eye --bits 8 --out eye.pgm --truth T
[[ $(cat eye.pgm) == "old image" ]] || fail "sim eye replaced --out before failing"
[[ ! -e T_eye0_spots.csv ]] || fail "sim eye left a truth file of a failed run"
rmdir T_pupils.csv
expect 0 --backend cpu sim eye --bits 8 --out eye.pgm --truth T
[[ -s T_eye0_spots.csv && -s T_pupils.csv && $(head -c 2 eye.pgm) == P5 ]] ||
    fail "sim eye's files after a good run"

# fit of two frames with --map m.png makes m-0.png and m-1.png; the slopes file is m-1.png itself.
echo "old table" >f.csv
{
    head -n 1 s.csv | sed 's/^/frame,/'
    tail -n +2 s.csv | sed 's/^/0,/'
    tail -n +2 s.csv | sed 's/^/1,/'
} >m-1.png
refused 1 "names the input" --backend cpu fit m-1.png "${geom[@]}" --pupil-mm 1 --out f.csv \
    --map m.png
[[ $(cat f.csv) == "old table" ]] || fail "fit replaced --out before failing on a map"
[[ ! -e m-0.png ]] || fail "fit left the first map of a failed run"
expect 0 --backend cpu fit m-1.png "${geom[@]}" --pupil-mm 1 --out f.csv --map mm.png
[[ -s mm-0.png && -s mm-1.png && $(head -n 1 f.csv) == frame,* ]] || fail "fit's files"

# a staging folder a killed run left behind is never moved into place by a later run
# (one named after this very process, as a pid-named scheme would reuse it: exec keeps the pid)
echo "kept" >victim.csv
bash -c 'mkdir .spotwave-$$.tmp .spotwave-$$ && echo half >.spotwave-$$.tmp/victim.csv &&
    echo half >.spotwave-$$/victim.csv && exec "$0" --backend cpu find in.fits --out s_left.csv' \
    "$SW" 2>/dev/null || fail "find after a left staging folder"
[[ $(cat victim.csv) == kept ]] || fail "a later run moved a left staging folder's file into place"
rm -r .spotwave-*

# an output that is a symbolic link: the file it points to gets the output, the link stays
mkdir other
echo "old" >other/t.csv
ln -s other/t.csv lnk.csv
expect 0 --backend cpu find in.fits --out lnk.csv
[[ -L lnk.csv && $(head -n 1 other/t.csv) == frame,x_px,* ]] || fail "output through a link"

# a good run replaces an old output whole and leaves no staging folder
echo "old spots" >spots.csv
expect 0 --backend cpu find in.fits --out spots.csv --strong-mask strong.fits
[[ $(head -n 1 spots.csv) == frame,x_px,* && -s strong.fits ]] || fail "find's outputs"
[[ -z $(find . -name '.spotwave-*') ]] || fail "a staging folder after a good run"
echo "PASS"
