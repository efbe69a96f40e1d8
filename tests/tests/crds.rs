//! CustomResourceDefinitions as a user meets them, with real kubectl on every driver:
//! a real-world-shaped CRD bundle applied and Established, its custom resources served with
//! the CRD's printer columns, `explain`ed from its schema, validated by the schema and its
//! CEL rules with their messages, pruned of unknown fields, defaulted, with `/status` and
//! `/scale`, several versions stored as one, list-sets merged by server-side apply, stored
//! as JSON under `/registry/<group>/<plural>/`, and removed with their CRD. A second test
//! checks that a CRD created on one server is served by another on the same store.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use rudder_tests::{Kubectl, RudderServer};
use serde_json::Value;

const RUDDER: &str = env!("CARGO_BIN_EXE_rudder");
const BUNDLE: &str = include_str!("crds/bundle.yaml");

const CERTIFICATE: &str = "apiVersion: tls.rudder.test/v1
kind: Certificate
metadata:
  name: web
spec:
  secretName: web-tls
  issuerRef: {name: ca}
  duration: 7200
  dnsNames: [web.example.com]
  privateKey: {size: 2048}
  extra: {anything: {goes: [1, 2]}}
";

async fn raw(url: &str, key: &str) -> Option<Vec<u8>> {
    let store = rudder_storage::open(url).await.unwrap();
    let kv = store.get(key.as_bytes(), 0).await.unwrap();
    store.close().await;
    kv.map(|kv| kv.value)
}

const QUIET: &[&str] = &[
    "--disable-controller-manager",
    "--disable-scheduler",
    "--disable-agent",
];

fn start(url: &str) -> RudderServer {
    RudderServer::start_with_args(RUDDER, url, QUIET)
}

fn install_bundle(k: &Kubectl<'_>) {
    let bundle = k.file("bundle.yaml", BUNDLE);
    k.ok(&["apply", "-f", &bundle]);
    k.ok(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=20s",
        "crd/certificates.tls.rudder.test",
        "crd/clusterissuers.tls.rudder.test",
    ]);
}

