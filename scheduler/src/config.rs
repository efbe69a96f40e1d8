//! `KubeSchedulerConfiguration` (`kubescheduler.config.k8s.io/v1`), the file given with
//! `--config`: the profiles (one per `schedulerName`), which plugins each enables or
//! disables at which extension point, score weights, and plugin arguments. Fields Rudder
//! has no use for (client connection, leader election tuning) are accepted and ignored.

use serde::Deserialize;

/// The file's contents.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerConfiguration {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    /// Cluster-wide default for every profile (0: adaptive).
    #[serde(default)]
    pub percentage_of_nodes_to_score: Option<u32>,
    #[serde(default)]
    pub profiles: Vec<ProfileConfig>,
}

/// One profile.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileConfig {
    #[serde(default = "default_scheduler_name")]
    pub scheduler_name: String,
    #[serde(default)]
    pub percentage_of_nodes_to_score: Option<u32>,
    #[serde(default)]
    pub plugins: Plugins,
    #[serde(default)]
    pub plugin_config: Vec<PluginConfig>,
}

fn default_scheduler_name() -> String {
    crate::DEFAULT_SCHEDULER_NAME.to_string()
}

/// Plugin sets per extension point.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plugins {
    #[serde(default)]
    pub multi_point: PluginSet,
    #[serde(default)]
    pub pre_enqueue: PluginSet,
    #[serde(default)]
    pub queue_sort: PluginSet,
    #[serde(default)]
    pub pre_filter: PluginSet,
    #[serde(default)]
    pub filter: PluginSet,
    #[serde(default)]
    pub post_filter: PluginSet,
    #[serde(default)]
    pub pre_score: PluginSet,
    #[serde(default)]
    pub score: PluginSet,
    #[serde(default)]
    pub reserve: PluginSet,
    #[serde(default)]
    pub permit: PluginSet,
    #[serde(default)]
    pub pre_bind: PluginSet,
    #[serde(default)]
    pub bind: PluginSet,
    #[serde(default)]
    pub post_bind: PluginSet,
}

impl Plugins {
    /// The set given for `point`.
    pub fn at(&self, point: crate::framework::Point) -> &PluginSet {
        use crate::framework::Point;
        match point {
            Point::PreEnqueue => &self.pre_enqueue,
            Point::QueueSort => &self.queue_sort,
            Point::PreFilter => &self.pre_filter,
            Point::Filter => &self.filter,
            Point::PostFilter => &self.post_filter,
            Point::PreScore => &self.pre_score,
            Point::Score => &self.score,
            Point::Reserve => &self.reserve,
            Point::Permit => &self.permit,
            Point::PreBind => &self.pre_bind,
            Point::Bind => &self.bind,
            Point::PostBind => &self.post_bind,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct PluginSet {
    #[serde(default)]
    pub enabled: Vec<PluginRef>,
    #[serde(default)]
    pub disabled: Vec<PluginRef>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct PluginRef {
    pub name: String,
    #[serde(default)]
    pub weight: Option<i64>,
}

/// `pluginConfig` entry: a plugin's arguments.
#[derive(Clone, Debug, Deserialize)]
pub struct PluginConfig {
    pub name: String,
    #[serde(default)]
    pub args: serde_json::Value,
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading the scheduler configuration: {0}")]
    Parse(String),
    #[error("unsupported apiVersion {0:?} (want kubescheduler.config.k8s.io/v1)")]
    Version(String),
    #[error("profile {profile:?}: unknown plugin {plugin:?}")]
    UnknownPlugin { profile: String, plugin: String },
    #[error("profile {profile:?}: plugin {plugin:?}: {message}")]
    Args {
        profile: String,
        plugin: String,
        message: String,
    },
    #[error("scheduler name {0:?} is used by two profiles")]
    DuplicateProfile(String),
    #[error("profile {0:?} has no Bind plugin")]
    NoBinder(String),
}

impl SchedulerConfiguration {
    /// Parses a YAML (or JSON) file's text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let config: Self =
            yaml_serde::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        if !config.api_version.is_empty() && config.api_version != "kubescheduler.config.k8s.io/v1"
        {
            return Err(ConfigError::Version(config.api_version));
        }
        Ok(config)
    }

    /// The profiles, or the one default profile when none is given.
    pub fn profiles(&self) -> Vec<ProfileConfig> {
        if self.profiles.is_empty() {
            vec![ProfileConfig {
                scheduler_name: default_scheduler_name(),
                ..Default::default()
            }]
        } else {
            self.profiles.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_plugins_weights_and_args_are_read() {
        let config = SchedulerConfiguration::parse(
            r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {qps: 50}
profiles:
- schedulerName: default-scheduler
- schedulerName: bin-packer
  plugins:
    score:
      disabled: [{name: NodeResourcesBalancedAllocation}]
      enabled: [{name: NodeResourcesFit, weight: 5}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy: {type: MostAllocated}
"#,
        )
        .expect("parses");
        let profiles = config.profiles();
        assert_eq!(profiles.len(), 2);
        assert_eq!(profiles[1].scheduler_name, "bin-packer");
        assert_eq!(profiles[1].plugins.score.enabled[0].weight, Some(5));
        assert_eq!(
            profiles[1].plugin_config[0].args["scoringStrategy"]["type"],
            "MostAllocated"
        );
    }

    #[test]
    fn a_foreign_api_version_is_refused() {
        let error =
            SchedulerConfiguration::parse("apiVersion: kubescheduler.config.k8s.io/v1beta2\n");
        assert!(matches!(error, Err(ConfigError::Version(_))));
    }
}
