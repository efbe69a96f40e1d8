//! Parsing of resource quantities (`100m`, `1Gi`, `1e3`) per upstream's `resource.Quantity`
//! grammar, with its error messages; values are compared as `f64`.

use serde_json::Value;

use super::json::Errs;
use super::FieldError;

/// Upstream's `ErrFormatWrong` text.
pub const FORMAT_WRONG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
/// Upstream's `ErrSuffix` text.
pub const BAD_SUFFIX: &str = "unable to parse quantity's suffix";

/// A parsed quantity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quantity {
    /// The quantity's value in base units (e.g. cores, bytes).
    pub value: f64,
}

fn suffix_multiplier(suffix: &str) -> Option<f64> {
    let m = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        _ => {
            let rest = suffix.strip_prefix(['e', 'E'])?;
            let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            let exp: i32 = rest.parse().ok()?;
            10f64.powi(exp)
        }
    };
    Some(m)
}

/// Parses `s` as a quantity, returning upstream's error text on failure.
pub fn parse_quantity(s: &str) -> Result<Quantity, &'static str> {
    if s.is_empty() {
        return Err(FORMAT_WRONG);
    }
    let (negative, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let num_len = rest
        .bytes()
        .take_while(|c| c.is_ascii_digit() || *c == b'.')
        .count();
    let (number, suffix) = rest.split_at(num_len);
    let dots = number.bytes().filter(|c| *c == b'.').count();
    if !number.bytes().any(|c| c.is_ascii_digit()) || dots > 1 {
        return Err(FORMAT_WRONG);
    }
    let suffix_ok = suffix
        .bytes()
        .all(|c| b"eEinumkKMGTP+-0123456789".contains(&c));
    if !suffix_ok {
        return Err(FORMAT_WRONG);
    }
    let multiplier = suffix_multiplier(suffix).ok_or(BAD_SUFFIX)?;
    let mantissa: f64 = number.parse().map_err(|_| FORMAT_WRONG)?;
    let value = mantissa * multiplier;
    Ok(Quantity {
        value: if negative { -value } else { value },
    })
}

/// Reads a quantity held as a JSON string or number, reporting a malformed one at `path`.
pub fn quantity_value(v: &Value, path: &str, errs: &mut Errs) -> Option<Quantity> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => {
            errs.push(FieldError::invalid(
                path,
                other.clone(),
                "must be a quantity",
            ));
            return None;
        }
    };
    match parse_quantity(&text) {
        Ok(q) => Some(q),
        Err(msg) => {
            errs.push(FieldError::invalid(path, v.clone(), msg));
            None
        }
    }
}

/// The quantity's text as written, for messages.
pub fn quantity_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_quantities_parse_to_their_values() {
        let cases: Vec<(&str, f64)> = vec![
            ("100m", 0.1),
            ("1", 1.0),
            ("1Gi", 1073741824.0),
            ("1e3", 1000.0),
            ("1E-3", 0.001),
            ("0.5", 0.5),
            (".5", 0.5),
            ("5.", 5.0),
            ("+2k", 2000.0),
            ("-1M", -1e6),
            ("128974848", 128974848.0),
            ("129e6", 129e6),
            ("123Mi", 123.0 * 1048576.0),
            ("10n", 1e-8),
        ];
        for (s, want) in cases {
            let q = parse_quantity(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert!(
                (q.value - want).abs() <= want.abs() * 1e-12,
                "{s}: {} != {want}",
                q.value
            );
        }
    }

    #[test]
    fn malformed_quantities_give_upstreams_messages() {
        let cases = vec![
            ("", FORMAT_WRONG),
            ("abc", FORMAT_WRONG),
            ("1.2.3", FORMAT_WRONG),
            ("1 Gi", FORMAT_WRONG),
            ("1Gb", FORMAT_WRONG),
            ("1KiB", FORMAT_WRONG),
            ("1mm", BAD_SUFFIX),
            ("1e", BAD_SUFFIX),
            ("1ki", BAD_SUFFIX),
            (".", FORMAT_WRONG),
        ];
        for (s, want) in cases {
            assert_eq!(parse_quantity(s), Err(want), "{s}");
        }
    }

    #[test]
    fn json_numbers_are_quantities_too() {
        let mut errs = Vec::new();
        let q = quantity_value(&serde_json::json!(2), "x", &mut errs);
        assert_eq!(q.map(|q| q.value), Some(2.0));
        assert!(quantity_value(&serde_json::json!(true), "x", &mut errs).is_none());
        assert_eq!(errs.len(), 1);
    }
}
