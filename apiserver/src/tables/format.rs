//! Shared helpers for Table cells: lenient JSON access, human durations, ages, label and
//! selector formatting, and the column constructors every group module uses.

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use crate::json::{array_at, opt_str_at, str_at, text, value_at};

use crate::selectors::LabelSelector;

use super::Column;

// ---------------------------------------------------------------------------------------------
// Column constructors and shared descriptions
// ---------------------------------------------------------------------------------------------

/// What ObjectMeta says about `name`.
pub const NAME_DESC: &str = "Name must be unique within a namespace. It is required when \
creating resources (some resources let the server generate it), is mainly meant for creation \
idempotence and configuration definition, and cannot be updated.";
/// What ObjectMeta says about `creationTimestamp`.
pub const AGE_DESC: &str = "CreationTimestamp is the server time at which this object was \
created. It is not guaranteed to follow happens-before order across separate operations, is set \
by the system, is read-only for clients, and is written in RFC3339 form in UTC.";
pub const CONTAINERS_DESC: &str = "The names of the template's containers.";
pub const IMAGES_DESC: &str = "The images the template's containers run.";

/// A priority-0 column.
pub fn col(name: &'static str, type_: &'static str, description: &'static str) -> Column {
    Column {
        name,
        type_,
        format: "",
        description,
        priority: 0,
    }
}

/// A priority-1 column (shown by `-o wide`).
pub fn wide(name: &'static str, type_: &'static str, description: &'static str) -> Column {
    Column {
        priority: 1,
        ..col(name, type_, description)
    }
}

/// The usual leading Name column (format "name").
pub fn name_col() -> Column {
    Column {
        format: "name",
        ..col("Name", "string", NAME_DESC)
    }
}

/// The usual Age column.
pub fn age_col() -> Column {
    col("Age", "string", AGE_DESC)
}