async fn custom_resources(url: String) {
    let server = start(&url);
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "certs".into(),
    };
    k.ok(&["create", "namespace", "certs"]);
    install_bundle(&k);
    let crd = k.json(&["get", "crd", "certificates.tls.rudder.test"]);
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Certificate");
    assert_eq!(crd["status"]["storedVersions"], serde_json::json!(["v1"]));
    let resources = k.ok(&["api-resources", "--api-group", "tls.rudder.test"]);
    assert!(
        resources.contains("certificates") && resources.contains("cert,certs"),
        "{resources}"
    );

    // A rule whose worst case is too costly is refused when the CRD is written, with
    // upstream's messages: a quadratic walk over an unbounded list of unbounded strings.
    let costly = k.file(
        "costly.yaml",
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: costlies.tls.rudder.test}\nspec:\n  group: tls.rudder.test\n  names: {kind: Costly, plural: costlies}\n  scope: Namespaced\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            properties:\n              hosts:\n                type: array\n                items: {type: string}\n                x-kubernetes-validations:\n                - rule: \"self.all(a, self.exists_one(b, a == b))\"\n                  message: hosts must be unique\n",
    );
    let refused = k.fails(&["apply", "-f", &costly]);
    assert!(
        refused.contains("spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[hosts].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)")
            && refused.contains("spec.versions[0].schema.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x"),
        "{refused}"
    );
    // Bounds make the same rule affordable; a full list still costs more than one call may
    // spend at runtime (1M), so an object that fills it is refused before the rule runs.
    let bounded = std::fs::read_to_string(&costly)
        .unwrap()
        .replace(
            "type: array\n",
            "type: array\n                maxItems: 1000\n",
        )
        .replace(
            "items: {type: string}",
            "items: {type: string, maxLength: 4}",
        );
    let bounded = k.file("bounded.yaml", &bounded);
    k.ok(&["apply", "-f", &bounded]);
    k.ok(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=20s",
        "crd/costlies.tls.rudder.test",
    ]);
    let costly_object = |name: &str, hosts: usize| {
        let hosts: Vec<String> = (0..hosts).map(|i| format!("h{i}")).collect();
        k.file(
            &format!("{name}.yaml"),
            &format!("apiVersion: tls.rudder.test/v1\nkind: Costly\nmetadata: {{name: {name}}}\nspec: {{hosts: [{}]}}\n", hosts.join(", ")),
        )
    };
    k.ok_ns(&["apply", "-f", &costly_object("few", 10)]);
    let refused = k.fails_ns(&["apply", "-f", &costly_object("many", 1000)]);
    assert!(
        refused.contains("spec.hosts: Invalid value: \"array\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: hosts must be unique"),
        "{refused}"
    );
    k.ok(&["delete", "crd", "costlies.tls.rudder.test"]);

    // Created, defaulted and pruned.
    let manifest = k.file("web.yaml", CERTIFICATE);
    k.ok_ns(&["apply", "-f", &manifest]);
    let web = k.json(&["get", "certificate", "web"]);
    assert_eq!(web["spec"]["replicas"], 1);
    assert_eq!(web["spec"]["privateKey"]["algorithm"], "RSA");
    assert_eq!(web["spec"]["issuerRef"]["kind"], "Issuer");
    assert_eq!(
        web["spec"]["extra"]["anything"]["goes"],
        serde_json::json!([1, 2])
    );
    assert_eq!(web["metadata"]["generation"], 1);
    let loose = k.file(
        "loose.yaml",
        "apiVersion: tls.rudder.test/v1\nkind: Certificate\nmetadata: {name: loose}\nspec: {secretName: loose, issuerRef: {name: ca}, bogus: 1}\nextra: 2\n",
    );
    let strict = k.fails_ns(&["apply", "-f", &loose]);
    assert!(strict.contains("unknown field \"spec.bogus\""), "{strict}");
    k.ok_ns(&["apply", "--validate=false", "-f", &loose]);
    let loose = k.json(&["get", "certificate", "loose"]);
    assert!(
        loose["spec"].get("bogus").is_none() && loose.get("extra").is_none(),
        "{loose}"
    );

    // The CRD's printer columns, through its short name and its category.
    let table = k.ok_ns(&["get", "certs"]);
    let header = table.lines().next().unwrap();
    for column in ["NAME", "READY", "SECRET", "REPLICAS", "AGE"] {
        assert!(header.contains(column), "{table}");
    }
    assert!(
        !header.contains("ISSUER"),
        "a priority-1 column only in -o wide: {table}"
    );
    assert!(k.ok_ns(&["get", "certs", "-o", "wide"]).contains("ISSUER"));
    let row = table
        .lines()
        .find(|l| l.starts_with("web "))
        .unwrap()
        .to_string();
    assert!(row.contains("web-tls") && row.contains(" 1 "), "{row}");
    assert!(k.ok_ns(&["get", "tls-all"]).contains("web"));
    // Its selectable field filters lists (served from the watch cache) and nothing else does.
    let selected = k.ok_ns(&[
        "get",
        "certs",
        "--field-selector",
        "spec.secretName=web-tls",
        "-o",
        "name",
    ]);
    assert_eq!(selected.trim(), "certificate.tls.rudder.test/web");
    let others = k.ok_ns(&[
        "get",
        "certs",
        "--field-selector",
        "spec.secretName!=web-tls",
        "-o",
        "name",
    ]);
    assert_eq!(others.trim(), "certificate.tls.rudder.test/loose");
    let refused = k.fails_ns(&["get", "certs", "--field-selector", "spec.duration=7200"]);
    assert!(
        refused.contains("field label not supported: spec.duration"),
        "{refused}"
    );
    let explained = k.ok(&["explain", "certificates.spec.secretName"]);
    assert!(
        explained.contains("The name of the Secret the certificate"),
        "{explained}"
    );

    // The schema's and the rules' messages.
    let bad = k.file(
        "bad.yaml",
        "apiVersion: tls.rudder.test/v1\nkind: Certificate\nmetadata: {name: bad}\nspec: {secretName: Bad_Name, issuerRef: {name: ca, kind: Nope}, duration: 60, usages: [nonsense]}\n",
    );
    let refused = k.fails_ns(&["apply", "-f", &bad]);
    for message in [
        "The Certificate \"bad\" is invalid",
        "spec.duration: Invalid value: 60: spec.duration in body should be greater than or equal to 3600",
        "spec.secretName: Invalid value: \"Bad_Name\": spec.secretName in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
        "spec.issuerRef.kind: Unsupported value: \"Nope\": supported values: \"Issuer\", \"ClusterIssuer\"",
        "spec.usages[0]: Unsupported value: \"nonsense\"",
    ] {
        assert!(refused.contains(message), "{message} in {refused}");
    }
    let missing = k.file(
        "missing.yaml",
        "apiVersion: tls.rudder.test/v1\nkind: Certificate\nmetadata: {name: missing}\nspec: {secretName: missing}\n",
    );
    assert!(k
        .fails_ns(&["apply", "-f", &missing])
        .contains("spec.issuerRef: Required value"));
    let renew = k.file(
        "renew.yaml",
        "apiVersion: tls.rudder.test/v1\nkind: Certificate\nmetadata: {name: renew}\nspec: {secretName: renew, issuerRef: {name: ca}, duration: 3600, renewBefore: 7200, commonName: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}\n",
    );
    let refused = k.fails_ns(&["apply", "-f", &renew]);
    assert!(
        refused
            .contains("spec: Invalid value: \"object\": renewBefore must be shorter than duration"),
        "{refused}"
    );
    assert!(
        refused.contains(
            "the commonName of the certificate for Secret renew is longer than 64 characters"
        ),
        "messageExpression: {refused}"
    );
    // A transition rule holds on updates.
    let immutable = k.fails_ns(&[
        "patch",
        "certificate",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"secretName":"other"}}"#,
    ]);
    assert!(
        immutable.contains("spec: Invalid value: \"object\": secretName is immutable"),
        "{immutable}"
    );
    // No strategic merge patch for custom resources, as upstream.
    let smp = k.fails_ns(&[
        "patch",
        "certificate",
        "web",
        "-p",
        r#"{"spec":{"replicas":2}}"#,
    ]);
    assert!(
        smp.contains("application/strategic-merge-patch+json is not supported"),
        "{smp}"
    );

    // Status and scale subresources.
    k.ok_ns(&[
        "patch", "certificate", "web", "--subresource", "status", "--type", "merge", "-p",
        r#"{"status":{"replicas":1,"selector":"app=web","conditions":[{"type":"Ready","status":"True"}]},"spec":{"replicas":9}}"#,
    ]);
    let web = k.json(&["get", "certificate", "web"]);
    assert_eq!(web["status"]["conditions"][0]["status"], "True");
    assert_eq!(web["spec"]["replicas"], 1, "/status leaves the spec alone");
    let row = k.ok_ns(&["get", "certs", "web", "--no-headers"]);
    assert!(row.contains("True"), "{row}");
    k.ok_ns(&["scale", "certificate", "web", "--replicas", "3"]);
    assert_eq!(
        k.jsonpath(
            "certificate",
            "web",
            "{.spec.replicas} {.metadata.generation}"
        ),
        "3 2"
    );
    let scale: Value = serde_json::from_str(&k.ok(&[
        "get",
        "--raw",
        "/apis/tls.rudder.test/v1/namespaces/certs/certificates/web/scale",
    ]))
    .unwrap();
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["replicas"], 1);
    assert_eq!(scale["status"]["selector"], "app=web");

    // Server-side apply merges a list-type set item by item between managers.
    for (manager, name) in [("first", "a.example.com"), ("second", "b.example.com")] {
        let applied = k.file(
            &format!("{manager}.yaml"),
            &format!("apiVersion: tls.rudder.test/v1\nkind: Certificate\nmetadata: {{name: sans}}\nspec: {{secretName: sans, issuerRef: {{name: ca}}, dnsNames: [{name}]}}\n"),
        );
        k.ok_ns(&[
            "apply",
            "--server-side",
            "--field-manager",
            manager,
            "-f",
            &applied,
        ]);
    }
    let names = k.jsonpath("certificate", "sans", "{.spec.dnsNames}");
    assert_eq!(names, r#"["a.example.com","b.example.com"]"#);

    // A second served version shows the same object; storage keeps the storage version, JSON.
    let beta = k.ok_ns(&[
        "get",
        "certificates.v1beta1.tls.rudder.test",
        "web",
        "-o",
        "json",
    ]);
    let beta: Value = serde_json::from_str(&beta).unwrap();
    assert_eq!(beta["apiVersion"], "tls.rudder.test/v1beta1");
    assert_eq!(beta["spec"]["secretName"], "web-tls");
    let stored = raw(&url, "/registry/tls.rudder.test/certificates/certs/web")
        .await
        .unwrap();
    let stored: Value =
        serde_json::from_slice(&stored).expect("custom resources are stored as JSON");
    assert_eq!(stored["apiVersion"], "tls.rudder.test/v1");

    // Cluster scope; then deleting the CRDs deletes their objects.
    let issuer = k.file(
        "issuer.yaml",
        "apiVersion: tls.rudder.test/v1\nkind: ClusterIssuer\nmetadata: {name: ca}\nspec: {ca: {secretName: ca}}\n",
    );
    k.ok(&["apply", "-f", &issuer]);
    assert!(k.ok(&["get", "clusterissuers"]).contains("ca"));
    k.ok(&[
        "delete",
        "crd",
        "certificates.tls.rudder.test",
        "clusterissuers.tls.rudder.test",
    ]);
    assert!(
        k.ok(&["get", "crd"]).trim().is_empty()
            || !k.ok(&["get", "crd"]).contains("tls.rudder.test")
    );
    assert!(
        raw(&url, "/registry/tls.rudder.test/certificates/certs/web")
            .await
            .is_none()
    );
    assert!(raw(&url, "/registry/tls.rudder.test/clusterissuers/ca")
        .await
        .is_none());
    let gone = k.fails_ns(&["get", "certs"]);
    // kubectl either finds the type gone from discovery or, from its discovery cache, the
    // resource gone from the server.
    assert!(
        gone.contains("the server doesn't have a resource type")
            || gone.contains("the server could not find the requested resource"),
        "{gone}"
    );
}

