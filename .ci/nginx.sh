#!/usr/bin/env bash
# Installs nginx from Debian's packages if it is missing, for
# adapter-blocking/tests/nginx.rs (the test starts and stops nginx itself, on
# 127.0.0.1 only; without nginx it prints why and skips). Never fails CI: a
# failed install only means that one test skips.
set -u
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
    echo "nginx.sh: nginx present"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "nginx.sh: no apt-get here; tests/nginx.rs will skip"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
        echo "nginx.sh: not root and no sudo; tests/nginx.rs will skip"
        exit 0
    fi
fi
echo "nginx.sh: installing nginx from Debian packages"
export DEBIAN_FRONTEND=noninteractive
if $SUDO apt-get update -qq >/dev/null 2>&1 &&
    $SUDO apt-get install -y -qq --no-install-recommends nginx >/dev/null 2>&1; then
    echo "nginx.sh: installed $(/usr/sbin/nginx -v 2>&1)"
else
    echo "nginx.sh: could not install nginx; tests/nginx.rs will skip"
fi
exit 0
