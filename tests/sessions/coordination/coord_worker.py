"""A separate process for the coordination tests: ``python -m tests.sessions.coordination.coord_worker
<command> <store> <session> [args…]``. Prints one line per result; never imports pytest."""

from __future__ import annotations

import os
import sys
import time


def main(argv: list[str]) -> int:
    command, where, session = argv[:3]
    from hermes_data.sessions.store import SessionStore

    with SessionStore(where) as store:
        if command == "race":  # wait for the shared start time, try the lock once
            start = float(argv[3])
            while time.time() < start:
                time.sleep(0.001)
            print(store.try_acquire_compression_lock(session, f"proc-{argv[4]}"), flush=True)
        elif command == "hold":  # take lock and lease with a real holder, then wait to die
            holder = store.make_holder("test")
            ok = store.try_acquire_compression_lock(session, holder) and \
                store.try_acquire_session_turn_lease(session, holder)
            print("held" if ok else "refused", holder, flush=True)
            time.sleep(60)
        elif command == "lease-for":  # hold the turn lease for argv[3] seconds, then release
            holder = f"proc-{argv[4]}"
            ok = store.try_acquire_session_turn_lease(session, holder)
            print("held" if ok else "refused", flush=True)
            time.sleep(float(argv[3]))
            store.release_session_turn_lease(session, holder)
            print("released", time.monotonic(), flush=True)
        elif command == "append-loop":  # append argv[3] numbered rows, one per 10 ms
            for i in range(int(argv[3])):
                store.append_message(session, "user", f"appended-{i}")
                time.sleep(0.01)
            print("done", flush=True)
        elif command == "crash-op":  # announce, then run one rewrite (the test kills us)
            op = argv[3]
            target = store.get_messages(session)[2].id  # a user row
            print("go", flush=True)
            if op == "compact":
                store.archive_and_compact(session, [{"role": "user", "content": "omega summary"}])
            elif op == "replace":
                store.replace_messages(session, [{"role": "user", "content": "omega new"}])
            else:
                store.rewind_to_message(session, target)
            print("done", flush=True)
            time.sleep(60)
        elif command == "contend":  # rounds of: lease, lock, two fenced markers, release
            me, rounds = argv[4], int(argv[3])
            start = float(argv[5])
            while time.time() < start:
                time.sleep(0.001)
            for r in range(rounds):
                holder = f"pid={os.getpid()}:proc-{me}-{r}"
                assert store.acquire_session_turn_lease(session, holder, wait_seconds=120,
                                                        poll_interval_seconds=0.002)
                while not store.try_acquire_compression_lock(session, holder):
                    time.sleep(0.002)
                store.append_message(session, "user", f"enter {me} {r}",
                                     turn_lease_holder=holder)
                store.append_message(session, "user", f"exit {me} {r}",
                                     turn_lease_holder=holder)
                store.release_compression_lock(session, holder)
                store.release_session_turn_lease(session, holder)
            print("done", flush=True)
        else:
            print(f"unknown command {command}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
