# SPDX-License-Identifier: MIT
"""Regressions found by a review of the event-loop waits (issue 19, part 6),
each failing on the code before its fix:
  - 40 non-blocking connects waiting for one conns slot: the close that
    frees it handed it over without reading past the 32 it sorts (the 32nd
    waiter read an unset index and close() crashed);
  - a per=peer accept's held connection that came due before the program
    waited: poll(-1), select and epoll_wait must return at once (they waited
    for their timeout, poll(-1) for ever);
  - a held connection whose fd number the program closes (closerange) is
    dropped: accept must not hand out whatever reuses the number;
  - a fork child's close must not start the parent's waiting connect (two
    connections under conns=1);
  - a second connect on a connected AF_UNIX stream under a full conns limit
    is the kernel's to answer (EISCONN), not a new connection to wait for.
Loopback only; every wait is bounded."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shim_lib import check, finish, run_child  # noqa: E402

MANY = r'''
import json, select, socket, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(512); addr = l.getsockname()
holder = socket.create_connection(addr)
waiting = []
for _ in range(40):
    s = socket.socket(); s.setblocking(False)
    try: s.connect(addr)
    except BlockingIOError: pass
    waiting.append(s)
holder.close()  # hands the slot to the longest waiter: must not crash
p = select.poll()
for s in waiting: p.register(s, select.POLLOUT)
ready = p.poll(2000)
print(json.dumps({"closed": True, "ready": len(ready),
                  "first": waiting[0].fileno() in [fd for fd, _ in ready]}))
'''

HELD = r'''
import json, select, socket, sys, time
mode = sys.argv[1]
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(64); srv.setblocking(False)
addr = srv.getsockname()
cs = []
for _ in range(2):
    c = socket.socket(); c.bind(("127.0.0.2", 0)); c.connect(addr); cs.append(c)
time.sleep(0.05)
srv.accept()
try:
    srv.accept(); held = False
except BlockingIOError:
    held = True
time.sleep(1.0)  # the held connection is due meanwhile
t = time.monotonic()
if mode == "poll":
    p = select.poll(); p.register(srv, select.POLLIN); ev = p.poll(5000)
elif mode == "select":
    ev = select.select([srv], [], [], 5.0)[0]
else:
    ep = select.epoll(); ep.register(srv, select.EPOLLIN); ev = ep.poll(5.0)
took = time.monotonic() - t
n, peer = srv.accept() if ev else (None, None)
print(json.dumps({"held": held, "ready": bool(ev), "took": took,
                  "peer": peer[0] if peer else None}))
'''

CLOSED = r'''
import json, os, socket, stat, time
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(64); srv.setblocking(False)
addr = srv.getsockname()
cs = []
for _ in range(2):
    c = socket.socket(); c.bind(("127.0.0.2", 0)); c.connect(addr); cs.append(c)
time.sleep(0.05)
a, _ = srv.accept()
try:
    srv.accept(); held = False
except BlockingIOError:
    held = True
hi = max(s.fileno() for s in [srv, a] + cs)
os.closerange(hi + 1, 256)  # a daemon's fd sweep closes the held number too
f = os.open("/etc/hostname", os.O_RDONLY)
time.sleep(0.7)
try:
    n, _ = srv.accept()
    kind = "socket" if stat.S_ISSOCK(os.fstat(n.fileno()).st_mode) else "not a socket"
except BlockingIOError:
    kind = "EAGAIN"
print(json.dumps({"held": held, "accept": kind}))
'''

# The same in C, with the stack under the handover filled first with a
# value that is no valid index (the crash needed garbage there).
MANY_C = r'''
#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
__attribute__((noinline)) static void fill(unsigned char v)
{
	volatile unsigned char b[16384];
	for (unsigned i = 0; i < sizeof b; i++)
		b[i] = v;
}
int main(int argc, char **argv)
{
	int n = atoi(argv[1]), s[64];
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
	socklen_t len = sizeof sa;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	bind(l, (void *)&sa, sizeof sa);
	getsockname(l, (void *)&sa, &len);
	listen(l, 512);
	int a = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(a, (void *)&sa, sizeof sa) != 0)
		return 3;
	for (int i = 0; i < n; i++) {
		s[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		connect(s[i], (void *)&sa, sizeof sa);
	}
	fill(0);
	close(a);
	struct pollfd p[64];
	for (int i = 0; i < n; i++)
		p[i] = (struct pollfd){.fd = s[i], .events = POLLOUT};
	printf("{\"ready\": %d}\n", poll(p, (nfds_t)n, 2000));
	return 0;
}
'''

FORK = r'''
import json, os, socket, struct, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(8); addr = l.getsockname()
a = socket.create_connection(addr)          # holds the one slot
b = socket.socket(); b.setblocking(False)
try: b.connect(addr)
except BlockingIOError: pass                # waits for a slot
pid = os.fork()
if pid == 0:
    a.close()                               # the child's copy of the holder
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(0.3)
def state(s):
    ti = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    return ti[0]
before = state(b)                           # 7 (TCP_CLOSE): not started
a.close()
time.sleep(0.3)
print(json.dumps({"before": before, "after": state(b)}))
'''

UNIX = r'''
import json, os, select, socket, sys, tempfile
p = os.path.join(tempfile.mkdtemp(), "u.sock")
srv = socket.socket(socket.AF_UNIX); srv.bind(p); srv.listen(4)
a = socket.socket(socket.AF_UNIX); a.setblocking(False)
first = a.connect_ex(p)
second = a.connect_ex(p)             # the kernel says EISCONN (106)
pl = select.poll(); pl.register(a, select.POLLOUT)
ready = bool(pl.poll(1000))
print(json.dumps({"first": first, "second": second, "ready": ready,
                  "so_error": a.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)}))
'''


def main():
    rc, r, _ = run_child(MANY, {"SLUICE_CONNS": "1"}, timeout=30)
    check(rc == 0 and r is not None and r["closed"],
          "40 connects waiting for one slot: the freeing close returns (rc %d)" % rc)
    if r:
        check(r["ready"] >= 1 and r["first"],
              "the longest waiter got the slot (%d ready)" % r["ready"])
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "many.c"), os.path.join(tmp, "many")
        with open(src, "w") as f:
            f.write(MANY_C)
        subprocess.run(["cc", "-O1", "-o", exe, src], check=True)
        for n in (32, 40):
            rc, r, _ = run_child(None, {"SLUICE_CONNS": "1"}, timeout=30, argv=[exe, str(n)])
            check(rc == 0 and r is not None and r["ready"] >= 1,
                  "C: %d connects waiting, the freeing close returns (rc %d, %r)" % (n, rc, r))
    for mode in ("poll", "select", "epoll"):
        rc, r, _ = run_child(HELD, {"SLUICE_ACCEPT": "2/s,burst=1,per=peer"}, timeout=30,
                             argv=[sys.executable, "-c", HELD, mode])
        print("measured: %s, held connection due before the wait: %r" % (mode, r))
        check(r is not None and r["held"] and r["ready"] and r["took"] < 0.5 and
              r["peer"] == "127.0.0.2",
              "%s reports a held connection that is due at once, and accept returns it" % mode)
    rc, r, _ = run_child(CLOSED, {"SLUICE_ACCEPT": "2/s,burst=1,per=peer"}, timeout=30)
    check(r is not None and r["held"] and r["accept"] != "not a socket",
          "a held number the program closed is never handed out (%r)" % r)
    rc, r, _ = run_child(UNIX, {"SLUICE_CONNS": "1,family=unix"}, timeout=30)
    check(r is not None and r["first"] == 0 and r["second"] == 106 and r["ready"] and
          r["so_error"] == 0,
          "a second connect on a connected unix stream gets the kernel's EISCONN (%r)" % r)
    rc, r, _ = run_child(FORK, {"SLUICE_CONNS": "1"}, timeout=30)
    check(r is not None and r["before"] == 7 and r["after"] == 1,
          "a fork child's close does not start the parent's waiting connect (%r)" % r)
    finish()


if __name__ == "__main__":
    main()
