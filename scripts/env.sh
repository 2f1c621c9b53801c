# Sourced by the other scripts: where builds go and which tools come first on PATH.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# A target directory outside the clone, shared between clones on one machine; cargo creates it
# when it is missing, so nothing depends on it being there.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/exportd-target}
export PATH="$HOME/.cargo/bin:$root/end2end/node_modules/.bin:$PATH"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
