//! RFC 3339 text for meta/v1 `Time` (whole seconds) and `MicroTime` (six decimals), always in
//! UTC, and parsing of any RFC 3339 timestamp back to Unix seconds + nanoseconds.

/// Days since 1970-01-01 for a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The (year, month, day) of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = if month <= 2 {
        yoe + era * 400 + 1
    } else {
        yoe + era * 400
    };
    (year, month, day)
}

/// `2006-01-02T15:04:05Z`, or with `.000000` microseconds when `micro` is set.
pub(super) fn format(seconds: i64, nanos: i32, micro: bool) -> String {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    let (h, mi, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}");
    if micro {
        out.push_str(&format!(".{:06}", nanos.clamp(0, 999_999_999) / 1000));
    }
    out.push('Z');
    out
}

fn number(text: &str, from: usize, len: usize) -> Option<i64> {
    let part = text.get(from..from + len)?;
    if !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    part.parse().ok()
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` into Unix seconds and nanoseconds.
pub(super) fn parse(text: &str) -> Option<(i64, i32)> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (year, month, day) = (
        number(text, 0, 4)?,
        number(text, 5, 2)?,
        number(text, 8, 2)?,
    );
    let (hour, minute, second) = (
        number(text, 11, 2)?,
        number(text, 14, 2)?,
        number(text, 17, 2)?,
    );
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut nanos: i64 = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        nanos = frac[..digits].parse::<i64>().ok()? * 10_i64.pow(9 - digits as u32);
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && rest.as_bytes()[3] == b':' => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (oh, om) = (number(rest, 1, 2)?, number(rest, 4, 2)?);
            sign * (oh * 3600 + om * 60)
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    Some((seconds, i32::try_from(nanos).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses() {
        assert_eq!(format(0, 0, false), "1970-01-01T00:00:00Z");
        assert_eq!(format(1_700_000_000, 0, false), "2023-11-14T22:13:20Z");
        assert_eq!(
            format(1_700_000_000, 123_456_789, true),
            "2023-11-14T22:13:20.123456Z"
        );
        assert_eq!(format(-62_135_596_800, 0, false), "0001-01-01T00:00:00Z");
        assert_eq!(parse("2023-11-14T22:13:20Z"), Some((1_700_000_000, 0)));
        assert_eq!(
            parse("2023-11-14T22:13:20.123456Z"),
            Some((1_700_000_000, 123_456_000))
        );
        assert_eq!(parse("2023-11-15T00:13:20+02:00"), Some((1_700_000_000, 0)));
        assert_eq!(
            parse("2024-02-29T00:00:00Z")
                .map(|t| format(t.0, 0, false))
                .as_deref(),
            Some("2024-02-29T00:00:00Z")
        );
        for bad in [
            "",
            "2023-11-14",
            "2023-13-14T22:13:20Z",
            "2023-11-14T22:13:20",
            "x023-11-14T22:13:20Z",
            "2023-11-14T22:13:20.Z",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
