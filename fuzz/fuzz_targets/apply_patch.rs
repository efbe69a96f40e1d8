//! A server-side apply body (YAML) against one of a few objects, as a manager that owns
//! nothing yet: it must merge or fail with an error, never panic.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use rudder_apiserver::patch::{parse, Document, PatchKind};

fuzz_target!(|input: &[u8]| {
    let Some((selector, body)) = input.split_first() else { return };
    let (group, kind, object) = common::base(*selector);
    let Ok(Document::Object(applied)) = parse(PatchKind::Apply, body) else { return };
    let api_version = object["apiVersion"].as_str().unwrap_or("v1").to_string();
    let force = selector & 0x80 != 0;
    let _ = rudder_apiserver::patch::apply::apply(
        group,
        kind,
        &api_version,
        Some(&object),
        &applied,
        "fuzzer",
        force,
        None,
        "2024-01-01T00:00:00Z",
    );
});
