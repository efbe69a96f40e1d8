//! A real `rudder server` process for end-to-end tests: started on a free port with a
//! temporary data dir and a given storage URL, driven with the installed kubectl binaries, and
//! killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Where the Google Cloud SDK installs one kubectl per minor version (`kubectl.1.27` …).
pub const KUBECTL_DIR: &str = "/usr/lib/google-cloud-sdk/bin";

/// How long a server gets to write its kubeconfig and answer `/readyz`.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// What a started server must answer `ok` to.
const READY: &str = "/readyz";

/// A running `rudder server`; killed (and its data dir removed) on drop.
pub struct RudderServer {
    child: Child,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl RudderServer {
    /// Starts `binary server` (pass `env!("CARGO_BIN_EXE_rudder")`) on `127.0.0.1:0` over
    /// `storage_url`, and waits until it has written its admin kubeconfig and `/readyz`
    /// answers `ok`. Panics, with the server's log, if it exits or never becomes ready.
    pub fn start(binary: &str, storage_url: &str) -> RudderServer {
        Self::start_command(Command::new(binary), storage_url, &[])
    }

    /// The apiserver alone on `storage_url`: no controller-manager, scheduler or node agent.
    pub fn start_apiserver_only(binary: &str, storage_url: &str) -> RudderServer {
        Self::start_with_args(
            binary,
            storage_url,
            &[
                "--disable-controller-manager",
                "--disable-scheduler",
                "--disable-agent",
            ],
        )
    }

    /// As [`RudderServer::start`], with more `rudder server` flags (`--controllers=…`, say).
    pub fn start_with_args(binary: &str, storage_url: &str, args: &[&str]) -> RudderServer {
        Self::start_command(Command::new(binary), storage_url, args)
    }

    /// As [`RudderServer::start`], with the process's soft open-file limit lowered to
    /// `soft_limit` first (as a default `ulimit -n 1024` would leave it).
    pub fn start_with_open_file_limit(
        binary: &str,
        storage_url: &str,
        soft_limit: u64,
    ) -> RudderServer {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("ulimit -Sn {soft_limit} && exec \"$0\" \"$@\""))
            .arg(binary);
        Self::start_command(command, storage_url, &[])
    }

    /// Servers run no node agent unless the test asks for one (a runtime endpoint, a pod range
    /// for the server's own containerd, a kubelet port) or says so itself: on a machine with
    /// containerd every server would otherwise start a containerd of its own and run the tests'
    /// pods for real.
    fn start_command(command: Command, storage_url: &str, args: &[&str]) -> RudderServer {
        let given = |flag: &str| args.iter().any(|arg| arg.starts_with(flag));
        let wants_agent = [
            "--disable-agent",
            "--container-runtime-endpoint",
            "--pod-cidr",
            "--kubelet-port",
        ]
        .into_iter()
        .any(given);
        let no_agent: &[&str] = if wants_agent {
            &[]
        } else {
            &["--disable-agent"]
        };
        // An agent in the tests' own network namespace routes no Services and serves no DNS
        // unless the test names the pod network (the network tests run theirs in a namespace
        // of their own) and does not say otherwise itself.
        let no_network: Vec<&str> = ["--disable-kube-proxy", "--disable-cluster-dns"]
            .into_iter()
            .filter(|flag| wants_agent && !given("--cluster-cidr") && !given(flag))
            .collect();
        let listen: &[&str] = if args.iter().any(|arg| arg.starts_with("--listen")) {
            &[]
        } else {
            &["--listen", "127.0.0.1:0"]
        };
        let dir = tempfile::tempdir().expect("temporary data dir");
        let mut server = Self::spawn_in(
            command,
            dir,
            storage_url,
            args,
            listen,
            no_agent,
            &no_network,
        );
        server.wait_ready(READY);
        server
    }

