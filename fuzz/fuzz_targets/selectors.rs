//! Label and field selectors from a query string: parsing must give a selector or an error,
//! and a parsed selector must match objects without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rudder_apiserver::selectors::{FieldSelector, LabelSelector};

fuzz_target!(|input: &str| {
    let object = serde_json::json!({"metadata": {"name": "a", "labels": {"app": "web", "tier": "x"}}});
    if let Ok(selector) = LabelSelector::parse(input) {
        let _ = selector.matches_object(&object);
    }
    let _ = FieldSelector::parse(input);
});
