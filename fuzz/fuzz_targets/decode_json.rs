//! A request body in Json: decoding it must give a value or a 4xx error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rudder_apiserver::codec::{decode, Format};

fuzz_target!(|body: &[u8]| {
    if let Err(error) = decode(Format::Json, body) {
        assert!((400..500).contains(&error.code), "{error}");
    }
});
