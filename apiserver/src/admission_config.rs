//! `--admission-control-config-file`: upstream's `AdmissionConfiguration`
//! (`apiserver.config.k8s.io/v1`, or the older `apiserver.k8s.io/v1alpha1`), a list of
//! plugins each with its configuration inline (`configuration`) or in a file of its own
//! (`path`, relative to the admission file). Rudder reads the PodSecurity plugin's
//! (`PodSecurityConfiguration`: defaults and exemptions); a configuration for a plugin that
//! takes none here is logged and left alone, as upstream leaves configuration a plugin does not
//! read. A malformed file stops the server at start, naming the file and field.

use std::path::Path;

use rudder_admission::PodSecurityConfig;
use serde_json::Value;

/// The plugins' configurations this server reads.
#[derive(Clone, Debug, Default)]
pub struct AdmissionPluginConfig {
    pub pod_security: PodSecurityConfig,
}

const API_VERSIONS: &[&str] = &["apiserver.config.k8s.io/v1", "apiserver.k8s.io/v1alpha1"];

fn read_yaml(path: &Path) -> Result<Value, String> {
    let text = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    yaml_serde::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))
}

impl AdmissionPluginConfig {
    /// Reads an AdmissionConfiguration file.
    pub fn load(path: &Path) -> Result<Self, String> {
        let file = read_yaml(path)?;
        let here = path.parent().unwrap_or(Path::new("."));
        Self::from_value(&file, here).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn from_value(file: &Value, here: &Path) -> Result<Self, String> {
        let api_version = file["apiVersion"].as_str().unwrap_or("");
        if !API_VERSIONS.contains(&api_version) {
            return Err(format!(
                "apiVersion \"{api_version}\" is not one of {}",
                API_VERSIONS.join(", ")
            ));
        }
        if file["kind"] != "AdmissionConfiguration" {
            return Err(format!(
                "kind {} is not AdmissionConfiguration",
                file["kind"]
            ));
        }
        let mut config = Self::default();
        let plugins = match &file["plugins"] {
            Value::Null => return Ok(config),
            Value::Array(plugins) => plugins,
            _ => return Err("plugins: must be a list".into()),
        };
        for (index, plugin) in plugins.iter().enumerate() {
            let at = format!("plugins[{index}]");
            let name = plugin["name"]
                .as_str()
                .filter(|name| !name.is_empty())
                .ok_or_else(|| format!("{at}.name: Required value"))?;
            let configuration = match (&plugin["configuration"], plugin["path"].as_str()) {
                (Value::Null, None) => continue,
                (Value::Null, Some(path)) => read_yaml(&here.join(path))?,
                (inline, None) => inline.clone(),
                (_, Some(_)) => {
                    return Err(format!(
                        "{at}: only one of configuration and path may be given"
                    ))
                }
            };
            match name {
                "PodSecurity" => {
                    config.pod_security = PodSecurityConfig::from_value(configuration)
                        .map_err(|e| format!("{at} (PodSecurity): {e}"))?;
                }
                other => tracing::warn!(
                    plugin = other,
                    "the admission configuration names a plugin whose configuration Rudder does not read; left alone"
                ),
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pod_security_comes_inline_or_from_a_file_of_its_own() {
        let inline = json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [
                {"name": "EventRateLimit", "configuration": {"kind": "Configuration"}},
                {"name": "PodSecurity", "configuration": {
                    "apiVersion": "pod-security.admission.config.k8s.io/v1",
                    "kind": "PodSecurityConfiguration",
                    "defaults": {"enforce": "baseline", "warn": "restricted", "warn-version": "v1.30"},
                    "exemptions": {"namespaces": ["kube-system"]}}}
            ]
        });
        let config = AdmissionPluginConfig::from_value(&inline, Path::new(".")).expect("valid");
        assert_eq!(
            config.pod_security.defaults.enforce.to_string(),
            "baseline:latest"
        );
        assert_eq!(
            config.pod_security.defaults.warn.to_string(),
            "restricted:v1.30"
        );
        assert_eq!(config.pod_security.exempt_namespaces, vec!["kube-system"]);

        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::write(
            dir.path().join("podsecurity.yaml"),
            "apiVersion: pod-security.admission.config.k8s.io/v1\nkind: PodSecurityConfiguration\ndefaults:\n  enforce: restricted\n",
        )
        .expect("write");
        let admission = dir.path().join("admission.yaml");
        std::fs::write(
            &admission,
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  path: podsecurity.yaml\n",
        )
        .expect("write");
        let config = AdmissionPluginConfig::load(&admission).expect("valid");
        assert_eq!(
            config.pod_security.defaults.enforce.to_string(),
            "restricted:latest"
        );
    }

    #[test]
    fn a_malformed_file_names_the_field_at_fault() {
        let bad_level = json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [{"name": "PodSecurity", "configuration": {
                "apiVersion": "pod-security.admission.config.k8s.io/v1",
                "kind": "PodSecurityConfiguration",
                "defaults": {"audit": "loud"}}}]
        });
        let error =
            AdmissionPluginConfig::from_value(&bad_level, Path::new(".")).expect_err("a bad level");
        assert_eq!(
            error,
            "plugins[0] (PodSecurity): PodSecurityConfiguration: defaults.audit: Invalid value: \"loud\": must be one of privileged, baseline, restricted"
        );
        let unknown_field = json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [{"name": "PodSecurity", "configuration": {
                "apiVersion": "pod-security.admission.config.k8s.io/v1",
                "kind": "PodSecurityConfiguration",
                "exemptions": {"users": ["ops"]}}}]
        });
        let error = AdmissionPluginConfig::from_value(&unknown_field, Path::new("."))
            .expect_err("an unknown field");
        assert!(error.contains("unknown field `users`"), "{error}");
        let wrong_kind = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        assert!(AdmissionPluginConfig::from_value(&wrong_kind, Path::new(".")).is_err());
    }
}
