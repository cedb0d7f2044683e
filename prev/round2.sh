#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/.."
prefix=/tmp/spotwave-deps
mkdir -p "$prefix"; for f in .deps/*.deb; do dpkg -x "$f" "$prefix"; done
lib="$prefix/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export HDF5_PLUGIN_PATH="$lib/hdf5/serial/plugins"
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
cmake -S . -B build-gpu -DSW_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DSW_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$prefix/usr" -DPython_EXECUTABLE="$(command -v python3)" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
cmake --build build-gpu -j 15 > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30; tail -20 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
[[ ${PART:-A} == B ]] && exec bash prev/round2b.sh
ctest --test-dir build-gpu -L gpu -j 6 --output-on-failure > $OUT/ctest-gpu.log 2>&1
grep -E "tests passed|Failed|\*\*\*|Skipped" $OUT/ctest-gpu.log | tail -8
ctest --test-dir build-gpu -R "cli/test_cli_(rtc|find_deblend|find_refine|centroid|stream)|unit/test_(stream|find|centroid|loop)" -j 6 --output-on-failure > $OUT/ctest-new.log 2>&1
grep -E "tests passed|Failed|\*\*\*" $OUT/ctest-new.log | tail -6
PYTHONPATH=build-gpu/python SPOTWAVE_CLI=build-gpu/spotwave timeout 200 python3 -m pytest -q -x python/tests/test_gpu.py python/tests/test_gpu_stages.py > $OUT/pytest.log 2>&1; tail -2 $OUT/pytest.log; grep -E "^E |FAILED" $OUT/pytest.log | head -8
S=$PWD/build-gpu/spotwave; cd /tmp
$S sim stars --size 512x512 --random 200 --sigma 1.5 --seed 4 --out st.fits > /dev/null 2>&1
for b in cpu cuda; do $S --backend $b find st.fits --deblend --refine gauss --background annulus --out d_$b.csv > /dev/null 2>&1; done
cmp d_cpu.csv d_cuda.csv && echo "deblend+refine: CPU and GPU CSVs identical ($(wc -l < d_cpu.csv) lines)" || { echo "deblend+refine CSVs differ:"; diff d_cpu.csv d_cuda.csv | head -6; }
export MILK_SHM_DIR=/tmp/shm; mkdir -p $MILK_SHM_DIR
for cfg in "8 mvm 3" "8 dsabre-local 3" "40 mvm 12" "40 dsabre-local 12"; do
 set -- $cfg
 A="--set nx=$1 --set recon=$2 --set diameter_m=$3 --set magnitude=9 --set seed=3"
 $S sim bench $A --rtc-config c$1$2 --frames 0 > /dev/null
 $S rtc --config c$1$2/rtc.conf --in cam$1$2 --out dm$1$2 --frames 2000 --json > rtc.json 2>&1 &
 $S sim bench $A --camera cam$1$2 --dm dm$1$2 --frames 2000 --twin-tolerance 1e-3 --json > bench.json 2>&1
 wait
 echo "GPU bench nx=$1 $2: $(grep -oE '"(twin_identical_frames|twin_max_rel_difference|residual_mean_nm|frames_per_s)": [^,]*' bench.json | tr '\n' ' ') | rtc $(grep -oE '"(missed|latency_median_us|latency_p99_us|latency_max_us)": [^,]*' rtc.json | tr '\n' ' ') $(grep -h error bench.json rtc.json)"
done
cd - > /dev/null
timeout 150 build-gpu/bench/bench_refine > $OUT/bench_refine.txt 2>&1; grep -E "refine_" $OUT/bench_refine.txt
timeout 150 build-gpu/bench/bench_centroid > $OUT/bench_centroid.txt 2>&1; grep -E '"centroid_kernel' $OUT/bench_centroid.txt | grep -oE '"bench":"[a-z_]*","config":"[^"]*"|"median_us":[0-9.]*' | paste - - 
timeout 200 tools/gpu-sanitize build-gpu 6 "find_refine|centroid_methods|test_gpu_find$" "memcheck racecheck" 190
