//! Label key and value checks worded like apimachinery's validation messages, plus Go-style
//! quoting so error text reads exactly as upstream's.

const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must \
                             start and end with an alphanumeric character";
const LABEL_KEY_MAX: usize = 63;
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric \
                               characters, '-', '_' or '.', and must start and end with an \
                               alphanumeric character";
const LABEL_VALUE_MAX: usize = 63;
const SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
                             alphanumeric characters, '-' or '.', and must start and end with an \
                             alphanumeric character";
const SUBDOMAIN_MAX: usize = 253;

/// Upstream's explanation of a pattern mismatch, with examples.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let shown: Vec<String> = examples.iter().map(|e| format!("'{e}'")).collect();
    format!(
        "{msg} (e.g. {}, regex used for validation is '{fmt}')",
        shown.join(" or ")
    )
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`: a label name or a non-empty label value.
fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// One lowercase RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn is_dns_label(s: &str) -> bool {
    let lower_alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            lower_alnum(f) && lower_alnum(l) && b.iter().all(|c| lower_alnum(c) || *c == b'-')
        }
        _ => false,
    }
}

fn subdomain_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > SUBDOMAIN_MAX {
        errs.push(max_len_error(SUBDOMAIN_MAX));
    }
    if !s.split('.').all(is_dns_label) {
        errs.push(regex_error(SUBDOMAIN_ERR, SUBDOMAIN_FMT, &["example.com"]));
    }
    errs
}

/// What is wrong with a label key (optional DNS subdomain prefix + `/` + name); empty if valid.
pub(super) fn label_key_errors(key: &str) -> Vec<String> {
    let name_regex = || {
        regex_error(
            LABEL_KEY_ERR,
            LABEL_KEY_FMT,
            &["MyName", "my.name", "123-abc"],
        )
    };
    let mut errs = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    subdomain_errors(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. \
                 'example.com/MyName')",
                name_regex()
            )]
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > LABEL_KEY_MAX {
        errs.push(format!("name part {}", max_len_error(LABEL_KEY_MAX)));
    }
    if !is_label_name(name) {
        errs.push(format!("name part {}", name_regex()));
    }
    errs
}

/// What is wrong with a label value (may be empty); empty if valid.
pub(super) fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        errs.push(max_len_error(LABEL_VALUE_MAX));
    }
    if !value.is_empty() && !is_label_name(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// A field error of type Invalid, rendered as upstream's `field.Error`:
/// `<path>: Invalid value: "<bad>": <detail>`.
pub(super) fn invalid(path: &str, bad: &str, detail: &str) -> String {
    let mut s = format!("{path}: Invalid value: {}", go_quote(bad));
    if !detail.is_empty() {
        s.push_str(": ");
        s.push_str(detail);
    }
    s
}

/// Go's `%q` for a string: double quotes, backslash escapes for quotes, backslashes and control
/// characters; printable characters (including non-ASCII) stay as they are.
pub(super) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_are_checked_like_upstream() {
        let name_msg = "name part must consist of alphanumeric characters, '-', '_' or '.', and \
                        must start and end with an alphanumeric character (e.g. 'MyName' or \
                        'my.name' or '123-abc', regex used for validation is \
                        '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
        let long = "a".repeat(64);
        let cases: Vec<(&str, Vec<String>)> = vec![
            ("app", vec![]),
            ("A.b-c_D9", vec![]),
            ("example.com/app", vec![]),
            ("kubernetes.io/cluster-service", vec![]),
            ("-app", vec![name_msg.to_string()]),
            ("app.", vec![name_msg.to_string()]),
            (
                "",
                vec!["name part must be non-empty".into(), name_msg.to_string()],
            ),
            (
                &long,
                vec!["name part must be no more than 63 characters".into()],
            ),
            ("/app", vec!["prefix part must be non-empty".into()]),
            (
                "Example.com/app",
                vec![
                    "prefix part a lowercase RFC 1123 subdomain must consist of lower case \
                      alphanumeric characters, '-' or '.', and must start and end with an \
                      alphanumeric character (e.g. 'example.com', regex used for validation is \
                      '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                        .into(),
                ],
            ),
        ];
        for (key, want) in cases {
            assert_eq!(label_key_errors(key), want, "key {key:?}");
        }
        let three = label_key_errors("a/b/c");
        assert_eq!(three.len(), 1);
        assert!(three[0].starts_with("a valid label key must consist of"));
        assert!(three[0].ends_with(
            "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ));
    }

    #[test]
    fn label_values_may_be_empty_but_not_malformed() {
        assert!(label_value_errors("").is_empty());
        assert!(label_value_errors("v1.2_x-Y").is_empty());
        assert_eq!(label_value_errors("-x").len(), 1);
        assert_eq!(
            label_value_errors(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
        assert_eq!(label_value_errors(&"-".repeat(64)).len(), 2);
        assert_eq!(label_value_errors("ünïcode").len(), 1);
    }

    #[test]
    fn quoting_follows_go_percent_q() {
        let cases = [
            ("plain", "\"plain\""),
            ("a\"b", "\"a\\\"b\""),
            ("back\\slash", "\"back\\\\slash\""),
            ("tab\tnl\n", "\"tab\\tnl\\n\""),
            ("nul\u{0}", "\"nul\\x00\""),
            ("ключ", "\"ключ\""),
        ];
        for (input, want) in cases {
            assert_eq!(go_quote(input), want);
        }
        assert_eq!(
            invalid("<nil>", "x", "bad"),
            "<nil>: Invalid value: \"x\": bad"
        );
    }
}
