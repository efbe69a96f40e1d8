#!/usr/bin/env bash
# A private containerd for Rudder's node agent, configured as ../shared/docs/cri-on-this-machine.md
# found necessary on these machines (restrict_oom_score_adj, cgroupfs, netns under the state
# dir, its own runc root, a bridge + host-local CNI network), with the pause and busybox images
# built locally and imported (no registry is reachable).
#
#   scripts/containerd.sh start DIR [SUBNET]   # prints the socket path; SUBNET like 10.244.77.0/24
#   scripts/containerd.sh stop DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
cmd=${1:?start|stop} dir=${2:?dir}

PAUSE_IMAGE=localhost/pause:3.9
BUSYBOX_IMAGE=localhost/busybox:1.36

start() {
  local subnet=${1:-10.244.77.0/24}
  rudder_install_packages containerd runc containernetworking-plugins iptables busybox-static jq >&2
  mkdir -p "$dir"/{root,state,opt,logs,images,cni/net.d,cni/ipam}
  dir=$(cd "$dir" && pwd)
  local gateway=${subnet%.*}.1 bridge
  bridge=rdr$(printf '%s' "$dir" | sha256sum | cut -c1-8)
  cat > "$dir/containerd.toml" <<TOML
version = 2
root = "$dir/root"
state = "$dir/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$dir/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    disable_apparmor = true
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    max_container_log_line_size = 16384
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$dir/cni/net.d"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$dir/state/runc"
TOML
  cat > "$dir/cni/net.d/10-rudder.conflist" <<JSON
{ "cniVersion": "1.0.0", "name": "rudder",
  "plugins": [
    { "type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": { "type": "host-local", "dataDir": "$dir/cni/ipam",
                "ranges": [[{ "subnet": "$subnet", "gateway": "$gateway" }]],
                "routes": [{ "dst": "0.0.0.0/0" }] } },
    { "type": "portmap", "capabilities": { "portMappings": true } } ] }
JSON
  if ! { [ -f "$dir/containerd.pid" ] && kill -0 "$(cat "$dir/containerd.pid")" 2>/dev/null; }; then
    rm -f "$dir/containerd.sock"
    nohup containerd --config "$dir/containerd.toml" > "$dir/logs/containerd.log" 2>&1 &
    echo $! > "$dir/containerd.pid"
  fi
  for _ in $(seq 100); do [ -S "$dir/containerd.sock" ] && break; sleep 0.1; done
  [ -S "$dir/containerd.sock" ] || { cat "$dir/logs/containerd.log" >&2; echo "containerd did not start" >&2; exit 1; }
  [ -f "$dir/images/pause.tar" ] || "$here/build-image.sh" "$PAUSE_IMAGE" "$dir/images/pause.tar" '["/bin/sleep","2147483647"]'
  [ -f "$dir/images/busybox.tar" ] || "$here/build-image.sh" "$BUSYBOX_IMAGE" "$dir/images/busybox.tar" null '["sh"]'
  ctr --address "$dir/containerd.sock" -n k8s.io images import "$dir/images/pause.tar" >&2
  ctr --address "$dir/containerd.sock" -n k8s.io images import "$dir/images/busybox.tar" >&2
  echo "$dir/containerd.sock"
}

stop() {
  [ -d "$dir" ] || return 0
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/containerd.pid" ]; then
    kill "$(cat "$dir/containerd.pid")" 2>/dev/null || true
    rm -f "$dir/containerd.pid"
  fi
  # Shims outlive containerd: stop the ones of this instance, then unmount what is left.
  pkill -f "containerd-shim-runc-v2 .*-address $dir/containerd.sock" 2>/dev/null || true
  grep " $dir/" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  local bridge
  bridge=rdr$(printf '%s' "$dir" | sha256sum | cut -c1-8)
  ip link del "$bridge" 2>/dev/null || true
}

case $cmd in
  start) start "${3:-}" ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop DIR [SUBNET]" >&2; exit 2 ;;
esac
