#!/bin/sh
# SPDX-License-Identifier: MIT
# bench_redis.sh - issue 16's benches: Redis round trips per second against
# the lease size, a Redis Cluster row and a host pool row, and the hot path
# with a live lease (bench/redis_lease.py; private redis-servers it starts
# and stops itself; SL_BUILD picks the build).
exec python3 "$(dirname "$0")/redis_lease.py" "${SL_BUILD:-build}"
