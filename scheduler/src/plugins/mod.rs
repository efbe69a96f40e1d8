//! The in-tree plugins, upstream's default set and order, and building a [`Profile`] from a
//! profile's configuration (enabled/disabled per point, weights, arguments).

pub mod inter_pod_affinity;
pub mod match_counts;
pub mod resources_fit;
pub mod simple;
pub mod topology_spread;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::config::{ConfigError, ProfileConfig};
use crate::framework::{Plugin, Point, Profile};

/// Upstream's default plugins (multiPoint), in order, with their default score weights.
pub const DEFAULTS: &[(&str, i64)] = &[
    ("SchedulingGates", 0),
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("NodeName", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0),
    ("VolumeBinding", 0),
    ("VolumeZone", 0),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DefaultPreemption", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", 0),
];

/// Preemption's marker: the scheduler runs `preemption` when a profile enables it.
pub struct DefaultPreemption;

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        "DefaultPreemption"
    }
    fn points(&self) -> &'static [Point] {
        &[Point::PostFilter]
    }
}

fn args_error(profile: &str, plugin: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Args {
        profile: profile.into(),
        plugin: plugin.into(),
        message: message.into(),
    }
}

/// Builds the plugin `name` with its arguments.
fn build(name: &str, args: &Value, profile: &str) -> Result<Arc<dyn Plugin>, ConfigError> {
    use simple::*;
    Ok(match name {
        "SchedulingGates" => Arc::new(SchedulingGates),
        "PrioritySort" => Arc::new(PrioritySort),
        "NodeUnschedulable" => Arc::new(NodeUnschedulable),
        "NodeName" => Arc::new(NodeName),
        "TaintToleration" => Arc::new(TaintToleration),
        "NodeAffinity" => Arc::new(node_affinity(args).map_err(|m| args_error(profile, name, m))?),
        "NodePorts" => Arc::new(NodePorts),
        "NodeResourcesFit" => Arc::new(resources_fit::NodeResourcesFit {
            args: fit_args(args).map_err(|m| args_error(profile, name, m))?,
        }),
        "NodeResourcesBalancedAllocation" => {
            let mut plugin = resources_fit::BalancedAllocation::default();
            if let Some(resources) = args["resources"].as_array() {
                plugin.resources = resources
                    .iter()
                    .filter_map(|r| r["name"].as_str().map(String::from))
                    .collect();
            }
            Arc::new(plugin)
        }
        "PodTopologySpread" => Arc::new(topology_spread::PodTopologySpread {
            args: topology_spread::SpreadArgs::parse(args)
                .map_err(|m| args_error(profile, name, m))?,
            ..Default::default()
        }),
        "InterPodAffinity" => {
            let weight = args["hardPodAffinityWeight"].as_i64().unwrap_or(1);
            if !(0..=100).contains(&weight) {
                return Err(args_error(
                    profile,
                    name,
                    "hardPodAffinityWeight must be in 0..=100",
                ));
            }
            Arc::new(inter_pod_affinity::InterPodAffinity {
                hard_pod_affinity_weight: weight,
            })
        }
        "ImageLocality" => Arc::new(ImageLocality),
        "VolumeBinding" => Arc::new(volume_binding::VolumeBinding),
        "VolumeRestrictions" => Arc::new(volume_restrictions::VolumeRestrictions),
        "VolumeZone" => Arc::new(volume_zone::VolumeZone),
        "DefaultPreemption" => Arc::new(DefaultPreemption),
        "DefaultBinder" => Arc::new(DefaultBinder),
        other => {
            return Err(ConfigError::UnknownPlugin {
                profile: profile.into(),
                plugin: other.into(),
            })
        }
    })
}

fn node_affinity(args: &Value) -> Result<simple::NodeAffinity, String> {
    let added = &args["addedAffinity"];
    let required = &added["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    let preferred = &added["preferredDuringSchedulingIgnoredDuringExecution"];
    Ok(simple::NodeAffinity {
        added_required: if required.is_null() {
            Vec::new()
        } else {
            serde_json::from_value(required.clone()).map_err(|e| e.to_string())?
        },
        added_preferred: if preferred.is_null() {
            Vec::new()
        } else {
            serde_json::from_value(preferred.clone()).map_err(|e| e.to_string())?
        },
    })
}

fn fit_args(args: &Value) -> Result<resources_fit::FitArgs, String> {
    use resources_fit::{FitArgs, Strategy};
    let mut fit = FitArgs::default();
    let strategy = &args["scoringStrategy"];
    if let Some(resources) = strategy["resources"].as_array() {
        fit.resources = resources
            .iter()
            .map(|r| {
                let name = r["name"].as_str().ok_or("a scored resource needs a name")?;
                Ok((name.to_string(), r["weight"].as_i64().unwrap_or(1)))
            })
            .collect::<Result<_, String>>()?;
    }
    fit.strategy = match strategy["type"].as_str().unwrap_or("LeastAllocated") {
        "LeastAllocated" => Strategy::LeastAllocated,
        "MostAllocated" => Strategy::MostAllocated,
        "RequestedToCapacityRatio" => {
            let shape = strategy["requestedToCapacityRatio"]["shape"]
                .as_array()
                .ok_or("RequestedToCapacityRatio needs a shape")?
                .iter()
                .map(|p| {
                    (
                        p["utilization"].as_i64().unwrap_or(0),
                        p["score"].as_i64().unwrap_or(0),
                    )
                })
                .collect::<Vec<_>>();
            if shape.is_empty() || shape.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err("the shape's utilization points must increase".into());
            }
            Strategy::RequestedToCapacityRatio(shape)
        }
        other => return Err(format!("unknown scoring strategy {other:?}")),
    };
    if let Some(ignored) = args["ignoredResources"].as_array() {
        fit.ignored_resources = ignored
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect();
    }
    Ok(fit)
}