rudder_tests::on_every_driver!(custom_resources;
    custom_resources_on_sqlite => sqlite,
    custom_resources_on_postgres => postgres,
    custom_resources_on_etcd => etcd);

/// Older kubectls read the CRD's discovery and OpenAPI too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_kubectls_use_custom_resources() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("state.db").display());
    let server = start(&url);
    for version in ["1.27", "1.30"] {
        let k = Kubectl {
            server: &server,
            version,
            namespace: format!("v{}", version.replace('.', "-")),
        };
        k.ok(&["create", "namespace", &k.namespace]);
        install_bundle(&k);
        let manifest = k.file("web.yaml", CERTIFICATE);
        k.ok_ns(&["apply", "-f", &manifest]);
        let table = k.ok_ns(&["get", "cert"]);
        assert!(
            table.contains("SECRET") && table.contains("web-tls"),
            "{version}: {table}"
        );
        let explained = k.ok(&["explain", "certificates.spec.issuerRef"]);
        assert!(
            explained.contains("The issuer that signs the certificate"),
            "{version}: {explained}"
        );
        k.ok_ns(&["delete", "cert", "web"]);
    }
}

/// A CRD created through one server is served by another on the same store within a second.
async fn shared_between_servers(url: String) {
    let first = start(&url);
    let token = std::fs::read_to_string(first.data_dir().join("token")).unwrap();
    let mut args = QUIET.to_vec();
    args.extend(["--token", token.trim()]);
    let second = RudderServer::start_with_args(RUDDER, &url, &args);
    let one = Kubectl {
        server: &first,
        version: "1.33",
        namespace: "default".into(),
    };
    let two = Kubectl {
        server: &second,
        version: "1.33",
        namespace: "default".into(),
    };
    install_bundle(&one);
    let started = Instant::now();
    let manifest = two.file("web.yaml", CERTIFICATE);
    loop {
        let applied = two.run(&two.in_namespace(&["apply", "-f", &manifest]));
        if applied.status.success() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the second server never served certificates"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("served by the second server after {:?}", started.elapsed());
    assert!(one.ok_ns(&["get", "certs"]).contains("web-tls"));
}

rudder_tests::on_every_driver!(shared_between_servers;
    a_crd_is_served_by_every_server_on_postgres => postgres,
    a_crd_is_served_by_every_server_on_etcd => etcd);

/// A kube-rs `#[derive(CustomResource)]` type: its CRD created from the derive, then CRUD,
/// a watcher, and status patches, as an operator written with kube-rs does.
mod derived {
    use std::time::Duration;

    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
    use kube::runtime::watcher;
    use kube::{CustomResource, CustomResourceExt, ResourceExt};
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    use super::start;

    #[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
    #[kube(
        group = "derive.rudder.test",
        version = "v1",
        kind = "Backup",
        namespaced,
        status = "BackupStatus",
        shortname = "bk",
        printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule"}"#
    )]
    pub struct BackupSpec {
        schedule: String,
        keep: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
    }

    #[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
    pub struct BackupStatus {
        taken: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last: Option<String>,
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_derived_custom_resource_works_with_kube_rs() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("state.db").display());
        let server = start(&url);
        let client = rudder_tests::admin_client(server.kubeconfig()).await;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.create(&PostParams::default(), &Backup::crd())
            .await
            .unwrap();
        rudder_tests::eventually(
            "the Backup CRD is established",
            Duration::from_secs(10),
            || {
                let crds = crds.clone();
                async move {
                    let Ok(crd) = crds.get("backups.derive.rudder.test").await else {
                        return false;
                    };
                    crd.status
                        .and_then(|status| status.conditions)
                        .is_some_and(|conditions| {
                            conditions
                                .iter()
                                .any(|c| c.type_ == "Established" && c.status == "True")
                        })
                }
            },
        )
        .await;

        let backups: Api<Backup> = Api::namespaced(client.clone(), "default");
        // The watcher runs from the start (its initial list done) and reports what it sees.
        let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let mut events = watcher(backups.clone(), watcher::Config::default()).boxed();
        tokio::spawn(async move {
            while let Ok(Some(event)) = events.try_next().await {
                let seen = match event {
                    watcher::Event::Apply(b) | watcher::Event::InitApply(b) => {
                        format!("applied {} keep={}", b.name_any(), b.spec.keep)
                    }
                    watcher::Event::Delete(b) => format!("deleted {}", b.name_any()),
                    watcher::Event::InitDone => "listed".to_string(),
                    watcher::Event::Init => continue,
                };
                if seen_tx.send(seen).is_err() {
                    return;
                }
            }
        });
        let first = tokio::time::timeout(Duration::from_secs(10), seen_rx.recv()).await;
        assert_eq!(first.unwrap().as_deref(), Some("listed"));
        let nightly = Backup::new(
            "nightly",
            BackupSpec {
                schedule: "0 2 * * *".into(),
                keep: 7,
                target: None,
            },
        );
        let created = backups
            .create(&PostParams::default(), &nightly)
            .await
            .unwrap();
        assert_eq!(created.spec.keep, 7);
        assert!(created.status.is_none(), "status is the subresource's");
        let mut listed = backups.list(&Default::default()).await.unwrap();
        assert_eq!(listed.items.len(), 1);
        let mut changed = listed.items.remove(0);
        changed.spec.keep = 14;
        let replaced = backups
            .replace("nightly", &PostParams::default(), &changed)
            .await
            .unwrap();
        assert_eq!(replaced.spec.keep, 14);
        let status = serde_json::json!({"status": {"taken": 3, "last": "2026-12-02T02:00:00Z"}});
        let patched = backups
            .patch_status("nightly", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        assert_eq!(patched.status.unwrap().taken, 3);
        assert_eq!(patched.spec.keep, 14);
        // A wrong type in the status is refused by the derived schema.
        let wrong = serde_json::json!({"status": {"taken": "many"}});
        let refused = backups
            .patch_status("nightly", &PatchParams::default(), &Patch::Merge(&wrong))
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("status.taken"), "{refused}");
        let applied = serde_json::json!({
            "apiVersion": "derive.rudder.test/v1", "kind": "Backup",
            "metadata": {"name": "weekly"},
            "spec": {"schedule": "0 3 * * 0", "keep": 4, "target": "s3://bucket"}
        });
        backups
            .patch(
                "weekly",
                &PatchParams::apply("backup-operator"),
                &Patch::Apply(&applied),
            )
            .await
            .unwrap();
        backups
            .delete("nightly", &DeleteParams::default())
            .await
            .unwrap();

        // The watcher saw the creates, the updates and the delete.
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !seen.iter().any(|s: &String| s == "deleted nightly") {
            let next = tokio::time::timeout_at(deadline, seen_rx.recv())
                .await
                .unwrap_or_else(|_| panic!("the watcher's events in time; saw {seen:?}"));
            seen.push(next.expect("the watcher runs"));
        }
        for expected in [
            "applied nightly keep=7",
            "applied nightly keep=14",
            "applied weekly keep=4",
        ] {
            assert!(seen.iter().any(|s| s == expected), "{expected} in {seen:?}");
        }

        // A protobuf client (client-go's metadata informers, as the garbage collector runs
        // them) gets custom resources as JSON — they have no protobuf form — and their
        // metadata as protobuf.
        let uri = "/apis/derive.rudder.test/v1/namespaces/default/backups";
        for (accept, content_type, kind) in [
            (
                "application/vnd.kubernetes.protobuf, application/json",
                "application/json",
                "BackupList",
            ),
            (
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
                "application/vnd.kubernetes.protobuf",
                "PartialObjectMetadataList",
            ),
        ] {
            let request = http::Request::get(uri)
                .header(http::header::ACCEPT, accept)
                .body(Vec::new())
                .unwrap();
            let response = client.send(request.map(Into::into)).await.unwrap();
            assert_eq!(response.status(), 200, "{accept}");
            assert_eq!(response.headers()[http::header::CONTENT_TYPE], content_type);
            let body = http_body_util::BodyExt::collect(response.into_body())
                .await
                .unwrap()
                .to_bytes();
            let list = if content_type == "application/json" {
                serde_json::from_slice::<serde_json::Value>(&body).unwrap()
            } else {
                rudder_apiserver::protobuf::decode(&body).unwrap()
            };
            assert_eq!(list["kind"], kind);
            assert_eq!(list["items"][0]["metadata"]["name"], "weekly", "{list}");
        }
    }
}

