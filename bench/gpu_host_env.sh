# Sourced by the bench/*_h200.sh scripts on the GPU host, from the
# repository root (shared/gpu-host/README.md's recipe): unpacks the Debian
# packages (.devtools/gpu-env.sh), then lets pkg-config and the linker use
# the host's own GnuTLS in place of the unpacked one (the Debian libgnutls
# does not link there), and prints the GPU.
ls .devdeps/libmicrohttpd-dev_*.deb .devdeps/libgnutls28-dev_*.deb > /dev/null 2>&1 ||
  echo "gpu_host_env: .devdeps lacks libmicrohttpd-dev or libgnutls28-dev: on the Debian" \
    "machine, in .devdeps: apt-get download libmicrohttpd-dev libmicrohttpd12 pkgconf" \
    "pkgconf-bin libpkgconf3 pkg-config libgnutls28-dev (docs/operations.md); cmake will fail"
source .devtools/gpu-env.sh
export PKG_CONFIG_PATH=/opt/deb/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/opt/deb
g=$(ls /usr/lib/x86_64-linux-gnu/libgnutls.so.30* 2>/dev/null | head -1)
ln -sf "$g" /opt/deb/usr/lib/x86_64-linux-gnu/libgnutls.so.30
ln -sf "$g" /opt/deb/usr/lib/x86_64-linux-gnu/libgnutls.so
rm -f /opt/deb/usr/lib/x86_64-linux-gnu/libgnutls.a
printf "Name: gnutls\nDescription: host\nVersion: 3.7.9\nLibs: -lgnutls\nCflags:\n" \
  > /opt/deb/usr/lib/x86_64-linux-gnu/pkgconfig/gnutls.pc
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
uptime
# stamp MESSAGE: the message after the seconds since this file was sourced.
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

# gpu_build TARGET...: configures build-gpu (Release, no tests, the client
# without libcurl: the unpacked Debian libcurl does not link on the host,
# docs/operations.md) and builds TARGETs with -j16, logging to
# $OUT/cmake.txt and $OUT/build.txt. Returns 1 with the log's tail or its
# errors printed when either step fails.
gpu_build() {
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DMETALSERVE_BUILD_TESTS=OFF \
    -DMETALSERVE_HTTP_CLIENT=OFF -DMETALSERVE_PYTHON="$(command -v python3)" $GPU_CMAKE_ARGS \
    > "$OUT/cmake.txt" 2>&1 || { tail -30 "$OUT/cmake.txt"; echo "cmake failed"; return 1; }
  cmake --build build-gpu -j16 --target "$@" > "$OUT/build.txt" 2>&1 ||
    { grep -E "error|Error" "$OUT/build.txt" | head -30; echo "build failed"; return 1; }
}

# gpu_build_while_exporting EXPORT_ARG... -- TARGET...: runs
# `python3 models/export.py EXPORT_ARG...` (log in $OUT/export.txt, which
# ends "export FAILED" when it fails) beside `gpu_build TARGET...`, then
# waits for it. Returns 1, once the export has ended, when the build fails.
# The caller checks the models it needs.
gpu_build_while_exporting() {
  local export_args=()
  while [[ $# -gt 0 && $1 != -- ]]; do export_args+=("$1"); shift; done
  shift  # the --
  (python3 models/export.py "${export_args[@]}" > "$OUT/export.txt" 2>&1 ||
     echo "export FAILED" >> "$OUT/export.txt") &
  # Waited for by pid: a bare `wait` also waits for the callers' tee (a
  # process substitution), which never ends.
  local export_pid=$!
  gpu_build "$@" || { wait "$export_pid"; echo "stopping"; return 1; }
  stamp "built"
  wait "$export_pid"
  stamp "exported"; tail -3 "$OUT/export.txt"
}

# gpu_build_resnet50 TARGET...: unless SKIP_BUILD=1, builds TARGETs while
# exporting ResNet-50 (gpu_build_while_exporting); then checks that
# build-gpu/models/resnet50.pt and .json exist. Returns 1, having said why,
# when either fails.
gpu_build_resnet50() {
  if [[ ${SKIP_BUILD:-0} != 1 ]]; then
    gpu_build_while_exporting --out build-gpu/models --only resnet50 -- "$@" || return 1
  fi
  local f
  for f in build-gpu/models/resnet50.pt build-gpu/models/resnet50.json; do
    [[ -f $f ]] || { echo "no $f: stopping"; return 1; }
  done
}

# free_port [N]: N (default 1) distinct TCP ports free on 127.0.0.1 now, on
# one line (all bound at once, so no two are the same).
free_port() {
  python3 -c 'import socket, sys
s = [socket.socket() for _ in range(int(sys.argv[1]))]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))' "${1:-1}"
}
