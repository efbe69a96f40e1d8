//! Objects of a custom resource version a CRD's webhook converts (`crd::conversion`): read
//! from the store in the storage version and converted to the served one (then defaulted by
//! its schema), and converted to the storage version before they are stored. Every other
//! kind passes through untouched.

use std::borrow::Cow;

use serde_json::Value;

use super::Registry;
use crate::catalog::ResourceInfo;
use crate::error::Result;

impl Registry {
    /// `objects`, as read from the store, in the version `info` serves.
    pub(super) async fn served_forms(
        &self,
        info: &ResourceInfo,
        objects: Vec<Value>,
    ) -> Result<Vec<Value>> {
        let Some((converter, served, _)) = info.strategy.converter() else {
            return Ok(objects);
        };
        let mut converted = converter.convert(self, objects, served).await?;
        for object in &mut converted {
            info.strategy.default(object);
        }
        Ok(converted)
    }

    /// One object as read from the store, in the version `info` serves.
    pub(super) async fn served_form(&self, info: &ResourceInfo, object: Value) -> Result<Value> {
        if info.strategy.converter().is_none() {
            return Ok(object);
        }
        let mut converted = self.served_forms(info, vec![object]).await?;
        Ok(converted.pop().unwrap_or_default())
    }

    /// A watch event of the store in the version `info` serves.
    pub(super) async fn served_event(
        &self,
        info: &ResourceInfo,
        event: super::WatchEvent,
    ) -> Result<super::WatchEvent> {
        if info.strategy.converter().is_none() {
            return Ok(event);
        }
        let kind = event.kind;
        let object = self.served_form(info, event.into_value()).await?;
        Ok(super::WatchEvent::new(kind, object))
    }

    /// `object` (in the version `info` serves) in the version it is stored in.
    pub(super) async fn storage_form<'a>(
        &self,
        info: &ResourceInfo,
        object: &'a Value,
    ) -> Result<Cow<'a, Value>> {
        let Some((converter, _, storage)) = info.strategy.converter() else {
            return Ok(Cow::Borrowed(object));
        };
        let mut converted = converter
            .convert(self, vec![object.clone()], storage)
            .await?;
        Ok(Cow::Owned(converted.pop().unwrap_or_default()))
    }

    /// Whether the watch cache may answer for `info` (not for webhook-converted versions).
    pub(super) fn caches(
        &self,
        info: &ResourceInfo,
    ) -> Option<&std::sync::Arc<super::cache::WatchCache>> {
        self.cache
            .as_ref()
            .filter(|_| info.strategy.converter().is_none())
    }
}
