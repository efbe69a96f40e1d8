//! Table-driven tests for label selector parsing, error text and matching.

use serde_json::{json, Map, Value};

use super::*;

fn labels(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// Upstream's `RegexError` joins its examples as `'a',  or 'b', ` (a comma and two spaces).
const VALUE_RULE: &str = "a valid label must be an empty string or consist of alphanumeric \
                          characters, '-', '_' or '.', and must start and end with an \
                          alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', \
                          regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const NAME_RULE: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and \
                         must start and end with an alphanumeric character (e.g. 'MyName',  or \
                         'my.name',  or '123-abc', regex used for validation is \
                         '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

#[test]
fn valid_selectors_parse_to_their_canonical_form() {
    let cases = [
        ("", ""),
        ("   ", ""),
        ("x=a", "x=a"),
        ("x==a", "x==a"),
        ("x!=a", "x!=a"),
        ("x=", "x="),
        ("x==,y!=", "x==,y!="),
        (" x = a , y == b ", "x=a,y==b"),
        ("z=c,y=b,x=a", "x=a,y=b,z=c"),
        ("x", "x"),
        ("!x", "!x"),
        ("! x", "!x"),
        ("x,!y", "x,!y"),
        (
            "x in (foo,,baz),y,z notin ()",
            "x in (,baz,foo),y,z notin ()",
        ),
        ("x in (b,a,b)", "x in (a,b)"),
        ("x in (a,)", "x in (,a)"),
        ("x in (,a)", "x in (,a)"),
        ("x notin (a)", "x notin (a)"),
        ("in in (in)", "in in (in)"),
        ("notin notin (notin)", "notin notin (notin)"),
        ("x=in", "x=in"),
        ("x>1", "x>1"),
        ("x<10,y>0", "x<10,y>0"),
        ("example.com/app=web", "example.com/app=web"),
        (
            "kubernetes.io/cluster-service=true",
            "kubernetes.io/cluster-service=true",
        ),
        ("\u{0}x=a", ""),
    ];
    for (input, want) in cases {
        match LabelSelector::parse(input) {
            Ok(sel) => assert_eq!(sel.to_string(), want, "input {input:?}"),
            Err(e) => panic!("{input:?} should parse, got {e}"),
        }
    }
}

#[test]
fn malformed_selectors_fail_with_upstream_messages() {
    let long_value = "v".repeat(64);
    let long_key = "k".repeat(64);
    let cases: Vec<(String, String)> = vec![
        (
            ",".into(),
            "found ',', expected: !, identifier, or 'end of string'".into(),
        ),
        (
            "=a".into(),
            "found '=', expected: !, identifier, or 'end of string'".into(),
        ),
        (
            "x,".into(),
            "found '', expected: identifier after ','".into(),
        ),
        (
            "x,,y".into(),
            "found ',', expected: identifier after ','".into(),
        ),
        (
            "x=a b".into(),
            "found 'b', expected: ',' or 'end of string'".into(),
        ),
        (
            "a\tb\n=c".into(),
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt".into(),
        ),
        (
            "x=a)".into(),
            "found ')', expected: ',' or 'end of string'".into(),
        ),
        (
            "!x=a".into(),
            "found '=', expected: ',' or 'end of string'".into(),
        ),
        (
            "!x y".into(),
            "found 'y', expected: ',' or 'end of string'".into(),
        ),
        (
            "!".into(),
            "unable to parse requirement: found '', expected: identifier".into(),
        ),
        (
            "!!x".into(),
            "unable to parse requirement: found '!', expected: identifier".into(),
        ),
        (
            "x y".into(),
            "unable to parse requirement: found 'y', expected: in, notin, =, ==, !=, gt, lt".into(),
        ),
        (
            "x (a)".into(),
            "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt".into(),
        ),
        (
            "x in a".into(),
            "unable to parse requirement: found 'a' expected: '('".into(),
        ),
        (
            "x in".into(),
            "unable to parse requirement: found '' expected: '('".into(),
        ),
        (
            "x in (".into(),
            "unable to parse requirement: found '', expected: ',', ')' or identifier".into(),
        ),
        (
            "x in (=)".into(),
            "unable to parse requirement: found '=', expected: ',', ')' or identifier".into(),
        ),
        (
            "x in (a b)".into(),
            "unable to parse requirement: found 'b', expected: ',' or ')'".into(),
        ),
        (
            "x in (a".into(),
            "unable to parse requirement: found '', expected: ',' or ')'".into(),
        ),
        (
            "x in (a,=)".into(),
            "unable to parse requirement: found '=', expected: ',', or identifier".into(),
        ),
        (
            "x=(".into(),
            "unable to parse requirement: found '(', expected: identifier".into(),
        ),
        (
            "x!==a".into(),
            "unable to parse requirement: found '=', expected: identifier".into(),
        ),
        (
            "x>a".into(),
            "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' \
             operators, the value must be an integer"
                .into(),
        ),
        (
            "x<".into(),
            "unable to parse requirement: values[0]: Invalid value: \"\": for 'Gt', 'Lt' \
             operators, the value must be an integer"
                .into(),
        ),
        (
            "x>-1".into(),
            format!(
                "unable to parse requirement: values[0][x]: Invalid value: \"-1\": {VALUE_RULE}"
            ),
        ),
        (
            "x>a-".into(),
            format!(
                "unable to parse requirement: [values[0]: Invalid value: \"a-\": for 'Gt', 'Lt' \
                 operators, the value must be an integer, values[0][x]: Invalid value: \"a-\": \
                 {VALUE_RULE}]"
            ),
        ),
        (
            "x=a||y".into(),
            format!(
                "unable to parse requirement: values[0][x]: Invalid value: \"a||y\": {VALUE_RULE}"
            ),
        ),
        (
            "x in (ok,-bad)".into(),
            format!(
                "unable to parse requirement: values[0][x]: Invalid value: \"-bad\": {VALUE_RULE}"
            ),
        ),
        (
            format!("x={long_value}"),
            format!(
                "unable to parse requirement: values[0][x]: Invalid value: \"{long_value}\": must \
                 be no more than 63 characters"
            ),
        ),
        (
            "-x=a".into(),
            format!("unable to parse requirement: <nil>: Invalid value: \"-x\": {NAME_RULE}"),
        ),
        (
            "ключ=a".into(),
            format!("unable to parse requirement: <nil>: Invalid value: \"ключ\": {NAME_RULE}"),
        ),
        (
            long_key.clone(),
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"{long_key}\": name part must \
                 be no more than 63 characters"
            ),
        ),
        (
            "/x".into(),
            "unable to parse requirement: <nil>: Invalid value: \"/x\": prefix part must be \
             non-empty"
                .into(),
        ),
        (
            "x/".into(),
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"x/\": name part must be \
                 non-empty; {NAME_RULE}"
            ),
        ),
        (
            "\"x\"".into(),
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"\\\"x\\\"\": {NAME_RULE}"
            ),
        ),
    ];
    for (input, want) in cases {
        match LabelSelector::parse(&input) {
            Ok(sel) => panic!("{input:?} should fail, parsed as {sel}"),
            Err(e) => {
                assert!(matches!(e, SelectorError::InvalidLabelSelector(_)));
                assert_eq!(e.to_string(), want, "input {input:?}");
            }
        }
    }
}

