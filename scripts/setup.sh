#!/usr/bin/env bash
# Idempotent machine + project setup used by `make demo`, `make test` and CI.
# Installs what is missing (apt), links kernel headers for bcc, mounts tracefs,
# and creates .venv from /usr/bin/python3 with --system-site-packages (bcc's Python
# module is Debian's python3-bpfcc). A second run does nothing slow.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (apt-get, kernel headers and tracing need it), e.g. sudo make test"

APT_PACKAGES=(python3-bpfcc bpfcc-tools python3-venv python3-pip gcc make libc6-dev
              systemtap-sdt-dev binutils bpftrace
              mariadb-server postgresql-15 openjdk-17-jdk-headless
              prometheus python3-prometheus-client
              python3-capstone ruby3.1 php8.2-cli python3-rich tmux chromium golang-go
              systemd)
if [ -n "${PLANRUNNER_SETUP_EXTRA:-}" ]; then
  read -r -a extra <<<"$PLANRUNNER_SETUP_EXTRA"; APT_PACKAGES+=("${extra[@]}")
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

release=$(uname -r)
build="/lib/modules/$release/build"
need_headers=0
[ -e "$build/include/linux/kconfig.h" ] || [ -e "$build/Makefile" ] || need_headers=1
if [ "$need_headers" = 1 ] && ! ls -d /usr/src/linux-headers-*-amd64 >/dev/null 2>&1; then
  missing+=(linux-headers-amd64)
fi

if [ ${#missing[@]} -gt 0 ]; then
  say "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed: check the network or the apt sources"
  apt-get install -y -qq "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
fi

if [ "$need_headers" = 1 ]; then
  # No headers package matches this kernel: bcc only needs a consistent tree, so link
  # Debian's newest amd64 headers. `build` alone is not enough: bcc includes
  # ./include/linux/kconfig.h relative to `source`.
  hdr=$(ls -d /usr/src/linux-headers-*-amd64 | sort -V | tail -n1)
  common="${hdr%-amd64}-common"
  [ -d "$hdr" ] && [ -d "$common" ] || die "kernel headers not found under /usr/src; install linux-headers-amd64"
  mkdir -p "/lib/modules/$release"
  ln -sfn "$hdr" "$build"
  ln -sfn "$common" "/lib/modules/$release/source"
  say "linked $build -> $hdr and source -> $common (no headers package matches kernel $release)"
fi

if [ ! -e /sys/kernel/tracing/uprobe_events ]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null && say "mounted tracefs on /sys/kernel/tracing" \
    || say "warning: could not mount tracefs on /sys/kernel/tracing"
fi

VENV=.venv
stamp="$VENV/.planrunner-installed"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV (system site packages, for Debian's bcc)"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  say "installing planrunner and its test extras into $VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q -e '.[test]' || die "pip install failed: check the network or PyPI access"
  touch "$stamp"
fi
"$VENV/bin/python" -c 'import bcc' 2>/dev/null || die "bcc is not importable from $VENV: is python3-bpfcc installed?"
