use super::*;

const KEY_A: &str = "c2VjcmV0IGlzIHNlY3VyZSwgaXMgaXQgc2VjdXJlPz8=";
const KEY_B: &str = "YW5vdGhlciBzZWNyZXQsIGFsc28gMzIgYnl0ZXMhISE=";

fn encryption(providers: &str) -> Encryption {
    Encryption::parse(&format!(
        "apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets, '*.apps']
    providers:
{providers}
  - resources: ['*.*']
    providers: [identity: {{}}]
"
    ))
    .expect("valid config")
}

fn aesgcm(keys: &[(&str, &str)]) -> String {
    let keys: Vec<String> = keys
        .iter()
        .map(|(name, secret)| format!("            - {{name: {name}, secret: {secret}}}"))
        .collect();
    format!("      - aesgcm:\n          keys:\n{}\n", keys.join("\n"))
}

const KEY: &[u8] = b"/registry/secrets/default/s";

#[test]
fn the_first_provider_writes_with_upstreams_prefix_and_reads_back() {
    let enc = encryption(&aesgcm(&[("one", KEY_A), ("two", KEY_B)]));
    let chain = enc.chain_for("", "secrets").expect("covered");
    let sealed = chain.seal(b"plain".to_vec(), KEY).expect("seals");
    assert!(sealed.starts_with(b"k8s:enc:aesgcm:v1:one:"));
    let opened = chain.open(&sealed, KEY).expect("opens");
    assert_eq!(&*opened.plain, b"plain");
    assert!(!opened.stale);
    assert_eq!(opened.label, "k8s:enc:aesgcm:v1:");
}

#[test]
fn reordering_keys_rotates_them() {
    let before = encryption(&aesgcm(&[("one", KEY_A), ("two", KEY_B)]));
    let old = before
        .chain_for("", "secrets")
        .expect("covered")
        .seal(b"v".to_vec(), KEY)
        .expect("seals");
    let after = encryption(&aesgcm(&[("two", KEY_B), ("one", KEY_A)]));
    let chain = after.chain_for("", "secrets").expect("covered");
    let opened = chain.open(&old, KEY).expect("the old key still reads");
    assert!(opened.stale, "read by a key that no longer writes");
    let new = chain.seal(b"v".to_vec(), KEY).expect("seals");
    assert!(new.starts_with(b"k8s:enc:aesgcm:v1:two:"));
    let dropped = encryption(&aesgcm(&[("two", KEY_B)]));
    let error = dropped
        .chain_for("", "secrets")
        .expect("covered")
        .open(&old, KEY)
        .err()
        .expect("the removed key cannot read");
    assert!(
        error.to_string().contains("k8s:enc:aesgcm:v1:one:"),
        "{error}"
    );
}

#[test]
fn identity_first_writes_plain_and_still_reads_encrypted_values() {
    let encrypting = encryption(&aesgcm(&[("one", KEY_A)]));
    let sealed = encrypting
        .chain_for("", "secrets")
        .expect("covered")
        .seal(b"v".to_vec(), KEY)
        .expect("seals");
    let decrypting = encryption(&format!(
        "      - identity: {{}}\n{}",
        aesgcm(&[("one", KEY_A)])
    ));
    let chain = decrypting.chain_for("", "secrets").expect("covered");
    assert_eq!(chain.seal(b"v".to_vec(), KEY).expect("plain"), b"v");
    let opened = chain.open(&sealed, KEY).expect("reads");
    assert_eq!(&*opened.plain, b"v");
    assert!(opened.stale);
    let plain = chain.open(b"{\"a\":1}", KEY).expect("plain reads");
    assert!(!plain.stale);
}

#[test]
fn rules_cover_resources_by_name_group_wildcard_and_order() {
    let enc = encryption(&aesgcm(&[("one", KEY_A)]));
    let writer = |group: &str, resource: &str| {
        enc.chain_for(group, resource)
            .map(|chain| chain.writer_label().to_string())
    };
    assert_eq!(writer("", "secrets").as_deref(), Some("k8s:enc:aesgcm:v1:"));
    assert_eq!(
        writer("apps", "deployments").as_deref(),
        Some("k8s:enc:aesgcm:v1:")
    );
    assert_eq!(writer("", "configmaps").as_deref(), Some("identity"));
    let none = Encryption::none();
    assert!(none.chain_for("", "secrets").is_none());
}

#[test]
fn encrypted_values_of_uncovered_resources_are_errors() {
    assert!(open_uncovered(b"k8s:enc:aesgcm:v1:one:xxxx").is_err());
    assert_eq!(open_uncovered(b"{}").expect("plain"), b"{}");
}

#[test]
fn every_cipher_provider_works_through_its_chain() {
    for provider in ["aesgcm", "aescbc", "secretbox"] {
        let enc = encryption(&format!(
            "      - {provider}:\n          keys:\n            - {{name: k, secret: {KEY_A}}}\n"
        ));
        let chain = enc.chain_for("", "secrets").expect("covered");
        let sealed = chain.seal(b"hello".to_vec(), KEY).expect(provider);
        assert!(sealed.starts_with(format!("k8s:enc:{provider}:v1:k:").as_bytes()));
        assert_eq!(&*chain.open(&sealed, KEY).expect(provider).plain, b"hello");
    }
}

#[test]
fn a_kms_provider_whose_plugin_is_not_running_builds_but_cannot_seal() {
    let encryption = Encryption::parse(
        "apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - kms: {apiVersion: v2, name: p, endpoint: 'unix:///nonexistent/kms.sock'}
",
    )
    .expect("the plugin may start after the server");
    let chain = encryption.chain_for("", "secrets").expect("covered");
    let error = chain.seal(b"v".to_vec(), KEY).expect_err("no seed");
    let error = error.to_string();
    assert!(
        error.contains("k8s:enc:kms:v2:p:") && error.contains("unix:///nonexistent/kms.sock"),
        "{error}"
    );
}
