#!/usr/bin/env bash
# Installs the real servers the tests start themselves (each test starts and
# stops its own instance on a free 127.0.0.1 port), from Debian's packages,
# when they are missing:
#   nginx         -- the third-party rate limiter without hints
#                    (adapter-blocking/tests/nginx.rs, cli/tests/nohints.rs);
#   redis-server  -- the fleet pace's shared store (lab/src/redis.rs);
#   tmux          -- a real terminal for `polite batch`'s progress line
#                    (cli/tests/terminal.rs).
# A failed install is reported here; the tests then fail in CI (CI=true), and
# skip, saying why, on a developer machine.
set -u

# need BINARY ALSO_AT PACKAGE: install PACKAGE unless BINARY is on PATH or
# at ALSO_AT.
need() {
    local binary=$1 also_at=$2 package=$3
    if command -v "$binary" >/dev/null 2>&1 || [ -x "$also_at" ]; then
        echo "services: $binary present"
        return
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "services: no apt-get here; the tests that need $binary will fail in CI"
        return
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; else
            echo "services: not root and no sudo; the tests that need $binary will fail in CI"
            return
        fi
    fi
    echo "services: installing $package from Debian packages"
    if DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq >/dev/null 2>&1 &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$package" >/dev/null 2>&1; then
        echo "services: installed $package"
    else
        echo "services: could not install $package; the tests that need $binary will fail in CI"
    fi
}

need nginx /usr/sbin/nginx nginx
need redis-server /usr/bin/redis-server redis-server
need tmux /usr/bin/tmux tmux
exit 0