/// The garbage collector finds a CRD's kind created after it started (by discovering again,
/// as upstream resyncs every 30 s) and deletes custom objects whose owner is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_objects_are_garbage_collected_with_their_owner() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("state.db").display());
    let server =
        RudderServer::start_with_args(RUDDER, &url, &["--disable-scheduler", "--disable-agent"]);
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "default".into(),
    };
    install_bundle(&k);
    k.ok_ns(&["create", "configmap", "owner"]);
    let uid = k.jsonpath("configmap", "owner", "{.metadata.uid}");
    let owned = k.file(
        "owned.yaml",
        &format!("apiVersion: tls.rudder.test/v1\nkind: Certificate\nmetadata:\n  name: owned\n  ownerReferences: [{{apiVersion: v1, kind: ConfigMap, name: owner, uid: {uid}}}]\nspec: {{secretName: owned, issuerRef: {{name: ca}}}}\n"),
    );
    k.ok_ns(&["apply", "-f", &owned]);
    k.ok_ns(&["delete", "configmap", "owner"]);
    let started = Instant::now();
    loop {
        let left = k.run(&k.in_namespace(&[
            "get",
            "certificate",
            "owned",
            "--ignore-not-found",
            "-o",
            "name",
        ]));
        if left.status.success() && left.stdout.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(75),
            "the garbage collector never deleted the orphaned certificate"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}
