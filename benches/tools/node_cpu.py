#!/usr/bin/env python3
"""CPU each PostgreSQL server spent while a command ran: the data for benches/HISTORY.md's
projection of what more Citus workers carry (what one operation costs the coordinator and
the workers, measured on one machine).

    python3 benches/tools/node_cpu.py /tmp/citus-cluster/node0 /tmp/citus-cluster/node1 \
        /tmp/citus-cluster/node2 -- <command> [args...]

Each argument before `--` is a server's data directory (its postmaster.pid names the server's
process). A server's CPU is its postmaster's and every backend's: live backends are read from
/proc, and backends that exit during the run are counted by the kernel into the postmaster's
"children" times once it reaps them. Prints the command's own output, then one line per
server: seconds of CPU (user + system) during the run. Linux only; the standard library only.
"""
import os
import subprocess
import sys

TICKS = os.sysconf("SC_CLK_TCK")


def stat_fields(pid):
    with open(f"/proc/{pid}/stat") as f:
        # The command name (field 2) may hold spaces; everything after its ')' is numeric.
        return f.read().rsplit(")", 1)[1].split()


def server_ticks(postmaster):
    """The postmaster's own and reaped children's ticks, plus every live child's."""
    fields = stat_fields(postmaster)
    # After the name: state is index 0, so utime, stime, cutime, cstime are 11..14.
    total = sum(int(v) for v in fields[11:15])
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            child = stat_fields(entry)
        except OSError:
            continue  # exited between the listing and the read
        if int(child[1]) == postmaster:
            total += int(child[11]) + int(child[12])
    return total


def postmaster_of(data_dir):
    with open(os.path.join(data_dir, "postmaster.pid")) as f:
        return int(f.readline())


def main():
    if "--" not in sys.argv:
        sys.exit(__doc__)
    split = sys.argv.index("--")
    data_dirs, command = sys.argv[1:split], sys.argv[split + 1:]
    servers = [(d, postmaster_of(d)) for d in data_dirs]
    before = {d: server_ticks(pid) for d, pid in servers}
    status = subprocess.run(command).returncode
    after = {d: server_ticks(pid) for d, pid in servers}
    for d, _ in servers:
        print(f"node-cpu {d}: {(after[d] - before[d]) / TICKS:.2f} s")
    sys.exit(status)


if __name__ == "__main__":
    main()
