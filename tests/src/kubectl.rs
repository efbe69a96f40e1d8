//! A kubectl of one version driving one `rudder server`, in one namespace, with a transcript
//! of every command on stderr so a failure shows what led to it.

// Test support: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::process::Output;

use serde_json::Value;

use crate::RudderServer;

/// One kubectl version against one server, in the test's namespace.
pub struct Kubectl<'a> {
    pub server: &'a RudderServer,
    /// `1.27` … `1.33`: which `kubectl.1.NN` runs.
    pub version: &'static str,
    /// Where `*_ns` commands run.
    pub namespace: String,
}

impl Kubectl<'_> {
    /// Runs a command; returns its output whatever its exit code.
    pub fn run(&self, args: &[&str]) -> Output {
        self.run_with_env(args, &[])
    }

    /// Runs kubectl with extra environment variables (`KUBE_EDITOR` for `edit`).
    pub fn run_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = self.server.kubectl_command(self.version);
        command.args(args);
        for (name, value) in env {
            command.env(name, value);
        }
        let output = command
            .output()
            .unwrap_or_else(|error| panic!("cannot run kubectl.{}: {error}", self.version));
        eprintln!(
            "$ {}kubectl.{} {}\n{}{}[rc {}]",
            env.iter()
                .map(|(name, value)| format!("{name}={value:?} "))
                .collect::<String>(),
            self.version,
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            output.status.code().unwrap_or(-1)
        );
        output
    }

    fn expect_ok(&self, args: &[&str], output: Output) -> String {
        assert!(
            output.status.success(),
            "kubectl.{} {} failed: {}",
            self.version,
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Runs a command that must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        self.expect_ok(args, self.run(args))
    }

    /// Runs a command in the test namespace that must succeed; returns its stdout.
    pub fn ok_ns(&self, args: &[&str]) -> String {
        self.ok(&self.in_namespace(args))
    }

    /// Runs a command in the test namespace, with extra environment variables, that must
    /// succeed; returns its stdout.
    pub fn ok_ns_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let args = self.in_namespace(args);
        self.expect_ok(&args, self.run_with_env(&args, env))
    }

    /// Runs a command that must exit 1; returns its output.
    pub fn exits_1(&self, args: &[&str]) -> Output {
        let output = self.run(args);
        assert_eq!(
            output.status.code(),
            Some(1),
            "kubectl.{} {} should exit 1",
            self.version,
            args.join(" ")
        );
        output
    }

    /// Runs a command that must exit 1; returns its stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        String::from_utf8(self.exits_1(args).stderr).unwrap()
    }

    /// Runs a command in the test namespace that must exit 1; returns its stderr.
    pub fn fails_ns(&self, args: &[&str]) -> String {
        self.fails(&self.in_namespace(args))
    }

    /// `args` preceded by `-n NAMESPACE`.
    pub fn in_namespace<'b>(&'b self, args: &[&'b str]) -> Vec<&'b str> {
        let mut all = vec!["-n", self.namespace.as_str()];
        all.extend_from_slice(args);
        all
    }

    /// `args -o json` in the test namespace, parsed.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.ok_ns(&all)).unwrap()
    }

    /// `get KIND NAME -o jsonpath=PATH` in the test namespace.
    pub fn jsonpath(&self, kind: &str, name: &str, path: &str) -> String {
        self.ok_ns(&["get", kind, name, "-o", &format!("jsonpath={path}")])
    }

    /// Writes a manifest into the server's temporary directory; returns its path.
    pub fn file(&self, name: &str, contents: &str) -> String {
        let path = self
            .server
            .write_file(&format!("{}-{name}", self.namespace), contents);
        path.to_str().unwrap().to_string()
    }
}
