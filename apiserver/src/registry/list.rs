//! Lists: label and field selectors, `limit`/`continue` pages whose token pins the revision
//! of the first page, and `resourceVersion` + `resourceVersionMatch` semantics.

use std::sync::{Arc, OnceLock};

use base64::Engine;
use rudder_storage::{KeyRange, RangeRequest};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument;

use super::cache::Wanted;
use super::decoded::Object;
use super::keys::collection_prefix;
use super::object;
use super::Registry;
use crate::catalog::ResourceInfo;
use crate::error::{ApiError, Result};
use crate::protobuf::{self, ProtobufError};
use crate::request::{ListOptions, VersionMatch};
use crate::selectors::{self, FieldSelector, FieldSet, LabelSelector};

/// Rows read from storage per round trip when selectors filter a page.
const FILTERED_BATCH: i64 = 500;

/// One object of a list: shared with the watch cache when it came from there (a LIST of
/// 10,000 pods copies none of them, and JSON responses send the cache's encoding), or the
/// list's own when the store answered. A shared object is parsed into a tree only for a
/// reader that needs one (a Table, a metadata-only or protobuf response), and that tree is
/// this item's, dropped with the response.
#[derive(Clone)]
pub struct Listed(Item);

#[derive(Clone)]
enum Item {
    Owned {
        value: Value,
        json: OnceLock<bytes::Bytes>,
    },
    Shared {
        object: Arc<Object>,
        value: OnceLock<Value>,
    },
}

impl Listed {
    pub fn new(value: Value) -> Self {
        Self(Item::Owned {
            value,
            json: OnceLock::new(),
        })
    }

    pub(super) fn shared(object: Arc<Object>) -> Self {
        Self(Item::Shared {
            object,
            value: OnceLock::new(),
        })
    }

    /// The object as a tree of the caller's own.
    pub fn into_value(self) -> Value {
        match self.0 {
            Item::Owned { value, .. } => value,
            Item::Shared { object, value } => value.into_inner().unwrap_or_else(|| object.value()),
        }
    }

    /// The object as JSON: the cache's encoding, or encoded on first use.
    pub fn json(&self) -> &bytes::Bytes {
        match &self.0 {
            Item::Owned { value, json } => json
                .get_or_init(|| bytes::Bytes::from(serde_json::to_vec(value).unwrap_or_default())),
            Item::Shared { object, .. } => object.json(),
        }
    }

    /// The object's typed protobuf message (a list's item): the cache's encoding, or encoded
    /// now.
    pub fn protobuf_message(&self) -> std::result::Result<bytes::Bytes, ProtobufError> {
        match &self.0 {
            Item::Owned { value, .. } => Ok(protobuf::encode_object(value)?.message()),
            Item::Shared { object, .. } => object
                .protobuf()
                .map(protobuf::Encoded::message)
                .ok_or_else(|| ProtobufError::Schema("the object has no protobuf form".into())),
        }
    }

    /// The object as a watch event carries it (shared as it is when it came from the cache).
    pub(super) fn into_shared(self) -> Arc<Object> {
        match self.0 {
            Item::Owned { value, .. } => Arc::new(Object::plain(value)),
            Item::Shared { object, .. } => object,
        }
    }

    fn value(&self) -> &Value {
        match &self.0 {
            Item::Owned { value, .. } => value,
            Item::Shared { object, value } => value.get_or_init(|| object.value()),
        }
    }
}

impl std::ops::Deref for Listed {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

impl std::borrow::Borrow<Value> for Listed {
    fn borrow(&self) -> &Value {
        self.value()
    }
}

impl Serialize for Listed {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
    }
}

impl std::fmt::Debug for Listed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.value().fmt(f)
    }
}

/// One page of a list.
#[derive(Clone, Debug)]
pub struct ListResult {
    pub items: Vec<Listed>,
    pub resource_version: i64,
    pub continue_token: Option<String>,
    pub remaining_item_count: Option<i64>,
}

impl ListResult {
    /// The items by name (a cluster-scoped kind's, as the controllers inside the apiserver
    /// keep them).
    pub fn by_name(self) -> std::collections::BTreeMap<String, Value> {
        self.items
            .into_iter()
            .map(|item| {
                let value = item.into_value();
                (crate::json::name(&value).to_string(), value)
            })
            .collect()
    }
}

#[derive(Serialize, Deserialize)]
struct ContinueToken {
    v: String,
    rv: i64,
    start: String,
}

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

pub(super) fn encode_continue(revision: i64, start: &str) -> String {
    let token = ContinueToken {
        v: TOKEN_VERSION.into(),
        rv: revision,
        start: start.to_string(),
    };
    let json = serde_json::to_vec(&token).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE.encode(json)
}