/// A profile from its configuration: upstream's defaults, then multiPoint's changes, then
/// each point's own.
pub fn profile(config: &ProfileConfig, default_percentage: u32) -> Result<Profile, ConfigError> {
    let profile_name = config.scheduler_name.as_str();
    let args = |name: &str| {
        config
            .plugin_config
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.args.clone())
            .unwrap_or(Value::Null)
    };
    // multiPoint: the defaults, minus disabled, plus enabled (weights override).
    let multi = &config.plugins.multi_point;
    let all_disabled = multi.disabled.iter().any(|p| p.name == "*");
    let mut names: Vec<(String, i64)> = DEFAULTS
        .iter()
        .filter(|(name, _)| !all_disabled && !multi.disabled.iter().any(|p| p.name == *name))
        .map(|(name, weight)| (name.to_string(), *weight))
        .collect();
    for enabled in &multi.enabled {
        match names.iter_mut().find(|(name, _)| *name == enabled.name) {
            Some(entry) => entry.1 = enabled.weight.unwrap_or(entry.1),
            None => names.push((enabled.name.clone(), enabled.weight.unwrap_or(1))),
        }
    }
    let mut built: HashMap<String, Arc<dyn Plugin>> = HashMap::new();
    let mut instance = |name: &str| -> Result<Arc<dyn Plugin>, ConfigError> {
        if let Some(plugin) = built.get(name) {
            return Ok(plugin.clone());
        }
        let plugin = build(name, &args(name), profile_name)?;
        built.insert(name.to_string(), plugin.clone());
        Ok(plugin)
    };
    let mut weights: HashMap<&'static str, i64> = HashMap::new();
    let mut enabled: HashMap<Point, Vec<Arc<dyn Plugin>>> = HashMap::new();
    for (name, weight) in &names {
        let plugin = instance(name)?;
        weights.insert(plugin.name(), (*weight).max(1));
        for point in plugin.points() {
            enabled.entry(*point).or_default().push(plugin.clone());
        }
    }
    for point in Point::ALL {
        let set = config.plugins.at(point);
        let list = enabled.entry(point).or_default();
        if set.disabled.iter().any(|p| p.name == "*") {
            list.clear();
        } else {
            list.retain(|p| !set.disabled.iter().any(|d| d.name == p.name()));
        }
        for wanted in &set.enabled {
            let plugin = instance(&wanted.name)?;
            if !plugin.points().contains(&point) {
                return Err(args_error(
                    profile_name,
                    &wanted.name,
                    format!("does not implement {}", point.config_name()),
                ));
            }
            if point == Point::Score {
                if let Some(weight) = wanted.weight {
                    weights.insert(plugin.name(), weight.max(1));
                }
            }
            list.retain(|p| p.name() != plugin.name());
            list.push(plugin);
        }
    }
    if enabled.get(&Point::Bind).is_none_or(Vec::is_empty) {
        return Err(ConfigError::NoBinder(profile_name.into()));
    }
    let percentage = config
        .percentage_of_nodes_to_score
        .unwrap_or(default_percentage);
    Ok(Profile::new(
        profile_name.to_string(),
        enabled,
        weights,
        percentage,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SchedulerConfiguration;

    #[test]
    fn the_default_profile_has_upstreams_plugins_in_order() {
        let profile = profile(&ProfileConfig::default(), 0).expect("builds");
        assert_eq!(
            profile.names_at(Point::Filter),
            [
                "NodeUnschedulable",
                "NodeName",
                "TaintToleration",
                "NodeAffinity",
                "NodePorts",
                "NodeResourcesFit",
                "VolumeRestrictions",
                "VolumeBinding",
                "VolumeZone",
                "PodTopologySpread",
                "InterPodAffinity"
            ]
        );
        assert_eq!(profile.weight("TaintToleration"), 3);
        assert_eq!(profile.weight("PodTopologySpread"), 2);
        assert_eq!(profile.names_at(Point::PostFilter), ["DefaultPreemption"]);
    }

    #[test]
    fn points_can_disable_and_reweigh_plugins() {
        let config = SchedulerConfiguration::parse(
            r#"
profiles:
- schedulerName: packer
  plugins:
    score:
      disabled: [{name: "*"}]
      enabled: [{name: NodeResourcesFit, weight: 7}]
    postFilter:
      disabled: [{name: DefaultPreemption}]
  pluginConfig:
  - {name: NodeResourcesFit, args: {scoringStrategy: {type: MostAllocated}}}
"#,
        )
        .expect("parses");
        let profile = profile(&config.profiles()[0], 0).expect("builds");
        assert_eq!(profile.names_at(Point::Score), ["NodeResourcesFit"]);
        assert_eq!(profile.weight("NodeResourcesFit"), 7);
        assert!(!profile.has_post_filter());
    }

    #[test]
    fn unknown_plugins_and_bad_args_are_refused() {
        let unknown = SchedulerConfiguration::parse(
            "profiles: [{plugins: {filter: {enabled: [{name: Nope}]}}}]",
        )
        .expect("parses");
        assert!(matches!(
            profile(&unknown.profiles()[0], 0),
            Err(ConfigError::UnknownPlugin { .. })
        ));
        let bad = SchedulerConfiguration::parse(
            "profiles: [{pluginConfig: [{name: InterPodAffinity, args: {hardPodAffinityWeight: 101}}]}]",
        )
        .expect("parses");
        assert!(matches!(
            profile(&bad.profiles()[0], 0),
            Err(ConfigError::Args { .. })
        ));
    }
}
