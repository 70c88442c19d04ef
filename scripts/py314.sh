#!/usr/bin/env bash
# CPython 3.14 for the test matrix (issue 32): Debian sid's `python3.14` in a chroot made with
# debootstrap, with this checkout and the host's Rust toolchain bind-mounted at the same paths,
# so the same scripts run inside with the same paths.
#
#   scripts/py314.sh setup         # make the chroot once (~1 min; later calls check and return)
#   scripts/py314.sh run 'CMD ...' # run the command line inside the chroot, in the repository root
#
# Needs root (chroot, mount namespaces) and debootstrap (installed with apt-get when missing).
# The mounts live in a private mount namespace (`unshare -m`) and vanish with the command.
# Environment: DLBIND_CHROOT (default /var/tmp/dlbind-py3.14), DLBIND_DEBIAN_MIRROR
# (default http://deb.debian.org/debian).
# Exit: CMD's status; 3 when the chroot cannot be made (the interpreter is then missing, and
# the caller says so: the matrix is never narrowed silently).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${DLBIND_CHROOT:-/var/tmp/dlbind-py3.14}"
MIRROR="${DLBIND_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PKGS=python3.14,python3.14-dev,python3.14-venv,gcc,libc6-dev,ca-certificates,valgrind,git
CARGO_DIR="${CARGO_HOME:-$HOME/.cargo}"
RUSTUP_DIR="${RUSTUP_HOME:-$HOME/.rustup}"

setup() {
  if [[ -x "$DIR/usr/bin/python3.14" && -f "$DIR/.dlbind-ready" ]]; then
    return 0
  fi
  if ! command -v debootstrap >/dev/null 2>&1; then
    echo "py314: installing debootstrap (apt-get)"
    { apt-get install -y -q debootstrap || { apt-get update -q && apt-get install -y -q debootstrap; }; } >/dev/null \
      || { echo "py314: cannot install debootstrap" >&2; return 3; }
  fi
  rm -rf "$DIR"
  mkdir -p "$DIR"
  echo "py314: debootstrap --variant=minbase sid $DIR ($MIRROR)"
  if ! debootstrap --variant=minbase --include="$PKGS" sid "$DIR" "$MIRROR" >"$DIR.log" 2>&1; then
    tail -20 "$DIR.log" >&2
    echo "py314: debootstrap failed (log: $DIR.log)" >&2
    return 3
  fi
  touch "$DIR/.dlbind-ready"
}

run() {
  setup
  # The host's CA bundle and resolver (the registries may sit behind a proxy with its own CA).
  mkdir -p "$DIR/etc/ssl/certs"
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] && cp /etc/ssl/certs/ca-certificates.crt "$DIR/etc/ssl/certs/ca-certificates.crt"
  [[ -f /etc/resolv.conf ]] && cp -L /etc/resolv.conf "$DIR/etc/resolv.conf" 2>/dev/null || true
  mkdir -p "$DIR$ROOT" "$DIR$CARGO_DIR" "$DIR$RUSTUP_DIR" "$DIR/proc" "$DIR/dev" "$DIR/tmp"
  local inner="$*"   # one shell command line, run by bash -c inside
  # shellcheck disable=SC2016
  unshare -m --propagation private bash -euc '
    DIR=$1; ROOT=$2; CARGO_DIR=$3; RUSTUP_DIR=$4; shift 4
    mount --bind "$ROOT" "$DIR$ROOT"
    mount --bind "$CARGO_DIR" "$DIR$CARGO_DIR"
    mount --bind "$RUSTUP_DIR" "$DIR$RUSTUP_DIR"
    mount --rbind /dev "$DIR/dev"
    mount -t proc proc "$DIR/proc"
    exec chroot "$DIR" /usr/bin/env -i \
      HOME="$HOME" PATH="$CARGO_DIR/bin:/usr/local/bin:/usr/bin:/bin" \
      CARGO_HOME="$CARGO_DIR" RUSTUP_HOME="$RUSTUP_DIR" RUSTUP_AUTO_INSTALL=0 \
      PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
      PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 LANG=C.UTF-8 TMPDIR=/tmp \
      ${CARGO_BUILD_JOBS:+CARGO_BUILD_JOBS=$CARGO_BUILD_JOBS} \
      ${DLBIND_SKIP_MEMCHECK:+DLBIND_SKIP_MEMCHECK=$DLBIND_SKIP_MEMCHECK} \
      ${DLBIND_MATRIX_SKIP_DOWNSTREAM:+DLBIND_MATRIX_SKIP_DOWNSTREAM=$DLBIND_MATRIX_SKIP_DOWNSTREAM} \
      ${DLBIND_MATRIX_RUST_ON:+"DLBIND_MATRIX_RUST_ON=$DLBIND_MATRIX_RUST_ON"} \
      ${DLBIND_FREELIST:+DLBIND_FREELIST=$DLBIND_FREELIST} \
      bash -c "cd $ROOT && $*"
  ' _ "$DIR" "$ROOT" "$CARGO_DIR" "$RUSTUP_DIR" "$inner"
}

case "${1:-}" in
  setup) setup && echo "$DIR/usr/bin/python3.14" ;;
  run) shift; run "$@" ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
