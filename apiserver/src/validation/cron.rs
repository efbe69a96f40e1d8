//! A parser for standard 5-field cron schedules and `@` descriptors, with the error texts of
//! the cron library upstream uses (robfig/cron v3 `ParseStandard`).

struct Bounds {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MONTHS: &[&str] = &[
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

const FIELDS: [Bounds; 5] = [
    Bounds {
        min: 0,
        max: 59,
        names: &[],
    },
    Bounds {
        min: 0,
        max: 23,
        names: &[],
    },
    Bounds {
        min: 1,
        max: 31,
        names: &[],
    },
    Bounds {
        min: 1,
        max: 12,
        names: MONTHS,
    },
    Bounds {
        min: 0,
        max: 6,
        names: DAYS,
    },
];

/// Parses `spec` as upstream's CronJob schedule parser does; the error is its message.
pub fn parse_standard(spec: &str) -> Result<(), String> {
    if spec.is_empty() {
        return Err("empty spec string".to_string());
    }
    let mut spec = spec.trim_start();
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let (tz, rest) = spec.split_once(' ').unwrap_or((spec, ""));
        let zone = tz.split_once('=').map(|(_, z)| z).unwrap_or("");
        if !super::batch::time_zone_exists(zone) {
            return Err(format!(
                "provided bad location {zone}: unknown time zone {zone}"
            ));
        }
        spec = rest.trim_start();
    }
    if let Some(desc) = spec.strip_prefix('@') {
        return match desc {
            "yearly" | "annually" | "monthly" | "weekly" | "daily" | "midnight" | "hourly" => {
                Ok(())
            }
            _ if desc.starts_with("every ") => parse_every(&desc[6..]),
            _ => Err(format!("unrecognized descriptor: {spec}")),
        };
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    for (field, bounds) in fields.iter().zip(FIELDS.iter()) {
        for part in field.split(',') {
            parse_range(part, bounds)?;
        }
    }
    Ok(())
}

fn parse_every(d: &str) -> Result<(), String> {
    // Go durations such as 1h30m, 10s, 1.5h.
    let ok = d.chars().any(|c| c.is_ascii_digit())
        && d.ends_with(|c: char| c.is_ascii_alphabetic())
        && d.chars()
            .all(|c| c.is_ascii_digit() || ".hmsuµn".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "failed to parse duration @every {d}: time: invalid duration {}",
            super::go_quote(d)
        ))
    }
}

fn parse_value(s: &str, bounds: &Bounds) -> Result<u32, String> {
    let lower = s.to_ascii_lowercase();
    if let Some(i) = bounds.names.iter().position(|n| *n == lower) {
        let offset = if bounds.names.len() == 12 { 1 } else { 0 };
        return Ok(i as u32 + offset);
    }
    match s.parse::<i64>() {
        Ok(n) if n < 0 => Err(format!("negative number ({n}) not allowed: {s}")),
        Ok(n) => u32::try_from(n).map_err(|_| {
            format!(
                "failed to parse int from {s}: strconv.Atoi: parsing {}: value out of range",
                super::go_quote(s)
            )
        }),
        Err(_) => Err(format!(
            "failed to parse int from {s}: strconv.Atoi: parsing {}: invalid syntax",
            super::go_quote(s)
        )),
    }
}

fn parse_range(expr: &str, b: &Bounds) -> Result<(), String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single_digit = low_and_high.len() == 1;
    let (start, end) = if low_and_high[0] == "*" || low_and_high[0] == "?" {
        (b.min, b.max)
    } else {
        let start = parse_value(low_and_high[0], b)?;
        let end = match low_and_high.len() {
            1 => start,
            2 => parse_value(low_and_high[1], b)?,
            _ => return Err(format!("too many hyphens: {expr}")),
        };
        (start, end)
    };
    let (end, step) = match range_and_step.len() {
        1 => (end, 1),
        2 => {
            let step = parse_value(range_and_step[1], b)?;
            (if single_digit { b.max } else { end }, step)
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < b.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            b.min
        ));
    }
    if end > b.max {
        return Err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            b.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_schedules_parse() {
        for s in [
            "*/5 * * * *",
            "0 0 1 1 *",
            "0 9-17 * * MON-FRI",
            "15,45 */2 ? jan,jul sun",
            "@hourly",
            "@daily",
            "@every 1h30m",
            "0 0 * * 6",
            "5/15 * * * *",
        ] {
            assert_eq!(parse_standard(s), Ok(()), "{s}");
        }
    }

    #[test]
    fn invalid_schedules_give_the_librarys_messages() {
        let cases = vec![
            ("", "empty spec string"),
            ("* * *", "expected exactly 5 fields, found 3: [* * *]"),
            ("@foo", "unrecognized descriptor: @foo"),
            ("60 * * * *", "end of range (60) above maximum (59): 60"),
            (
                "x * * * *",
                "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax",
            ),
            ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
            (
                "5-1 * * * *",
                "beginning of range (5) beyond end of range (1): 5-1",
            ),
            (
                "*/0 * * * *",
                "step of range should be a positive number: */0",
            ),
            ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
            ("* * * * 7", "end of range (7) above maximum (6): 7"),
        ];
        for (s, want) in cases {
            assert_eq!(parse_standard(s), Err(want.to_string()), "{s}");
        }
    }
}
