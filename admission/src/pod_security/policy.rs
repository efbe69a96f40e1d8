//! What PodSecurity evaluates a namespace by: a level and a version per mode (enforce, audit,
//! warn), read from the namespace's `pod-security.kubernetes.io/<mode>[-version]` labels over
//! the configured defaults, as upstream reads them — a malformed enforce level enforces
//! `restricted`, a malformed audit or warn level is `privileged` (they fail open), a malformed
//! version is `latest`, each with a field error; and warn follows an explicitly stricter
//! enforce level when it is not set itself.
//!
//! Also the plugin's configuration (`PodSecurityConfiguration`,
//! `pod-security.admission.config.k8s.io/v1`): the defaults and the exempt usernames,
//! namespaces and RuntimeClasses.

use serde::Deserialize;
use serde_json::Value;

use super::checks::LATEST_MINOR;

pub const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";

/// A Pod Security Standards level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    #[default]
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "privileged" => Ok(Self::Privileged),
            "baseline" => Ok(Self::Baseline),
            "restricted" => Ok(Self::Restricted),
            _ => Err("must be one of privileged, baseline, restricted".to_string()),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Privileged => "privileged",
            Self::Baseline => "baseline",
            Self::Restricted => "restricted",
        }
    }
}

/// A standards version: `latest` or `v1.<minor>`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Version {
    #[default]
    Latest,
    V1(u32),
}

impl Version {
    pub fn parse(text: &str) -> Result<Self, String> {
        if text == "latest" {
            return Ok(Self::Latest);
        }
        let invalid = || "must be \"latest\" or \"v1.x\"".to_string();
        let minor = text.strip_prefix("v1.").ok_or_else(invalid)?;
        let well_formed = !minor.is_empty()
            && minor.bytes().all(|b| b.is_ascii_digit())
            && (minor == "0" || !minor.starts_with('0'));
        if !well_formed {
            return Err(invalid());
        }
        minor.parse().map(Self::V1).map_err(|_| invalid())
    }

    /// The minor version whose rules apply (the latest known for `latest` and anything newer).
    pub fn minor(self) -> u32 {
        match self {
            Self::Latest => LATEST_MINOR,
            Self::V1(minor) => minor.min(LATEST_MINOR),
        }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Latest => f.write_str("latest"),
            Self::V1(minor) => write!(f, "v1.{minor}"),
        }
    }
}

/// A level at a version, shown as upstream shows it: `restricted:latest`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    pub level: Level,
    pub version: Version,
}

impl LevelVersion {
    pub fn new(level: Level, version: Version) -> Self {
        Self { level, version }
    }
}

impl std::fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

/// The three modes' levels and versions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub audit: LevelVersion,
    pub warn: LevelVersion,
}

impl Policy {
    pub fn fully_privileged(&self) -> bool {
        [self.enforce, self.audit, self.warn]
            .iter()
            .all(|mode| mode.level == Level::Privileged)
    }

    /// The policy of a namespace with `labels` over `defaults`, and the labels' errors as
    /// upstream words them (`metadata.labels[<key>]: Invalid value: "<v>": <why>`).
    /// `labels` is a namespace's `metadata.labels` (null when it has none).
    pub fn of_labels(labels: &Value, defaults: Policy) -> (Self, Vec<String>) {
        let mut policy = defaults;
        let mut errors = Vec::new();
        let label = |mode: &str| labels[format!("{LABEL_PREFIX}{mode}")].as_str();
        let mut note = |mode: &str, value: &str, why: String| {
            errors.push(format!(
                "metadata.labels[{LABEL_PREFIX}{mode}]: Invalid value: \"{value}\": {why}"
            ));
        };
        let mut has_enforce_level = false;
        if let Some(value) = label("enforce") {
            match Level::parse(value) {
                Ok(level) => {
                    policy.enforce.level = level;
                    has_enforce_level = true;
                }
                Err(why) => {
                    policy.enforce.level = Level::Restricted;
                    note("enforce", value, why);
                }
            }
        }
        if let Some(value) = label("enforce-version") {
            policy.enforce.version = Version::parse(value).unwrap_or_else(|why| {
                note("enforce-version", value, why);
                Version::Latest
            });
        }
        if let Some(value) = label("audit") {
            policy.audit.level = Level::parse(value).unwrap_or_else(|why| {
                note("audit", value, why);
                Level::Privileged
            });
        }
        if let Some(value) = label("audit-version") {
            policy.audit.version = Version::parse(value).unwrap_or_else(|why| {
                note("audit-version", value, why);
                Version::Latest
            });
        }
        let has_warn_level = label("warn").is_some();
        if let Some(value) = label("warn") {
            policy.warn.level = Level::parse(value).unwrap_or_else(|why| {
                note("warn", value, why);
                Level::Privileged
            });
        }
        let has_warn_version = label("warn-version").is_some();
        if let Some(value) = label("warn-version") {
            policy.warn.version = Version::parse(value).unwrap_or_else(|why| {
                note("warn-version", value, why);
                Version::Latest
            });
        }
        if !has_warn_level && has_enforce_level && policy.enforce.level > policy.warn.level {
            policy.warn.level = policy.enforce.level;
            if !has_warn_version {
                policy.warn.version = policy.enforce.version;
            }
        }
        (policy, errors)
    }
}

