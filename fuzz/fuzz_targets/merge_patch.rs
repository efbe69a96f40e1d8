//! A merge patch against one of a few objects: parsed and applied, it must give an object or
//! a 4xx error, never a panic.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use rudder_apiserver::patch::{apply, parse, PatchKind};

fuzz_target!(|input: &[u8]| {
    let Some((selector, body)) = input.split_first() else { return };
    let (group, kind, object) = common::base(*selector);
    let result = parse(PatchKind::Merge, body)
        .and_then(|document| apply(PatchKind::Merge, group, kind, &object, &document));
    if let Err(error) = result {
        assert!((400..500).contains(&error.code), "{error}");
    }
});
