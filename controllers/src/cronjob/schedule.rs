//! CronJob schedules: the standard five fields (minute, hour, day of month, month, day of
//! week) with lists, ranges, steps, `*`/`?` and month and weekday names, the `@yearly`,
//! `@monthly`, `@weekly`, `@daily`, `@hourly` shorthands, and a time zone (`spec.timeZone`, or
//! `CRON_TZ=`/`TZ=` in front of the schedule) — as upstream's cron parser reads them. When
//! both day fields are restricted, a day matching either runs (cron's rule).

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan, Zoned};

/// A parsed schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// The day-of-month field was `*` (or `?`).
    any_day: bool,
    /// The day-of-week field was `*` (or `?`).
    any_weekday: bool,
    zone: TimeZone,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// A bit set of the values one field allows, and whether it was unrestricted.
fn field(text: &str, low: u32, high: u32, names: &[&str]) -> Result<(u64, bool), String> {
    let value = |part: &str| -> Result<u32, String> {
        if let Some(index) = names
            .iter()
            .position(|name| name.eq_ignore_ascii_case(part))
        {
            return Ok(low + u32::try_from(index).unwrap_or(0));
        }
        part.parse::<u32>()
            .map_err(|_| format!("{part:?} is not a number"))
    };
    let mut bits = 0u64;
    let unrestricted = text == "*" || text == "?";
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .map_err(|_| format!("{step:?} is not a step"))?;
                if step == 0 {
                    return Err("a step of 0".into());
                }
                (range, step)
            }
            None => (item, 1),
        };
        let (start, end) = if range == "*" || range == "?" {
            (low, high)
        } else if let Some((start, end)) = range.split_once('-') {
            (value(start)?, value(end)?)
        } else {
            let start = value(range)?;
            // `5/10` means from 5 to the end, every 10.
            (start, if step > 1 { high } else { start })
        };
        // Sunday may be written 7.
        let (start, end) = if names == WEEKDAYS && end == 7 {
            (start, 7)
        } else {
            (start, end)
        };
        let top = if names == WEEKDAYS { 7 } else { high };
        if start < low || end > top || start > end {
            return Err(format!("{range:?} is outside {low}-{high}"));
        }
        let mut at = start;
        while at <= end {
            let bit = if names == WEEKDAYS && at == 7 { 0 } else { at };
            bits |= 1 << bit;
            at += step;
        }
    }
    Ok((bits, unrestricted))
}

impl Schedule {
    /// Parses `schedule` in `time_zone` (an IANA name; `None`: the controller's local zone, as
    /// upstream's default).
    pub fn parse(schedule: &str, time_zone: Option<&str>) -> Result<Self, String> {
        let mut text = schedule.trim();
        let mut zone_name = time_zone.map(str::to_string);
        for prefix in ["CRON_TZ=", "TZ="] {
            if let Some(rest) = text.strip_prefix(prefix) {
                let (zone, rest) = rest
                    .split_once(char::is_whitespace)
                    .ok_or_else(|| format!("{schedule:?} has a time zone and no schedule"))?;
                zone_name = Some(zone.to_string());
                text = rest.trim();
            }
        }
        let zone = match zone_name.as_deref() {
            None | Some("") | Some("Local") => TimeZone::system(),
            Some(name) => TimeZone::get(name).map_err(|_| format!("unknown time zone {name:?}"))?,
        };
        let expanded = match text {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => {
                return Err(format!(
                    "{other:?} is not a schedule (@every is not supported)"
                ))
            }
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(format!(
                "{schedule:?} has {} fields; a schedule has 5 (minute hour day-of-month month day-of-week)",
                fields.len()
            ));
        };
        let (minutes, _) = field(minute, 0, 59, &[])?;
        let (hours, _) = field(hour, 0, 23, &[])?;
        let (days, any_day) = field(day, 1, 31, &[])?;
        let (months, _) = field(month, 1, 12, &MONTHS)?;
        let (weekdays, any_weekday) = field(weekday, 0, 6, &WEEKDAYS)?;
        Ok(Self {
            minutes,
            hours,
            days,
            months,
            weekdays,
            any_day,
            any_weekday,
            zone,
        })
    }

    fn day_matches(&self, at: &DateTime) -> bool {
        let day = self.days & (1 << at.day()) != 0;
        let weekday = self.weekdays & (1 << at.weekday().to_sunday_zero_offset()) != 0;
        match (self.any_day, self.any_weekday) {
            (true, true) => true,
            (true, false) => weekday,
            (false, true) => day,
            (false, false) => day || weekday,
        }
    }

    /// The first scheduled time strictly after `after`, within the next five years.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let start = after.to_zoned(self.zone.clone());
        // The next whole minute.
        let mut at: DateTime = start
            .datetime()
            .with()
            .second(0)
            .subsec_nanosecond(0)
            .build()
            .ok()?
            .checked_add(1.minute())
            .ok()?;
        let limit = at.checked_add(5.years()).ok()?;
        while at < limit {
            if self.months & (1 << at.month()) == 0 {
                at = at
                    .first_of_month()
                    .checked_add(1.month())
                    .ok()?
                    .start_of_day();
                continue;
            }
            if !self.day_matches(&at) {
                at = at.checked_add(1.day()).ok()?.start_of_day();
                continue;
            }
            if self.hours & (1 << at.hour()) == 0 {
                at = at
                    .checked_add(1.hour())
                    .ok()?
                    .with()
                    .minute(0)
                    .build()
                    .ok()?;
                continue;
            }
            if self.minutes & (1 << at.minute()) == 0 {
                at = at.checked_add(1.minute()).ok()?;
                continue;
            }
            // A local time the zone skips (a DST gap) runs at the next valid instant.
            let zoned: Zoned = self.zone.to_ambiguous_zoned(at).compatible().ok()?;
            let instant = zoned.timestamp();
            if instant > after {
                return Some(instant);
            }
            at = at.checked_add(1.minute()).ok()?;
        }
        None
    }
}
