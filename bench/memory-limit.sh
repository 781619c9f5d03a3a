# Sourced by the benchmark scripts: `enter_memory_limit 2560M` moves the
# calling shell (and so everything it starts) into a cgroup v1 memory group
# capped there, page cache included, for stores larger than memory. Needs
# root.
enter_memory_limit() {
  local cg=/sys/fs/cgroup/memory/tern-bench
  [ -d /sys/fs/cgroup/memory ] || { echo "a memory limit needs the cgroup v1 memory controller at /sys/fs/cgroup/memory" >&2; exit 1; }
  mkdir -p "$cg"
  echo "$1" > "$cg/memory.limit_in_bytes"
  echo $$ > "$cg/cgroup.procs"
  echo "memory limit: $(cat "$cg/memory.limit_in_bytes") bytes (cgroup $cg)" >&2
}
