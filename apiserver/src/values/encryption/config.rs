//! Upstream's `EncryptionConfiguration` (`apiserver.config.k8s.io/v1`), parsed and checked as
//! kube-apiserver checks it. Every check runs while the YAML is read, so an error names the
//! field at fault (`resources[0].providers[1].aesgcm.keys[0].secret`) and the line and column
//! where it is, and never shows a secret.

use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use base64::Engine;
use serde::de::{self, Deserializer};
use serde::Deserialize;

/// The API version and kind a configuration file must declare.
pub const API_VERSION: &str = "apiserver.config.k8s.io/v1";
pub const KIND: &str = "EncryptionConfiguration";

/// A whole configuration.
#[derive(Debug)]
pub struct EncryptionConfiguration {
    /// Rules in order: the first that covers a resource decides how it is stored.
    pub resources: Vec<ResourceRule>,
}

/// One entry of `resources`: which resources, and the providers that write (the first) and
/// read (any) them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawRule")]
pub struct ResourceRule {
    pub resources: Vec<Pattern>,
    pub providers: Vec<Provider>,
}

/// A resource as the configuration names it: `secrets`, `deployments.apps`, `*.apps` (a
/// group), `*.` (the core group) or `*.*` (everything).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    /// `None`: any resource of the group.
    pub resource: Option<String>,
    /// `None`: any group.
    pub group: Option<String>,
    /// As written, for messages.
    pub text: String,
}

impl Pattern {
    fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("Required value: resource name is required".into());
        }
        if text != text.to_lowercase() {
            return Err(format!(
                "Invalid value: {text:?}: resource name should not contain capital letters"
            ));
        }
        if text == "*" {
            return Err(format!("Invalid value: {text:?}: use '*.' to encrypt all the resources from core API group or *.* to encrypt all resources"));
        }
        let (resource, group) = text.split_once('.').unwrap_or((text, ""));
        let resource = (resource != "*").then(|| resource.to_string());
        if resource.as_deref().is_some_and(|r| r.contains('*')) {
            return Err(format!(
                "Invalid value: {text:?}: a wildcard may only stand for the whole resource or the whole group"
            ));
        }
        let group = (group != "*").then(|| group.to_string());
        if group.as_deref().is_some_and(|g| g.contains('*')) {
            return Err(format!(
                "Invalid value: {text:?}: a wildcard may only stand for the whole resource or the whole group"
            ));
        }
        Ok(Self {
            resource,
            group,
            text: text.to_string(),
        })
    }

    /// Whether the pattern covers `resource` in `group` ("" for the core group).
    pub fn covers(&self, group: &str, resource: &str) -> bool {
        self.group.as_deref().is_none_or(|g| g == group)
            && self.resource.as_deref().is_none_or(|r| r == resource)
    }

    /// Whether everything this pattern covers is covered by `other` too.
    fn is_masked_by(&self, other: &Pattern) -> bool {
        let group = match (&other.group, &self.group) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(b)) => a == b,
        };
        let resource = match (&other.resource, &self.resource) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(b)) => a == b,
        };
        group && resource
    }
}

/// One provider of a rule.
#[derive(Debug, Deserialize)]
#[serde(try_from = "RawProvider")]
pub enum Provider {
    Identity,
    AesGcm(Vec<Key>),
    AesCbc(Vec<Key>),
    Secretbox(Vec<Key>),
    Kms(Kms),
}

impl Provider {
    /// The name upstream's messages and metrics use.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Identity => "identity",
            Self::AesGcm(_) => "aesgcm",
            Self::AesCbc(_) => "aescbc",
            Self::Secretbox(_) => "secretbox",
            Self::Kms(_) => "kms",
        }
    }
}

/// A named key.
#[derive(Clone)]
pub struct Key {
    pub name: String,
    pub secret: Vec<u8>,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("name", &self.name)
            .field("secret", &"REDACTED")
            .finish()
    }
}

