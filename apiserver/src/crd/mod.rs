//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`): kinds defined at run time.
//!
//! A CRD is stored like any object ([`kind`] holds its catalog entry and rules). Every
//! apiserver on the store watches CRDs ([`controller`]) and turns each served version into a
//! catalog entry of its own ([`served`]): the same [`crate::catalog::ResourceInfo`] a
//! built-in kind has, whose [`Strategy`](crate::kinds::Strategy) prunes, defaults and
//! validates by the version's structural schema ([`schema`]) and CEL rules ([`rules`]), and
//! whose printer follows `additionalPrinterColumns` ([`jsonpath`]) and whose field selectors
//! include its `selectableFields` ([`selectable`]). Routing, discovery and
//! OpenAPI look custom resources up in this server's [`CustomResources`] after the built-in
//! catalog. See docs/crds.md.
//!
//! Catalog entries are `&'static` everywhere; an entry built for a CRD lives for the process
//! and is reused while the CRD's spec is unchanged, so only a change of a CRD's spec costs a
//! new one.

pub mod controller;
pub mod conversion;
pub mod cost;
pub mod jsonpath;
pub mod kind;
mod resource;
pub mod rules;
pub mod schema;
mod selectable;
mod served;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;

use crate::catalog::ResourceInfo;

pub use served::version_order;

/// One custom group: its served versions, the preferred first.
#[derive(Clone, Debug)]
pub struct CustomGroup {
    pub name: &'static str,
    pub versions: Vec<&'static str>,
}

/// What this server serves of the CRDs in the store, as one snapshot.
#[derive(Debug, Default)]
pub struct Served {
    pub resources: Vec<&'static ResourceInfo>,
    pub groups: Vec<CustomGroup>,
    /// Counts the snapshots.
    pub generation: u64,
    /// The OpenAPI documents of this snapshot, built on first use.
    pub openapi: std::sync::OnceLock<Arc<crate::openapi::CustomDocuments>>,
}

impl Served {
    /// The custom resource served at group/version/plural.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&'static ResourceInfo> {
        self.resources
            .iter()
            .find(|info| info.group == group && info.version == version && info.plural == plural)
            .copied()
    }

    /// Whether a custom group serves `version`.
    pub fn serves_group_version(&self, group: &str, version: &str) -> bool {
        self.groups
            .iter()
            .any(|g| g.name == group && g.versions.contains(&version))
    }

    /// A custom group by name.
    pub fn group(&self, name: &str) -> Option<&CustomGroup> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// The custom resources of one group-version, in the CRDs' name order.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'static ResourceInfo> + 'a {
        self.resources
            .iter()
            .filter(move |info| info.group == group && info.version == version)
            .copied()
    }
}

/// This server's custom resources: the served snapshot, replaced whole when a CRD changes.
#[derive(Default)]
pub struct CustomResources {
    served: RwLock<Arc<Served>>,
    /// The entries built so far, by CRD uid, version and a digest of the CRD's spec.
    built: Mutex<HashMap<(String, String, u64), &'static ResourceInfo>>,
}

impl std::fmt::Debug for CustomResources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomResources").finish_non_exhaustive()
    }
}

impl CustomResources {
    /// What is served now.
    pub fn served(&self) -> Arc<Served> {
        match self.served.read() {
            Ok(served) => served.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The custom resource at group/version/plural.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&'static ResourceInfo> {
        self.served().find(group, version, plural)
    }

    /// The entry of `crd`'s storage version, served or not (a CRD being deleted is cleaned
    /// up through it).
    pub fn storage_entry(
        &self,
        crd: &Value,
        storage: &str,
    ) -> Result<Option<&'static ResourceInfo>, String> {
        let mut only_storage = crd.clone();
        if let Some(versions) = only_storage["spec"]["versions"].as_array_mut() {
            for version in versions {
                version["served"] = Value::Bool(version["name"] == storage);
            }
        }
        let mut built = match self.built.lock() {
            Ok(built) => built,
            Err(poisoned) => poisoned.into_inner(),
        };
        Ok(served::resources_of(&only_storage, &mut built)?
            .into_iter()
            .next())
    }

    /// Serves exactly the served versions of `crds` (the controller passes those whose names
    /// are accepted and that are not being deleted), returning the CRDs it could not serve with why.
    pub fn replace(&self, crds: &[Value]) -> Vec<(String, String)> {
        let mut refused = Vec::new();
        let mut resources: Vec<&'static ResourceInfo> = Vec::new();
        let mut built = match self.built.lock() {
            Ok(built) => built,
            Err(poisoned) => poisoned.into_inner(),
        };
        for crd in crds {
            let name = crate::json::name(crd).to_string();
            match served::resources_of(crd, &mut built) {
                Ok(infos) => resources.extend(infos),
                Err(why) => refused.push((name, why)),
            }
        }
        drop(built);
        let groups = served::groups_of(&resources);
        let mut current = match self.served.write() {
            Ok(current) => current,
            Err(poisoned) => poisoned.into_inner(),
        };
        let unchanged = current.resources.len() == resources.len()
            && current
                .resources
                .iter()
                .zip(&resources)
                .all(|(a, b)| std::ptr::eq(*a, *b));
        if unchanged {
            return refused;
        }
        let generation = current.generation + 1;
        *current = Arc::new(Served {
            resources,
            groups,
            generation,
            openapi: std::sync::OnceLock::new(),
        });
        refused
    }
}
