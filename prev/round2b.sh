#!/usr/bin/env bash
# the stream latency benchmark on the GPU (after round2.sh's build)
set -uo pipefail
B=build-gpu/bench/bench_rtc_stream
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
timeout 200 $B --backend cuda --nx 40 --frames 100000 --rate 2000 --modes ${MODES40:-inproc,sem,spin} --soak > $OUT/rtc40.txt 2>&1; tail -12 $OUT/rtc40.txt
timeout 100 $B --backend cuda --nx 80 --frames 20000 --rate 2000 --modes inproc,sem,spin > $OUT/rtc80.txt 2>&1; tail -10 $OUT/rtc80.txt
