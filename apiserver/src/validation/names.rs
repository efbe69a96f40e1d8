//! String formats upstream validates (RFC 1123 labels and subdomains, qualified names, label
//! values, port names, IPs, …) and the name rule each kind's objects follow.

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const CONFIG_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
const CONFIG_KEY_MSG: &str =
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";
const WILDCARD_FMT: &str = "\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const WILDCARD_MSG: &str = "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character";
const PERCENT_FMT: &str = "[0-9]+%";
const PERCENT_MSG: &str =
    "a valid percent string must be a numeric string followed by an ending '%'";

/// Upstream's message for a maximum length.
pub fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// Upstream's message for a failed pattern, with its examples.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let ex: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{msg} (e.g. {}regex used for validation is '{fmt}')",
        ex.join(" or ")
    )
}

/// Upstream's message for an inclusive range.
pub fn range_error(lo: i64, hi: i64) -> String {
    format!("must be between {lo} and {hi}, inclusive")
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

fn matches_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_lower_alnum(b[0])
        && is_lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
}

fn matches_dns_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns_label)
}

fn matches_qualified_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// RFC 1123 label (e.g. namespace names).
pub fn is_dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !matches_dns_label(s) {
        if matches_dns_subdomain(s) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// RFC 1123 subdomain (most object names).
pub fn is_dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !matches_dns_subdomain(s) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// RFC 1035 label (service names).
pub fn is_dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    let starts_alpha = s.as_bytes().first().is_some_and(u8::is_ascii_lowercase);
    if !(matches_dns_label(s) && starts_alpha) {
        errs.push(regex_error(
            DNS1035_LABEL_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// `*.` followed by an RFC 1123 subdomain.
pub fn is_wildcard_dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !s.strip_prefix("*.").is_some_and(matches_dns_subdomain) {
        errs.push(regex_error(WILDCARD_MSG, WILDCARD_FMT, &["*.example.com"]));
    }
    errs
}

/// A qualified name: an optional DNS subdomain prefix and '/', then a 63-character name.
pub fn is_qualified_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                for m in is_dns1123_subdomain(prefix) {
                    errs.push(format!("prefix part {m}"));
                }
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            )]
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !matches_qualified_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// A label value: empty, or up to 63 alphanumerics, '-', '_' and '.' starting and ending
/// alphanumeric.
pub fn is_label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !(s.is_empty() || matches_qualified_part(s)) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// A ConfigMap or Secret key.
pub fn is_config_map_key(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len_error(253));
    }
    let ok = !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'));
    if !ok {
        errs.push(regex_error(
            CONFIG_KEY_MSG,
            CONFIG_KEY_FMT,
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    match s {
        "." => errs.push("must not be '.'".to_string()),
        ".." => errs.push("must not be '..'".to_string()),
        _ if s.starts_with("..") => errs.push("must not start with '..'".to_string()),
        _ => {}
    }
    errs
}

/// An IANA-style port name: up to 15 of `[-a-z0-9]`, at least one letter, no `--`, no edge '-'.
pub fn is_valid_port_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 15 {
        errs.push(max_len_error(15));
    }
    if s.is_empty() || !s.bytes().all(|c| is_lower_alnum(c) || c == b'-') {
        errs.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string(),
        );
    }
    if !s.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_string());
    }
    if s.contains("--") {
        errs.push("must not contain consecutive hyphens".to_string());
    }
    if s.starts_with('-') || s.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_string());
    }
    errs
}

/// A percentage string such as `25%`.
pub fn is_valid_percent(s: &str) -> Vec<String> {
    let digits = s.strip_suffix('%').unwrap_or("");
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return vec![regex_error(PERCENT_MSG, PERCENT_FMT, &["1%", "93%"])];
    }
    Vec::new()
}

/// Upstream's message for an unparseable IP address.
pub const IP_ERROR: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

/// Whether `s` is an IPv4 or IPv6 address in a form upstream accepts.
pub fn is_ip(s: &str) -> bool {
    s.parse::<std::net::IpAddr>().is_ok()
}

/// A name that is a single URL path segment (RBAC kinds and others).
pub fn path_segment_name(s: &str, prefix: bool) -> Vec<String> {
    if !prefix && (s == "." || s == "..") {
        return vec![format!("may not be '{s}'")];
    }
    let mut errs = Vec::new();
    for bad in ["/", "%"] {
        if s.contains(bad) {
            errs.push(format!("may not contain '{bad}'"));
        }
    }
    errs
}

