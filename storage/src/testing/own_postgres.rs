//! A PostgreSQL server of the test case's own (a new cluster in a temporary directory, on a
//! free loopback port), for fault tests that stop and start it. Run as the `postgres` user
//! when the tests run as root, as PostgreSQL insists.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A PostgreSQL cluster the case started; stopped (immediately) when dropped.
pub struct OwnPostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

impl OwnPostgres {
    /// A URL to the cluster's `postgres` database as the `postgres` user (trust auth).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Runs `pg_ctl` with `args` on the cluster; panics with its log when it fails.
    fn pg_ctl(&self, args: &[&str]) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let mut command = as_postgres(&self.bin.join("pg_ctl"));
        command
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .arg("-o")
            .arg(options)
            .args(args);
        let output = command.output().expect("pg_ctl runs");
        assert!(
            output.status.success(),
            "pg_ctl {args:?} failed: {}{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
        );
    }

    /// Runs one SQL statement as `postgres` through `psql`; panics with its error when it fails.
    pub fn sql(&self, statement: &str) {
        let output = as_postgres(&self.bin.join("psql"))
            .arg("-h")
            .arg(self.dir.path())
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
            ])
            .args(["-v", "ON_ERROR_STOP=1", "-c", statement])
            .output()
            .expect("psql runs");
        assert!(
            output.status.success(),
            "{statement}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Stops the server (`pg_ctl stop -m fast`: open transactions are rolled back).
    pub fn stop(&self) {
        self.pg_ctl(&["stop", "-w", "-m", "fast"]);
    }

    /// Starts it again and waits until it accepts connections.
    pub fn start(&self) {
        self.pg_ctl(&["start", "-w", "-t", "30"]);
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = as_postgres(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .args(["stop", "-m", "immediate"])
            .output();
    }
}

/// `program` run as the `postgres` user when we are root.
fn as_postgres(program: &Path) -> Command {
    // Whether we are root, asked of `id` rather than through libc.
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| output.stdout.trim_ascii() == b"0");
    if root {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// The newest installed PostgreSQL's `bin` directory.
fn postgres_bin() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("pg_ctl").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// Initialises and starts a cluster of the case's own; `None` (loudly) when PostgreSQL's
/// server binaries are missing outside CI, a failure under `CI=true`.
pub fn own_postgres() -> Option<OwnPostgres> {
    let Some(bin) = postgres_bin() else {
        if super::in_ci() {
            panic!(
                "no PostgreSQL server under /usr/lib/postgresql but CI=true; run scripts/test.sh"
            );
        }
        eprintln!("SKIPPED: no PostgreSQL server binaries under /usr/lib/postgresql");
        return None;
    };
    let dir = tempfile::tempdir().expect("temporary directory");
    let _ = Command::new("chown")
        .args(["postgres:postgres"])
        .arg(dir.path())
        .status();
    let port = super::free_port();
    let postgres = OwnPostgres { bin, dir, port };
    let output = as_postgres(&postgres.bin.join("initdb"))
        .arg("-D")
        .arg(postgres.data())
        .args(["-A", "trust", "-U", "postgres", "--no-sync"])
        .output()
        .expect("initdb runs");
    assert!(
        output.status.success(),
        "initdb failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    postgres.start();
    Some(postgres)
}
