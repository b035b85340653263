#!/bin/sh
# The scale bench's runs like a real server on every file system the agent's root
# directory can be on: real-991 RUNS times each on tmpfs, a fresh ext4 and an aged ext4 (loop
# devices: needs root), then real-2500 once per file system given in BIG_DISKS. Output: one
# line per figure, prefixed `scale/<run>@<disk>/`, in $OUT (default target/scale-disks.txt).
#
#   sudo scripts/scale-disks.sh                     # 3 runs each, about 10 minutes
#   RUNS=1 BIG_DISKS="tmpfs" scripts/scale-disks.sh
#
# Extra environment is passed to the bench (SCALE_RATE, SCALE_READ_MS, SCALE_NO_RESTART ...).
set -eu
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
DISKS=${DISKS:-"tmpfs fresh-ext4 aged-ext4"}
BIG_DISKS=${BIG_DISKS:-"fresh-ext4 aged-ext4"}
OUT=${OUT:-target/scale-disks.txt}
if [ "$(id -u)" -ne 0 ]; then
    echo "scale-disks: needs root (loop devices, mount); run it with sudo" >&2
    exit 1
fi
cargo bench -p nodelet --bench scale --no-run
: >"$OUT"
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) load: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT"
i=1
while [ "$i" -le "$RUNS" ]; do
    for disk in $DISKS; do
        SCALE_DISK=$disk SCALE_RUNS=real-991 SCALE_NO_RESTART=${SCALE_NO_RESTART:-1} \
            cargo bench -p nodelet --bench scale 2>&1 | grep '^scale/' | tee -a "$OUT"
    done
    i=$((i + 1))
done
for disk in $BIG_DISKS; do
    SCALE_DISK=$disk SCALE_RUNS=real-2500 SCALE_NO_RESTART=${SCALE_NO_RESTART:-1} \
        cargo bench -p nodelet --bench scale 2>&1 | grep '^scale/' | tee -a "$OUT"
done
echo "scale-disks: figures in $OUT"
