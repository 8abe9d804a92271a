#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Files and shared memory that other local users cannot subvert, and that
clean up after themselves (issue 18). Runs as root and creates two
unprivileged users of its own (useradd), removed on every exit path:
"victim" runs sluice, "mallory" plays the attacker.

  1. SLUICE_STATS / SLUICE_LOG_FILE: a planted symbolic link and a file of
     another user are refused (exit 2, or a warning under
     SLUICE_CONFIG_ERROR=warn) and never written; new files are 0600.
  2. Segments: mallory squatting the predictable names (the old flat
     /dev/shm names, the /dev/shm/sluice-UID directory, a link in its place)
     never blocks root, blocks the victim only without a private runtime
     directory (with a message naming the path, the owner and the remedy),
     and cannot read the victim's directory.
  3. The leak figure: 1000 children that _exit after a matched connect and
     100 that are SIGKILLed leave at most 8 records once the parent and one
     later sluice process have run.
  4. sluice set shared:NAME, then a rule asking another rate: the note;
     sluice stat shared:NAME (text and --json); sluice rm shared:NAME
     refusing while a holder lives, --force.
  5. The launcher under ulimit -v 20000; the fd tables' fallback under a
     RLIMIT_AS too small for a 1048576-entry table.
  6. An example under a closed pipe leaves no server and no temp directory.
