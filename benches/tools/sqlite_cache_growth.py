#!/usr/bin/env python3
"""SQLite memory against database size: the release binary under steady sends and pulls,
with no restarts, its RSS, RssAnon and database size sampled every 15 s (RELIABILITY.md,
"Not flat on SQLite across its restarts").

    cargo build --release --bin chorus
    SECS=300 python3 benches/tools/sqlite_cache_growth.py
    SECS=240 EXTRA="CHORUS_SQLITE_CACHE_KIB=256" python3 benches/tools/sqlite_cache_growth.py

CHORUS_BIN: the binary (target/release/chorus); PORT (18090); DATA: a scratch data dir,
deleted first (/tmp/memx-data); EXTRA: space-separated NAME=VALUE settings for the server.
Loopback only; the standard library only.
"""
import http.client, json, os, random, sys, threading, time, subprocess, signal

PORT = int(os.environ.get("PORT", "18090"))
SECS = int(os.environ.get("SECS", "240"))
DATA = os.environ.get("DATA", "/tmp/memx-data")
BIN = os.environ.get("CHORUS_BIN", "target/release/chorus")
GROUPS, MEMBERS = 50, 10

env = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")}
env.update({"CHORUS_BIND": f"127.0.0.1:{PORT}", "CHORUS_DATA_DIR": DATA, "CHORUS_LOG": "warn"})
for extra in os.environ.get("EXTRA", "").split():
    k, v = extra.split("=", 1); env[k] = v
subprocess.run(["rm", "-rf", DATA]); os.makedirs(DATA)
srv = subprocess.Popen([BIN, "serve"], env=env, stdout=open(DATA + ".log", "w"), stderr=subprocess.STDOUT)

def conn():
    return http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)

def req(c, method, path, tok=None, body=None):
    h = {"Content-Type": "application/json"}
    if tok: h["Authorization"] = "Bearer " + tok
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse(); data = r.read()
    return r.status, (json.loads(data) if data else None)

for _ in range(100):
    try:
        c = conn(); req(c, "GET", "/health"); break
    except Exception:
        time.sleep(0.1)
c = conn()
users = [f"u{i}" for i in range(GROUPS * MEMBERS)]
tok = {u: req(c, "POST", "/v1/dev/token", body={"user_id": u})[1]["token"] for u in users}
groups = []
for g in range(GROUPS):
    ms = users[g * MEMBERS:(g + 1) * MEMBERS]
    st, b = req(c, "POST", "/v1/groups", tok[ms[0]], {"name": f"g{g}", "member_ids": ms[1:]})
    assert st in (200, 201), (st, b)
    groups.append((b["group_id"], ms))
stop = time.time() + SECS
sent = [0]; pulled = [0]; errs = [0]
def sender(i):
    c = conn(); n = 0
    while time.time() < stop:
        gid, ms = random.choice(groups); u = random.choice(ms)
        n += 1
        st, _ = req(c, "POST", f"/v1/groups/{gid}/messages", tok[u], {"client_msg_id": f"s{i}-{n}", "content": "x" * 150 + str(n)})
        if st in (200, 201): sent[0] += 1
        else: errs[0] += 1
def reader(i):
    c = conn()
    while time.time() < stop:
        gid, ms = random.choice(groups); u = random.choice(ms)
        top = max(1, sent[0] // GROUPS)
        st, _ = req(c, "GET", f"/v1/groups/{gid}/messages?after_msg_id={random.randint(0, top)}&limit=50", tok[u])
        if random.random() < 0.2:
            req(c, "GET", "/v1/me/groups", tok[u])
        if st == 200: pulled[0] += 1
        else: errs[0] += 1
ths = [threading.Thread(target=sender, args=(i,)) for i in range(6)] + [threading.Thread(target=reader, args=(i,)) for i in range(6)]
for t in ths: t.start()
def status(field):
    for line in open(f"/proc/{srv.pid}/status"):
        if line.startswith(field): return int(line.split()[1]) // 1024
def size(p):
    try: return os.path.getsize(p) / 1e6
    except OSError: return 0
t0 = time.time()
print("secs sent pulled errs rss_mib anon_mib db_mb wal_mb", flush=True)
while time.time() < stop:
    time.sleep(15)
    db = os.path.join(DATA, "chorus.sqlite3")
    print(f"{time.time()-t0:.0f} {sent[0]} {pulled[0]} {errs[0]} {status('VmRSS:')} {status('RssAnon:')} {size(db):.1f} {size(db+'-wal'):.1f}", flush=True)
for t in ths: t.join()
time.sleep(3)
print(f"idle-after {status('VmRSS:')} {status('RssAnon:')}", flush=True)
srv.send_signal(signal.SIGTERM); srv.wait()