/// `PodSecurityConfiguration` as written in an AdmissionConfiguration.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Configuration {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    defaults: Defaults,
    #[serde(default)]
    exemptions: Exemptions,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Defaults {
    enforce: Option<String>,
    #[serde(rename = "enforce-version")]
    enforce_version: Option<String>,
    audit: Option<String>,
    #[serde(rename = "audit-version")]
    audit_version: Option<String>,
    warn: Option<String>,
    #[serde(rename = "warn-version")]
    warn_version: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Exemptions {
    #[serde(default)]
    usernames: Vec<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    runtime_classes: Vec<String>,
}

/// The plugin's settings: the defaults for namespaces without labels and who is exempt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSecurityConfig {
    pub defaults: Policy,
    pub exempt_usernames: Vec<String>,
    pub exempt_namespaces: Vec<String>,
    pub exempt_runtime_classes: Vec<String>,
}

/// The configuration versions upstream reads (v1beta1 and v1alpha1 are older spellings of the
/// same fields).
const API_VERSIONS: &[&str] = &[
    "pod-security.admission.config.k8s.io/v1",
    "pod-security.admission.config.k8s.io/v1beta1",
    "pod-security.admission.config.k8s.io/v1alpha1",
];

impl PodSecurityConfig {
    /// Reads a `PodSecurityConfiguration` (JSON already decoded from YAML), refusing unknown
    /// fields, versions and levels with the field at fault.
    pub fn from_value(value: serde_json::Value) -> Result<Self, String> {
        let configuration: Configuration =
            serde_json::from_value(value).map_err(|e| format!("PodSecurityConfiguration: {e}"))?;
        match configuration.api_version.as_deref() {
            Some(version) if API_VERSIONS.contains(&version) => {}
            other => {
                return Err(format!(
                    "PodSecurityConfiguration: apiVersion {other:?} is not one of {}",
                    API_VERSIONS.join(", ")
                ))
            }
        }
        if configuration.kind.as_deref() != Some("PodSecurityConfiguration") {
            return Err(format!(
                "PodSecurityConfiguration: kind {:?} is not PodSecurityConfiguration",
                configuration.kind
            ));
        }
        let mut errors = Vec::new();
        let level = |field: &str, text: &Option<String>, errors: &mut Vec<String>| {
            let text = text.as_deref().unwrap_or("privileged");
            Level::parse(text).unwrap_or_else(|why| {
                errors.push(format!(
                    "defaults.{field}: Invalid value: \"{text}\": {why}"
                ));
                Level::Privileged
            })
        };
        let version = |field: &str, text: &Option<String>, errors: &mut Vec<String>| {
            let text = text.as_deref().unwrap_or("latest");
            Version::parse(text).unwrap_or_else(|why| {
                errors.push(format!(
                    "defaults.{field}: Invalid value: \"{text}\": {why}"
                ));
                Version::Latest
            })
        };
        let d = &configuration.defaults;
        let defaults = Policy {
            enforce: LevelVersion::new(
                level("enforce", &d.enforce, &mut errors),
                version("enforce-version", &d.enforce_version, &mut errors),
            ),
            audit: LevelVersion::new(
                level("audit", &d.audit, &mut errors),
                version("audit-version", &d.audit_version, &mut errors),
            ),
            warn: LevelVersion::new(
                level("warn", &d.warn, &mut errors),
                version("warn-version", &d.warn_version, &mut errors),
            ),
        };
        let exemptions = configuration.exemptions;
        for (field, items) in [
            ("usernames", &exemptions.usernames),
            ("namespaces", &exemptions.namespaces),
            ("runtimeClasses", &exemptions.runtime_classes),
        ] {
            for (index, item) in items.iter().enumerate() {
                if item.is_empty() {
                    errors.push(format!(
                        "exemptions.{field}[{index}]: Invalid value: \"\": must be non-empty"
                    ));
                } else if items[..index].contains(item) {
                    errors.push(format!(
                        "exemptions.{field}[{index}]: Duplicate value: \"{item}\""
                    ));
                }
            }
        }
        if !errors.is_empty() {
            return Err(format!("PodSecurityConfiguration: {}", errors.join(", ")));
        }
        Ok(Self {
            defaults,
            exempt_usernames: exemptions.usernames,
            exempt_namespaces: exemptions.namespaces,
            exempt_runtime_classes: exemptions.runtime_classes,
        })
    }
}
