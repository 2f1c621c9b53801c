#!/usr/bin/env bash
# Installs what exportd needs to build (and, with --test, to run its tests: Debian's Chromium,
# LibreOffice Calc and PostgreSQL client, and PyPI's moto S3 server and openpyxl), skipping
# whatever is already there. Nothing is
# downloaded from outside the package registries.
#
# It assumes, and checks first: a Debian or Ubuntu machine; rustup's Rust toolchain (cargo,
# rustup) on PATH; Node.js with npm; root (or passwordless sudo) for apt-get. What it installs
# from Debian when missing: a C toolchain (build-essential), curl, python3-venv and, with
# --test, chromium, postgresql-client, strace, nginx, openssl and libreoffice-calc-nogui.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$root"

want_tests=false
[[ "${1:-}" == "--test" || "${1:-}" == "--browser" ]] && want_tests=true

# Everything that cannot be installed from here is checked at once, so one run names it all.
missing=()
command -v apt-get >/dev/null || missing+=("apt-get (a Debian or Ubuntu machine)")
command -v cargo >/dev/null || missing+=("cargo (Rust from rustup: https://rustup.rs)")
command -v rustup >/dev/null || missing+=("rustup (the wasm32 target is added with it)")
command -v npm >/dev/null || missing+=("npm (Node.js 20 or newer with npm)")
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo"; else missing+=("root, or passwordless sudo, for apt-get"); fi
fi
if ((${#missing[@]})); then
  echo "setup.sh: missing, and not installable from here:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 1
fi

apt_install() {
  if [[ ! -f /var/lib/apt/lists/.exportd-updated ]]; then
    $sudo apt-get update -q && $sudo touch /var/lib/apt/lists/.exportd-updated
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "$@"
}

# The Debian packages every build needs: a C toolchain for the -sys crates, curl, and venv for
# the Python tools of the tests and benchmarks.
command -v cc >/dev/null && command -v make >/dev/null || apt_install build-essential
command -v curl >/dev/null || apt_install curl
python3 -c "import ensurepip, venv" 2>/dev/null || apt_install python3-venv

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi

leptos_version=0.3.10
if [[ "$(cargo leptos --version 2>/dev/null || true)" != *"$leptos_version"* ]]; then
  cargo install cargo-leptos --version "$leptos_version" --locked
fi

# The CLI must equal the wasm-bindgen crate in Cargo.lock to the patch version.
bindgen_version=$(awk '/^name = "wasm-bindgen"$/ {getline; gsub(/version = |"/, ""); print; exit}' Cargo.lock)
if [[ "$(wasm-bindgen --version 2>/dev/null || true)" != *"$bindgen_version"* ]]; then
  cargo install wasm-bindgen-cli --version "$bindgen_version"
fi

# wasm-opt for release builds comes from npm's binaryen (Debian's is too old).
if [[ ! -x end2end/node_modules/.bin/wasm-opt || end2end/package-lock.json -nt end2end/node_modules/.package-lock.json ]]; then
  (cd end2end && npm ci --no-audit --no-fund)
fi

if $want_tests; then
  [[ -x /usr/bin/chromium ]] || apt_install chromium
  command -v psql >/dev/null || apt_install postgresql-client
  # A test reads a worker's fsync calls with strace.
  command -v strace >/dev/null || apt_install strace
  # The proxy and the certificate of the reverse-proxy test.
  command -v nginx >/dev/null || apt_install nginx
  command -v openssl >/dev/null || apt_install openssl
  # schemathesis, the OpenAPI fuzzer of the schema test, in a virtual environment of its own.
  schemathesis_version=4.32.5
  venv="$HOME/.cache/exportd-schemathesis"
  if [[ "$("$venv/bin/st" --version 2>/dev/null || true)" != *"$schemathesis_version"* ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$schemathesis_version"
  fi
  # The two spreadsheet readers of the workbook tests: LibreOffice Calc (headless) from Debian,
  # and openpyxl from PyPI in a virtual environment of its own.
  command -v soffice >/dev/null || apt_install libreoffice-calc-nogui
  openpyxl_version=3.1.5
  venv="$HOME/.cache/exportd-openpyxl"
  if ! "$venv/bin/python" -c "import openpyxl, sys; sys.exit(0 if openpyxl.__version__ == '$openpyxl_version' else 1)" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "openpyxl==$openpyxl_version"
  fi
  # The SMTP server the notification test sends its emails to (aiosmtpd, from PyPI).
  aiosmtpd_version=1.4.6
  venv="$HOME/.cache/exportd-aiosmtpd"
  if ! "$venv/bin/python" -c "import aiosmtpd, sys; sys.exit(0 if aiosmtpd.__version__ == '$aiosmtpd_version' else 1)" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "aiosmtpd==$aiosmtpd_version"
  fi
  # The S3-protocol server the storage tests run against.
  moto_version=5.2.1
  if ! python3 -c "import moto.server, sys; sys.exit(0 if moto.__version__ == '$moto_version' else 1)" 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check "moto[server]==$moto_version"
    command -v pyenv >/dev/null && pyenv rehash || true
  fi
fi
