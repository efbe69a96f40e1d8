//! The estimates against upstream's published cost vectors (apiextensions-apiserver's
//! `TestCostEstimation`: each schema without bounds, then with them), and the CRD-level
//! limits with upstream's messages.

use serde_json::{json, Value};

use super::*;

/// The rule's estimated maximum cost with `self` of `schema` (as a non-root node).
fn cost_of(schema: &Value, rule: &str) -> u64 {
    let (shape, _) = shape_of(schema, false);
    estimate(rule, &shape).expect("the rule parses")
}

fn item(kind: &str) -> Value {
    match kind {
        "int-or-string" => json!({"x-kubernetes-int-or-string": true}),
        other => json!({"type": other}),
    }
}

fn array_of(kind: &str, max_items: Option<u64>) -> Value {
    let mut schema = json!({"type": "array", "items": item(kind)});
    if let Some(max) = max_items {
        schema["maxItems"] = json!(max);
    }
    schema
}

fn map_of(kind: &str, max_properties: Option<u64>) -> Value {
    let mut schema = json!({"type": "object", "additionalProperties": item(kind)});
    if let Some(max) = max_properties {
        schema["maxProperties"] = json!(max);
    }
    schema
}

fn string(max_length: Option<u64>) -> Value {
    let mut schema = json!({"type": "string"});
    if let Some(max) = max_length {
        schema["maxLength"] = json!(max);
    }
    schema
}

