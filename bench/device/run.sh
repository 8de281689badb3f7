#!/bin/bash
# On the GPU machine, in the repository root, with .devcarry/ carried (prepare.sh): set up
# fusecache's dependencies under /tmp, compile pyfuse3 against the carried libfuse3, then
# run the training experiment with the real model on the GPU. Its JSON and Markdown go
# to $OUT (or bench/results). Environment knobs: RUNS (1), SCALE (2), EPOCHS (1),
# CONTENDERS (local,boto3,fusecache,fusecache-prefetch), BENCH_S (timeout of each run, 420).
set -u
C=$PWD/.devcarry
[ -d "$C" ] || { echo "no .devcarry here: run bench/device/prepare.sh and carry it" >&2; exit 2; }
echo "== machine $(date -u +%T)"
uname -r; nproc; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
[ -e /dev/fuse ] || mknod -m 666 /dev/fuse c 10 229
grep -qw fuse /proc/filesystems || { echo "this kernel has no FUSE" >&2; exit 2; }
PYINC=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
SUF=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
echo "== setup $(date -u +%T)"
tar xJf "$C/site.tar.xz" -C /tmp
mkdir -p /tmp/bin
xz -dc "$C/weed.xz" > /tmp/bin/weed && chmod +x /tmp/bin/weed
cp "$C/lib/fusermount3" /tmp/bin/ && chmod +x /tmp/bin/fusermount3
gcc -O2 -shared -fPIC -I"$PYINC" -I"$C/include/fuse3" -DFUSE_USE_VERSION=32 \
  /tmp/site/pyfuse3/__init__.c -L"$C/lib" -l:libfuse3.so.3 -lpthread -lrt \
  -o "/tmp/site/pyfuse3/__init__$SUF" || exit 3
for t in prefetchd fusecache; do
  printf '#!/bin/sh\nexec python3 -m %s.cli "$@"\n' $t > /tmp/bin/$t; chmod +x /tmp/bin/$t
done
export LD_LIBRARY_PATH=$C/lib PATH=/tmp/bin:$PATH PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
python3 -c "import pyfuse3, trio, lmdb, obstore, boto3, zlib_ng, pynvml, torch, fusecache.cli, prefetchd.cli; assert torch.cuda.is_available()" || exit 3
BW=1000  # the shaped link needs ip and tc; without them, loopback behind the latency proxy
command -v ip >/dev/null && command -v tc >/dev/null || BW=0
for r in $(seq "${RUNS:-1}"); do
  echo "== run $r $(date -u +%T), bandwidth $BW"
  rm -rf /var/tmp/fcbench
  timeout "${BENCH_S:-420}" python3 bench/run_train_bench.py --scale "${SCALE:-2}" \
    --epochs "${EPOCHS:-1}" --contenders "${CONTENDERS:-local,boto3,fusecache,fusecache-prefetch}" \
    --accelerator gpu --bandwidth $BW --no-plot --out-dir "${OUT:-bench/results}" \
    --workdir /var/tmp/fcbench
  echo "== run $r exit $? $(date -u +%T)"
done
