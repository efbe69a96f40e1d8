//! `kube-system/extension-apiserver-authentication`, as kube-apiserver publishes it: how an
//! extension apiserver authenticates the requests it gets — client certificates from the
//! cluster CA (`client-ca-file`), and proxied requests whose client certificate the
//! front-proxy CA issued to an allowed name, with the user in the `requestheader-*` headers.
//! Extension apiservers (metrics-server, the sample apiserver) read it at start; RBAC's
//! `extension-apiserver-authentication-reader` Role lets them.

use serde_json::{json, Value};

use crate::authn::request_header::RequestHeaderConfig;
use crate::catalog;
use crate::error::{ApiError, Result};
use crate::registry::{system_write, Input, Registry};

pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "extension-apiserver-authentication";

/// The ConfigMap's data for the cluster CA (PEM) and the request-header settings.
pub fn data(client_ca_pem: &str, request_header: &RequestHeaderConfig) -> Value {
    let list = |items: &[String]| json!(items).to_string();
    json!({
        "client-ca-file": client_ca_pem,
        "requestheader-client-ca-file": request_header.client_ca_pem,
        "requestheader-allowed-names": list(&request_header.allowed_names),
        "requestheader-username-headers": list(&request_header.username_headers),
        "requestheader-uid-headers": list(&request_header.uid_headers),
        "requestheader-group-headers": list(&request_header.group_headers),
        "requestheader-extra-headers-prefix": list(&request_header.extra_headers_prefix),
    })
}

/// Creates the ConfigMap, or brings its data up to date.
pub async fn publish(
    registry: &Registry,
    client_ca_pem: &str,
    request_header: &RequestHeaderConfig,
) -> Result<()> {
    let maps = catalog::find("", "v1", "configmaps")
        .ok_or_else(|| ApiError::internal("the catalog lacks configmaps"))?;
    let wanted = data(client_ca_pem, request_header);
    let write = system_write();
    let stored = match registry.get(maps, Some(NAMESPACE), NAME).await {
        Ok(object) => Some(object),
        Err(error) if error.is_not_found() => None,
        Err(error) => return Err(error),
    };
    match stored {
        Some(object) if object["data"] == wanted => {}
        Some(_) => {
            registry
                .update_with(maps, Some(NAMESPACE), NAME, None, &write, |current| {
                    let mut updated = current.clone();
                    updated["data"] = wanted.clone();
                    crate::registry::object::remove_meta(&mut updated, "resourceVersion");
                    Ok(updated)
                })
                .await?;
        }
        None => {
            let input = Input {
                object: json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": NAME, "namespace": NAMESPACE}, "data": wanted}),
                duplicate_fields: Vec::new(),
            };
            match registry.create(maps, Some(NAMESPACE), input, &write).await {
                Ok(_) => tracing::info!("published kube-system/{NAME}"),
                Err(error) if error.is_already_exists() => {}
                Err(error) => return Err(error),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_settings_are_json_lists_as_upstreams() {
        let config = RequestHeaderConfig::x_remote(
            "proxy".into(),
            vec![crate::pki::front_proxy::CLIENT_NAME.into()],
        );
        let data = data("client", &config);
        assert_eq!(data["requestheader-client-ca-file"], "proxy");
        assert_eq!(
            data["requestheader-allowed-names"],
            "[\"front-proxy-client\"]"
        );
        assert_eq!(
            data["requestheader-username-headers"],
            "[\"X-Remote-User\"]"
        );
        assert_eq!(
            data["requestheader-extra-headers-prefix"],
            "[\"X-Remote-Extra-\"]"
        );
    }
}
