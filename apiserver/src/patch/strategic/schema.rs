//! Patch metadata of the built-in types: the `patchStrategy` / `patchMergeKey` struct tags of
//! k8s.io/api and k8s.io/apimachinery (meta/v1), kept per *type* so that nested templates
//! (a CronJob's job template's pod template) resolve through the same entries.
//!
//! Only the fields that carry a strategy, or lead to a type that does, are listed. A field that
//! is not listed has no strategy: maps under it merge, lists under it are replaced. Lists that
//! are replaced wholesale never need their element type, so e.g. `containerStatuses` (no
//! strategy) is not followed into `ContainerStatus`.

/// One field of a type: its JSON name, the type of its value (or of its list items) when that
/// type has patch metadata of its own, and its tags.
#[derive(Clone, Copy, Debug)]
pub(super) struct Field {
    pub name: &'static str,
    pub ty: Option<Ty>,
    pub merge_key: Option<&'static str>,
    pub strategy: Option<&'static str>,
}

/// A field that only leads to a type with metadata.
const fn nav(name: &'static str, ty: Ty) -> Field {
    Field {
        name,
        ty: Some(ty),
        merge_key: None,
        strategy: None,
    }
}

/// A list with `patchStrategy:"merge" patchMergeKey:<key>` whose items need no metadata.
const fn merge(name: &'static str, key: &'static str) -> Field {
    Field {
        name,
        ty: None,
        merge_key: Some(key),
        strategy: Some("merge"),
    }
}

/// A list with `patchStrategy:"merge" patchMergeKey:<key>` whose items have metadata.
const fn merge_of(name: &'static str, key: &'static str, ty: Ty) -> Field {
    Field {
        name,
        ty: Some(ty),
        merge_key: Some(key),
        strategy: Some("merge"),
    }
}

/// A field with a strategy and no merge key (primitive merge lists, retainKeys, replace).
const fn plain(name: &'static str, strategy: &'static str) -> Field {
    Field {
        name,
        ty: None,
        merge_key: None,
        strategy: Some(strategy),
    }
}

/// A list with `patchStrategy:"merge,retainKeys" patchMergeKey:<key>`.
const fn merge_retain(name: &'static str, key: &'static str, ty: Option<Ty>) -> Field {
    Field {
        name,
        ty,
        merge_key: Some(key),
        strategy: Some("merge,retainKeys"),
    }
}

/// The types with patch metadata. Several Go types with identical relevant fields share one
/// entry (e.g. every `...Status` whose only tagged field is `conditions` keyed by `type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    /// Any object whose only tagged fields are in its ObjectMeta (ConfigMap, Role, Lease, …);
    /// also PersistentVolumeClaimTemplate.
    Object,
    /// meta/v1 ObjectMeta.
    ObjectMeta,
    /// A status whose only tagged field is `conditions` merged by `type`.
    Conditions,
    Pod,
    PodSpec,
    /// core/v1 Container, and EphemeralContainer (same tagged fields via EphemeralContainerCommon).
    Container,
    Volume,
    EphemeralVolumeSource,
    PodStatus,
    NodeAllocatableResourceClaimStatus,
    PodTemplate,
    PodTemplateSpec,
    Service,
    ServiceSpec,
    ServiceAccount,
    Node,
    NodeSpec,
    NodeStatus,
    /// Namespace, HorizontalPodAutoscaler, FlowSchema, PriorityLevelConfiguration, ServiceCIDR.
    ObjectWithConditions,
    PersistentVolumeClaim,
    PersistentVolumeClaimStatus,
    VolumeHealthStatus,
    /// ReplicationController, ReplicaSet, StatefulSet, DaemonSet.
    Workload,
    /// ReplicationControllerSpec, ReplicaSetSpec, StatefulSetSpec, DaemonSetSpec.
    WorkloadSpec,
    Deployment,
    DeploymentSpec,
    Job,
    JobSpec,
    JobSchedulingConfiguration,
    CronJob,
    CronJobSpec,
    JobTemplateSpec,
    PodDisruptionBudget,
    PodDisruptionBudgetSpec,
    /// Validating- and MutatingWebhookConfiguration.
    WebhookConfiguration,
    /// ValidatingWebhook, MutatingWebhook.
    Webhook,
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicySpec,
    CsiNode,
    CsiNodeSpec,
    CsiNodeStatus,
}

/// A `&'static [Field]` from const expressions.
macro_rules! fields {
    ($($field:expr),* $(,)?) => {{
        const FIELDS: &[Field] = &[$($field),*];
        FIELDS
    }};
}

const META: Field = nav("metadata", Ty::ObjectMeta);
const CONDITIONS: Field = merge("conditions", "type");
const STATUS_CONDITIONS: Field = nav("status", Ty::Conditions);
const TEMPLATE: Field = nav("template", Ty::PodTemplateSpec);

