//! Image garbage collection at upstream's thresholds: when the image filesystem is used at or
//! above `--image-gc-high-threshold` percent (85), images no container uses are removed,
//! least recently used first, until usage is down to `--image-gc-low-threshold` (80). An
//! image seen for less than the minimum age (2 minutes) is kept, as are pinned images and
//! the sandbox image. Under disk pressure the eviction manager asks for every unused image to go
//! before it evicts a pod.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::runtime::{api, Runtime};
use crate::stats::machine::Filesystem;

/// When and how far images are collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub high_percent: u8,
    pub low_percent: u8,
    pub min_age: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            high_percent: 85,
            low_percent: 80,
            min_age: Duration::from_secs(120),
        }
    }
}

impl Policy {
    /// Checks the flags as upstream does: both in 0–100, low below high (100 turns it off).
    pub fn new(high_percent: u8, low_percent: u8) -> Result<Self, String> {
        if high_percent > 100 || low_percent > 100 {
            return Err(
                "--image-gc-high-threshold and --image-gc-low-threshold are percentages (0-100)"
                    .into(),
            );
        }
        if low_percent >= high_percent && high_percent != 100 {
            return Err(format!(
                "--image-gc-low-threshold ({low_percent}) must be below --image-gc-high-threshold ({high_percent})"
            ));
        }
        Ok(Self {
            high_percent,
            low_percent,
            ..Self::default()
        })
    }

    /// How many bytes to free on `fs`: none below the high threshold, else down to the low.
    pub fn to_free(&self, fs: &Filesystem) -> u64 {
        if fs.capacity == 0 || self.high_percent >= 100 {
            return 0;
        }
        let used = fs.capacity.saturating_sub(fs.available);
        if u128::from(used) * 100 < u128::from(fs.capacity) * u128::from(self.high_percent) {
            return 0;
        }
        let low = u128::from(fs.capacity) * u128::from(100 - self.low_percent) / 100;
        u64::try_from(low.saturating_sub(u128::from(fs.available))).unwrap_or(u64::MAX)
    }
}

/// What is known of one image.
#[derive(Debug, Clone, Copy)]
struct Seen {
    first: Instant,
    last_used: Instant,
    size: u64,
    pinned: bool,
}

/// One node's image collector; it remembers when each image was last in use.
pub struct ImageGc {
    runtime: Arc<dyn Runtime>,
    policy: Policy,
    images: HashMap<String, Seen>,
    /// References kept whatever the runtime says (the sandbox image: containerd 1.6 does
    /// not mark it pinned).
    pinned: Vec<String>,
}

/// The images to remove to free `want` bytes: unused, not pinned, old enough, least recently
/// used first (the larger first among equals).
fn choose(
    images: &HashMap<String, Seen>,
    in_use: &HashSet<String>,
    want: u64,
    now: Instant,
    min_age: Duration,
) -> Vec<(String, u64)> {
    let mut unused: Vec<(&String, &Seen)> = images
        .iter()
        .filter(|(id, seen)| {
            !in_use.contains(*id) && !seen.pinned && now.duration_since(seen.first) >= min_age
        })
        .collect();
    unused.sort_by_key(|(id, seen)| (seen.last_used, std::cmp::Reverse(seen.size), *id));
    let mut freed = 0u64;
    let mut out = Vec::new();
    for (id, seen) in unused {
        if freed >= want {
            break;
        }
        freed += seen.size;
        out.push((id.clone(), seen.size));
    }
    out
}

impl ImageGc {
    pub fn new(runtime: Arc<dyn Runtime>, policy: Policy) -> Self {
        Self {
            runtime,
            policy,
            images: HashMap::new(),
            pinned: Vec::new(),
        }
    }

    /// Never removes the images named `references`, as if the runtime had pinned them.
    pub fn pinning(mut self, references: Vec<String>) -> Self {
        self.pinned = references;
        self
    }

    /// Refreshes what is known: new images, sizes, and which are in use by any container
    /// (running or not). Returns the ids in use.
    async fn detect(&mut self, now: Instant) -> crate::runtime::Result<HashSet<String>> {
        let images = self.runtime.list_images().await?;
        let containers = self.runtime.list_containers(None).await?;
        let mut in_use = HashSet::new();
        for container in &containers {
            let named = container.image.as_ref().map(|i| i.image.as_str());
            if let Some(image) = images.iter().find(|i| {
                i.id == container.image_ref
                    || named.is_some_and(|n| i.id == n || i.repo_tags.iter().any(|t| t == n))
            }) {
                in_use.insert(image.id.clone());
            }
        }
        let present: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
        self.images.retain(|id, _| present.contains(id.as_str()));
        for image in &images {
            let pinned = image.pinned || image.repo_tags.iter().any(|t| self.pinned.contains(t));
            let seen = self.images.entry(image.id.clone()).or_insert(Seen {
                first: now,
                last_used: now,
                size: image.size,
                pinned,
            });
            seen.size = image.size;
            seen.pinned = pinned;
            if in_use.contains(&image.id) {
                seen.last_used = now;
            }
        }
        Ok(in_use)
    }

