#!/usr/bin/env bash
# Installs redis-server from Debian's packages if it is missing, for the
# tests that need a real Redis (the fleet pace, SPEC §4.3; the lab's
# starter, lab/src/redis.rs, starts and stops its own instance on a free
# 127.0.0.1 port). A failed install is reported here; the tests then fail
# in CI (CI=true), and skip, saying why, on a developer machine.
set -u
if command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ]; then
    echo "redis.sh: redis-server present"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "redis.sh: no apt-get here; the Redis tests will fail in CI"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
        echo "redis.sh: not root and no sudo; the Redis tests will fail in CI"
        exit 0
    fi
fi
echo "redis.sh: installing redis-server from Debian packages"
export DEBIAN_FRONTEND=noninteractive
if $SUDO apt-get update -qq >/dev/null 2>&1 &&
    $SUDO apt-get install -y -qq --no-install-recommends redis-server >/dev/null 2>&1; then
    echo "redis.sh: installed $(redis-server --version 2>&1)"
else
    echo "redis.sh: could not install redis-server; the Redis tests will fail in CI"
fi
exit 0
