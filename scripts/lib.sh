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
  if [[ ! -f /tmp/.pinfleet-apt-updated ]]; then
    apt-get update -q >/dev/null && touch /tmp/.pinfleet-apt-updated
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkg}" >/dev/null
}

# A free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Starts moto on 127.0.0.1 with realistic validation; sets MOTO_URL and MOTO_PID.
start_moto() {
  local port
  port=$(free_port)
  MOTO_ENABLE_AMI_VALIDATION=true \
    MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION=true \
    MOTO_ENABLE_KEYPAIR_VALIDATION=true \
    "${PINFLEET_VENV}/bin/moto_server" -H 127.0.0.1 -p "${port}" >"${MOTO_LOG:-/dev/null}" 2>&1 &
  MOTO_PID=$!
  MOTO_URL="http://127.0.0.1:${port}"
  for _ in $(seq 1 100); do
    if curl -sf "${MOTO_URL}/moto-api/data.json" >/dev/null 2>&1; then
      export MOTO_URL MOTO_PID
      return
    fi
    sleep 0.1
  done
  echo "moto did not start on ${MOTO_URL}" >&2
  return 1
}

stop_moto() {
  if [[ -n "${MOTO_PID:-}" ]]; then
    kill "${MOTO_PID}" 2>/dev/null || true
    wait "${MOTO_PID}" 2>/dev/null || true
  fi
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
stop_pid() {
  local pid=$1
  kill "${pid}" 2>/dev/null || true
  wait "${pid}" 2>/dev/null || true
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
  local step
  for step in "${CLEANUP_EXTRA[@]}"; do eval "${step}" || true; done
  exit "${status}"
}
install_cleanup() {
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}
