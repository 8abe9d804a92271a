#!/bin/sh
# SPDX-License-Identifier: MIT
# bench_eventloop.sh - issue 8's bench: accuracy and CPU per throttled
# connection with 1, 100 and 1000 connections on one nginx event loop
# (bench/eventloop.py; needs nginx, SLUICE_BUILD picks the build).
exec python3 "$(dirname "$0")/eventloop.py" "$@"
