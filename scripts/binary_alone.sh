#!/usr/bin/env bash
# The release binary carries its page: copied alone into an empty folder, with no
# LEPTOS_SITE_ROOT and no hash.txt beside it, it serves the page, the stylesheet, the wasm's glue
# and the wasm (brotli when asked, as built) and the split import section. Run by scripts/test.sh
# after `cargo leptos build --release --precompress --split`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

binary="$CARGO_TARGET_DIR/release/exportd"
[[ -x "$binary" ]] || { echo "binary_alone: no release binary at $binary" >&2; exit 1; }
alone=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cleanup() {
  [[ -n "${pid:-}" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$alone"
}
trap cleanup EXIT
cp "$binary" "$alone/exportd"
cd "$alone"
env -u LEPTOS_SITE_ROOT -u EXPORTD_DATABASE_URL -u EXPORTD_STORE_URL ./exportd serve --bind "127.0.0.1:$port" >serve.log 2>&1 &
pid=$!
base="http://127.0.0.1:$port"
for _ in $(seq 1 100); do
  curl -fsS "$base/healthz" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat serve.log >&2; echo "binary_alone: exportd exited" >&2; exit 1; }
  sleep 0.1
done

fail() { echo "binary_alone: $*" >&2; cat serve.log >&2; exit 1; }
page=$(curl -fsS "$base/") || fail "the page did not answer"
grep -q 'the page.s files are those inside the binary' serve.log || fail "the binary did not serve its own files"
css=$(grep -o '/pkg/exportd\.[A-Za-z0-9_-]*\.css' <<<"$page" | head -n1)
js=$(grep -o '/pkg/exportd\.[A-Za-z0-9_-]*\.js' <<<"$page" | head -n1)
wasm=$(grep -o '/pkg/exportd\.[A-Za-z0-9_-]*\.wasm' <<<"$page" | head -n1)
[[ -n "$css" && -n "$js" && -n "$wasm" ]] || fail "the page names no hashed stylesheet, glue or wasm"

# Each file answers 200 with its media type and a year's caching; the wasm as brotli when asked.
check() { # path, media type, accept-encoding, expected content-encoding
  local headers
  headers=$(curl -fsS -o "$alone/body" -D - -H "Accept-Encoding: $3" "$base$1") || fail "$1 did not answer"
  grep -qiE "^content-type: $2" <<<"$headers" || fail "$1 is not $2: $headers"
  grep -qi '^cache-control: public, max-age=31536000, immutable' <<<"$headers" || fail "$1 is not kept a year"
  if [[ -n "$4" ]]; then grep -qi "^content-encoding: $4" <<<"$headers" || fail "$1 is not $4"; fi
  [[ -s "$alone/body" ]] || fail "$1 is empty"
}
check "$css" text/css identity ""
check "$js" "(text|application)/javascript" identity ""
check "$wasm" application/wasm identity ""
[[ $(head -c4 "$alone/body" | od -An -tx1 | tr -d ' \n') == 0061736d ]] || fail "$wasm is not a wasm module"
check "$wasm" application/wasm br br
# The import section is loaded from a file of its own, named in the glue.
split=$(curl -fsS "$base$js" | grep -o '__wasm_split\.[A-Za-z0-9_-]*\.js' | head -n1)
[[ -n "$split" ]] || fail "the glue names no split loader"
check "/pkg/$split" "(text|application)/javascript" identity ""
status=$(curl -s -o /dev/null -w '%{http_code}' "$base/pkg/nothing.wasm")
[[ "$status" == 404 ]] || fail "an unknown file answered $status"
echo "binary_alone: the release binary alone serves the page, $css, $js, $wasm and $split"
