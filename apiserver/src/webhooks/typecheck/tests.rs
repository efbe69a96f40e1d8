//! Type checking against built-in kinds' upstream schemas, in cel-go's words.

use serde_json::{json, Value};

use super::*;

fn policy(resources: Value, validations: Value) -> Value {
    json!({"spec": {
        "matchConstraints": {"resourceRules": [resources]},
        "validations": validations,
    }})
}

fn deployments() -> Value {
    json!({"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]})
}

#[test]
fn an_undefined_field_is_a_warning_in_upstreams_words() {
    let served = Served::default();
    let checked = policy(
        deployments(),
        json!([
            {"expression": "object.spec.replicass > 1"},
            {"expression": "object.spec.replicas <= 5", "messageExpression": "'too many: ' + string(object.spec.replicas)"},
        ]),
    );
    let warnings = expression_warnings(&checked, &served);
    assert_eq!(
        warnings,
        vec![json!({
            "fieldRef": "spec.validations[0].expression",
            "warning": "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replicass'\n | object.spec.replicass > 1\n | ...........^"
        })]
    );
}

#[test]
fn paths_go_through_refs_lists_maps_has_and_macros() {
    let served = Served::default();
    let fine = [
        "object.spec.template.spec.containers.all(c, c.image.startsWith('registry/'))",
        "has(object.metadata.labels) && object.metadata.labels.tier == 'web'",
        "object.spec.template.spec.containers[0].resources.limits.cpu != ''",
        "oldObject == null || oldObject.spec.selector == object.spec.selector",
        "object.spec.template.spec.containers.exists(c, c.ports.all(p, p.containerPort > 0))",
    ];
    for expression in fine {
        let checked = policy(deployments(), json!([{"expression": expression}]));
        assert_eq!(
            expression_warnings(&checked, &served),
            Vec::<Value>::new(),
            "{expression}"
        );
    }
    let wrong = [
        (
            "object.spec.template.spec.containers.all(c, c.imagee != '')",
            "imagee",
        ),
        ("has(object.spec.strategyy)", "strategyy"),
        (
            "object.spec.template.spec.containers[0].resourcez.limits.cpu != ''",
            "resourcez",
        ),
    ];
    for (expression, field) in wrong {
        let checked = policy(deployments(), json!([{"expression": expression}]));
        let warnings = expression_warnings(&checked, &served);
        assert_eq!(warnings.len(), 1, "{expression}");
        assert!(
            warnings[0]["warning"]
                .as_str()
                .unwrap()
                .contains(&format!("undefined field '{field}'")),
            "{warnings:?}"
        );
    }
}

#[test]
fn every_matched_kind_is_checked_and_wildcards_are_not() {
    let served = Served::default();
    let pods_and_deployments = json!({"spec": {
        "matchConstraints": {"resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]},
            deployments(),
        ]},
        "validations": [{"expression": "object.spec.replicas > 0"}],
    }});
    let warnings = expression_warnings(&pods_and_deployments, &served);
    assert_eq!(
        warnings[0]["warning"],
        "/v1, Kind=Pod: ERROR: <input>:1:12: undefined field 'replicas'\n | object.spec.replicas > 0\n | ...........^"
    );
    let wildcard = policy(
        json!({"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}),
        json!([{"expression": "object.spec.nonsense"}]),
    );
    assert!(expression_warnings(&wildcard, &served).is_empty());
}

#[test]
fn operators_and_string_functions_on_the_wrong_types_are_warnings() {
    let served = Served::default();
    let warning = |expression: &str| -> Option<String> {
        let checked = policy(deployments(), json!([{"expression": expression}]));
        expression_warnings(&checked, &served)
            .first()
            .map(|w| w["warning"].as_str().unwrap().to_string())
    };
    assert_eq!(
        warning("object.spec.replicas > '3'").as_deref(),
        Some("apps/v1, Kind=Deployment: ERROR: <input>:1:22: found no matching overload for '_>_' applied to '(int, string)'\n | object.spec.replicas > '3'\n | .....................^")
    );
    assert!(warning("object.metadata.name == 5")
        .unwrap()
        .contains("found no matching overload for '_==_' applied to '(string, int)'"));
    assert!(warning("object.spec.replicas.startsWith('1')")
        .unwrap()
        .contains("found no matching overload for 'startsWith' applied to 'int.(string)'"));
    assert!(warning("object.spec.replicas + 'x' == 'y'")
        .unwrap()
        .contains("'_+_' applied to '(int, string)'"));
    // What CEL allows is no warning: numbers compare across types, strings concatenate,
    // sizes are ints, timestamps compare, unknown types (int-or-string) are left alone.
    for fine in [
        "object.spec.replicas >= 1.5",
        "object.spec.replicas <= size(object.spec.template.spec.containers)",
        "object.metadata.name + '-x' != 'y'",
        "object.metadata.name.startsWith('web')",
        "object.metadata.creationTimestamp < object.metadata.creationTimestamp",
        "object.spec.strategy.rollingUpdate.maxSurge == 1",
        "object.spec.paused == true || object.spec.replicas % 2 == 0",
    ] {
        assert_eq!(warning(fine), None, "{fine}");
    }
}
