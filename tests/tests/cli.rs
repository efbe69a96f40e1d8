//! The `rudder` CLI as a user runs it: version, storage check, and its error messages.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

fn run(args: &[&str]) -> (bool, String, String) {
    let output = rudder_tests::run(env!("CARGO_BIN_EXE_rudder"), args);
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn version_names_the_release_and_the_drivers() {
    let (ok, stdout, _) = run(&["version"]);
    assert!(ok);
    assert!(stdout.starts_with("rudder 0."), "{stdout}");
    assert!(
        stdout.contains("sqlite, postgres, mysql, spanner, etcd"),
        "{stdout}"
    );
}

#[test]
fn storage_check_opens_a_new_sqlite_file_and_reports_its_status() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("nested/state.db").display());
    let (ok, stdout, stderr) = run(&["storage", "check", "--storage", &url]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("driver:           sqlite"), "{stdout}");
    assert!(stdout.contains("revision:         1"), "{stdout}");
    assert!(dir.path().join("nested/state.db").exists());
    // A second check finds the same store (migrations are idempotent).
    let (ok, _, stderr) = run(&["storage", "check", "--storage", &url]);
    assert!(ok, "{stderr}");
}

#[test]
fn storage_check_history_records_two_servers_on_sqlite_and_finds_them_linearizable() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("state.db").display());
    let (ok, stdout, stderr) = run(&[
        "storage",
        "check-history",
        "--storage",
        &url,
        "--two-servers",
        "--clients",
        "6",
        "--operations",
        "100",
        "--rounds",
        "2",
    ]);
    assert!(ok, "{stdout}{stderr}");
    assert_eq!(stdout.matches("600 operations").count(), 2, "{stdout}");
    assert!(stdout.contains("0 anomalies, 0 undecided"), "{stdout}");
    assert!(stdout.contains("linearizable: every round"), "{stdout}");
    // It cleans up after itself: the store holds nothing under its prefix.
    let (ok, _, stderr) = run(&[
        "storage",
        "get",
        "/rudder-check-history/",
        "--storage",
        &url,
    ]);
    assert!(!ok);
    assert!(stderr.contains("not found"), "{stderr}");
}

#[test]
fn storage_check_names_the_problem_and_the_fix_in_one_line() {
    let cases = [
        ("state.db", "has no scheme: use sqlite://PATH"),
        ("redis://db/x", "unknown storage scheme"),
        (
            "mysql://root@127.0.0.1:1/x?connect_timeout=2",
            "check that MySQL/MariaDB is running",
        ),
        (
            "postgres://postgres@127.0.0.1:1/x?connect_timeout=2",
            "check that PostgreSQL is running",
        ),
        (
            "etcd://127.0.0.1:1?connect_timeout=2",
            "check that etcd is running",
        ),
        ("sqlite://x.db?synchronous=sometimes", "use normal or full"),
    ];
    for (url, needle) in cases {
        let (ok, stdout, stderr) = run(&["storage", "check", "--storage", url]);
        assert!(!ok, "{url} must fail");
        assert!(stdout.is_empty(), "{url}: {stdout}");
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "{url}: one line, got {stderr}"
        );
        assert!(
            stderr.starts_with("error: ") && stderr.contains(needle),
            "{url}: {stderr}"
        );
    }
}

#[test]
fn storage_check_reports_bad_postgres_credentials() {
    let Some(base) = rudder_storage::testing::service(rudder_storage::testing::POSTGRES_ENV) else {
        return;
    };
    let url = base.replacen("postgres://postgres@", "postgres://no_such_role:secret@", 1);
    let (ok, _, stderr) = run(&["storage", "check", "--storage", &url]);
    assert!(!ok);
    assert!(stderr.contains("check the user and password"), "{stderr}");
}

/// TLS to PostgreSQL from the URL alone: `sslmode=require`, and `verify-full` against a root CA
/// (here the server's own self-signed certificate, as Debian sets PostgreSQL up).
#[test]
fn storage_check_reaches_postgres_over_tls() {
    let Some(base) = rudder_storage::testing::service(rudder_storage::testing::POSTGRES_ENV) else {
        return;
    };
    let ca = "/etc/ssl/certs/ssl-cert-snakeoil.pem";
    let ssl_on = std::process::Command::new("psql")
        .args([base.as_str(), "-Atc", "SHOW ssl"])
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "on")
        .unwrap_or(false);
    if !ssl_on || !std::path::Path::new(ca).exists() {
        // Only a throw-away cluster started by scripts/test.sh lacks TLS; say so loudly.
        eprintln!("SKIPPED: this PostgreSQL has no TLS (ssl = off) or {ca} is missing");
        return;
    }
    let schema = format!("tls_{:08x}", rand::random::<u32>());
    let separator = if base.contains('?') { '&' } else { '?' };
    let required = format!("{base}{separator}sslmode=require&schema={schema}");
    let (ok, stdout, stderr) = run(&["storage", "check", "--storage", &required]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("driver:           postgres"), "{stdout}");

    // The certificate names localhost: verify-full passes for that name and fails for the IP.
    let verify = format!("{required}&sslmode=verify-full&sslrootcert={ca}");
    if verify.contains("@127.0.0.1:") {
        let (ok, _, stderr) = run(&[
            "storage",
            "check",
            "--storage",
            &verify.replace("@127.0.0.1:", "@localhost:"),
        ]);
        assert!(ok, "verify-full against the server's CA: {stderr}");
        let (ok, _, stderr) = run(&["storage", "check", "--storage", &verify]);
        assert!(!ok, "a certificate for another name must be refused");
        assert!(stderr.contains("check sslmode and sslrootcert"), "{stderr}");
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(rudder_storage::wipe(&required)).unwrap();
}

/// The etcd gateway serves every object: beyond loopback only with client-certificate TLS.
#[test]
fn the_etcd_gateway_listens_beyond_loopback_only_with_client_certificate_tls() {
    let binary = env!("CARGO_BIN_EXE_rudder");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let refused = rudder_tests::run(
        binary,
        &["etcd", "--data-dir", data, "--listen", "0.0.0.0:0"],
    );
    assert!(!refused.status.success());
    let error = String::from_utf8_lossy(&refused.stderr);
    assert!(
        error.contains("client-certificate authentication"),
        "{error}"
    );
    let half = rudder_tests::run(
        binary,
        &[
            "etcd",
            "--data-dir",
            data,
            "--listen",
            "127.0.0.1:0",
            "--cert-file",
            "/nonexistent",
        ],
    );
    assert!(!half.status.success());
    assert!(String::from_utf8_lossy(&half.stderr).contains("give both"));
}

#[test]
fn bench_controllers_brings_every_deployment_to_available_and_reports_it() {
    // A small run of `rudder bench controllers` on SQLite: the apiserver, the scheduler, a
    // `rudder controller-manager` child and the hollow nodes, end to end (no figure asserted:
    // speed is for the benchmark itself to report).
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_rudder"))
        .args(["bench", "controllers", "--subjects", "sqlite"])
        .args(["--deployments", "3", "--replicas", "2", "--nodes", "2"])
        .args(["--timeout-seconds", "120"])
        .env("TMPDIR", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let row = stdout
        .lines()
        .find(|line| line.contains("sqlite"))
        .unwrap_or_else(|| panic!("no sqlite row in:\n{stdout}"));
    assert!(row.contains("3/3"), "every Deployment available: {row}");
    assert!(row.contains("6/6"), "every pod seen: {row}");
    assert!(!row.contains("timed out"), "{row}");
    // The driver's directory is gone after the run.
    assert!(!dir.path().join("rudder-bench-controllers-sqlite").exists());
}
