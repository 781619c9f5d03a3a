#!/usr/bin/env bash
# Installs what building and testing Tern needs on a fresh Debian machine,
# skipping what is there: protoc (etcd-client's build), etcd and an S3
# server (moto) for the offload tests, redis-server and redis-tools for the
# server's differential test and the CI smoke run, redis-py for the
# cluster tests. Sourced by
# scripts/test.sh and .ci/run.

# Installs Debian packages that are missing (as root, or through sudo).
apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null 2>&1 || { echo "need packages ${missing[*]} (no apt-get here)" >&2; return 1; }
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "== installing ${missing[*]}"
  $sudo apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 ||
    { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q "${missing[@]}" >/dev/null; }
}

apt_install protobuf-compiler etcd-server redis-server redis-tools
# The cluster tests drive the nodes with redis-py's RedisCluster.
if ! python3 -c 'import redis.cluster' >/dev/null 2>&1; then
  echo "== installing redis (redis-py, a cluster client for the cluster tests)"
  python3 -m pip install -q redis >/dev/null 2>&1 ||
    python3 -m pip install -q --break-system-packages redis >/dev/null
fi
# The offload tests put the shared tier on an S3 server too.
if ! command -v moto_server >/dev/null 2>&1; then
  echo "== installing moto[server] (an S3 server for the offload tests)"
  python3 -m pip install -q 'moto[server]' >/dev/null 2>&1 ||
    python3 -m pip install -q --break-system-packages 'moto[server]' >/dev/null
fi

