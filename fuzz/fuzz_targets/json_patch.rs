//! A JSON patch (RFC 6902) against one of a few objects: parsed and applied, it must give an
//! object or a 4xx error, never a panic, a stack overflow or a document past the depth limit.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use rudder_apiserver::patch::{apply, parse, PatchKind};

fuzz_target!(|input: &[u8]| {
    let Some((selector, body)) = input.split_first() else { return };
    let (group, kind, object) = common::base(*selector);
    match parse(PatchKind::Json, body) {
        Ok(document) => match apply(PatchKind::Json, group, kind, &object, &document) {
            Ok(patched) => assert!(
                rudder_apiserver::limits::depth(&patched) <= rudder_apiserver::limits::MAX_OBJECT_DEPTH
            ),
            Err(error) => assert!((400..500).contains(&error.code), "{error}"),
        },
        Err(error) => assert!((400..500).contains(&error.code), "{error}"),
    }
});