/// Renders an int-or-string value ("1", "50%"), if present.
pub fn int_or_string(v: &Value, path: &[&str]) -> Option<String> {
    match value_at(v, path)? {
        Value::String(x) => Some(x.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------------------------

/// Parses an RFC 3339 timestamp at `path`; absent, empty or malformed reads as None.
pub fn time_at(v: &Value, path: &[&str]) -> Option<Timestamp> {
    opt_str_at(v, path)
        .filter(|t| !t.is_empty())
        .and_then(|t| t.parse::<Timestamp>().ok())
}

/// Upstream's succinct human duration (apimachinery `duration.HumanDuration`): about two or
/// three significant figures, e.g. "45s", "5m30s", "3h", "2d4h", "3y120d".
pub fn human_duration(d: SignedDuration) -> String {
    // Whole seconds, truncated toward zero; a little clock skew still reads as "0s".
    let seconds = d.as_secs();
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            rest => format!("{minutes}m{rest}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            rest => format!("{hours}h{rest}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{days}d"),
            rest => format!("{days}d{rest}h"),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        return match days % 365 {
            0 => format!("{years}y"),
            rest => format!("{years}y{rest}d"),
        };
    }
    format!("{years}y")
}

/// Human time elapsed from `t` to `now`; "<unknown>" when there is no time.
pub fn since(t: Option<Timestamp>, now: Timestamp) -> String {
    match t {
        Some(t) => human_duration(now.duration_since(t)),
        None => "<unknown>".to_string(),
    }
}

/// The Age cell: time since `metadata.creationTimestamp`.
pub fn age(obj: &Value, now: Timestamp) -> Value {
    Value::from(since(time_at(obj, &["metadata", "creationTimestamp"]), now))
}

/// RFC 3339 in UTC with whole seconds, like Go's `time.RFC3339` on a UTC time; a missing time
/// prints as Go's zero time.
pub fn rfc3339(t: Option<Timestamp>) -> String {
    match t {
        Some(t) => t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => "0001-01-01T00:00:00Z".to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Labels, selectors, containers
// ---------------------------------------------------------------------------------------------

/// A string map as sorted "k=v" pairs joined by ","; "<none>" when empty.
pub fn format_labels(v: &Value, path: &[&str]) -> String {
    let mut pairs: Vec<(&String, &Value)> = match value_at(v, path) {
        Some(Value::Object(m)) => m.iter().collect(),
        _ => Vec::new(),
    };
    if pairs.is_empty() {
        return "<none>".to_string();
    }
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    let text: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", text(Some(v))))
        .collect();
    text.join(",")
}

/// A LabelSelector rendered as upstream's selector string ("" when it selects everything);
/// Err when it is malformed.
pub fn selector_string(sel: Option<&Value>) -> Result<String, ()> {
    let Some(sel) = sel.filter(|v| v.is_object()) else {
        return Ok(String::new());
    };
    LabelSelector::from_object(sel)
        .map(|selector| selector.to_string())
        .map_err(|_| ())
}

/// metav1.FormatLabelSelector: "<none>" when empty, "<error>" when invalid.
pub fn format_selector(v: &Value, path: &[&str]) -> String {
    match selector_string(value_at(v, path)) {
        Ok(x) if x.is_empty() => "<none>".to_string(),
        Ok(x) => x,
        Err(()) => "<error>".to_string(),
    }
}

/// A quantity as served (a string, or a bare number); absent reads as "0" like Go's zero value.
pub fn quantity(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(q)) if !q.is_empty() => q.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "0".to_string(),
    }
}

/// Container names and images of a pod spec's `containers`, each joined by ",".
pub fn container_cells(pod_spec: Option<&Value>) -> (Value, Value) {
    let containers = pod_spec
        .map(|spec| array_at(spec, &["containers"]))
        .unwrap_or(&[]);
    let names: Vec<&str> = containers.iter().map(|c| str_at(c, &["name"])).collect();
    let images: Vec<&str> = containers.iter().map(|c| str_at(c, &["image"])).collect();
    (Value::from(names.join(",")), Value::from(images.join(",")))
}

/// Up to `max` items joined by ",", then " + N more..." when there were more; `empty` when none.
pub fn list_with_more(items: &[String], max: usize, empty: &str) -> String {
    if items.is_empty() {
        return empty.to_string();
    }
    let shown = items
        .iter()
        .take(max)
        .cloned()
        .collect::<Vec<_>>()
        .join(",");
    if items.len() > max {
        format!("{shown} + {} more...", items.len() - max)
    } else {
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secs(n: i64) -> String {
        human_duration(SignedDuration::from_secs(n))
    }

    #[test]
    fn human_duration_follows_upstream_bands() {
        assert_eq!(secs(-5), "<invalid>");
        assert_eq!(secs(-1), "0s");
        assert_eq!(secs(0), "0s");
        assert_eq!(secs(119), "119s");
        assert_eq!(secs(120), "2m");
        assert_eq!(secs(330), "5m30s");
        assert_eq!(secs(599), "9m59s");
        assert_eq!(secs(600), "10m");
        assert_eq!(secs(179 * 60 + 59), "179m");
        assert_eq!(secs(3 * 3600), "3h");
        assert_eq!(secs(3 * 3600 + 25 * 60), "3h25m");
        assert_eq!(secs(8 * 3600 + 25 * 60), "8h");
        assert_eq!(secs(47 * 3600), "47h");
        assert_eq!(secs(48 * 3600), "2d");
        assert_eq!(secs(52 * 3600), "2d4h");
        assert_eq!(secs(8 * 86400), "8d");
        assert_eq!(secs(729 * 86400), "729d");
        assert_eq!(secs(730 * 86400), "2y");
        assert_eq!(secs(850 * 86400), "2y120d");
        assert_eq!(secs(9 * 365 * 86400 + 40 * 86400), "9y");
    }

    #[test]
    fn a_fraction_of_a_negative_second_still_reads_as_zero() {
        assert_eq!(human_duration(SignedDuration::from_millis(-1900)), "0s");
    }

    #[test]
    fn age_is_unknown_without_a_creation_timestamp() {
        let now: Timestamp = "2024-01-01T00:10:00Z".parse().unwrap();
        assert_eq!(age(&json!({}), now), json!("<unknown>"));
        let obj = json!({"metadata": {"creationTimestamp": "2024-01-01T00:00:00Z"}});
        assert_eq!(age(&obj, now), json!("10m"));
    }

    #[test]
    fn rfc3339_prints_utc_seconds_or_the_go_zero_time() {
        let t = "2024-03-04T05:06:07.891Z".parse().ok();
        assert_eq!(rfc3339(t), "2024-03-04T05:06:07Z");
        assert_eq!(rfc3339(None), "0001-01-01T00:00:00Z");
    }

    #[test]
    fn labels_are_sorted_and_empty_maps_print_none() {
        let v = json!({"m": {"b": "2", "a": "1"}});
        assert_eq!(format_labels(&v, &["m"]), "a=1,b=2");
        assert_eq!(format_labels(&v, &["missing"]), "<none>");
    }

    #[test]
    fn selectors_render_like_upstream() {
        let v = json!({"sel": {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["b", "a"]},
                {"key": "env", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "Exists"}
            ]
        }});
        assert_eq!(
            format_selector(&v, &["sel"]),
            "app=web,!env,tier in (a,b),zone"
        );
        assert_eq!(format_selector(&json!({"sel": {}}), &["sel"]), "<none>");
        assert_eq!(format_selector(&json!({}), &["sel"]), "<none>");
        let bad = json!({"sel": {"matchExpressions": [{"key": "k", "operator": "Near"}]}});
        assert_eq!(format_selector(&bad, &["sel"]), "<error>");
    }

    #[test]
    fn lists_longer_than_the_limit_say_how_many_more() {
        let items: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        assert_eq!(list_with_more(&items, 3, "<unset>"), "a,b,c + 2 more...");
        assert_eq!(list_with_more(&items[..2], 3, "<unset>"), "a,b");
        assert_eq!(list_with_more(&[], 3, "<unset>"), "<unset>");
    }
}
