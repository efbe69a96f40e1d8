//! A containerd of the agent's own, as k3s runs one: configured the way these machines need
//! (`restrict_oom_score_adj` — no CAP_SYS_RESOURCE here —, the cgroupfs driver, network
//! namespaces under its state dir, its own runc root), a bridge + host-local CNI network for the
//! node's pod range, and the pause image built locally and imported (no registry is reachable).
//! The pod range is the Node's `spec.podCIDRs`: containerd is given a CNI configuration
//! template, and the kubelet hands it the ranges once node IPAM has assigned them (CRI
//! `UpdateRuntimeConfig`, as upstream's kubelet and containerd do); until then containerd
//! reports its network not ready. A range given on the command line (`--pod-cidr`) is written
//! as the configuration at once instead.
//! Stopping it leaves the pods' shims running, so pods survive an agent restart.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::images;

/// The sandbox image the managed containerd is configured with.
pub const PAUSE_IMAGE: &str = "localhost/pause:3.9";
/// A general-purpose image imported beside it (busybox with `sh` as its command).
pub const BUSYBOX_IMAGE: &str = "localhost/busybox:1.36";

/// How long a starting containerd may take to serve its socket.
const SOCKET_WAIT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("containerd did not answer on {socket} within {} s; its log is {log}", SOCKET_WAIT.as_secs())]
    NotStarted { socket: String, log: String },
    #[error("containerd exited ({status}) before it answered; its log is {log}:\n{tail}")]
    Exited {
        status: std::process::ExitStatus,
        log: String,
        tail: String,
    },
    #[error("importing {image}: {message}")]
    Import { image: String, message: String },
    #[error(transparent)]
    Image(#[from] images::Error),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// A running managed containerd.
pub struct Managed {
    pub socket: PathBuf,
    child: tokio::process::Child,
    /// The CNI bridge it made.
    bridge: String,
}

fn config(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{d}/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{PAUSE_IMAGE}"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    disable_apparmor = true
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    max_container_log_line_size = 16384
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "{d}/cni/net.d"
      conf_template = "{d}/cni/{TEMPLATE}"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "{d}/state/runc"
"#
    )
}

/// The bridge's name: `rdr` and a hash of the directory (interface names stay short).
fn bridge_name(dir: &Path) -> String {
    let hash = format!("{:x}", sha2::Sha256::digest(dir.display().to_string()));
    format!("rdr{}", &hash[..8])
}

/// The CNI configuration template's file name, under `<dir>/cni`.
const TEMPLATE: &str = "template.conflist";
/// The configuration a `--pod-cidr` is written to, in the CNI configuration directory.
const STATIC_CONFLIST: &str = "10-rudder.conflist";
/// The configuration containerd writes from its template (its fixed name).
const TEMPLATED_CONFLIST: &str = "10-containerd-net.conflist";

/// The CNI network: a bridge named after the directory, host-local addresses from the pod
/// ranges (`ranges`, JSON of CNI's range sets) with their default `routes`, and portmap for
/// hostPorts.
fn network(dir: &Path, ranges: serde_json::Value, routes: serde_json::Value) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "rudder",
        "plugins": [
            {"type": "bridge", "bridge": bridge_name(dir), "isGateway": true, "ipMasq": false,
             "hairpinMode": true,
             "ipam": {"type": "host-local", "dataDir": format!("{}/cni/ipam", dir.display()),
                      "ranges": ranges, "routes": routes}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
        ],
    })
    .to_string()
}

/// The network for one given range (`10.244.77.0/24`); host-local's gateway is its first
/// address.
fn conflist(dir: &Path, subnet: &str) -> String {
    let route = if subnet.contains(':') {
        "::/0"
    } else {
        "0.0.0.0/0"
    };
    network(
        dir,
        serde_json::json!([[{ "subnet": subnet }]]),
        serde_json::json!([{ "dst": route }]),
    )
}

