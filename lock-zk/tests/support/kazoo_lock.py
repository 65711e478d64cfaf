"""A kazoo lock on a distlock lock path, driven by lock-zk's interop tests.

usage: kazoo_lock.py hold KIND HOSTS PATH      acquire, print "HELD <node>", release on a line from stdin
       kazoo_lock.py try KIND HOSTS PATH SECS  print "ACQUIRED" (then release) or "TIMEOUT"

KIND is `lock` (kazoo's Lock), `read` (ReadLock) or `write` (WriteLock), each
told to count the nodes of Curator's layout (and so lock-zk's) as kazoo
documents it, with extra_lock_patterns: `-lock-` for the Lock, `__WRIT__` for
the ReadLock (the write nodes it waits for), `__WRIT__` and `__READ__` for
the WriteLock. Exit status 3 means kazoo is not installed.
"""
import sys

try:
    from kazoo.client import KazooClient
    from kazoo.exceptions import LockTimeout
except ImportError as err:  # pragma: no cover
    print("NO_KAZOO", err, flush=True)
    sys.exit(3)


def make(zk, kind, path):
    if kind == "lock":
        return zk.Lock(path, "kazoo-interop", extra_lock_patterns=("-lock-",))
    if kind == "read":
        return zk.ReadLock(path, "kazoo-interop", extra_lock_patterns=("__WRIT__",))
    if kind == "write":
        return zk.WriteLock(
            path, "kazoo-interop", extra_lock_patterns=("__WRIT__", "__READ__")
        )
    raise SystemExit("unknown kind " + kind)


def main():
    mode, kind, hosts, path = sys.argv[1:5]
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=10)
    try:
        lock = make(zk, kind, path)
        if mode == "hold":
            lock.acquire(timeout=10)
            print("HELD", lock.node, flush=True)
            sys.stdin.readline()
            lock.release()
            print("RELEASED", flush=True)
        elif mode == "try":
            try:
                got = lock.acquire(timeout=float(sys.argv[5]))
            except LockTimeout:
                got = False
            print("ACQUIRED" if got else "TIMEOUT", flush=True)
            if got:
                lock.release()
        else:
            raise SystemExit("unknown mode " + mode)
    finally:
        zk.stop()
        zk.close()


if __name__ == "__main__":
    main()
