//! Unit tests of schedules and missed starts.

use jiff::Timestamp;

use super::missed;
use super::schedule::Schedule;

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

#[test]
fn five_fields_shorthands_names_and_steps() {
    let every_five = Schedule::parse("*/5 * * * *", Some("UTC")).unwrap();
    assert_eq!(
        every_five.next_after(at("2026-01-01T10:02:30Z")),
        Some(at("2026-01-01T10:05:00Z"))
    );
    assert_eq!(
        every_five.next_after(at("2026-01-01T10:05:00Z")),
        Some(at("2026-01-01T10:10:00Z"))
    );
    let hourly = Schedule::parse("@hourly", Some("UTC")).unwrap();
    assert_eq!(
        hourly.next_after(at("2026-01-01T10:00:00Z")),
        Some(at("2026-01-01T11:00:00Z"))
    );
    let weekdays = Schedule::parse("30 9 * * MON-FRI", Some("UTC")).unwrap();
    // 2026-01-03 is a Saturday: the next run is Monday the 5th.
    assert_eq!(
        weekdays.next_after(at("2026-01-02T10:00:00Z")),
        Some(at("2026-01-05T09:30:00Z"))
    );
    let yearly = Schedule::parse("@yearly", Some("UTC")).unwrap();
    assert_eq!(
        yearly.next_after(at("2026-03-01T00:00:00Z")),
        Some(at("2027-01-01T00:00:00Z"))
    );
    let sunday_seven = Schedule::parse("0 0 * * 7", Some("UTC")).unwrap();
    assert_eq!(
        sunday_seven.next_after(at("2026-01-01T00:00:00Z")),
        Some(at("2026-01-04T00:00:00Z"))
    );
}

#[test]
fn either_day_field_matches_when_both_are_restricted() {
    // The 15th, or any Friday.
    let schedule = Schedule::parse("0 0 15 * FRI", Some("UTC")).unwrap();
    assert_eq!(
        schedule.next_after(at("2026-01-01T00:00:00Z")),
        Some(at("2026-01-02T00:00:00Z"))
    );
    assert_eq!(
        schedule.next_after(at("2026-01-14T00:00:00Z")),
        Some(at("2026-01-15T00:00:00Z"))
    );
}

#[test]
fn time_zones_from_the_field_or_the_prefix() {
    let berlin = Schedule::parse("0 9 * * *", Some("Europe/Berlin")).unwrap();
    assert_eq!(
        berlin.next_after(at("2026-01-10T00:00:00Z")),
        Some(at("2026-01-10T08:00:00Z"))
    );
    let prefixed = Schedule::parse("CRON_TZ=America/New_York 0 9 * * *", None).unwrap();
    assert_eq!(
        prefixed.next_after(at("2026-01-10T00:00:00Z")),
        Some(at("2026-01-10T14:00:00Z"))
    );
}

#[test]
fn bad_schedules_say_why() {
    for (schedule, needle) in [
        ("* * * *", "5"),
        ("61 * * * *", "outside"),
        ("*/0 * * * *", "step of 0"),
        ("@every 5m", "not supported"),
        ("0 0 * * nope", "not a number"),
    ] {
        let error = Schedule::parse(schedule, Some("UTC")).unwrap_err();
        assert!(error.contains(needle), "{schedule}: {error}");
    }
    assert!(Schedule::parse("0 0 * * *", Some("Mars/Olympus"))
        .unwrap_err()
        .contains("time zone"));
}

#[test]
fn missed_starts_are_counted_up_to_now() {
    let schedule = Schedule::parse("* * * * *", Some("UTC")).unwrap();
    let (count, latest) = missed(
        &schedule,
        at("2026-01-01T00:00:00Z"),
        at("2026-01-01T00:10:30Z"),
    );
    assert_eq!((count, latest), (10, Some(at("2026-01-01T00:10:00Z"))));
    let (count, latest) = missed(
        &schedule,
        at("2026-01-01T00:00:00Z"),
        at("2026-01-01T00:00:30Z"),
    );
    assert_eq!((count, latest), (0, None));
}