/// The network as a template of containerd's (Go `text/template`): one range set per pod
/// range the kubelet hands over, and the default route of each family.
fn template(dir: &Path) -> String {
    // Placeholders in the JSON, then replaced by the template's loops (which are not JSON).
    let json = network(
        dir,
        serde_json::json!(["@RANGES@"]),
        serde_json::json!(["@ROUTES@"]),
    );
    json.replace(
        r#""@RANGES@""#,
        r#"{{range $i, $range := .PodCIDRRanges}}{{if $i}},{{end}}[{"subnet":"{{$range}}"}]{{end}}"#,
    )
    .replace(
        r#""@ROUTES@""#,
        r#"{{range $i, $route := .Routes}}{{if $i}},{{end}}{"dst":"{{$route}}"}{{end}}"#,
    )
}

use sha2::Digest as _;

impl Managed {
    /// Writes the configuration under `dir`, starts containerd, and imports the pause and
    /// busybox images built from `busybox` (a static busybox binary). The pod network is
    /// `subnet` when given, else made from the ranges the kubelet hands over.
    pub async fn start(dir: &Path, subnet: Option<&str>, busybox: &Path) -> Result<Self, Error> {
        for sub in ["root", "state", "opt", "logs", "cni/net.d", "cni/ipam"] {
            let path = dir.join(sub);
            std::fs::create_dir_all(&path).map_err(io(format!("creating {}", path.display())))?;
        }
        let dir = dir
            .canonicalize()
            .map_err(io(format!("resolving {}", dir.display())))?;
        std::fs::write(dir.join("containerd.toml"), config(&dir))
            .map_err(io("writing containerd.toml"))?;
        std::fs::write(dir.join("cni").join(TEMPLATE), template(&dir))
            .map_err(io("writing the CNI configuration template"))?;
        // One network configuration at most: the given range's, or the one containerd made
        // from the template (kept across restarts; a node's ranges do not change).
        let configured = dir.join("cni/net.d");
        let (keep, drop) = match subnet {
            Some(subnet) => {
                std::fs::write(configured.join(STATIC_CONFLIST), conflist(&dir, subnet))
                    .map_err(io("writing the CNI configuration"))?;
                (STATIC_CONFLIST, TEMPLATED_CONFLIST)
            }
            None => (TEMPLATED_CONFLIST, STATIC_CONFLIST),
        };
        match std::fs::remove_file(configured.join(drop)) {
            Ok(()) => tracing::info!(kept = keep, dropped = drop, "CNI configuration replaced"),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(io("removing an old CNI configuration")(error)),
        }
        let socket = dir.join("containerd.sock");
        let _ = std::fs::remove_file(&socket);
        let log_path = dir.join("logs/containerd.log");
        let log = std::fs::File::create(&log_path).map_err(io("creating containerd's log"))?;
        let child = tokio::process::Command::new("containerd")
            .arg("--config")
            .arg(dir.join("containerd.toml"))
            .stdout(log.try_clone().map_err(io("containerd's log"))?)
            .stderr(log)
            .spawn()
            .map_err(io("starting containerd (package containerd)"))?;
        let mut managed = Self {
            socket,
            child,
            bridge: bridge_name(&dir),
        };
        managed.wait_for_socket(&log_path).await?;
        managed
            .import(
                PAUSE_IMAGE,
                images::busybox_image(
                    busybox,
                    PAUSE_IMAGE,
                    Some(&["/bin/sleep", "2147483647"]),
                    None,
                )?,
            )
            .await?;
        managed
            .import(
                BUSYBOX_IMAGE,
                images::busybox_image(busybox, BUSYBOX_IMAGE, None, Some(&["sh"]))?,
            )
            .await?;
        tracing::info!(socket = %managed.socket.display(), "containerd started");
        Ok(managed)
    }

