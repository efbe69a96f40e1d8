//! What the VolumeBinding plugin reads of the cluster's storage — claims, volumes and
//! StorageClasses, from the scheduler's informers ([`StoreVolumes`]) or a test's lists
//! ([`ListedVolumes`]) — and the volumes it has promised to claims (Reserve) but whose
//! binding it has not seen yet, so that two pods never pick the same free volume.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{ObjectRef, Store};

/// Reads claims, volumes and classes.
pub trait VolumeLister: Send + Sync {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>>;
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>>;
    fn volumes(&self) -> Vec<Arc<PersistentVolume>>;
    fn class(&self, name: &str) -> Option<Arc<StorageClass>>;
}

/// The informers' stores.
pub struct StoreVolumes {
    pub claims: Store<PersistentVolumeClaim>,
    pub volumes: Store<PersistentVolume>,
    pub classes: Store<StorageClass>,
}

impl VolumeLister for StoreVolumes {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get(&ObjectRef::new(name).within(namespace))
    }
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes.get(&ObjectRef::new(name))
    }
    fn volumes(&self) -> Vec<Arc<PersistentVolume>> {
        self.volumes.state()
    }
    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.classes.get(&ObjectRef::new(name))
    }
}

/// Lists held in memory (tests, and a scheduler without storage informers).
#[derive(Default)]
pub struct ListedVolumes {
    pub claims: Mutex<Vec<Arc<PersistentVolumeClaim>>>,
    pub volumes: Mutex<Vec<Arc<PersistentVolume>>>,
    pub classes: Mutex<Vec<Arc<StorageClass>>>,
}

fn locked<T: Clone>(list: &Mutex<Vec<T>>) -> Vec<T> {
    list.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

impl VolumeLister for ListedVolumes {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        locked(&self.claims).into_iter().find(|c| {
            c.metadata.namespace.as_deref() == Some(namespace)
                && c.metadata.name.as_deref() == Some(name)
        })
    }
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        locked(&self.volumes)
            .into_iter()
            .find(|v| v.metadata.name.as_deref() == Some(name))
    }
    fn volumes(&self) -> Vec<Arc<PersistentVolume>> {
        locked(&self.volumes)
    }
    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        locked(&self.classes)
            .into_iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
    }
}

/// The cluster's storage as the scheduler sees it, with its own promises.
pub struct Volumes {
    pub lister: Arc<dyn VolumeLister>,
    /// Volume name → the claim (`namespace/name`) it was promised to.
    assumed: Mutex<HashMap<String, String>>,
}

impl Default for Volumes {
    fn default() -> Self {
        Self::new(Arc::new(ListedVolumes::default()))
    }
}

impl Volumes {
    pub fn new(lister: Arc<dyn VolumeLister>) -> Self {
        Self {
            lister,
            assumed: Mutex::new(HashMap::new()),
        }
    }

    fn assumed(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.assumed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `volume` is promised to a claim other than `claim`.
    pub fn taken(&self, volume: &str, claim: &str) -> bool {
        self.assumed()
            .get(volume)
            .is_some_and(|owner| owner != claim)
    }

    /// Promises `volume` to `claim`.
    pub fn assume(&self, volume: &str, claim: &str) {
        self.assumed().insert(volume.to_string(), claim.to_string());
    }

    /// Drops the promises made to `claims` (their binding finished or was given up).
    pub fn forget(&self, claims: &[String]) {
        self.assumed().retain(|_, owner| !claims.contains(owner));
    }
}
