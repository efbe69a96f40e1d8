//! Upstream's audit policy (`audit.k8s.io/v1` `Policy`): rules in order, the first that
//! matches a request decides its level (`None`, `Metadata`, `Request`, `RequestResponse`) and
//! the stages left out; a request no rule matches is not audited.

use serde::Deserialize;

/// How much of a request the log records.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    #[default]
    None,
    Metadata,
    Request,
    RequestResponse,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

/// The points in a request's life an event is written at.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
pub enum Stage {
    RequestReceived,
    ResponseStarted,
    ResponseComplete,
    Panic,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupResources {
    #[serde(default)]
    group: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    resource_names: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    level: Level,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
}

/// An audit policy.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    rules: Vec<Rule>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
    #[serde(default)]
    omit_managed_fields: bool,
}

/// What a policy asks of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub level: Level,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

/// A request as a policy sees it.
#[derive(Clone, Debug, Default)]
pub struct Subject<'a> {
    pub user: &'a str,
    pub groups: &'a [String],
    pub verb: &'a str,
    /// `None` for a path that names no resource.
    pub resource: Option<ResourceRef<'a>>,
    pub path: &'a str,
}

#[derive(Clone, Debug, Default)]
pub struct ResourceRef<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl Policy {
    /// Parses a policy file's YAML (or JSON).
    pub fn parse(text: &str) -> Result<Self, String> {
        let policy: Policy = yaml_serde::from_str(text).map_err(|error| error.to_string())?;
        if !policy.kind.is_empty() && policy.kind != "Policy" {
            return Err(format!("kind {:?}: expected Policy", policy.kind));
        }
        if !policy.api_version.is_empty() && policy.api_version != "audit.k8s.io/v1" {
            return Err(format!(
                "apiVersion {:?}: expected audit.k8s.io/v1",
                policy.api_version
            ));
        }
        Ok(policy)
    }

    /// Every request at `Metadata`: who did what to which object, never a body (what Rudder
    /// logs when a log path is given without a policy).
    pub fn metadata_for_all() -> Self {
        Policy {
            api_version: "audit.k8s.io/v1".into(),
            kind: "Policy".into(),
            rules: vec![Rule {
                level: Level::Metadata,
                users: Vec::new(),
                user_groups: Vec::new(),
                verbs: Vec::new(),
                resources: Vec::new(),
                namespaces: Vec::new(),
                non_resource_urls: Vec::new(),
                omit_stages: Vec::new(),
            }],
            omit_stages: vec![Stage::RequestReceived],
            omit_managed_fields: false,
        }
    }

    /// The first matching rule's answer; `Level::None` when none matches.
    pub fn decide(&self, subject: &Subject) -> Decision {
        let rule = self.rules.iter().find(|rule| rule.matches(subject));
        let mut omit_stages = self.omit_stages.clone();
        if let Some(rule) = rule {
            omit_stages.extend(rule.omit_stages.iter().copied());
        }
        Decision {
            level: rule.map(|rule| rule.level).unwrap_or_default(),
            omit_stages,
            omit_managed_fields: self.omit_managed_fields,
        }
    }
}

fn listed(list: &[String], value: &str) -> bool {
    list.is_empty() || list.iter().any(|item| item == value)
}

impl Rule {
    fn matches(&self, subject: &Subject) -> bool {
        if !listed(&self.users, subject.user) || !listed(&self.verbs, subject.verb) {
            return false;
        }
        if !self.user_groups.is_empty()
            && !subject
                .groups
                .iter()
                .any(|group| self.user_groups.contains(group))
        {
            return false;
        }
        match &subject.resource {
            None => {
                if !self.resources.is_empty() || !self.namespaces.is_empty() {
                    return false;
                }
                self.non_resource_urls.is_empty()
                    || self.non_resource_urls.iter().any(|url| {
                        url == subject.path
                            || url
                                .strip_suffix('*')
                                .is_some_and(|prefix| subject.path.starts_with(prefix))
                    })
            }
            Some(resource) => {
                if !self.non_resource_urls.is_empty() {
                    return false;
                }
                if !self.namespaces.is_empty()
                    && !self.namespaces.iter().any(|ns| ns == resource.namespace)
                {
                    return false;
                }
                self.resources.is_empty()
                    || self.resources.iter().any(|group| group.matches(resource))
            }
        }
    }
}

impl GroupResources {
    fn matches(&self, resource: &ResourceRef) -> bool {
        if self.group != resource.group {
            return false;
        }
        let names_match = self.resource_names.is_empty()
            || self.resource_names.iter().any(|name| name == resource.name);
        if self.resources.is_empty() {
            return names_match;
        }
        let combined = if resource.subresource.is_empty() {
            resource.resource.to_string()
        } else {
            format!("{}/{}", resource.resource, resource.subresource)
        };
        let resource_matches = self.resources.iter().any(|listed| {
            listed == "*"
                || *listed == combined
                || (!resource.subresource.is_empty()
                    && (*listed == format!("{}/*", resource.resource)
                        || *listed == format!("*/{}", resource.subresource)))
        });
        resource_matches && names_match
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    users: ["system:kube-proxy"]
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets", "configmaps"]
  - level: RequestResponse
    resources:
      - group: "apps"
        resources: ["deployments", "*/scale"]
  - level: None
    nonResourceURLs: ["/healthz*", "/version"]
  - level: Request
    namespaces: ["prod"]
  - level: Metadata
    omitStages: ["ResponseStarted"]
"#;

    fn resource<'a>(group: &'a str, plural: &'a str, sub: &'a str, ns: &'a str) -> Subject<'a> {
        Subject {
            user: "alice",
            groups: &[],
            verb: "get",
            resource: Some(ResourceRef {
                group,
                resource: plural,
                subresource: sub,
                namespace: ns,
                name: "x",
            }),
            path: "",
        }
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let policy = Policy::parse(POLICY).expect("parses");
        let level = |subject: &Subject| policy.decide(subject).level;
        assert_eq!(level(&resource("", "secrets", "", "prod")), Level::Metadata);
        assert_eq!(
            level(&resource("apps", "deployments", "", "a")),
            Level::RequestResponse
        );
        assert_eq!(
            level(&resource("apps", "replicasets", "scale", "a")),
            Level::RequestResponse
        );
        assert_eq!(
            level(&resource("apps", "replicasets", "", "prod")),
            Level::Request
        );
        assert_eq!(level(&resource("", "pods", "", "a")), Level::Metadata);
        let mut proxy = resource("", "pods", "", "a");
        proxy.user = "system:kube-proxy";
        assert_eq!(level(&proxy), Level::None);
        let path = |path: &'static str| Subject {
            user: "alice",
            verb: "get",
            path,
            ..Subject::default()
        };
        assert_eq!(level(&path("/healthz/etcd")), Level::None);
        assert_eq!(level(&path("/metrics")), Level::Metadata);
        let decided = policy.decide(&path("/metrics"));
        assert_eq!(
            decided.omit_stages,
            vec![Stage::RequestReceived, Stage::ResponseStarted]
        );
    }

    #[test]
    fn a_policy_of_another_kind_is_refused() {
        assert!(Policy::parse("apiVersion: v1\nkind: ConfigMap\n").is_err());
        assert!(Policy::parse("rules: [{level: Loud}]").is_err());
    }
}
