#!/usr/bin/env bash
# Make sure Debian's Chromium and its WebDriver are installed, for the dashboard's test in a
# headless browser (tests/integration/test_dashboard.py). Installs them when missing (CI
# machines start bare); does nothing when both are there.
# Usage: bash .ci/chromium.sh
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
echo "ci: installing chromium and chromium-driver" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends chromium chromium-driver >&2
/usr/bin/chromium --version >&2