#[test]
fn odd_inputs_never_panic() {
    let inputs = [
        "(",
        ")",
        "((",
        "!=",
        "==",
        "<",
        ">",
        "x in ((",
        "x in (,,,)",
        "x notin (,",
        "é",
        "x=é",
        "\u{0}",
        "x\u{0}y",
        "x=\u{0}",
        "!\u{0}",
        ",,,",
        "x in (a,,",
        "a=b,c in (",
        "><=!(),",
    ];
    for input in inputs {
        let _ = LabelSelector::parse(input);
    }
}

#[test]
fn requirements_match_label_sets_like_upstream() {
    let set = json!({"env": "prod", "tier": "web", "n": "5", "empty": "", "bad": "x"});
    let cases = [
        ("", true),
        ("env=prod", true),
        ("env==prod", true),
        ("env=dev", false),
        ("env!=dev", true),
        ("env!=prod", false),
        ("missing!=x", true),
        ("missing=x", false),
        ("env in (dev,prod)", true),
        ("env in (dev)", false),
        ("missing in (dev)", false),
        ("env notin (dev)", true),
        ("env notin (prod)", false),
        ("missing notin (prod)", true),
        ("env", true),
        ("missing", false),
        ("!missing", true),
        ("!env", false),
        ("empty=", true),
        ("empty", true),
        ("empty in ()", true),
        ("missing=", false),
        ("n>4", true),
        ("n>5", false),
        ("n<6", true),
        ("n<5", false),
        ("missing>0", false),
        ("bad>0", false),
        ("bad<0", false),
        ("env=prod,tier=web", true),
        ("env=prod,tier=db", false),
        ("env=prod,!missing,n>1,tier in (web)", true),
    ];
    let labels = labels(set);
    for (input, want) in cases {
        let sel = LabelSelector::parse(input).expect("parses");
        assert_eq!(sel.matches(&labels), want, "selector {input:?}");
    }
}

