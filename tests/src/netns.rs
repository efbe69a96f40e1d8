//! A test's own "node": a network namespace joined to the host by a veth pair
//! (`10.201.<k>.1` on the host, `10.201.<k>.2` inside), with a default route out through the
//! host and a host route to the node's pod range. The node agent runs inside it through
//! `nsenter --net` (which, unlike `ip netns exec`, keeps the host's mounts, cgroups included),
//! so its containerd, bridge, pods and nftables rules are the namespace's alone. Under
//! `CI=true` a namespace that cannot be made fails the test.

// Test support: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::process::Command;

pub struct NodeNetns {
    pub name: String,
    pub index: u8,
    /// The host's end of the veth pair.
    pub host_ip: String,
    /// The node's address (inside the namespace).
    pub node_ip: String,
    pub pod_cidr: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|error| format!("ip {}: {error}", args.join(" ")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

impl NodeNetns {
    /// Node `index` (1–250) with pods in `pod_cidr`; `None` (outside CI only) when this
    /// machine cannot make network namespaces.
    pub fn create(index: u8, pod_cidr: &str) -> Option<NodeNetns> {
        let node = NodeNetns {
            name: format!("rdr-node-{index}"),
            index,
            host_ip: format!("10.201.{index}.1"),
            node_ip: format!("10.201.{index}.2"),
            pod_cidr: pod_cidr.to_owned(),
        };
        node.remove();
        match node.setup() {
            Ok(()) => Some(node),
            Err(why) => {
                node.remove();
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "cannot make a network namespace under CI=true: {why}"
                );
                eprintln!("skipping: cannot make a network namespace: {why}");
                None
            }
        }
    }

    fn host_link(&self) -> String {
        format!("rdrh{}", self.index)
    }

    fn node_link(&self) -> String {
        format!("rdrn{}", self.index)
    }

    fn setup(&self) -> Result<(), String> {
        let (ns, host, node) = (self.name.as_str(), self.host_link(), self.node_link());
        let host_cidr = format!("{}/24", self.host_ip);
        let node_cidr = format!("{}/24", self.node_ip);
        ip(&["netns", "add", ns])?;
        ip(&["link", "add", &host, "type", "veth", "peer", "name", &node])?;
        ip(&["link", "set", &node, "netns", ns])?;
        ip(&["addr", "add", &host_cidr, "dev", &host])?;
        ip(&["link", "set", &host, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", ns, "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&["addr", "add", &node_cidr, "dev", &node])?;
        inside(&["link", "set", &node, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        inside(&["route", "add", "default", "via", &self.host_ip])?;
        ip(&["route", "replace", &self.pod_cidr, "via", &self.node_ip])?;
        let forwarding = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
            ])
            .status()
            .map_err(|error| format!("sysctl: {error}"))?;
        if !forwarding.success() {
            return Err("sysctl net.ipv4.ip_forward=1 failed in the namespace".into());
        }
        Ok(())
    }

    fn remove(&self) {
        let _ = ip(&["route", "del", &self.pod_cidr]);
        let _ = ip(&["link", "del", &self.host_link()]);
        let _ = ip(&["netns", "del", &self.name]);
    }

    /// `program` run inside the namespace (network only).
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/run/netns/{}", self.name))
            .arg(program);
        command
    }
}

impl Drop for NodeNetns {
    fn drop(&mut self) {
        self.remove();
    }
}