/// A KMS v2 plugin.
#[derive(Clone, Debug)]
pub struct Kms {
    pub name: String,
    /// The plugin's unix socket path (from `endpoint: unix:///path`).
    pub socket: String,
    pub timeout: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawFile {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    resources: Vec<ResourceRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    providers: Vec<Provider>,
}

impl TryFrom<RawRule> for ResourceRule {
    type Error = String;

    fn try_from(raw: RawRule) -> Result<Self, String> {
        if raw.resources.is_empty() {
            return Err(
                ".resources: Required value: at least one resource must be specified".into(),
            );
        }
        if raw.providers.is_empty() {
            return Err(
                ".providers: Required value: at least one provider must be specified".into(),
            );
        }
        let mut patterns: Vec<Pattern> = Vec::with_capacity(raw.resources.len());
        for (index, text) in raw.resources.iter().enumerate() {
            let pattern =
                Pattern::parse(text).map_err(|why| format!(".resources[{index}]: {why}"))?;
            if let Some(earlier) = patterns
                .iter()
                .find(|earlier| pattern.is_masked_by(earlier))
            {
                return Err(if earlier.text == pattern.text {
                    format!(".resources[{index}]: Duplicate value: {text:?}")
                } else {
                    format!(".resources[{index}]: Invalid value: {text:?}: using overlapping resources such as {:?} and {text:?} in the same resource list is not allowed as they will be masked", earlier.text)
                });
            }
            patterns.push(pattern);
        }
        let mut kms_names = HashSet::new();
        for (index, provider) in raw.providers.iter().enumerate() {
            if let Provider::Kms(kms) = provider {
                if !kms_names.insert(kms.name.clone()) {
                    return Err(format!(
                        ".providers[{index}].kms.name: Duplicate value: {:?}",
                        kms.name
                    ));
                }
            }
        }
        Ok(Self {
            resources: patterns,
            providers: raw.providers,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    identity: Option<Empty>,
    aesgcm: Option<Keys<AesSizes>>,
    aescbc: Option<Keys<AesSizes>>,
    secretbox: Option<Keys<SecretboxSizes>>,
    kms: Option<RawKms>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

impl TryFrom<RawProvider> for Provider {
    type Error = String;

    fn try_from(raw: RawProvider) -> Result<Self, String> {
        let mut found = Vec::new();
        if raw.identity.is_some() {
            found.push(Provider::Identity);
        }
        if let Some(keys) = raw.aesgcm {
            found.push(Provider::AesGcm(keys.into_keys("aesgcm")?));
        }
        if let Some(keys) = raw.aescbc {
            found.push(Provider::AesCbc(keys.into_keys("aescbc")?));
        }
        if let Some(keys) = raw.secretbox {
            found.push(Provider::Secretbox(keys.into_keys("secretbox")?));
        }
        if let Some(kms) = raw.kms {
            found.push(Provider::Kms(kms.check()?));
        }
        match found.len() {
            0 => Err("Invalid value: provider does not contain any of the expected providers: kms, aesgcm, aescbc, secretbox, identity".into()),
            1 => Ok(found.remove(0)),
            _ => Err("Invalid value: more than one provider specified in a single element, should split into different list elements".into()),
        }
    }
}

/// The key lengths a cipher takes.
trait KeySizes {
    const SIZES: &'static [usize];
}

struct AesSizes;
impl KeySizes for AesSizes {
    const SIZES: &'static [usize] = &[16, 24, 32];
}

struct SecretboxSizes;
impl KeySizes for SecretboxSizes {
    const SIZES: &'static [usize] = &[32];
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, bound = "")]
struct Keys<S: KeySizes> {
    #[serde(default)]
    keys: Vec<RawKey<S>>,
}

impl<S: KeySizes> Keys<S> {
    fn into_keys(self, provider: &str) -> Result<Vec<Key>, String> {
        if self.keys.is_empty() {
            return Err(format!(
                ".{provider}.keys: Required value: keys (secrets) must be provided"
            ));
        }
        let mut names = HashSet::new();
        let mut keys = Vec::with_capacity(self.keys.len());
        for (index, key) in self.keys.into_iter().enumerate() {
            if !names.insert(key.name.clone()) {
                return Err(format!(
                    ".{provider}.keys[{index}].name: Duplicate value: {:?}",
                    key.name
                ));
            }
            keys.push(Key {
                name: key.name,
                secret: key.secret.0,
            });
        }
        Ok(keys)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, bound = "")]
struct RawKey<S: KeySizes> {
    #[serde(deserialize_with = "key_name")]
    name: String,
    secret: Secret<S>,
}

fn key_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let name = String::deserialize(deserializer)?;
    if name.is_empty() {
        return Err(de::Error::custom(
            ".name: Required value: key name is required",
        ));
    }
    if name.contains(':') {
        return Err(de::Error::custom(format!(
            ".name: Invalid value: {name:?}: should not contain ':'"
        )));
    }
    Ok(name)
}

/// A base64 secret of one of `S`'s lengths; its value never appears in an error.
struct Secret<S>(Vec<u8>, PhantomData<S>);

impl<'de, S: KeySizes> Deserialize<'de> for Secret<S> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text.is_empty() {
            return Err(de::Error::custom(
                ".secret: Required value: secret is required",
            ));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|_| {
                de::Error::custom(
                    ".secret: Invalid value: \"REDACTED\": secrets must be base64 encoded",
                )
            })?;
        if !S::SIZES.contains(&bytes.len()) {
            return Err(de::Error::custom(format!(
                ".secret: Invalid value: \"REDACTED\": secret is not of the expected length, got {}, expected one of {:?}",
                bytes.len(),
                S::SIZES
            )));
        }
        Ok(Self(bytes, PhantomData))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawKms {
    api_version: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    endpoint: String,
    cachesize: Option<i64>,
    timeout: Option<String>,
}

impl RawKms {
    fn check(self) -> Result<Kms, String> {
        match self.api_version.as_deref().unwrap_or("v1") {
            "v2" => {}
            "v1" => return Err(".kms.apiVersion: Invalid value: \"v1\": KMSv1 is deprecated and will only receive security updates going forward. Use KMSv2 instead".into()),
            other => return Err(format!(".kms.apiVersion: Unsupported value: {other:?}: supported values: \"v2\"")),
        }
        if self.name.is_empty() {
            return Err(".kms.name: Required value: kms name is required".into());
        }
        if self.name.contains(':') {
            return Err(format!(
                ".kms.name: Invalid value: {:?}: should not contain ':'",
                self.name
            ));
        }
        if self.cachesize.is_some() {
            return Err(".kms.cachesize: Invalid value: cachesize is not supported in v2".into());
        }
        if self.endpoint.is_empty() {
            return Err(".kms.endpoint: Required value: endpoint is required".into());
        }
        let Some(socket) = self
            .endpoint
            .strip_prefix("unix://")
            .filter(|s| !s.is_empty())
        else {
            return Err(format!(
                ".kms.endpoint: Invalid value: {:?}: unsupported scheme for KMS provider, only unix is supported",
                self.endpoint
            ));
        };
        let timeout = match self.timeout.as_deref() {
            None => Duration::from_secs(3),
            Some(text) => parse_duration(text).filter(|d| !d.is_zero()).ok_or_else(|| {
                format!(".kms.timeout: Invalid value: {text:?}: timeout should be a positive duration such as 3s")
            })?,
        };
        Ok(Kms {
            name: self.name,
            socket: socket.to_string(),
            timeout,
        })
    }
}

/// A Go duration of one unit (`3s`, `500ms`, `1m`).
fn parse_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(number)),
        "s" => Some(Duration::from_secs(number)),
        "m" => Some(Duration::from_secs(number * 60)),
        _ => None,
    }
}