impl Ty {
    /// The tagged (or leading) fields of this type.
    pub(super) fn fields(self) -> &'static [Field] {
        match self {
            Ty::Object => fields![META],
            Ty::ObjectMeta => fields![
                merge("ownerReferences", "uid"),
                plain("finalizers", "merge")
            ],
            Ty::Conditions => fields![CONDITIONS],
            Ty::Pod => fields![META, nav("spec", Ty::PodSpec), nav("status", Ty::PodStatus)],
            Ty::PodSpec => fields![
                merge_retain("volumes", "name", Some(Ty::Volume)),
                merge_of("initContainers", "name", Ty::Container),
                merge_of("containers", "name", Ty::Container),
                merge_of("ephemeralContainers", "name", Ty::Container),
                merge("imagePullSecrets", "name"),
                merge("hostAliases", "ip"),
                merge("topologySpreadConstraints", "topologyKey"),
                merge("schedulingGates", "name"),
                merge_retain("resourceClaims", "name", None),
                merge("evictionResponders", "name"),
            ],
            Ty::Container => fields![
                merge("ports", "containerPort"),
                merge("env", "name"),
                merge("volumeMounts", "mountPath"),
                merge("volumeDevices", "devicePath"),
            ],
            Ty::Volume => fields![nav("ephemeral", Ty::EphemeralVolumeSource)],
            Ty::EphemeralVolumeSource => fields![nav("volumeClaimTemplate", Ty::Object)],
            Ty::PodStatus => fields![
                CONDITIONS,
                merge("hostIPs", "ip"),
                merge("podIPs", "ip"),
                merge_retain("resourceClaimStatuses", "name", None),
                merge_of(
                    "nodeAllocatableResourceClaimStatuses",
                    "resourceClaimName",
                    Ty::NodeAllocatableResourceClaimStatus,
                ),
            ],
            Ty::NodeAllocatableResourceClaimStatus => {
                fields![merge("mapping", "name"), merge("overhead", "name")]
            }
            Ty::PodTemplate => fields![META, TEMPLATE],
            Ty::PodTemplateSpec => fields![META, nav("spec", Ty::PodSpec)],
            Ty::Service => fields![META, nav("spec", Ty::ServiceSpec), STATUS_CONDITIONS],
            Ty::ServiceSpec => fields![merge("ports", "port")],
            Ty::ServiceAccount => fields![META, merge("secrets", "name")],
            Ty::Node => fields![
                META,
                nav("spec", Ty::NodeSpec),
                nav("status", Ty::NodeStatus)
            ],
            Ty::NodeSpec => fields![plain("podCIDRs", "merge")],
            Ty::NodeStatus => fields![CONDITIONS, merge("addresses", "type")],
            Ty::ObjectWithConditions => fields![META, STATUS_CONDITIONS],
            Ty::PersistentVolumeClaim => {
                fields![META, nav("status", Ty::PersistentVolumeClaimStatus)]
            }
            Ty::PersistentVolumeClaimStatus => {
                fields![CONDITIONS, nav("healthStatus", Ty::VolumeHealthStatus)]
            }
            Ty::VolumeHealthStatus => fields![merge("healthConditions", "status")],
            Ty::Workload => fields![META, nav("spec", Ty::WorkloadSpec), STATUS_CONDITIONS],
            Ty::WorkloadSpec => fields![TEMPLATE],
            Ty::Deployment => fields![META, nav("spec", Ty::DeploymentSpec), STATUS_CONDITIONS],
            Ty::DeploymentSpec => fields![TEMPLATE, plain("strategy", "retainKeys")],
            Ty::Job => fields![META, nav("spec", Ty::JobSpec), STATUS_CONDITIONS],
            Ty::JobSpec => fields![TEMPLATE, nav("scheduling", Ty::JobSchedulingConfiguration)],
            Ty::JobSchedulingConfiguration => fields![merge("resourceClaims", "name")],
            Ty::CronJob => fields![META, nav("spec", Ty::CronJobSpec)],
            Ty::CronJobSpec => fields![nav("jobTemplate", Ty::JobTemplateSpec)],
            Ty::JobTemplateSpec => fields![META, nav("spec", Ty::JobSpec)],
            Ty::PodDisruptionBudget => {
                fields![
                    META,
                    nav("spec", Ty::PodDisruptionBudgetSpec),
                    STATUS_CONDITIONS
                ]
            }
            Ty::PodDisruptionBudgetSpec => fields![plain("selector", "replace")],
            Ty::WebhookConfiguration => fields![META, merge_of("webhooks", "name", Ty::Webhook)],
            Ty::Webhook => fields![merge("matchConditions", "name")],
            Ty::ValidatingAdmissionPolicy => {
                fields![META, nav("spec", Ty::ValidatingAdmissionPolicySpec)]
            }
            Ty::ValidatingAdmissionPolicySpec => {
                fields![merge("matchConditions", "name"), merge("variables", "name")]
            }
            Ty::CsiNode => fields![
                META,
                nav("spec", Ty::CsiNodeSpec),
                nav("status", Ty::CsiNodeStatus)
            ],
            Ty::CsiNodeSpec => fields![merge("drivers", "name")],
            Ty::CsiNodeStatus => fields![merge("storageHealth", "name")],
        }
    }

    /// The entry for the JSON field `name` of this type, if it has one.
    pub(super) fn field(self, name: &str) -> Option<&'static Field> {
        self.fields().iter().find(|field| field.name == name)
    }
}