"""
import atexit
import json
import os
import pwd
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shim_lib import BUILD, ROOT, check, finish, seg_dir  # noqa: E402

SLUICE = os.path.abspath(os.path.join(BUILD, "sluice"))
LIB = os.path.abspath(os.path.join(BUILD, "libsluice.so"))
TAG = "%d" % os.getpid()
PY = "/usr/bin/python3"  # one the test users can run (PY may be root's own)
USERS = {"victim": "slv%s" % TAG[-8:], "mallory": "slm%s" % TAG[-8:]}
UIDS = {}
WORK = None
STARTED = []  # pids of processes this test started as the test users


def cleanup():
    for pid in STARTED:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for role, name in USERS.items():
        uid = UIDS.get(role)
        if uid is not None:
            subprocess.run(["rm", "-rf", "/dev/shm/sluice-%d" % uid], check=False)
            for f in os.listdir("/dev/shm"):
                if f.startswith("sluice-%d-" % uid):
                    os.unlink("/dev/shm/" + f)
        subprocess.run(["userdel", name], capture_output=True, check=False)
    if WORK is not None:
        subprocess.run(["rm", "-rf", WORK], check=False)


def on_signal(signum, frame):
    sys.exit(128 + signum)


def setup():
    global WORK
    atexit.register(cleanup)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    for role, name in USERS.items():
        r = subprocess.run(["useradd", "-M", "-N", "-d", "/nonexistent", "-s",
                            "/usr/sbin/nologin", name], capture_output=True, text=True)
        if r.returncode != 0:
            print("useradd %s: %s" % (name, r.stderr.strip()))
            sys.exit(1)
        UIDS[role] = pwd.getpwnam(name).pw_uid
    WORK = tempfile.mkdtemp(prefix="sl-sec-%s-" % TAG)
    os.chmod(WORK, 0o1777)  # like /tmp: world-writable and sticky


def env_for(role=None, extra=None, xdg=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLUICE_") and k != "XDG_RUNTIME_DIR"}
    env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
    if role is not None:
        env["HOME"] = "/nonexistent"
    if xdg is not None:
        env["XDG_RUNTIME_DIR"] = xdg
    env.update(extra or {})
    return env


def as_user(role):
    if role is None:
        return {}
    uid = UIDS[role]
    return {"user": uid, "group": 65534, "extra_groups": []}


def run(argv, role=None, extra=None, xdg=None, timeout=60, preload=False, **kw):
    env = env_for(role, extra, xdg)
    if preload:
        env["LD_PRELOAD"] = LIB
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                          cwd="/", **as_user(role), **kw)


def popen(argv, role=None, extra=None, xdg=None, preload=False):
    env = env_for(role, extra, xdg)
    if preload:
        env["LD_PRELOAD"] = LIB
    p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd="/", **as_user(role))
    STARTED.append(p.pid)
    return p


def private_xdg(role):
    d = os.path.join(WORK, "xdg-" + role)
    os.mkdir(d, 0o700)
    os.chown(d, UIDS[role], 65534)
    return d


# ---- 1. stats and log files ---------------------------------------------------

def test_files():
    victim = os.path.join(WORK, "root-owned")
    with open(victim, "w") as f:
        f.write("precious\n")
    os.chmod(victim, 0o644)
    for var, flag in (("SLUICE_STATS", "--stats"), ("SLUICE_LOG_FILE", None)):
        link = os.path.join(WORK, "planted-%s" % var)
        r = run(["ln", "-s", victim, link], role="mallory")
        check(r.returncode == 0 and os.path.islink(link), "mallory planted a link for %s" % var)
        argv = [SLUICE, "--send", "1MiB/s"] + ([flag, link] if flag else []) + ["--", "true"]
        extra = {} if flag else {"SLUICE_LOG_FILE": link, "SLUICE_LOG": "debug"}
        r = run(argv, extra=extra)
        want = "%s=%s: the file is a symbolic link; refusing to write there" % (var, link)
        check(r.returncode == 2 and want in r.stderr,
              "root refuses the planted link of %s: rc=%d %r" % (var, r.returncode,
                                                                 r.stderr.strip()[:300]))
        extra["SLUICE_CONFIG_ERROR"] = "warn"
        r = run(argv, extra=extra)
        check(r.returncode == 0 and "warning: " + want in r.stderr,
              "under SLUICE_CONFIG_ERROR=warn a warning, and the program runs: rc=%d %r"
              % (r.returncode, r.stderr.strip()[:300]))
        check(open(victim).read() == "precious\n", "%s never wrote the link's target" % var)
        # A file of mallory's, readable by all, is refused too.
        planted = os.path.join(WORK, "foreign-%s" % var)
        r = run(["sh", "-c", "umask 0; : > '%s'" % planted], role="mallory")
        argv2 = [a if a != link else planted for a in argv]
        extra2 = {k: (planted if v == link else v) for k, v in extra.items()
                  if k != "SLUICE_CONFIG_ERROR"}
        r = run(argv2, extra=extra2)
        want = "%s=%s: the file belongs to user %d, not to you (user 0)" % (
            var, planted, UIDS["mallory"])
        check(r.returncode == 2 and want in r.stderr,
              "root refuses mallory's file for %s: %r" % (var, r.stderr.strip()[:300]))
        check(os.path.getsize(planted) == 0, "%s wrote nothing into mallory's file" % var)
    # A new file is created 0600 (umask 0 cannot widen it).
    new = os.path.join(WORK, "new-%p.json")
    code = "import socket; socket.socket().close()"
    r = run(["sh", "-c", 'umask 0; exec "$0" "$@"', SLUICE, "--send", "1MiB/s", "--stats",
             new, "--", PY, "-c", code])
    made = [f for f in os.listdir(WORK) if f.startswith("new-")]
    st = os.stat(os.path.join(WORK, made[0])) if made else None
    check(r.returncode == 0 and st is not None and st.st_mode & 0o777 == 0o600 and
          st.st_uid == 0, "a new stats file is 0600 and root's: %r %r" %
          (made, oct(st.st_mode) if st else None))


# ---- 2. squatting ---------------------------------------------------------------

SHARED_RUN = "import socket; socket.socket().close(); print('ran')"


def test_squatting():
    name = "sq" + TAG
    vic = UIDS["victim"]
    # mallory plants every predictable name of the old flat layout, for
    # root and for the victim, and for the next pids.
    me = os.getpid()
    planted = []
    for uid in (0, vic):
        for n in ["shared-" + name] + ["stat-%d" % (me + k) for k in range(1, 50)] + \
                 ["shared-%s.%d.tmp" % (name, me + k) for k in range(1, 50)]:
            planted.append("/dev/shm/sluice-%d-%s" % (uid, n))
    # A name another run of this test planted (its pids are near ours when
    # two start at once) is squatted all the same: only ours are ours to
    # remove.
    plant = ("import sys\nfor p in sys.argv[1:]:\n    try:\n        open(p, 'x').close()\n"
             "        print(p)\n    except FileExistsError:\n        pass")
    r = run([PY, "-c", plant] + planted, role="mallory")
    mine = r.stdout.split()
    check(r.returncode == 0, "mallory planted %d old flat names (%d of them there already): %r" %
          (len(planted), len(planted) - len(mine), r.stderr.strip()[-300:]))
    # mallory cannot create root's directory.
    r = run(["mkdir", "/run/sluice-x" + TAG], role="mallory")
    check(r.returncode != 0, "mallory cannot create a directory in /run")
    # root is never blocked.
    r = run([SLUICE, "--send", "1MiB/s,shared=" + name, "--", PY, "-c", SHARED_RUN],
            extra={"SLUICE_LOG": "info"})
    check(r.returncode == 0 and "ran" in r.stdout, "root's shared rule runs: %r" % r.stderr[-300:])
    check(("ignoring /dev/shm/sluice-0-shared-%s, left by an older sluice" % name) in r.stderr,
          "one info line names the old flat file: %r" % r.stderr.strip()[-300:])
    st = os.lstat("/run/sluice")
    check(st.st_uid == 0 and st.st_mode & 0o777 == 0o700, "/run/sluice is root's, 0700")
    check(os.path.exists("/run/sluice/shared-" + name), "root's segment is in /run/sluice")
    r = run([SLUICE, "rm", "shared:" + name])
    check(r.returncode == 0, "root removes its segment: %r" % r.stderr.strip())
    # The victim without a private runtime directory: mallory squats
    # /dev/shm/sluice-VICTIM, and the victim gets a precise refusal.
    squat = "/dev/shm/sluice-%d" % vic
    r = run(["mkdir", "-m", "0777", squat], role="mallory")
    check(r.returncode == 0, "mallory squats %s" % squat)
    r = run([SLUICE, "--send", "1MiB/s,shared=" + name, "--", PY, "-c", SHARED_RUN],
            role="victim")
    want = ("the directory %s belongs to user %d, not to you (user %d): another user created "
            "it; have it removed (as root: rm -r %s), or set XDG_RUNTIME_DIR" %
            (squat, UIDS["mallory"], vic, squat))
    check(r.returncode == 2 and want in r.stderr, "victim refused with the remedy: %r" %
          r.stderr.strip()[-400:])
    r = run([SLUICE, "stat"], role="victim")
    check(r.returncode == 1 and want in r.stderr,
          "sluice stat says so too, not 'no process': %r" % r.stderr.strip()[-300:])
    # A private runtime directory: the squat does not matter.
    xdg = private_xdg("victim")
    r = run([SLUICE, "--send", "1MiB/s,shared=" + name, "--", PY, "-c", SHARED_RUN],
            role="victim", xdg=xdg)
    check(r.returncode == 0 and os.path.exists(os.path.join(xdg, "sluice", "shared-" + name)),
          "with XDG_RUNTIME_DIR the victim's rule runs: %r" % r.stderr.strip()[-300:])
    st = os.lstat(os.path.join(xdg, "sluice"))
    check(st.st_uid == vic and st.st_mode & 0o777 == 0o700, "its directory is 0700")
    # mallory can neither read nor hide the victim's segments.
    seg = os.path.join(xdg, "sluice", "shared-" + name)
    r = run(["cat", seg], role="mallory")
    check(r.returncode != 0, "mallory cannot read the victim's segment")
    r = run(["ls", os.path.join(xdg, "sluice")], role="mallory")
    check(r.returncode != 0, "mallory cannot list the victim's directory")
    # A link in place of the directory is refused, never followed.
    os.rmdir(squat)
    r = run(["ln", "-s", "/tmp", squat], role="mallory")
    r = run([SLUICE, "--send", "1MiB/s,shared=" + name, "--", PY, "-c", SHARED_RUN],
            role="victim")
    check(r.returncode == 2 and ("%s is a symbolic link, not a directory of yours" % squat)
          in r.stderr, "a planted link is refused: %r" % r.stderr.strip()[-300:])
    os.unlink(squat)
    # Temporary names are random: none of mallory's planted pid names was used.
    check(all(os.path.getsize(p) == 0 for p in mine), "the planted files were never written")
    for p in mine:
        os.unlink(p)


# ---- 3. the leak figure -------------------------------------------------------

LEAK = r'''
import os, signal, socket, sys, threading, time
srv = socket.create_server(("127.0.0.1", 0), backlog=4096)
port = srv.getsockname()[1]
def serve():
    while True:
        c, _ = srv.accept()
        c.close()
threading.Thread(target=serve, daemon=True).start()
ready_r, ready_w = os.pipe()
def child(then):
    s = socket.create_connection(("127.0.0.1", port))  # its record exists from here
    if then == "exit":
        os._exit(0)
    os.write(ready_w, b"x")
    time.sleep(60)
    os._exit(0)
for i in range(1000):
    pid = os.fork()
    if pid == 0:
        child("exit")
    os.waitpid(pid, 0)
killed = []
for i in range(100):
    pid = os.fork()
    if pid == 0:
        child("sleep")
    killed.append(pid)
d = sys.argv[1]
got = 0
while got < 100:
    got += len(os.read(ready_r, 100 - got))
live = len([f for f in os.listdir(d) if f.startswith("stat-")])
for pid in killed:
    os.kill(pid, signal.SIGKILL)
for pid in killed:
    os.waitpid(pid, 0)
print(live, flush=True)
'''


def test_leak():
    xdg = private_xdg("mallory")  # an isolated directory: mallory is just a user here
    d = os.path.join(xdg, "sluice")
    t0 = time.monotonic()
    r = run([SLUICE, "--connect", "100000/s", "--", PY, "-c", LEAK, d],
            role="mallory", xdg=xdg, timeout=300)
    left_parent = len([f for f in os.listdir(d) if f.startswith("stat-")])
    check(r.returncode == 0, "1100 children ran (%.1f s): %r" % (time.monotonic() - t0,
                                                                  r.stderr.strip()[-300:]))
    live = int(r.stdout.strip() or -1)
    # Without the _exit hook the 1000 exited children would leave 1000 more.
    check(left_parent <= 100 + 8, "after the parent: %d records (the 100 SIGKILLed, not the "
          "1000 that _exit)" % left_parent)
    check(live >= 100, "while the 100 sleepers lived they had records: %d" % live)
    time.sleep(2.5)  # past the reclaim interval (SL_REC_RECLAIM_S)
    r = run([SLUICE, "--connect", "10/s", "--", "true"], role="mallory", xdg=xdg)
    left = [f for f in os.listdir(d) if f.startswith("stat-")]
    print("records after the parent: %d; after one later sluice process: %d" %
          (left_parent, len(left)))
    check(r.returncode == 0 and len(left) <= 8,
          "1000 _exit + 100 SIGKILLed children leave %d records (<= 8)" % len(left))


POOL = r'''
import multiprocessing, socket, sys
srv = socket.create_server(("127.0.0.1", 0), backlog=256)
def work(i):
    socket.create_connection(srv.getsockname()).close()
    return i
if __name__ == "__main__":
    multiprocessing.set_start_method("fork")
    with multiprocessing.Pool(8) as pool:
        got = pool.map(work, range(200), chunksize=1)
        pool.close()
        pool.join()
    print(sum(got), flush=True)
'''


def test_pool():
    xdg = os.path.join(WORK, "xdg-mallory")
    d = os.path.join(xdg, "sluice")
    before = set(os.listdir(d))
    r = run([SLUICE, "--connect", "100000/s", "--", PY, "-c", POOL], role="mallory", xdg=xdg,
            timeout=120)
    left = [f for f in set(os.listdir(d)) - before if f.startswith("stat-")]
    check(r.returncode == 0 and r.stdout.strip() == str(sum(range(200))) and left == [],
          "a multiprocessing pool of 8 leaves no record: %r %r" % (left, r.stderr[-200:]))


EXEC = r'''
import os, socket
s = socket.create_server(("127.0.0.1", 0))
c = socket.create_connection(s.getsockname())  # the record is made here
print("up", flush=True)
env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
os.execve("/bin/sleep", ["sleep", "30"], env)  # no rules after the exec
'''


def test_exec_record():
    xdg = os.path.join(WORK, "xdg-mallory")
    d = os.path.join(xdg, "sluice")
    p = popen([PY, "-c", EXEC], role="mallory", xdg=xdg, preload=True,
              extra={"SLUICE_CONNECT": "100/s"})
    up = p.stdout.readline().strip()
    rec = os.path.join(d, "stat-%d" % p.pid)
    # Wait for the exec itself: /proc/PID/exe turning into /bin/sleep, what
    # sluice stat compares with the record. (The cmdline said "sleep" from
    # the start: EXEC, in python's argv, names it. Under the parallel
    # runner python was then still between "up" and its execve when sluice
    # stat ran, 7 of 70 runs beside 4 busy loops; it rightly listed a
    # process that still ran with its rules.)
    sleep_st = os.stat("/bin/sleep")
    deadline = time.monotonic() + 30
    exec_d = False
    while not exec_d and time.monotonic() < deadline:
        try:
            exe = os.stat("/proc/%d/exe" % p.pid)
            exec_d = (exe.st_dev, exe.st_ino) == (sleep_st.st_dev, sleep_st.st_ino)
        except OSError:
            pass
        if not exec_d:
            time.sleep(0.02)
    had = os.path.exists(rec)
    check(up == "up" and exec_d and had, "the process exec'd /bin/sleep (within 30 s), its "
          "record left behind: up=%r exec'd=%s record=%s" % (up, exec_d, had))
    r = run([SLUICE, "stat"], role="mallory", xdg=xdg)
    check(("pid %d " % p.pid) not in r.stdout and not os.path.exists(rec),
          "a record left by the image before an exec is not shown, and removed: %r" % r.stdout)
    p.kill()
    p.wait()


# ---- 4. sluice set / stat / rm shared:NAME -----------------------------------

HOLD = "import socket, sys; socket.socket().close(); print('up', flush=True); sys.stdin.read()"


def test_shared_admin():
    xdg = private_xdg("victim") if not os.path.isdir(os.path.join(WORK, "xdg-victim")) \
        else os.path.join(WORK, "xdg-victim")
    name = "k" + TAG
    first = run([SLUICE, "--send", "256KiB/s,shared=" + name, "--", "true"], role="victim",
                xdg=xdg)
    r = run([SLUICE, "set", "shared:" + name, "send:512KiB/s"], role="victim", xdg=xdg)
    check(first.returncode == 0 and r.returncode == 0 and
          "send:256KiB/s,shared=%s -> send:512KiB/s,shared=%s" % (name, name) in r.stdout,
          "sluice set while nothing runs: %r %r" % (r.stdout.strip(), r.stderr.strip()))
    p = popen([SLUICE, "--send", "256KiB/s,shared=" + name, "--", PY, "-c", HOLD],
              role="victim", xdg=xdg)
    up = p.stdout.readline().strip()
    note = ("sluice: note: shared limiter %s runs as 'send:512KiB/s,shared=%s' (set by sluice "
            "set at " % (name, name))
    r = run([SLUICE, "stat", "shared:" + name], role="victim", xdg=xdg)
    check(up == "up" and r.returncode == 0 and
          ("rule send:512KiB/s,shared=%s  (created as send:256KiB/s,shared=%s)" % (name, name))
          in r.stdout and ("used by 1 process: %d" % p.pid) in r.stdout and
          "set by sluice set at " in r.stdout,
          "sluice stat shared:NAME (text): %r" % r.stdout)
    r = run([SLUICE, "stat", "--json", "shared:" + name], role="victim", xdg=xdg)
    j = json.loads(r.stdout) if r.returncode == 0 else {}
    check(j.get("rule") == "send:512KiB/s,shared=" + name and
          j.get("configured") == "send:256KiB/s,shared=" + name and j.get("holders") == [p.pid]
          and isinstance(j.get("set_at"), str) and j.get("shared") == name,
          "sluice stat --json shared:NAME: %r" % j)
    r = run([SLUICE, "rm", "shared:" + name], role="victim", xdg=xdg)
    check(r.returncode == 1 and ("is used by 1 process: %d" % p.pid) in r.stderr,
          "rm refuses while a holder lives: %r" % r.stderr.strip())
    r = run([SLUICE, "rm", "--force", "shared:" + name], role="victim", xdg=xdg)
    check(r.returncode == 0 and not os.path.exists(os.path.join(xdg, "sluice", "shared-" + name)),
          "rm --force removes it: %r" % r.stdout.strip())
    p.stdin.close()
    err = p.stderr.read()
    p.wait(timeout=20)
    check(note in err and "not the 'send:256KiB/s,shared=%s' this rule asks for" % name in err,
          "the process said once which rate runs: %r" % err.strip())
    check(err.count("sluice: note:") == 1, "the note is said once")
    r = run([SLUICE, "rm", "shared:" + name], role="victim", xdg=xdg)
    check(r.returncode == 1 and "no such shared limiter" in r.stderr, "rm of a missing one: 1")
    r = run([SLUICE, "stat", "shared:" + name], role="victim", xdg=xdg)
    check(r.returncode == 1 and "no such shared limiter" in r.stderr, "stat of a missing one: 1")


# ---- 5. address space ---------------------------------------------------------

def test_ulimit():
    # The last: a 1048576-entry fd table needs ~340 MB of address space; the
    # shim falls back to 65536 entries instead of exiting 2.
    for role, cmd in (("victim", "ulimit -v 20000; exec %s --version" % SLUICE),
                      ("victim", "ulimit -v 20000; exec %s --send 1MiB/s -- true" % SLUICE),
                      (None, "ulimit -Hn 1048576; ulimit -n 1048576; ulimit -v 100000; "
                       "exec %s --send 1MiB/s -- true" % SLUICE)):
        if "-Hn" in cmd and run(["sh", "-c", "ulimit -Hn 1048576"]).returncode != 0:
            print("skipped: %s (this machine cannot raise RLIMIT_NOFILE to 1048576)" % cmd)
            continue
        r = run(["sh", "-c", cmd], role=role)
        check(r.returncode == 0 and r.stderr == "", "%s: rc=%d %r" % (cmd, r.returncode,
                                                                   r.stderr.strip()))


# ---- 6. examples under a closed pipe -----------------------------------------

def test_example_pipe():
    tmp = tempfile.mkdtemp(prefix="sl-ex-%s-" % TAG)
    env = env_for(None, {"TMPDIR": tmp, "SLUICE": SLUICE})
    for ex in ("throttle-download.sh", "connect-rate.sh"):
        r = subprocess.run(["sh", "-c", "sh %s | head -1" % os.path.join(ROOT, "examples", ex)],
                           env=env, capture_output=True, text=True, timeout=120)
        deadline = time.monotonic() + 5
        procs = []
        while time.monotonic() < deadline:
            procs = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, tmp)]
            if not procs and not os.listdir(tmp):
                break
            time.sleep(0.1)
        check(r.stdout.count("\n") == 1 and not procs and not os.listdir(tmp),
              "%s | head -1 leaves no server (%r) and no temp dir (%r)" %
              (ex, procs, os.listdir(tmp)))
    # SIGKILL of the example's shell: no trap runs, the helpers' watchdog ends them.
    p = subprocess.Popen(["sh", os.path.join(ROOT, "examples", "throttle-download.sh")], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = p.stdout.readline()
    p.kill()
    p.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        procs = [q for q in os.listdir("/proc") if q.isdigit() and _cmdline_has(q, tmp)
                 and "http_server" in open("/proc/%s/cmdline" % q, "rb").read().decode(
                     errors="replace")]
        if not procs:
            break
        time.sleep(0.1)
    check(first.startswith("curl alone") and not procs,
          "the example SIGKILLed: its server ended within 5 s (%r)" % procs)
    subprocess.run(["rm", "-rf", tmp], check=False)


def _cmdline_has(pid, s):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            return s.encode() in f.read()
    except OSError:
        return False


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("skipped: needs root (creates users)")
        sys.exit(0)
    setup()
    test_files()
    test_squatting()
    test_shared_admin()
    test_leak()
    test_exec_record()
    test_pool()
    test_ulimit()
    test_example_pipe()
    finish()