/// Joins the path YAML reports (`resources[0].providers[0]: `) with the field a check names
/// (`.aesgcm.keys: …` or `[1].resources: …`), as upstream prints one path.
fn join_path(message: &str) -> String {
    match message.split_once(": ") {
        Some((path, rest)) if rest.starts_with('.') || rest.starts_with('[') => {
            format!("{path}{rest}")
        }
        _ => message.to_string(),
    }
}

/// Parses a configuration file's text. The error names the field (and, where YAML knows it,
/// the line) at fault.
pub fn parse(text: &str) -> Result<EncryptionConfiguration, String> {
    let raw: RawFile = yaml_serde::from_str(text).map_err(|error| join_path(&error.to_string()))?;
    match raw.kind.as_deref() {
        Some(KIND) => {}
        Some(other) => return Err(format!("kind: Invalid value: {other:?}: must be {KIND}")),
        None => return Err(format!("kind: Required value: must be {KIND}")),
    }
    match raw.api_version.as_deref() {
        Some(API_VERSION) => {}
        Some(other) => {
            return Err(format!(
                "apiVersion: Invalid value: {other:?}: must be {API_VERSION}"
            ))
        }
        None => return Err(format!("apiVersion: Required value: must be {API_VERSION}")),
    }
    if raw.resources.is_empty() {
        return Err(
            "resources: Required value: EncryptionConfiguration.Resources must contain at least one resource"
                .into(),
        );
    }
    // A resource an earlier rule covers is masked there, which upstream refuses.
    for (index, rule) in raw.resources.iter().enumerate() {
        for (at, pattern) in rule.resources.iter().enumerate() {
            let earlier = raw.resources[..index]
                .iter()
                .flat_map(|rule| rule.resources.iter())
                .find(|earlier| pattern.is_masked_by(earlier));
            if let Some(earlier) = earlier {
                return Err(format!(
                    "resources[{index}].resources[{at}]: Invalid value: {:?}: the resource is already covered by {:?} in an earlier entry, which masks this one",
                    pattern.text, earlier.text
                ));
            }
        }
    }
    Ok(EncryptionConfiguration {
        resources: raw.resources,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY32: &str = "c2VjcmV0IGlzIHNlY3VyZSwgaXMgaXQgc2VjdXJlPz8="; // 32 bytes
    const KEY16: &str = "c2VjcmV0IGlzIHNlY3VyZQ=="; // 16 bytes

    fn config(body: &str) -> String {
        format!("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n{body}")
    }

    #[test]
    fn upstreams_example_parses() {
        let text = config(&format!(
            "resources:
  - resources:
      - secrets
      - configmaps
      - '*.apps'
    providers:
      - aesgcm:
          keys:
            - name: key1
              secret: {KEY16}
            - name: key2
              secret: {KEY32}
      - aescbc:
          keys:
            - name: old
              secret: {KEY32}
      - secretbox:
          keys:
            - name: box
              secret: {KEY32}
      - kms:
          apiVersion: v2
          name: plugin
          endpoint: unix:///run/kms.sock
          timeout: 5s
      - identity: {{}}
  - resources: ['*.*']
    providers:
      - identity: {{}}
"
        ));
        let parsed = parse(&text).expect("valid");
        assert_eq!(parsed.resources.len(), 2);
        let rule = &parsed.resources[0];
        assert!(rule.resources[2].covers("apps", "deployments"));
        assert!(!rule.resources[2].covers("", "deployments"));
        let kinds: Vec<_> = rule.providers.iter().map(Provider::kind).collect();
        assert_eq!(kinds, ["aesgcm", "aescbc", "secretbox", "kms", "identity"]);
        match &rule.providers[3] {
            Provider::Kms(kms) => {
                assert_eq!(kms.socket, "/run/kms.sock");
                assert_eq!(kms.timeout, Duration::from_secs(5));
            }
            other => panic!("{other:?}"),
        }
        assert!(parsed.resources[1].resources[0].covers("anything.example", "widgets"));
    }

    /// Each malformed file, and what its error must say (the field, and the line).
    #[test]
    fn malformed_files_name_the_field_and_line_at_fault() {
        let cases = [
            (
                "resources:\n  - resources: [secrets]\n    providers:\n      - aesgcm:\n          keys:\n            - name: k\n              secret: c2hvcnQ=\n".to_string(),
                vec!["resources[0].providers[0].aesgcm.keys[0].secret: Invalid value", "got 5, expected one of [16, 24, 32]", "line 8", "REDACTED"],
            ),
            (
                format!("resources:\n  - resources: [secrets]\n    providers:\n      - secretbox:\n          keys:\n            - name: k\n              secret: {KEY16}\n"),
                vec!["resources[0].providers[0].secretbox.keys[0].secret", "expected one of [32]", "line 8"],
            ),
            (
                "resources:\n  - resources: [secrets]\n    providers:\n      - aesgcm:\n          keys:\n            - name: k\n              secret: '%%%'\n".to_string(),
                vec!["keys[0].secret", "base64", "line 8"],
            ),
            (
                "resources:\n  - resources: [secrets]\n    providers:\n      - aesgmc:\n          keys: []\n".to_string(),
                vec!["resources[0].providers[0]", "unknown field `aesgmc`", "line 6"],
            ),
            (
                format!("resources:\n  - resources: [secrets]\n    providers:\n      - identity: {{}}\n        aescbc:\n          keys: [{{name: k, secret: {KEY32}}}]\n"),
                vec!["resources[0].providers: Invalid value", "more than one provider", "line 6"],
            ),
            (
                "resources:\n  - resources: [secrets]\n    providers:\n      - aesgcm:\n          keys: []\n".to_string(),
                vec!["resources[0].providers.aesgcm.keys: Required value", "line 6"],
            ),
            (
                "resources:\n  - resources: [Secrets]\n    providers: [identity: {}]\n".to_string(),
                vec!["resources.resources[0]: Invalid value", "capital letters", "line 4"],
            ),
            (
                "resources:\n  - resources: ['*.', configmaps]\n    providers: [identity: {}]\n".to_string(),
                vec!["overlapping resources", "masked"],
            ),
            (
                "resources:\n  - resources: ['*.*']\n    providers: [identity: {}]\n  - resources: [secrets]\n    providers: [identity: {}]\n".to_string(),
                vec!["resources[1].resources[0]: Invalid value", "earlier entry"],
            ),
            (
                "resources:\n  - resources: [secrets]\n    providers:\n      - kms: {name: p, endpoint: 'unix:///x'}\n".to_string(),
                vec!["KMSv1 is deprecated"],
            ),
            (
                "resources:\n  - resources: [secrets]\n    providers:\n      - kms: {apiVersion: v2, name: p, endpoint: 'tcp://x'}\n".to_string(),
                vec!["only unix is supported"],
            ),
            ("resources: []\n".to_string(), vec!["at least one resource"]),
        ];
        for (body, wanted) in cases {
            let error = parse(&config(&body)).expect_err(&body);
            for needle in wanted {
                assert!(error.contains(needle), "{needle:?} not in {error:?}");
            }
            assert!(!error.contains(KEY32) && !error.contains(KEY16), "{error}");
        }
        let wrong_kind = "apiVersion: apiserver.config.k8s.io/v1\nkind: Other\nresources: []\n";
        assert!(parse(wrong_kind).expect_err("kind").starts_with("kind:"));
        let wrong_version = "apiVersion: v1\nkind: EncryptionConfiguration\nresources: []\n";
        assert!(parse(wrong_version)
            .expect_err("v")
            .starts_with("apiVersion:"));
    }
}