    /// Runs the server command in `dir` (its data dir is `dir/data`, its log `dir/server.log`);
    /// the caller waits for it to be ready.
    fn spawn_in(
        mut command: Command,
        dir: tempfile::TempDir,
        storage_url: &str,
        args: &[&str],
        listen: &[&str],
        no_agent: &[&str],
        no_network: &[&str],
    ) -> RudderServer {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("server.log"))
            .expect("server log file");
        let child = command
            .arg("server")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(listen)
            .args(["--storage", storage_url])
            .args(args)
            .args(no_agent)
            .args(no_network)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("server log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot run {command:?}: {error}"));
        let kubeconfig = dir.path().join("data").join("kubeconfig.yaml");
        RudderServer {
            child,
            dir,
            kubeconfig,
        }
    }

    /// Waits until the admin kubeconfig is written and `probe` (a health path) answers `ok`.
    fn wait_ready(&mut self, probe: &str) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "rudder server exited ({status}) before it was ready; its log:\n{}",
                    self.log()
                );
            }
            // The file is written whole once the server listens and has bootstrapped.
            let written = std::fs::read_to_string(&self.kubeconfig)
                .is_ok_and(|text| text.contains("current-context"));
            if written {
                let output = self.kubectl("1.33", &["get", "--raw", probe]);
                if output.status.success() && output.stdout == b"ok" {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "rudder server was not ready within {START_TIMEOUT:?}; its log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The server's data dir.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The process id of the server.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The admin kubeconfig the server wrote.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// What the server has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// A `kubectl.<version>` command (e.g. version `"1.27"`) aimed at this server with its
    /// admin kubeconfig and a discovery cache of its own, for callers that spawn it.
    pub fn kubectl_command(&self, version: &str) -> Command {
        let mut command = Command::new(format!("{KUBECTL_DIR}/kubectl.{version}"));
        command
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", self.dir.path().join("kube-cache"))
            .env_remove("KUBECTL_EXTERNAL_DIFF")
            .stdin(Stdio::null());
        command
    }

    /// Runs `kubectl.<version> args…` against this server and returns its output.
    pub fn kubectl(&self, version: &str, args: &[&str]) -> Output {
        self.kubectl_command(version)
            .args(args)
            .output()
            .unwrap_or_else(|error| panic!("cannot run kubectl.{version}: {error}"))
    }

    /// Runs kubectl `version` against this server; its stdout, or a panic with its stderr
    /// when it fails.
    pub fn kubectl_ok(&self, version: &str, args: &[&str]) -> String {
        let output = self.kubectl(version, args);
        assert!(
            output.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// A kubeconfig for this server's cluster: the admin's, with `auth` in place of the
    /// admin's credentials when given, aimed at `other`'s address when given (another server
    /// of the same cluster). Written (as JSON, which is YAML) into the temporary directory.
    pub fn kubeconfig_with(
        &self,
        auth: Option<kube::config::AuthInfo>,
        other: Option<&RudderServer>,
    ) -> PathBuf {
        let mut config = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .expect("the server's admin kubeconfig");
        if let Some(auth) = auth {
            for user in &mut config.auth_infos {
                user.auth_info = Some(auth.clone());
            }
        }
        if let Some(other) = other {
            let aim = kube::config::Kubeconfig::read_from(&other.kubeconfig)
                .expect("the other server's admin kubeconfig");
            let address = aim.clusters[0]
                .cluster
                .as_ref()
                .expect("a cluster entry")
                .server
                .clone();
            for cluster in config
                .clusters
                .iter_mut()
                .filter_map(|c| c.cluster.as_mut())
            {
                cluster.server = address.clone();
            }
        }
        static WRITTEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let index = WRITTEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let text = serde_json::to_string(&config).expect("a kubeconfig serializes");
        self.write_file(&format!("kubeconfig-{index}.json"), &text)
    }

    /// Runs `kubectl.<version> --kubeconfig FILE args…`; returns (exit code, stdout, stderr),
    /// with the transcript on stderr.
    pub fn kubectl_with(
        &self,
        version: &str,
        kubeconfig: &Path,
        args: &[&str],
    ) -> (i32, String, String) {
        let output = self
            .kubectl_command(version)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .output()
            .unwrap_or_else(|error| panic!("cannot run kubectl.{version}: {error}"));
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        eprintln!(
            "$ kubectl.{version} --kubeconfig {} {}\n{}{}",
            kubeconfig.display(),
            args.join(" "),
            text(&output.stdout),
            text(&output.stderr)
        );
        (
            output.status.code().unwrap_or(-1),
            text(&output.stdout),
            text(&output.stderr),
        )
    }

    /// A file in the server's temporary directory holding `contents` (manifests for `-f`).
    pub fn write_file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).expect("write a file in the temporary dir");
        path
    }
}

impl RudderServer {
    /// Stops the server (SIGTERM) and starts it again on `storage_url`, with the same data
    /// dir, address and certificates, and no agent — what a user does after moving the
    /// cluster's store (`rudder storage migrate`). The log goes on in the same file.
    pub fn restart_on(self, binary: &str, storage_url: &str) -> RudderServer {
        let mut old = self;
        assert!(old.terminate(), "the server did not stop within 20 s");
        old.start_again(binary, storage_url, &[], READY)
    }

    /// Kills the server with SIGKILL — no chance to finish a write or stop cleanly — and
    /// starts it again as [`RudderServer::restart_on`] does, with the flags `args`.
    pub fn kill_and_restart(self, binary: &str, storage_url: &str, args: &[&str]) -> RudderServer {
        let mut old = self;
        let _ = old.child.kill();
        let _ = old.child.wait();
        old.start_again(binary, storage_url, args, READY)
    }

    /// As [`RudderServer::kill_and_restart`], ready once `probe` answers `ok` — for a server
    /// that is not meant to pass every readiness check (`/readyz?exclude=kms-providers` while
    /// its KMS plugin is down).
    pub fn kill_and_restart_until(
        self,
        binary: &str,
        storage_url: &str,
        args: &[&str],
        probe: &str,
    ) -> RudderServer {
        let mut old = self;
        let _ = old.child.kill();
        let _ = old.child.wait();
        old.start_again(binary, storage_url, args, probe)
    }

    /// Starts a stopped server again in its data dir, on the address its kubeconfig names,
    /// and waits until `probe` answers `ok`.
    fn start_again(
        mut self,
        binary: &str,
        storage_url: &str,
        args: &[&str],
        probe: &str,
    ) -> RudderServer {
        let kubeconfig = std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig");
        let address = kubeconfig
            .lines()
            .find_map(|line| line.trim().strip_prefix("server: "))
            .map(|url| {
                url.trim_matches('"')
                    .trim_start_matches("https://")
                    .to_string()
            })
            .expect("the kubeconfig names the server");
        let placeholder = tempfile::tempdir().expect("temporary dir");
        let dir = std::mem::replace(&mut self.dir, placeholder);
        drop(self);
        let listen = ["--listen", address.as_str()];
        let mut server = Self::spawn_in(
            Command::new(binary),
            dir,
            storage_url,
            args,
            &listen,
            &["--disable-agent"],
            &[],
        );
        server.wait_ready(probe);
        server
    }

    /// Stops the server as a user would (SIGTERM), so it stops what it started (its own
    /// containerd); SIGKILL if it has not stopped within 20 s. Returns whether it stopped
    /// by itself.
    pub fn terminate(&mut self) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for RudderServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