#[test]
fn estimates_match_upstreams_vectors() {
    // (schema without bounds, with bounds, rule, upstream's cost without, with)
    type Case = (fn(Option<u64>) -> Value, u64, &'static str, u64, u64);
    let cases: &[Case] = &[
        (
            |m| array_of("number", m),
            10,
            "self.all(x, true)",
            4718591,
            32,
        ),
        (
            |m| array_of("string", m),
            20,
            "self.all(x, true)",
            3145727,
            62,
        ),
        (
            |m| array_of("boolean", m),
            5,
            "self.all(x, true)",
            1887437,
            17,
        ),
        (
            |m| array_of("int-or-string", m),
            10,
            "self.all(x, true)",
            4718591,
            32,
        ),
        (
            |m| map_of("number", m),
            10,
            "self.all(x, true)",
            1348169,
            32,
        ),
        (|m| map_of("string", m), 3, "self.all(x, true)", 1179647, 11),
        (
            |m| map_of("boolean", m),
            100,
            "self.all(x, true)",
            943718,
            302,
        ),
        (string, 10, "self.contains('test')", 314574, 5),
        (string, 15, "self.startsWith('test')", 2, 2),
        (
            string,
            4,
            r#"size(self + "hello") > size("hello")"#,
            314578,
            7,
        ),
        (|m| array_of("number", m), 5000, "self[1] == 0.0", 2, 2),
        (
            |m| array_of("string", m),
            8,
            "self[1] == self[1]",
            314577,
            314577,
        ),
        (
            |m| array_of("number", m),
            10,
            "self.all(x, self.all(y, true))",
            0,
            352,
        ),
        (
            |m| array_of("number", m),
            10,
            "self.all(x, self.all(y, self.all(z, true)))",
            0,
            3552,
        ),
        (string, 50, r#"self.matches("x")"#, 314574, 22),
        (
            string,
            10,
            r#""".matches("(((((((((())))))))))[0-9]")"#,
            7,
            7,
        ),
        (string, 100, r#"self.matches("")"#, 1, 1),
        (
            |m| map_of("string", m),
            10,
            "self.all(x, x.contains(self[x]))",
            2752507,
            72,
        ),
        (string, 0, r#"self == "x""#, 2, 1),
        (
            |m| array_of("number", m),
            3 * 1024 * 2048,
            "self.all(x, x == 0.0)",
            6291454,
            25165826,
        ),
        (|m| array_of("int-or-string", m), 10, "self[0] == 5", 3, 3),
        (|m| array_of("boolean", m), 25, "self[0] == false", 2, 2),
    ];
    for (schema, bound, rule, unbounded, bounded) in cases {
        if *unbounded > 0 {
            assert_eq!(cost_of(&schema(None), rule), *unbounded, "{rule} unbounded");
        } else {
            assert!(
                cost_of(&schema(None), rule) > STATIC_ESTIMATED_COST_LIMIT,
                "{rule} unbounded is over the limit"
            );
        }
        assert_eq!(
            cost_of(&schema(Some(*bound)), rule),
            *bounded,
            "{rule} bounded"
        );
    }
    // A list of maps of numbers: a select on a map costs one.
    let maps = |max: Option<u64>| {
        let mut schema = json!({"type": "array", "items": map_of("number", None)});
        if let Some(max) = max {
            schema["maxItems"] = json!(max);
            schema["items"]["maxProperties"] = json!(max);
        }
        schema
    };
    assert_eq!(cost_of(&maps(None), "self.all(x, x.y == 25.2)"), 6291452);
    assert_eq!(cost_of(&maps(Some(12)), "self.all(x, x.y == 25.2)"), 74);
    assert_eq!(cost_of(&maps(Some(3000)), "self[0].x > 2.0"), 4);
}

fn crd_schema(spec: Value) -> Value {
    json!({"type": "object", "properties": {"spec": spec}})
}

const AT: &str = "spec.versions[0].schema.openAPIV3Schema";

#[test]
fn costly_rules_are_refused_with_upstreams_messages() {
    // Quadratic over an unbounded list of unbounded strings: far over.
    let mut errors = Errs::new();
    let schema = crd_schema(json!({
        "type": "array", "items": {"type": "string"},
        "x-kubernetes-validations": [{"rule": "self.all(a, self.exists(b, a == b))"}]
    }));
    check(&schema, AT, &mut errors);
    let messages: Vec<String> = errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.detail))
        .collect();
    assert_eq!(
        messages[0],
        format!("{AT}.properties[spec].x-kubernetes-validations[0].rule: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)")
    );
    // The total is over too: the rule is named as a contributor, then the schema.
    assert!(messages[1].ends_with(
        "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
    ));
    assert!(messages[2].starts_with(&format!("{AT}: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x")));

    // Bounds bring it under.
    let mut errors = Errs::new();
    let bounded = crd_schema(json!({
        "type": "array", "maxItems": 100, "items": {"type": "string", "maxLength": 64},
        "x-kubernetes-validations": [{"rule": "self.all(a, self.exists(b, a == b))"}]
    }));
    check(&bounded, AT, &mut errors);
    assert!(errors.is_empty(), "{errors:?}");

    // A cheap rule under a list runs once per item: its cost is multiplied by the list's
    // bound (or, unbounded, by how many items fit in a request), and one list too long for
    // the rule shows the factor.
    let per_item = |max_items: Option<u64>| {
        let mut list = json!({"type": "array", "items": {
            "type": "string",
            "x-kubernetes-validations": [{"rule": "self.matches('^[a-z]+$')"}]
        }});
        if let Some(max) = max_items {
            list["maxItems"] = json!(max);
        }
        crd_schema(list)
    };
    let mut errors = Errs::new();
    check(&per_item(Some(10)), AT, &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    let mut errors = Errs::new();
    check(&per_item(None), AT, &mut errors);
    assert_eq!(
        errors[0].field,
        format!("{AT}.properties[spec].items.x-kubernetes-validations[0].rule")
    );
    assert!(
        errors[0].detail.contains("more than 100x"),
        "{}",
        errors[0].detail
    );

    // messageExpressions are estimated as well.
    let mut errors = Errs::new();
    let message = crd_schema(json!({
        "type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 10},
        "x-kubernetes-validations": [{"rule": "true",
            "messageExpression": "self.map(a, self.map(b, a + b).join(',')).join(';')"}]
    }));
    check(&message, AT, &mut errors);
    assert!(errors.is_empty(), "a bounded message: {errors:?}");
}

#[test]
fn the_factor_reads_as_upstreams() {
    assert!(over_budget("x", 12_000_000, 10_000_000).contains("factor of 1.200000x"));
    assert!(over_budget("x", 25_000_000, 10_000_000).contains("factor of 2.5x"));
    assert!(over_budget("x", 2_000_000_000, 10_000_000).contains("more than 100x"));
}

#[test]
fn writes_that_would_run_out_of_the_runtime_budgets_are_refused() {
    // A quadratic rule over a list of up to 1,000 short strings: under the static limit of
    // one expression (10M), over a call's runtime limit (1M) when the list is full.
    let schema = crd_schema(json!({
        "type": "object",
        "properties": {"hosts": {
            "type": "array", "maxItems": 1000, "items": {"type": "string", "maxLength": 4},
            "x-kubernetes-validations": [{"rule": "self.all(a, self.exists_one(b, a == b))",
                "message": "hosts must be unique"}]
        }}
    }));
    let mut errors = Errs::new();
    check(&schema, AT, &mut errors);
    assert!(errors.is_empty(), "the CRD is allowed: {errors:?}");
    assert!(may_exceed_runtime_budget(&schema));
    let hosts =
        |n: usize| json!({"spec": {"hosts": (0..n).map(|i| format!("h{i}")).collect::<Vec<_>>()}});
    assert!(
        runtime::check(&schema, &hosts(50), None).is_none(),
        "a short list fits"
    );
    let refused = runtime::check(&schema, &hosts(1000), None).expect("a long list does not");
    assert_eq!(refused.field, "spec.hosts");
    assert_eq!(
        refused.detail,
        "'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: hosts must be unique"
    );
    // Many calls within their limit add up past the object's budget: two rules on each of up
    // to 40,000 items, each under its static limit, together under the CRD's.
    let rule = format!("[{}].all(x, x >= 0)", vec!["self.a"; 30].join(", "));
    let each = crd_schema(json!({
        "type": "object",
        "properties": {"points": {
            "type": "array", "maxItems": 40000,
            "items": {"type": "object", "properties": {"a": {"type": "integer"}},
                "x-kubernetes-validations": [{"rule": rule}, {"rule": rule}]}
        }}
    }));
    let mut errors = Errs::new();
    check(&each, AT, &mut errors);
    assert!(errors.is_empty(), "the CRD is allowed: {errors:?}");
    assert!(may_exceed_runtime_budget(&each));
    let points = |n: usize| json!({"spec": {"points": vec![json!({"a": 1}); n]}});
    assert!(runtime::check(&each, &points(1000), None).is_none());
    let refused = runtime::check(&each, &points(40000), None).expect("over the object's budget");
    assert!(
        refused.field.starts_with("spec.points["),
        "{}",
        refused.field
    );
    assert_eq!(
        refused.detail,
        "validation failed due to running out of cost budget, no further validation rules will be run"
    );
    // An ordinary CRD is never costed at runtime.
    let plain = crd_schema(
        json!({"type": "object", "properties": {"replicas": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.replicas >= 0"}]}),
    );
    assert!(!may_exceed_runtime_budget(&plain));
}