    /// Removes unused images until `want` bytes are freed; returns the bytes freed.
    pub async fn free(&mut self, want: u64) -> u64 {
        let now = Instant::now();
        let in_use = match self.detect(now).await {
            Ok(in_use) => in_use,
            Err(error) => {
                tracing::warn!(%error, "listing images for garbage collection");
                return 0;
            }
        };
        let mut freed = 0;
        for (id, size) in choose(&self.images, &in_use, want, now, self.policy.min_age) {
            match self.runtime.remove_image(&id).await {
                Ok(()) => {
                    tracing::info!(image = %id, size, "image garbage collected");
                    self.images.remove(&id);
                    freed += size;
                }
                Err(error) => tracing::warn!(image = %id, %error, "removing an unused image"),
            }
        }
        freed
    }

    /// The periodic pass: frees space when `imagefs` is above the high threshold. Between
    /// passes, it still records which images are in use.
    pub async fn collect(&mut self, imagefs: &Filesystem) -> u64 {
        let want = self.policy.to_free(imagefs);
        if want == 0 {
            if let Err(error) = self.detect(Instant::now()).await {
                tracing::debug!(%error, "listing images");
            }
            return 0;
        }
        let freed = self.free(want).await;
        if freed < want {
            tracing::warn!(
                want,
                freed,
                "image garbage collection could not free enough space: the remaining images are in use, pinned or new"
            );
        }
        freed
    }

    /// Every unused image, as under disk pressure.
    pub async fn free_all_unused(&mut self) -> u64 {
        self.free(u64::MAX).await
    }
}

/// The image an `api::Image` is, for logs.
pub fn describe(image: &api::Image) -> String {
    image
        .repo_tags
        .first()
        .cloned()
        .unwrap_or_else(|| image.id.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::fake::FakeRuntime;

    fn fs(capacity: u64, available: u64) -> Filesystem {
        Filesystem {
            capacity,
            available,
            ..Default::default()
        }
    }

    #[test]
    fn space_is_freed_from_the_high_threshold_down_to_the_low() {
        let policy = Policy::default();
        assert_eq!(policy.to_free(&fs(1000, 160)), 0, "84% used");
        assert_eq!(policy.to_free(&fs(1000, 150)), 50, "85% used: down to 80%");
        assert_eq!(policy.to_free(&fs(1000, 0)), 200);
        assert_eq!(Policy::new(100, 80).unwrap().to_free(&fs(1000, 0)), 0);
        assert!(Policy::new(80, 85).unwrap_err().contains("must be below"));
        assert!(Policy::new(101, 85).is_err());
    }

    #[test]
    fn the_least_recently_used_unused_old_enough_images_go_first() {
        let start = Instant::now();
        let later = start + Duration::from_secs(600);
        let seen = |first: Instant, last_used: Instant, size: u64, pinned: bool| Seen {
            first,
            last_used,
            size,
            pinned,
        };
        let images: HashMap<String, Seen> = [
            ("old-unused".to_string(), seen(start, start, 100, false)),
            (
                "recently-used".to_string(),
                seen(start, start + Duration::from_secs(300), 100, false),
            ),
            ("in-use".to_string(), seen(start, start, 100, false)),
            ("pinned".to_string(), seen(start, start, 100, true)),
            ("new".to_string(), seen(later, later, 100, false)),
        ]
        .into();
        let in_use: HashSet<String> = ["in-use".to_string()].into();
        let min_age = Duration::from_secs(120);
        let ids = |chosen: Vec<(String, u64)>| -> Vec<String> {
            chosen.into_iter().map(|(id, _)| id).collect()
        };
        assert_eq!(
            ids(choose(&images, &in_use, 50, later, min_age)),
            vec!["old-unused"]
        );
        assert_eq!(
            ids(choose(&images, &in_use, u64::MAX, later, min_age)),
            vec!["old-unused", "recently-used"]
        );
        assert!(choose(&images, &in_use, 0, later, min_age).is_empty());
    }

    #[tokio::test]
    async fn unused_images_are_removed_from_the_runtime_and_used_ones_stay() {
        let runtime = Arc::new(
            FakeRuntime::new("10.0.0", Duration::from_secs(3600)).with_local_images_only(),
        );
        runtime.add_image_of_size("localhost/used:1", 300);
        runtime.add_image_of_size("localhost/unused:1", 500);
        // The sandbox image: containerd 1.6 does not report it pinned, the kubelet pins it.
        runtime.add_image_of_size(crate::containerd::PAUSE_IMAGE, 700);
        let sandbox = runtime
            .run_pod_sandbox(&api::PodSandboxConfig::default(), "")
            .await
            .unwrap();
        let config = api::ContainerConfig {
            image: Some(api::ImageSpec {
                image: "localhost/used:1".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        runtime
            .create_container(&sandbox, &config, &api::PodSandboxConfig::default())
            .await
            .unwrap();
        let mut gc = ImageGc::new(
            runtime.clone(),
            Policy {
                min_age: Duration::ZERO,
                ..Policy::default()
            },
        )
        .pinning(vec![crate::containerd::PAUSE_IMAGE.to_owned()]);
        assert_eq!(
            gc.collect(&fs(1000, 500)).await,
            0,
            "50% used: nothing to do"
        );
        assert_eq!(gc.free_all_unused().await, 500);
        let mut left: Vec<String> = runtime
            .list_images()
            .await
            .unwrap()
            .iter()
            .map(describe)
            .collect();
        left.sort();
        assert_eq!(
            left,
            vec![crate::containerd::PAUSE_IMAGE, "localhost/used:1"]
        );
    }
}
