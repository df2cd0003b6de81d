#!/usr/bin/env bash
# Installs nginx from Debian's packages if it is missing, for the tests
# against nginx limit_req (adapter-blocking/tests/nginx.rs,
# cli/tests/nohints.rs; they start and stop nginx themselves, on 127.0.0.1
# only). A failed install is reported here; the tests then fail in CI
# (CI=true), and skip, saying why, on a developer machine.
set -u
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
    echo "nginx.sh: nginx present"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "nginx.sh: no apt-get here; the nginx tests will fail in CI"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
        echo "nginx.sh: not root and no sudo; the nginx tests will fail in CI"
        exit 0
    fi
fi
echo "nginx.sh: installing nginx from Debian packages"
export DEBIAN_FRONTEND=noninteractive
if $SUDO apt-get update -qq >/dev/null 2>&1 &&
    $SUDO apt-get install -y -qq --no-install-recommends nginx >/dev/null 2>&1; then
    echo "nginx.sh: installed $(/usr/sbin/nginx -v 2>&1)"
else
    echo "nginx.sh: could not install nginx; the nginx tests will fail in CI"
fi
exit 0
