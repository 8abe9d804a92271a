#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A python asyncio server and client for test_eventloop_asyncio.py.

  eventloop_asyncio.py server SECONDS
      listens on 127.0.0.1 (port printed on the first line), serves for
      SECONDS: each connection sends lines "N\\n" and gets N bytes back for
      each, until it closes.
  eventloop_asyncio.py client PORT BIG SMALL PINGS
      on one event loop, at once: three connections that each ask for BIG
      bytes, and one that asks for SMALL bytes PINGS times in a row; prints
      one JSON line with each download's time and the ping round trips.
"""
import asyncio
import json
import sys
import time


def payload(n):
    return bytes((i * 7 + 3) & 0xFF for i in range(256)) * (n // 256) + b"p" * (n % 256)


async def serve(reader, writer):
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            writer.write(payload(int(line)))
            await writer.drain()
    except ConnectionError:
        pass
    writer.close()


async def server(seconds):
    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(seconds)
    srv.close()


async def fetch(port, n, times):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    out = []
    for _ in range(times):
        t = time.monotonic()
        writer.write(b"%d\n" % n)
        data = await reader.readexactly(n)
        out.append(time.monotonic() - t)
        if data != payload(n):
            raise RuntimeError("corrupt data")
    writer.close()
    return out


async def client(port, big, small, pings):
    t0 = time.monotonic()
    res = await asyncio.gather(*([fetch(port, big, 1) for _ in range(3)] +
                                 [fetch(port, small, pings)]))
    print(json.dumps({"big": [r[0] for r in res[:3]], "pings": res[3],
                      "total": time.monotonic() - t0}), flush=True)


def main():
    if sys.argv[1] == "server":
        asyncio.run(server(float(sys.argv[2])))
    else:
        asyncio.run(client(*(int(a) for a in sys.argv[2:6])))


if __name__ == "__main__":
    main()
