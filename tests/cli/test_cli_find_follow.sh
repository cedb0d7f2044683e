#!/usr/bin/env bash
# `spotwave find --follow DIR`: a writer in the background drops CBF and TIFF files into a folder
# over about a second (renamed into place, copied, or written in pieces), with a hidden temporary
# file, a file of another name and an unreadable one among them; find takes every image once,
# in name order as they complete, never a partly written one, and its CSV and summary equal
# those of a plain run over the same files in the same order (the summary lines name their
# file); the unreadable file is skipped with exit status 1 and everything else written. A run
# without --follow-idle ends on SIGTERM with exit status 0, each line it wrote whole and the
# summary plot written. HDF5 files are followed too; no file at all is an error; the options
# that do not go with --follow are usage errors.
# Usage: test_cli_find_follow.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to check the tables"
cd "$tmp"

sim=(-q --backend cpu sim stars --random 40 --size 160x120 --sigma 1.2)
for i in 1 2 3 4; do
    "$SW" "${sim[@]}" --seed "$i" --out "c$i.cbf" >/dev/null
done
"$SW" "${sim[@]}" --seed 5 --bits 32 --out t5.tif >/dev/null
geom=(--wavelength-a 0.9763 --distance-mm 40 --beam-center 80,60 --pixel-mm 0.172)
follow=(--backend cpu find --follow in --follow-poll 0.1 "${geom[@]}")

# ---------------------------------------------------------------- files landing one by one
mkdir in
echo "not an image" >in/notes.txt # not an image name: never read
writer() {
    sleep 0.3
    cp c2.cbf in/.c2.part && mv in/.c2.part in/run_0002.cbf # renamed into place
    for _ in $(seq 100); do # until find has taken it (at most 10 s)
        [[ -s f.jsonl ]] && break
        sleep 0.1
    done
    cp c1.cbf in/run_0001.cbf # sorts before the one already taken
    cp t5.tif in/run_0003.tif
    sleep 0.2
    echo "garbage" >in/run_0004.cbf
    # written in eight pieces 20 ms apart (polls are 100 ms apart): never taken before it is whole
    python3 - <<'PY'
import time
data = open("c3.cbf", "rb").read()
with open("in/run_0005.cbf", "wb") as f:
    for k in range(8):
        f.write(data[k * len(data) // 8:(k + 1) * len(data) // 8])
        f.flush()
        time.sleep(0.02)
PY
    echo "hidden" >in/.run_0006.cbf
}
writer &
wpid=$!
t0=$(date +%s.%N)
expect 1 "${follow[@]}" --follow-idle 1.0 -o f.csv --summary f.jsonl --summary-plot f.png \
    --out-h5 f.h5 --progress
wait "$wpid"
t1=$(date +%s.%N)
[[ $err == *"skipped 'in/run_0004.cbf'"* ]] || fail "the garbage file was not reported: $err"
[[ $err == *"1 of 5 files were skipped"* ]] || fail "no count of skipped files: $err"
[[ $err == *"frames from"* ]] || fail "no progress line: $err"
[[ -s f.png && -s f.h5 ]] || fail "the summary plot and the HDF5 table were not written"
python3 -c "import sys; sys.exit(0 if float(sys.argv[2]) - float(sys.argv[1]) < 10 else 1)" \
    "$t0" "$t1" || fail "--follow-idle 1.0 did not end the run soon after the last file"

# the order find took them in: run_0002 (first to complete), then run_0001, run_0003, run_0005
python3 - <<'PY'
import json
lines = [json.loads(l) for l in open("f.jsonl")]
files = [l["file"] for l in lines]
assert files == ["in/run_0002.cbf", "in/run_0001.cbf", "in/run_0003.tif", "in/run_0005.cbf"], files
assert [l["frame"] for l in lines] == [0, 1, 2, 3], lines
PY

# a plain run over the same files in that order: the same spots, the same summaries
expect 0 --backend cpu find c2.cbf c1.cbf t5.tif c3.cbf "${geom[@]}" --no-progress -o p.csv \
    --summary p.jsonl
cmp f.csv p.csv || fail "--follow's spots differ from a plain run's"
python3 - <<'PY'
import json
f = [json.loads(l) for l in open("f.jsonl")]
p = [json.loads(l) for l in open("p.jsonl")]
assert len(f) == len(p) == 4
for a, b in zip(f, p):
    a.pop("file")
    assert a == b, (a, b)
assert sum(l["n_spots"] for l in p) == sum(1 for _ in open("p.csv")) - 1
PY

# ---------------------------------------------------------------- stopped by SIGTERM
rm -rf in f.*
mkdir in
(
    sleep 0.2
    cp c1.cbf in/a_1.cbf
    cp c2.cbf in/a_2.cbf
) &
wpid=$!
"$SW" "${follow[@]}" -o f.csv --summary f.jsonl --summary-plot f.png --no-progress \
    >out 2>err &
fpid=$!
for _ in $(seq 100); do # until both frames are written (at most 10 s)
    [[ -f f.jsonl && $(wc -l <f.jsonl) == 2 ]] && break
    sleep 0.1
done
wait "$wpid"
kill -TERM "$fpid" 2>/dev/null || fail "--follow ended before SIGTERM: $(cat err)"
set +e
wait "$fpid"
rc=$?
set -e
[[ $rc == 0 ]] || fail "--follow stopped by SIGTERM exited $rc: $(cat err)"
[[ $(wc -l <f.jsonl) == 2 ]] || fail "expected 2 summary lines, got $(wc -l <f.jsonl)"
[[ -s f.png ]] || fail "no summary plot after SIGTERM"
expect 0 --backend cpu find c1.cbf c2.cbf "${geom[@]}" --no-progress -o p.csv
cmp f.csv p.csv || fail "the spots written before SIGTERM differ from a plain run's"

# ---------------------------------------------------------------- HDF5 files, a pattern
rm -rf in
mkdir in
"$SW" "${sim[@]}" --seed 6 --out h6.h5 >/dev/null
"$SW" "${sim[@]}" --seed 7 --out h7.tif >/dev/null
(
    sleep 0.2
    cp h6.h5 in/x_1.h5
    cp h7.tif in/x_2.tif
    cp h7.tif in/y_3.tif
) &
expect 0 --backend cpu find --follow in --follow-poll 0.1 --follow-idle 0.8 \
    --follow-pattern 'x_*' -o h.csv --no-progress
wait
expect 0 --backend cpu find h6.h5 h7.tif -o hp.csv --no-progress
cmp h.csv hp.csv || fail "--follow over HDF5 and TIFF files differs from a plain run"

# ---------------------------------------------------------------- nothing, and usage errors
rm -rf in
mkdir in
expect 1 --backend cpu find --follow in --follow-poll 0.1 --follow-idle 0.3 -o n.csv
[[ $err == *"no image file completed"* ]] || fail "an empty folder: $err"
[[ ! -e n.csv ]] || fail "an empty folder left a CSV"
expect_usage find --follow in c1.cbf
expect_usage find --follow in --3d
expect_usage find --follow in --json -o x.csv
expect_usage find c1.cbf --follow-idle 3
expect_usage find --follow in --follow-poll 0
expect 1 find --follow "$tmp/no_such_folder" --follow-idle 0.1
echo "PASS"
