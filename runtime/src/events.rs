//! The events controllers record: `events.k8s.io/v1` through kube-runtime's recorder, which
//! folds a repeated event into a series instead of writing it again.

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};

/// A recorder reporting as `controller` (upstream's names, like `deployment-controller`).
pub fn recorder(client: Client, controller: &str, identity: &str) -> Recorder {
    Recorder::new(
        client,
        Reporter {
            controller: controller.into(),
            instance: Some(identity.to_string()),
        },
    )
}

/// Records an event about `object`; a failure to record is logged, never the sync's failure.
pub async fn publish<K: Resource<DynamicType = ()>>(
    recorder: &Recorder,
    object: &K,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    if let Err(error) = recorder.publish(&event, &object.object_ref(&())).await {
        tracing::debug!(%error, reason, "recording an event failed");
    }
}