    /// Waits until containerd serves its socket. A fresh containerd answers in well under a
    /// second; one restarting over running pods first reconnects to every pod's shim, which
    /// on a loaded machine takes many seconds — so the wait is long, and ends early (with
    /// the end of containerd's log) when the process exits instead.
    async fn wait_for_socket(&mut self, log_path: &Path) -> Result<(), Error> {
        let started = std::time::Instant::now();
        let mut said = false;
        while !self.socket.exists() {
            if let Some(status) = self.child.try_wait().map_err(io("watching containerd"))? {
                let log = std::fs::read_to_string(log_path).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(10)..].join("\n");
                return Err(Error::Exited {
                    status,
                    log: log_path.display().to_string(),
                    tail,
                });
            }
            let waited = started.elapsed();
            if waited >= SOCKET_WAIT {
                return Err(Error::NotStarted {
                    socket: self.socket.display().to_string(),
                    log: log_path.display().to_string(),
                });
            }
            if !said && waited >= Duration::from_secs(5) {
                tracing::info!(socket = %self.socket.display(), "waiting for containerd to answer");
                said = true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// `unix://…` of the socket.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Imports an image tar into the `k8s.io` namespace with containerd's `ctr`.
    pub async fn import(&self, image: &str, tar: Vec<u8>) -> Result<(), Error> {
        use tokio::io::AsyncWriteExt;
        let mut child = tokio::process::Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(["-n", "k8s.io", "images", "import", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(io("running ctr"))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(&tar)
                .await
                .map_err(io("writing the image to ctr"))?;
        }
        let output = child.wait_with_output().await.map_err(io("running ctr"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(Error::Import {
                image: image.to_owned(),
                message: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            })
        }
    }

    /// Stops containerd; the pods' shims keep running. When no pod is left, the CNI bridge
    /// goes too (another instance may want its address range).
    pub async fn stop(mut self) {
        use crate::runtime::Runtime as _;
        let empty = match crate::runtime::cri::CriRuntime::new(&self.endpoint()) {
            Ok(runtime) => runtime
                .list_pod_sandboxes()
                .await
                .is_ok_and(|s| s.is_empty()),
            Err(_) => false,
        };
        if let Some(pid) = self.child.id() {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(0));
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        let _ = self.child.kill().await;
        if empty {
            let _ = tokio::process::Command::new("ip")
                .args(["link", "del", &self.bridge])
                .status()
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_range_is_a_bridge_network_of_its_family() {
        let dir = Path::new("/var/lib/rudder/containerd");
        let parsed: serde_json::Value =
            serde_json::from_str(&conflist(dir, "10.244.77.0/24")).expect("JSON");
        let ipam = &parsed["plugins"][0]["ipam"];
        assert_eq!(parsed["plugins"][0]["bridge"], bridge_name(dir));
        assert_eq!(
            ipam["ranges"],
            serde_json::json!([[{"subnet": "10.244.77.0/24"}]])
        );
        assert_eq!(ipam["routes"], serde_json::json!([{"dst": "0.0.0.0/0"}]));
        let parsed: serde_json::Value =
            serde_json::from_str(&conflist(dir, "fd42::/64")).expect("JSON");
        assert_eq!(
            parsed["plugins"][0]["ipam"]["routes"],
            serde_json::json!([{"dst": "::/0"}])
        );
    }

    /// The template, with its loops run by hand over two ranges as containerd's would, is
    /// the JSON of a dual-stack network.
    #[test]
    fn the_template_makes_one_range_set_per_pod_range() {
        let dir = Path::new("/var/lib/rudder/containerd");
        let text = template(dir);
        let ranges = r#"{{range $i, $range := .PodCIDRRanges}}{{if $i}},{{end}}[{"subnet":"{{$range}}"}]{{end}}"#;
        let routes =
            r#"{{range $i, $route := .Routes}}{{if $i}},{{end}}{"dst":"{{$route}}"}{{end}}"#;
        assert!(text.contains(ranges) && text.contains(routes), "{text}");
        let rendered = text
            .replace(
                ranges,
                r#"[{"subnet":"10.42.1.0/24"}],[{"subnet":"fd42:0:0:1::/64"}]"#,
            )
            .replace(routes, r#"{"dst":"0.0.0.0/0"},{"dst":"::/0"}"#);
        let parsed: serde_json::Value = serde_json::from_str(&rendered).expect("JSON");
        let ipam = &parsed["plugins"][0]["ipam"];
        assert_eq!(ipam["ranges"][1][0]["subnet"], "fd42:0:0:1::/64");
        assert_eq!(ipam["routes"][1]["dst"], "::/0");
        assert_eq!(ipam["type"], "host-local");
    }
}
