# Sourced by the bench/*_h200.sh scripts on the GPU host, from the
# repository root (shared/gpu-host/README.md's recipe): unpacks the Debian
# packages (.devtools/gpu-env.sh), then lets pkg-config and the linker use
# the host's own GnuTLS in place of the unpacked one (the Debian libgnutls
# does not link there), and prints the GPU.
source .devtools/gpu-env.sh
export PKG_CONFIG_PATH=/opt/deb/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/opt/deb
g=$(ls /usr/lib/x86_64-linux-gnu/libgnutls.so.30* 2>/dev/null | head -1)
ln -sf "$g" /opt/deb/usr/lib/x86_64-linux-gnu/libgnutls.so.30
ln -sf "$g" /opt/deb/usr/lib/x86_64-linux-gnu/libgnutls.so
rm -f /opt/deb/usr/lib/x86_64-linux-gnu/libgnutls.a
printf "Name: gnutls\nDescription: host\nVersion: 3.7.9\nLibs: -lgnutls\nCflags:\n" \
  > /opt/deb/usr/lib/x86_64-linux-gnu/pkgconfig/gnutls.pc
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
