//! The compiled Kubernetes descriptor set plus the Go JSON facts (`proto/gofields.txt`) that the
//! `.proto` files do not carry, loaded once per process.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, MessageDescriptor};

use super::ProtobufError;

const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/k8s_descriptors.bin"));
const GO_FIELDS: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/proto/gofields.txt"));

pub(super) const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";
pub(super) const TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Time";
pub(super) const MICRO_TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime";
pub(super) const FIELDS_V1: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1";
pub(super) const RAW_EXTENSION: &str = "k8s.io.apimachinery.pkg.runtime.RawExtension";
pub(super) const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";
pub(super) const QUANTITY: &str = "k8s.io.apimachinery.pkg.api.resource.Quantity";
pub(super) const INT_OR_STRING: &str = "k8s.io.apimachinery.pkg.util.intstr.IntOrString";

/// API groups (as they appear in `apiVersion`) and the proto package of their types.
const GROUPS: &[(&str, &str)] = &[
    ("", "k8s.io.api.core"),
    ("apps", "k8s.io.api.apps"),
    ("batch", "k8s.io.api.batch"),
    ("coordination.k8s.io", "k8s.io.api.coordination"),
    ("discovery.k8s.io", "k8s.io.api.discovery"),
    ("events.k8s.io", "k8s.io.api.events"),
    ("rbac.authorization.k8s.io", "k8s.io.api.rbac"),
    ("networking.k8s.io", "k8s.io.api.networking"),
    ("policy", "k8s.io.api.policy"),
    ("storage.k8s.io", "k8s.io.api.storage"),
    ("scheduling.k8s.io", "k8s.io.api.scheduling"),
    ("authorization.k8s.io", "k8s.io.api.authorization"),
    ("authentication.k8s.io", "k8s.io.api.authentication"),
    ("autoscaling", "k8s.io.api.autoscaling"),
    ("certificates.k8s.io", "k8s.io.api.certificates"),
];

/// meta/v1 kinds that every group version also accepts (e.g. a `DeleteOptions` sent as `v1`).
const SHARED_META_KINDS: &[&str] = &[
    "DeleteOptions",
    "Status",
    "ListOptions",
    "GetOptions",
    "CreateOptions",
    "PatchOptions",
    "UpdateOptions",
    "WatchEvent",
];

/// How the Go struct behind one message prints as JSON.
#[derive(Debug, Default)]
pub(super) struct GoFacts {
    /// Field numbers of Go pointers: a value on the wire is printed even when zero.
    pub pointer: HashSet<u32>,
    /// Field numbers without `omitempty`: printed even when zero.
    pub always: HashSet<u32>,
    /// Field numbers of structs embedded with `json:",inline"`.
    pub inline: HashSet<u32>,
    /// JSON names that differ from the protobuf field name.
    pub names: HashMap<u32, String>,
    /// The Go type is a named slice: the message's only repeated field is the JSON value.
    pub list: bool,
}

pub(super) struct Schema {
    pub pool: DescriptorPool,
    facts: HashMap<String, GoFacts>,
    no_facts: GoFacts,
}

static SCHEMA: LazyLock<Result<Schema, String>> = LazyLock::new(load);

fn load() -> Result<Schema, String> {
    let pool = DescriptorPool::decode(DESCRIPTORS).map_err(|e| e.to_string())?;
    let facts = parse_facts(GO_FIELDS)?;
    Ok(Schema {
        pool,
        facts,
        no_facts: GoFacts::default(),
    })
}

/// The process-wide schema, or why it could not be loaded.
pub(super) fn schema() -> Result<&'static Schema, ProtobufError> {
    SCHEMA
        .as_ref()
        .map_err(|e| ProtobufError::Schema(e.clone()))
}

fn parse_numbers(list: &str, line: &str) -> Result<Vec<u32>, String> {
    list.split(',')
        .map(|n| {
            n.parse()
                .map_err(|_| format!("gofields.txt: bad number in {line:?}"))
        })
        .collect()
}

fn parse_facts(text: &str) -> Result<HashMap<String, GoFacts>, String> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let Some(message) = words.next() else {
            continue;
        };
        let mut facts = GoFacts::default();
        for word in words {
            match word.split_once('=') {
                None if word == "list" => facts.list = true,
                Some(("p", v)) => facts.pointer.extend(parse_numbers(v, line)?),
                Some(("a", v)) => facts.always.extend(parse_numbers(v, line)?),
                Some(("i", v)) => facts.inline.extend(parse_numbers(v, line)?),
                Some(("n", v)) => {
                    for pair in v.split(',') {
                        let (num, name) = pair
                            .split_once(':')
                            .ok_or_else(|| format!("gofields.txt: bad name in {line:?}"))?;
                        let num = parse_numbers(num, line)?;
                        for n in num {
                            facts.names.insert(n, name.to_string());
                        }
                    }
                }
                _ => return Err(format!("gofields.txt: unknown entry {word:?} in {line:?}")),
            }
        }
        out.insert(message.to_string(), facts);
    }
    Ok(out)
}

impl Schema {
    pub fn facts(&self, message: &MessageDescriptor) -> &GoFacts {
        self.facts
            .get(message.full_name())
            .unwrap_or(&self.no_facts)
    }

    pub fn message(&self, full_name: &str) -> Result<MessageDescriptor, ProtobufError> {
        self.pool
            .get_message_by_name(full_name)
            .ok_or_else(|| ProtobufError::Schema(format!("message {full_name} missing")))
    }

    /// The message for a top-level `apiVersion`/`kind`, if this schema has one.
    pub fn kind(&self, api_version: &str, kind: &str) -> Option<MessageDescriptor> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        if group.is_empty() && version.is_empty() || version.contains('.') || kind.contains('.') {
            return None;
        }
        if group == "meta.k8s.io" {
            return self
                .top_level(&format!("{META}.{kind}"), true)
                .filter(|_| version == "v1");
        }
        let package = GROUPS.iter().find(|(g, _)| *g == group).map(|(_, p)| *p)?;
        if let Some(found) = self.top_level(&format!("{package}.{version}.{kind}"), false) {
            return Some(found);
        }
        if SHARED_META_KINDS.contains(&kind) && version.starts_with('v') {
            return self.pool.get_message_by_name(&format!("{META}.{kind}"));
        }
        None
    }

    /// A message that is an API object (has object or list metadata), not a nested type.
    fn top_level(&self, full_name: &str, meta: bool) -> Option<MessageDescriptor> {
        let message = self.pool.get_message_by_name(full_name)?;
        if meta
            && SHARED_META_KINDS
                .iter()
                .any(|k| full_name.ends_with(&format!(".{k}")))
        {
            return Some(message);
        }
        let field = message.get_field_by_name("metadata")?;
        let kind = field.kind();
        let type_name = kind.as_message()?.full_name().to_string();
        let is_meta =
            type_name == format!("{META}.ObjectMeta") || type_name == format!("{META}.ListMeta");
        is_meta.then_some(message)
    }
}
