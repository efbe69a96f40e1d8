//! What the tests against the real `nft` and `iptables` share: a network namespace of the
//! test's own (so the host's rules are never touched) and a few Services with their
//! EndpointSlices. Under `CI=true` a namespace that cannot be made fails the test.

// Test support: a failed expectation is meant to panic; not every test uses every helper.
#![allow(clippy::unwrap_used, dead_code)]

use std::process::Command;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rudder_network::proxy::nft::Cli;
use serde_json::json;

pub struct Netns(pub String);

impl Netns {
    pub fn create(name: &str) -> Option<Netns> {
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        let made = Command::new("ip").args(["netns", "add", name]).output();
        match made {
            Ok(output) if output.status.success() => Some(Netns(name.to_owned())),
            other => {
                let why = format!("cannot create a network namespace: {other:?}");
                assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
                eprintln!("skipping (not CI): {why}");
                None
            }
        }
    }

    pub fn nft(&self) -> Cli {
        Cli {
            command: ["ip", "netns", "exec", &self.0, "nft"]
                .map(String::from)
                .to_vec(),
        }
    }

    pub fn list(&self) -> String {
        let output = Command::new("ip")
            .args(["netns", "exec", &self.0, "nft", "list", "ruleset"])
            .output()
            .expect("nft list ruleset");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl Netns {
    /// The iptables programs, run inside the namespace.
    pub fn iptables(&self) -> rudder_network::proxy::iptables::Cli {
        rudder_network::proxy::iptables::Cli {
            prefix: ["ip", "netns", "exec", &self.0].map(String::from).to_vec(),
        }
    }

    /// `program args…` inside the namespace; its standard output (panics when it fails).
    pub fn run(&self, program: &str, args: &[&str]) -> String {
        let output = Command::new("ip")
            .args(["netns", "exec", &self.0, program])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            output.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Runs `work` on a thread of its own that has entered the namespace, so the sockets it
    /// opens are the namespace's.
    pub fn within<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.0);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .unwrap_or_else(|e| panic!("entering {path}: {e}"));
            work()
        })
        .join()
        .expect("the thread in the namespace")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

pub fn services() -> Vec<Arc<Service>> {
    let specs = [
        (
            "web",
            json!({"clusterIP": "10.96.0.20", "type": "NodePort", "sessionAffinity": "ClientIP",
            "ports": [{"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"}]}),
        ),
        (
            "dns",
            json!({"clusterIP": "10.96.0.10", "externalTrafficPolicy": "Local", "type": "NodePort",
            "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053},
                      {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}),
        ),
        (
            "empty",
            json!({"clusterIP": "10.96.0.30", "ports": [{"name": "http", "port": 80}]}),
        ),
        (
            "sctp",
            json!({"clusterIP": "10.96.0.40", "internalTrafficPolicy": "Local",
            "ports": [{"name": "s", "port": 9, "protocol": "SCTP"}]}),
        ),
    ];
    specs
        .into_iter()
        .map(|(name, spec)| {
            Arc::new(
                serde_json::from_value(
                    json!({"metadata": {"name": name, "namespace": "ns"}, "spec": spec}),
                )
                .expect("a Service"),
            )
        })
        .collect()
}

pub fn slices(web_ips: &[&str]) -> Vec<Arc<EndpointSlice>> {
    let slice = |service: &str, ips: &[&str], ports: serde_json::Value| -> Arc<EndpointSlice> {
        let endpoints: Vec<_> = ips
            .iter()
            .map(|ip| json!({"addresses": [ip], "nodeName": "node-a", "conditions": {"ready": true}}))
            .collect();
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": format!("{service}-x"), "namespace": "ns",
                    "labels": {"kubernetes.io/service-name": service}},
                "addressType": "IPv4", "endpoints": endpoints, "ports": ports,
            }))
            .expect("an EndpointSlice"),
        )
    };
    vec![
        slice(
            "web",
            web_ips,
            json!([{"name": "http", "port": 8080, "protocol": "TCP"}]),
        ),
        slice(
            "dns",
            &["10.244.1.5"],
            json!([{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]),
        ),
        slice(
            "sctp",
            &["10.244.1.6"],
            json!([{"name": "s", "port": 9, "protocol": "SCTP"}]),
        ),
    ]
}
