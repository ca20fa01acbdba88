#!/usr/bin/env bash
# Build a full Debian kernel with the instrumented tcp_westwood.c (0001-tcp_westwood-instrument.patch)
# as a .deb that `testbed run --kernel <deb>` boots.
#
#   build-kernel.sh [--config debian|testbed]
#
# Source: Debian's linux-source-6.1 (fetched with apt-get download, never installed). Config: the
# Debian guest kernel's own config, with module signing and debug info off, and
#   testbed (default): only the modules a testbed guest loads (testbed-modules.lsmod, localmodconfig):
#                      the same kernel as Debian's for everything the experiments touch, ~10x less to build;
#   debian:            every module of Debian's config (hours on 2 cores).
# Output: $WORK/linux-image-<release>_*.deb (WORK defaults to ~/.cache/cc-testbed/kernel-build).
set -euo pipefail
# when started from `make kernel`, the parent make's flags would leak into the kernel's make
unset MAKEFLAGS MAKELEVEL MFLAGS
here=$(cd "$(dirname "$0")" && pwd)
config_kind=testbed
[ "${1:-}" = "--config" ] && config_kind=${2:?--config needs debian or testbed}
case $config_kind in debian|testbed) ;; *) echo "build-kernel.sh: --config must be debian or testbed" >&2; exit 2;; esac
work=${WORK:-${XDG_CACHE_HOME:-$HOME/.cache}/cc-testbed/kernel-build}
series=${SERIES:-6.1}
base_release=${BASE_RELEASE:-6.1.0-56-amd64}   # the Debian kernel whose config is used
mkdir -p "$work"
cd "$work"

missing=()
for tool in gcc make bc bison flex dpkg-buildpackage rsync cpio; do command -v "$tool" >/dev/null || missing+=("$tool"); done
for header in /usr/include/openssl/ssl.h /usr/include/libelf.h; do [ -e "$header" ] || missing+=("$header"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "build-kernel.sh: missing ${missing[*]}: apt-get install build-essential bc bison flex libssl-dev libelf-dev dpkg-dev rsync cpio" >&2
  exit 2
fi

if [ ! -d "linux-source-$series" ]; then
  echo "== fetching linux-source-$series (apt-get download; nothing is installed)"
  apt-get download "linux-source-$series" >/dev/null
  dpkg-deb --fsys-tarfile linux-source-"$series"_*.deb | tar -x --strip-components=3 -f - "./usr/src/linux-source-$series.tar.xz"
  tar -xf "linux-source-$series.tar.xz"
  rm -f "linux-source-$series.tar.xz" linux-source-"$series"_*.deb
  (cd "linux-source-$series" && patch -p1 < "$here/0001-tcp_westwood-instrument.patch")
fi
cd "linux-source-$series"

config=${BASE_CONFIG:-${XDG_CACHE_HOME:-$HOME/.cache}/cc-testbed/kernels/linux-image-$base_release/boot/config-$base_release}
[ -f "$config" ] || { echo "build-kernel.sh: no config at $config: run 'testbed kernels --fetch ${base_release%-amd64}' first or set BASE_CONFIG" >&2; exit 2; }
cp "$config" .config
# Debian's signing keys and BTF/debug info are not available or not needed here
scripts/config --set-str SYSTEM_TRUSTED_KEYS "" --set-str SYSTEM_REVOCATION_KEYS "" \
  --disable MODULE_SIG_ALL --disable DEBUG_INFO --disable DEBUG_INFO_DWARF5 --disable DEBUG_INFO_DWARF4 \
  --disable DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT --disable DEBUG_INFO_BTF \
  --enable DEBUG_INFO_NONE --set-str LOCALVERSION "-westwoodtb"
if [ "$config_kind" = testbed ]; then
  make LSMOD="$here/testbed-modules.lsmod" localmodconfig </dev/null >/dev/null
fi
make olddefconfig >/dev/null
echo "== building linux $series ($config_kind config) with $(nproc) jobs"
start=$(date +%s)
make -j"$(nproc)" bindeb-pkg KDEB_PKGVERSION="$(make -s --no-print-directory kernelversion)-westwoodtb1" >build.log 2>&1 || {
  echo "build-kernel.sh: build failed; log: $PWD/build.log" >&2; tail -20 build.log >&2; exit 1; }
echo "== built in $(( $(date +%s) - start )) s:"
ls -1 "$work"/linux-image-*westwoodtb*.deb | grep -v dbg