#[test]
fn objects_are_matched_on_metadata_labels() {
    let cases = [
        (
            json!({"metadata": {"labels": {"app": "web"}}}),
            "app=web",
            true,
        ),
        (
            json!({"metadata": {"labels": {"app": "web"}}}),
            "app!=web",
            false,
        ),
        (json!({"metadata": {"name": "x"}}), "app!=web", true),
        (json!({"metadata": {"name": "x"}}), "app", false),
        (json!({}), "!app", true),
        (json!("not an object"), "", true),
        (
            json!({"metadata": {"labels": null}}),
            "app notin (web)",
            true,
        ),
    ];
    for (obj, input, want) in cases {
        let sel = LabelSelector::parse(input).expect("parses");
        assert_eq!(sel.matches_object(&obj), want, "{input:?} on {obj}");
    }
}

#[test]
fn emptiness_and_exact_values_are_reported() {
    let cases = [
        ("", true, "app", None),
        ("app=web", false, "app", Some("web")),
        ("app==web", false, "app", Some("web")),
        ("app in (web)", false, "app", Some("web")),
        ("app in (web,db)", false, "app", None),
        ("app!=web", false, "app", None),
        ("app", false, "app", None),
        ("tier=db", false, "app", None),
    ];
    for (input, empty, key, exact) in cases {
        let sel = LabelSelector::parse(input).expect("parses");
        assert_eq!(sel.is_empty(), empty, "{input:?}");
        assert_eq!(sel.exact(key), exact, "{input:?}");
    }
    assert_eq!(
        LabelSelector::parse("").expect("parses"),
        LabelSelector::default()
    );
}

#[test]
fn label_selector_objects_and_sets_share_the_parsed_form() {
    let object = json!({
        "matchLabels": {"b": "2", "a": "1"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["web", "api", "web"]},
            {"key": "canary", "operator": "DoesNotExist"}
        ]
    });
    let selector = LabelSelector::from_object(&object).expect("valid");
    // Sorted by key, values sorted and de-duplicated, as upstream's String().
    assert_eq!(selector.to_string(), "a=1,b=2,!canary,tier in (api,web)");
    assert!(selector.matches(&labels(json!({"a": "1", "b": "2", "tier": "api"}))));
    assert!(!selector.matches(&labels(
        json!({"a": "1", "b": "2", "tier": "api", "canary": "y"})
    )));
    assert_eq!(
        LabelSelector::from_object(&object).expect("valid"),
        LabelSelector::parse("tier in (web,api),b=2,a=1,!canary").expect("parses"),
        "the object and the query string mean the same selector"
    );
    assert!(LabelSelector::from_object(&json!({}))
        .expect("empty")
        .is_empty());
    for bad in [
        json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
        json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
        json!({"matchLabels": {"bad key!": "x"}}),
    ] {
        assert!(LabelSelector::from_object(&bad).is_err(), "{bad}");
    }
    let set = LabelSelector::from_set(&json!({"app": "web", "a": "b"}));
    assert_eq!(set.to_string(), "a=b,app=web");
    assert!(set.matches(&labels(json!({"app": "web", "a": "b", "x": "y"}))));
    assert!(!set.matches(&labels(json!({"app": "web"}))));
}
