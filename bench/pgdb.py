"""A fresh database on the benchmark's PostgreSQL server (PICOGENT_TEST_PG_URL), made
with psql (no Python driver needed): its URL."""
import os, subprocess, time, urllib.parse

_n = [0]


def database():
    server = os.environ.get("PICOGENT_TEST_PG_URL")
    if not server:
        raise SystemExit("PICOGENT_TEST_PG_URL is not set: run bench/fleet.sh")
    _n[0] += 1
    name = f"bench_{os.getpid()}_{_n[0]}_{int(time.time())}"
    subprocess.run(["psql", server, "-qc", f"CREATE DATABASE {name}"], check=True)
    base = server.rsplit("/", 1)[0]
    return f"{base}/{name}"