/// Decodes a continue token into (revision, start key relative to the collection prefix).
pub fn decode_continue(token: &str) -> Result<(i64, String)> {
    let invalid = |why: &str| ApiError::bad_request(format!("continue key is not valid: {why}"));
    let bytes = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .or_else(|_| base64::engine::general_purpose::STANDARD.decode(token))
        .map_err(|error| invalid(&error.to_string()))?;
    let token: ContinueToken =
        serde_json::from_slice(&bytes).map_err(|error| invalid(&error.to_string()))?;
    if token.v != TOKEN_VERSION {
        return Err(invalid("server does not recognize this encoded version"));
    }
    if token.rv <= 0 {
        return Err(invalid(
            "incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        ));
    }
    if token.start.is_empty()
        || token.start.starts_with('/')
        || token
            .start
            .split('/')
            .any(|part| part == "." || part == "..")
    {
        return Err(invalid("invalid start key"));
    }
    Ok((token.rv, token.start))
}

/// Parsed selectors of a list or watch, checked against the kind.
#[derive(Clone)]
pub(super) struct Filter {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// The kind's field selector rules.
    field_set: &'static FieldSet,
    /// The kind's rules, to show stored objects as its API does.
    pub strategy: &'static dyn crate::kinds::Strategy,
}

impl Filter {
    pub fn new(info: &ResourceInfo, options: &ListOptions) -> Result<Self> {
        let labels = LabelSelector::parse(&options.label_selector)
            .map_err(|error| ApiError::bad_request(error.to_string()))?;
        let fields = FieldSelector::parse(&options.field_selector)
            .map_err(|error| ApiError::bad_request(error.to_string()))?;
        let field_set = info.strategy.fields();
        selectors::check_supported(field_set, &fields)
            .map_err(|error| ApiError::bad_request(error.to_string()))?;
        Ok(Self {
            labels,
            fields,
            field_set,
            strategy: info.strategy,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// As [`Filter::matches`], with the object's selectable fields worked out once for all
    /// the watches that look at it.
    pub fn matches_decoded(&self, object: &Object) -> bool {
        self.labels.matches(object.labels())
            && (self.fields.is_empty() || self.fields.matches(&object.fields(self.field_set)))
    }

    pub fn matches(&self, object: &Value) -> bool {
        if !self.labels.matches_object(object) {
            return false;
        }
        self.fields.is_empty()
            || self
                .fields
                .matches(&selectors::selectable_fields(self.field_set, object))
    }
}

/// The key range a list reads: a namespace (from the URL or a `metadata.namespace=` field
/// selector) or the whole resource.
pub(super) fn list_prefix(
    info: &ResourceInfo,
    namespace: Option<&str>,
    filter: &Filter,
) -> Vec<u8> {
    let namespace = namespace.or_else(|| {
        info.namespaced
            .then(|| filter.fields.exact("metadata.namespace"))
            .flatten()
            .filter(|ns| !ns.is_empty() && !ns.contains('/'))
    });
    collection_prefix(info, namespace)
}

/// What a LIST asks the watch cache for, or `None` when only the store can answer it (an
/// `Exact` resourceVersion; one that does not parse gets its 400 from the store's path).
fn cache_read(prefix: &[u8], options: &ListOptions) -> Result<Option<Wanted>> {
    if let Some(token) = &options.continue_token {
        let (revision, start) = decode_continue(token)?;
        let mut key = prefix.to_vec();
        key.extend_from_slice(start.as_bytes());
        return Ok(Some(Wanted::Continue(revision, key)));
    }
    Ok(match options.resource_version.as_deref() {
        None | Some("") => Some(Wanted::Consistent),
        Some("0") if options.version_match != VersionMatch::Exact => Some(Wanted::Any),
        Some(_) if options.version_match == VersionMatch::Exact => None,
        Some(version) => version.parse().ok().map(Wanted::NotOlderThan),
    })
}

impl Registry {
    /// Waits (briefly) until the store has reached `revision`, as upstream's watch cache does
    /// for a NotOlderThan read; then answers 504 "Too large resource version".
    async fn wait_for_revision(&self, revision: i64) -> Result<()> {
        for _ in 0..30 {
            if self.storage.status().await?.revision >= revision {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let current = self.storage.status().await?.revision;
        let mut error = ApiError::timeout(format!(
            "Too large resource version: {revision}, current: {current}"
        ));
        error.details = Some(Box::new(crate::error::Details {
            causes: vec![crate::error::Cause {
                reason: "ResourceVersionTooLarge".into(),
                message: "Too large resource version".into(),
                field: String::new(),
            }],
            retry_after_seconds: Some(1),
            ..Default::default()
        }));
        Err(error)
    }

    /// The objects of `info` (in `namespace`) the selectors pick, as the watch cache holds
    /// them (`resourceVersion=0`): how admission plugins read the cluster, as upstream's read
    /// their informers, without a consistent read of the store on every request.
    pub async fn list_cached(
        &self,
        info: &'static ResourceInfo,
        namespace: Option<&str>,
        label_selector: &str,
        field_selector: &str,
    ) -> Result<Vec<Value>> {
        let mut options = ListOptions::everything();
        options.resource_version = Some("0".into());
        options.label_selector = label_selector.to_string();
        options.field_selector = field_selector.to_string();
        let listed = self.list(info, namespace, &options).await?;
        Ok(listed.items.into_iter().map(Listed::into_value).collect())
    }

    /// LIST.
    #[tracing::instrument(level = "debug", name = "registry.list", skip_all, fields(resource = info.plural, namespace))]
    pub async fn list(
        &self,
        info: &'static ResourceInfo,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<ListResult> {
        let filter = Filter::new(info, options)?;
        let prefix = list_prefix(info, namespace, &filter);
        if let Some(cache) = self.caches(info) {
            if let Some(wanted) = cache_read(&prefix, options)? {
                if let Some(listed) = cache
                    .list(info, &prefix, &filter, wanted, options.limit)
                    .instrument(tracing::debug_span!("watch_cache.list"))
                    .await
                {
                    return Ok(listed);
                }
            }
        }
        let end = rudder_storage::prefix_end(&prefix);
        let (mut revision, mut start) = match &options.continue_token {
            Some(token) => {
                let (revision, start) = decode_continue(token)?;
                let mut key = prefix.clone();
                key.extend_from_slice(start.as_bytes());
                (revision, key)
            }
            None => (0, prefix.clone()),
        };
        if options.continue_token.is_none() {
            if let Some(version) = options.resource_version.as_deref().filter(|rv| *rv != "0") {
                let wanted: i64 = version.parse().map_err(|_| {
                    ApiError::bad_request(format!("resourceVersion: Invalid value: \"{version}\": must be a non-negative integer"))
                })?;
                match options.version_match {
                    VersionMatch::Exact => revision = wanted,
                    _ => self.wait_for_revision(wanted).await?,
                }
            }
        }
        let limit = options.limit;
        // An unfiltered page is one read of `limit` keys: the store tells whether there are
        // more, and the next page starts just after its last key (as upstream's token does) —
        // the start the store kept the rest of the range's count for, so a paged list counts
        // once, not on every page. A filtered list reads batches, and one row past the page
        // tells whether there is more (`limit` may be i64::MAX).
        let batch = match (limit, filter.is_empty()) {
            (Some(limit), true) => limit,
            (Some(limit), false) => limit.saturating_add(1).max(FILTERED_BATCH),
            (None, _) => 0,
        };
        let reader = self.values.reader(info);
        let mut items = Vec::new();
        let mut continue_from: Option<Vec<u8>> = None;
        let mut remaining = None;
        loop {
            let request = RangeRequest::new(KeyRange::between(start.clone(), end.clone()))
                .at_revision(revision)
                .with_limit(batch);
            let response = match self.storage.range(request).await {
                Ok(response) => response,
                Err(rudder_storage::Error::Compacted { .. }) if options.continue_token.is_some() => {
                    return Err(self.expired_continue(&prefix, &start).await)
                }
                Err(rudder_storage::Error::Compacted { .. }) => {
                    return Err(ApiError::expired(format!(
                        "The resourceVersion for the provided list is too old. (requested {revision})"
                    )))
                }
                Err(error) => return Err(error.into()),
            };
            if revision == 0 {
                revision = response.revision;
            }
            let fetched = response.kvs.len();
            let decode = |kv: &rudder_storage::KeyValue| {
                reader
                    .decode(&kv.key, &kv.value)
                    .map(|object| {
                        info.strategy
                            .stored_to_api(object::with_resource_version(object, kv.mod_revision))
                    })
                    .map_err(|error| {
                        ApiError::internal(format!("reading a stored object: {error}"))
                    })
            };
            // A webhook-converted version's page is converted in one review.
            let mut converted = match info.strategy.converter() {
                Some(_) => {
                    let stored = response
                        .kvs
                        .iter()
                        .map(decode)
                        .collect::<Result<Vec<_>>>()?;
                    Some(self.served_forms(info, stored).await?.into_iter())
                }
                None => None,
            };
            for (index, kv) in response.kvs.into_iter().enumerate() {
                if limit.is_some_and(|limit| items.len() as i64 >= limit) {
                    continue_from = Some(kv.key.clone());
                    if filter.is_empty() {
                        remaining = Some(response.count - index as i64);
                    }
                    break;
                }
                let object = match converted.as_mut().and_then(Iterator::next) {
                    Some(object) => object,
                    None => decode(&kv)?,
                };
                if filter.matches(&object) {
                    items.push(Listed::new(object));
                }
                start = kv.key;
                start.push(0);
            }
            let full = limit.is_some_and(|limit| items.len() as i64 >= limit);
            if continue_from.is_none() && full && response.more && filter.is_empty() {
                continue_from = Some(start.clone());
                remaining = Some(response.count - fetched as i64);
            }
            if continue_from.is_some() || !response.more || fetched == 0 {
                break;
            }
        }
        let continue_token = continue_from.map(|key| {
            let relative = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            encode_continue(revision, &relative)
        });
        Ok(ListResult {
            items,
            resource_version: revision,
            continue_token,
            remaining_item_count: remaining,
        })
    }

    /// The 410 for a continue token whose revision was compacted, carrying a fresh token that
    /// continues from the same key at the latest revision.
    async fn expired_continue(&self, prefix: &[u8], start: &[u8]) -> ApiError {
        let mut error = ApiError::expired(
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
        );
        if let Ok(status) = self.storage.status().await {
            let relative =
                String::from_utf8_lossy(&start[prefix.len().min(start.len())..]).into_owned();
            if !relative.is_empty() {
                error.continue_token = Some(encode_continue(status.revision, &relative));
            }
        }
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unfiltered list read from the store, page by page: each page is what is left after
    /// the one before, counted, and each token starts just after its page's last key (as
    /// upstream's does), where the store keeps the count of the rest of the range.
    #[tokio::test]
    async fn paged_lists_from_the_store_continue_after_the_last_key() {
        let (registry, _dir) =
            super::super::store::tests::registry_with(rudder_admission::Chain::new()).await;
        let configmaps = crate::catalog::find("", "v1", "configmaps").expect("served");
        for name in ["a", "b", "c", "d", "e"] {
            let input = super::super::Input {
                object: serde_json::json!({"metadata": {"name": name, "namespace": "default"}}),
                duplicate_fields: Vec::new(),
            };
            registry
                .create(
                    configmaps,
                    Some("default"),
                    input,
                    &super::super::store::tests::write(),
                )
                .await
                .expect("created");
        }
        let mut options = ListOptions::everything();
        options.limit = Some(2);
        let mut pages = Vec::new();
        loop {
            let page = registry
                .list(configmaps, Some("default"), &options)
                .await
                .expect("lists");
            let names: Vec<String> = page
                .items
                .iter()
                .map(|item| item["metadata"]["name"].as_str().unwrap_or("").to_string())
                .collect();
            let start = page
                .continue_token
                .as_deref()
                .map(|token| decode_continue(token).expect("valid token").1);
            pages.push((names, page.remaining_item_count, start));
            match page.continue_token {
                Some(token) => options.continue_token = Some(token),
                None => break,
            }
        }
        let page = |names: &[&str], remaining: Option<i64>, start: Option<&str>| {
            (
                names
                    .iter()
                    .map(|name| name.to_string())
                    .collect::<Vec<_>>(),
                remaining,
                start.map(str::to_string),
            )
        };
        assert_eq!(
            pages,
            [
                page(&["a", "b"], Some(3), Some("b\0")),
                page(&["c", "d"], Some(1), Some("d\0")),
                page(&["e"], None, None),
            ]
        );
    }

    #[test]
    fn continue_tokens_round_trip() {
        let token = encode_continue(42, "ns/name\u{0}");
        assert_eq!(
            decode_continue(&token).expect("valid"),
            (42, "ns/name\u{0}".to_string())
        );
    }

    #[test]
    fn forged_continue_tokens_are_bad_requests() {
        let engine = base64::engine::general_purpose::URL_SAFE;
        for token in [
            "!!!not base64".to_string(),
            engine.encode("not json"),
            engine.encode(r#"{"v":"other/v9","rv":3,"start":"a"}"#),
            engine.encode(r#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#),
            engine.encode(r#"{"v":"meta.k8s.io/v1","rv":3,"start":"../../secrets/x"}"#),
            engine.encode(r#"{"v":"meta.k8s.io/v1","rv":3,"start":"/registry/secrets"}"#),
        ] {
            let error = decode_continue(&token).expect_err(&token);
            assert_eq!(error.code, 400, "{token}");
            assert!(error.message.starts_with("continue key is not valid"));
        }
    }
}
