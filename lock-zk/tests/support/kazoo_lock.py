"""A kazoo Lock on a distlock lock path, driven by lock-zk's interop test.

usage: kazoo_lock.py hold HOSTS PATH      acquire, print "HELD <node>", release on a line from stdin
       kazoo_lock.py try HOSTS PATH SECS  print "ACQUIRED" (then release) or "TIMEOUT"

The lock is kazoo's documented way to share a lock with Curator (and so
with lock-zk, which uses Curator's node layout): extra_lock_patterns=("-lock-",).
Exit status 3 means kazoo is not installed.
"""
import sys

try:
    from kazoo.client import KazooClient
    from kazoo.exceptions import LockTimeout
except ImportError as err:  # pragma: no cover
    print("NO_KAZOO", err, flush=True)
    sys.exit(3)


def main():
    mode, hosts, path = sys.argv[1:4]
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=10)
    try:
        lock = zk.Lock(path, "kazoo-interop", extra_lock_patterns=("-lock-",))
        if mode == "hold":
            lock.acquire(timeout=10)
            print("HELD", lock.node, flush=True)
            sys.stdin.readline()
            lock.release()
            print("RELEASED", flush=True)
        elif mode == "try":
            try:
                got = lock.acquire(timeout=float(sys.argv[4]))
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
