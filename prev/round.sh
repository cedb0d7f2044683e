#!/usr/bin/env bash
# one self-contained GPU round (untracked; deleted after)
set -uo pipefail
cd "$(dirname "$0")/.."
prefix=/tmp/spotwave-deps
mkdir -p "$prefix"; for f in .deps/*.deb; do dpkg -x "$f" "$prefix"; done
lib="$prefix/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export HDF5_PLUGIN_PATH="$lib/hdf5/serial/plugins"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
t0=$(date +%s)
cmake -S . -B build-gpu -DSW_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DSW_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$prefix/usr" -DPython_EXECUTABLE="$(command -v python3)" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
cmake --build build-gpu -j 15 > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30; tail -20 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
ctest --test-dir build-gpu -L gpu -j 6 --output-on-failure > $OUT/ctest-gpu.log 2>&1
grep -E "tests passed|Failed|\*\*\*|Skipped" $OUT/ctest-gpu.log | tail -12
ctest --test-dir build-gpu -R "cli/test_cli_rtc|stream|find_refine|centroid_methods|loop_sim" -j 4 --output-on-failure > $OUT/ctest-new.log 2>&1
grep -E "tests passed|Failed|\*\*\*" $OUT/ctest-new.log | tail -8
PYTHONPATH=build-gpu/python SPOTWAVE_CLI=build-gpu/spotwave timeout 200 python3 -m pytest -q -x python/tests/test_gpu.py python/tests/test_gpu_stages.py python/tests/test_stream.py > $OUT/pytest.log 2>&1; tail -3 $OUT/pytest.log
# the simulated bench on the GPU: sim camera (CUDA) -> rtc (CUDA), twin on CUDA
S=$PWD/build-gpu/spotwave; export MILK_SHM_DIR=/tmp/shm; mkdir -p $MILK_SHM_DIR; cd /tmp
for nx in 8 40; do
 A="--set nx=$nx --set recon=mvm --set magnitude=9 --set seed=3"
 $S sim bench $A --rtc-config b$nx --frames 0 > /dev/null
 $S rtc --config b$nx/rtc.conf --in cam$nx --out dm$nx --frames 2000 --json > rtc$nx.json 2>&1 &
 $S sim bench $A --camera cam$nx --dm dm$nx --frames 2000 --twin --json > bench$nx.json 2>&1
 wait
 echo "nx=$nx GPU twin:"; grep -E "twin_|frames_per|residual_mean|error|differ" bench$nx.json; grep -E "missed|latency_(median|p99|max)|error" rtc$nx.json
done
cd - > /dev/null
timeout 120 build-gpu/bench/bench_refine > $OUT/bench_refine.txt 2>&1; tail -12 $OUT/bench_refine.txt
timeout 200 build-gpu/bench/bench_centroid > $OUT/bench_centroid.txt 2>&1; grep -E "w=1000|1000" $OUT/bench_centroid.txt | head -30
OUT2=$OUT timeout 250 tools/gpu-sanitize build-gpu 6 "find_refine|centroid_methods|test_gpu_centroid$|test_gpu_find$" "memcheck racecheck" 240
