//! `rudder storage get KEY|PREFIX`: what the store holds, decoded — protobuf or JSON values,
//! decrypted with the server's encryption configuration when it is given — what upstream
//! users reach for auger and etcdctl for.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use rudder_apiserver::values::encryption::kms::KmsContext;
use rudder_apiserver::values::encryption::{
    describe_prefix, Current, Encryption, ENCRYPTED_PREFIX,
};
use rudder_apiserver::values::{format, MediaType, Values};
use rudder_storage::{KeyRange, KeyValue, RangeRequest};
use serde_json::{json, Value};

#[derive(clap::Args)]
pub struct GetArgs {
    /// A key (`/registry/secrets/default/db`), or a prefix ending in `/` for every key under it.
    key: String,
    /// sqlite://PATH, postgres://USER@HOST:PORT/DB, mysql://USER@HOST:PORT/DB,
    /// spanner://projects/P/instances/I/databases/D or etcd://HOST:PORT[,HOST:PORT…]
    #[arg(long, env = "RUDDER_STORAGE")]
    storage: String,
    /// Output: `yaml` (each object after a `# key` comment) or `json` (the object; an array
    /// of them for a prefix).
    #[arg(short = 'o', long, default_value = "yaml")]
    output: String,
    /// The server's EncryptionConfiguration, to decrypt encrypted values.
    #[arg(long)]
    encryption_provider_config: Option<PathBuf>,
    /// Treat KEY as a prefix even without a trailing `/`.
    #[arg(long)]
    prefix: bool,
}

/// One key as shown: its object, or what stopped it from being read.
fn show(values: &Values, kv: &KeyValue) -> (Value, String) {
    let form = describe(&kv.value);
    match values.decode_key(&kv.key, &kv.value) {
        Some(Ok(mut object)) => {
            if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.insert(
                    "resourceVersion".into(),
                    Value::String(kv.mod_revision.to_string()),
                );
            }
            (object, form)
        }
        Some(Err(error)) => (json!({ "error": error.to_string() }), form),
        // A key of Rudder's own (not an API object): shown as text, or as JSON when it is.
        None => match serde_json::from_slice::<Value>(&kv.value) {
            Ok(value) => (value, form),
            Err(_) => (
                Value::String(String::from_utf8_lossy(&kv.value).into_owned()),
                form,
            ),
        },
    }
}

/// How a value is stored: `protobuf`, `json`, or the encryption prefix it carries.
fn describe(value: &[u8]) -> String {
    if value.starts_with(ENCRYPTED_PREFIX) {
        return format!("encrypted, {}", describe_prefix(value));
    }
    if format::is_protobuf(value) {
        "protobuf".into()
    } else {
        "json".into()
    }
}

pub async fn run(args: GetArgs) -> Result<()> {
    let encryption = match &args.encryption_provider_config {
        Some(path) => {
            Encryption::load(path, &KmsContext::default())
                .map_err(anyhow::Error::msg)?
                .0
        }
        None => Encryption::none(),
    };
    let values = Values::new(MediaType::default(), Arc::new(Current::new(encryption)));
    let store = rudder_storage::open(&args.storage)
        .await
        .with_context(|| format!("opening {}", rudder_storage::config::redact(&args.storage)))?;
    let key = args.key.as_bytes().to_vec();
    let range = if args.prefix || args.key.ends_with('/') {
        KeyRange::prefix(key)
    } else {
        KeyRange::key(key)
    };
    let listed = store.range(RangeRequest::new(range)).await;
    store.close().await;
    let listed = listed?;
    if listed.kvs.is_empty() {
        anyhow::bail!("{}: not found", args.key);
    }
    let shown: Vec<(String, Value, String)> = listed
        .kvs
        .iter()
        .map(|kv| {
            let (object, form) = show(&values, kv);
            (String::from_utf8_lossy(&kv.key).into_owned(), object, form)
        })
        .collect();
    match args.output.as_str() {
        "json" => {
            let out = if shown.len() == 1 && !(args.prefix || args.key.ends_with('/')) {
                shown[0].1.clone()
            } else {
                Value::Array(shown.into_iter().map(|(_, object, _)| object).collect())
            };
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        "yaml" => {
            for (index, (key, object, form)) in shown.iter().enumerate() {
                if index > 0 {
                    println!("---");
                }
                println!("# {key} ({form})");
                print!("{}", yaml_serde::to_string(object)?);
            }
        }
        other => anyhow::bail!("-o {other}: expected json or yaml"),
    }
    Ok(())
}