fn mask_trailing_dash(s: &str) -> String {
    // Upstream drops the dash and the character before it, then appends 'a'.
    if s.len() > 1 && s.ends_with('-') {
        let mut cut = s.len() - 2;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}a", &s[..cut])
    } else {
        s.to_string()
    }
}

/// The name rules a kind's objects follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// A DNS-1123 subdomain (most kinds).
    Subdomain,
    /// A DNS-1123 label (namespaces, StatefulSets: the name becomes part of a host name).
    Label,
    /// A DNS-1035 label (Services: it must start with a letter).
    Dns1035,
    /// Anything that is a path segment (RBAC objects: `system:` names).
    PathSegment,
}

/// Validates a name (or, with `prefix`, a generateName) under `rule`.
pub fn validate_name_for(rule: NameRule, name: &str, prefix: bool) -> Vec<String> {
    let masked;
    let name = if prefix && rule != NameRule::PathSegment {
        masked = mask_trailing_dash(name);
        masked.as_str()
    } else {
        name
    };
    match rule {
        NameRule::Subdomain => is_dns1123_subdomain(name),
        NameRule::Label => is_dns1123_label(name),
        NameRule::Dns1035 => is_dns1035_label(name),
        NameRule::PathSegment => path_segment_name(name, prefix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomain_errors_carry_upstreams_text() {
        let errs = is_dns1123_subdomain("Foo_bar");
        assert_eq!(errs, vec![
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string()
        ]);
        assert!(is_dns1123_subdomain("a.b-c.d").is_empty());
        assert_eq!(is_dns1123_subdomain(&"a".repeat(254)).len(), 1);
    }

    #[test]
    fn labels_reject_dots_with_their_own_message() {
        assert_eq!(is_dns1123_label("a.b"), vec!["must not contain dots"]);
        assert!(is_dns1123_label("a-b").is_empty());
        assert_eq!(is_dns1123_label("-a").len(), 1);
        assert_eq!(is_dns1123_label(&"a".repeat(64)), vec![max_len_error(63)]);
    }

    #[test]
    fn dns1035_labels_must_start_with_a_letter() {
        assert!(is_dns1035_label("abc-1").is_empty());
        assert_eq!(is_dns1035_label("1abc").len(), 1);
    }

    #[test]
    fn qualified_names_take_an_optional_prefix() {
        let cases: Vec<(&str, usize)> = vec![
            ("app", 0),
            ("example.com/app", 0),
            ("Example.com/app", 1),
            ("/app", 1),
            ("a/b/c", 1),
            ("example.com/", 2),
            ("-x", 1),
            ("my_name.v1", 0),
        ];
        for (name, n) in cases {
            assert_eq!(
                is_qualified_name(name).len(),
                n,
                "{name}: {:?}",
                is_qualified_name(name)
            );
        }
        assert_eq!(
            is_qualified_name("/app"),
            vec!["prefix part must be non-empty"]
        );
    }

    #[test]
    fn label_values_may_be_empty() {
        assert!(is_label_value("").is_empty());
        assert!(is_label_value("v1.2_3").is_empty());
        assert_eq!(is_label_value("a b").len(), 1);
        assert_eq!(is_label_value(&"a".repeat(64)).len(), 1);
    }

    #[test]
    fn config_keys_reject_dot_prefixes() {
        assert!(is_config_map_key("a.b-c_D").is_empty());
        assert_eq!(is_config_map_key(".."), vec!["must not be '..'"]);
        assert_eq!(is_config_map_key("a/b").len(), 1);
        assert_eq!(is_config_map_key("..a"), vec!["must not start with '..'"]);
    }

    #[test]
    fn port_names_follow_iana_rules() {
        assert!(is_valid_port_name("http").is_empty());
        assert_eq!(
            is_valid_port_name("80"),
            vec!["must contain at least one letter (a-z)"]
        );
        assert_eq!(
            is_valid_port_name("a--b"),
            vec!["must not contain consecutive hyphens"]
        );
        assert_eq!(is_valid_port_name("abcdefghijklmnop").len(), 1);
    }

    #[test]
    fn generate_name_prefixes_may_end_with_a_dash() {
        assert!(validate_name_for(NameRule::Subdomain, "web-", true).is_empty());
        assert!(validate_name_for(NameRule::Subdomain, "web-", false).len() == 1);
        assert!(validate_name_for(NameRule::PathSegment, "..", true).is_empty());
    }

    #[test]
    fn percents_need_digits_then_percent() {
        assert!(is_valid_percent("25%").is_empty());
        assert_eq!(is_valid_percent("%").len(), 1);
        assert_eq!(is_valid_percent("x%").len(), 1);
    }
}
