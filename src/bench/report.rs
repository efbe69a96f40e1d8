//! Turning measurements into figures: a [`Tally`] per workload and subject sums the rounds;
//! [`rows`] gives each pair its throughput (operations ÷ time spent, over all rounds), its
//! latency percentiles and its throughput ratio to the reference subject (etcd) measured in
//! the same run; then the table printed on stdout and `results.json` / `results.csv`.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use comfy_table::{presets, CellAlignment, Table};
use hdrhistogram::Histogram;
use serde::Serialize;

use super::workloads::{Params, Sample, Workload};

/// Everything measured for one workload on one subject, over all rounds.
pub struct Tally {
    ops: u64,
    busy: Duration,
    latencies: Histogram<u64>,
    rounds: Vec<f64>,
}

impl Tally {
    pub fn new() -> Result<Self> {
        Ok(Self {
            ops: 0,
            busy: Duration::ZERO,
            latencies: Histogram::new(3)?,
            rounds: Vec::new(),
        })
    }

    pub fn add(&mut self, sample: &Sample) -> Result<()> {
        self.ops += sample.ops;
        self.busy += sample.elapsed;
        self.latencies.add(&sample.latencies)?;
        self.rounds.push(throughput(sample.ops, sample.elapsed));
        Ok(())
    }
}

/// One line of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub workload: String,
    /// What one operation is (creates, gets, lists, …).
    pub unit: String,
    pub subject: String,
    pub ops: u64,
    pub seconds: f64,
    pub ops_per_sec: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    /// ops_per_sec ÷ the reference subject's, when the reference was measured.
    pub ratio_to_reference: Option<f64>,
    /// ops/s of each round, in round order, to show the spread.
    pub round_ops_per_sec: Vec<f64>,
}

/// The rows of every workload (outer, in order) and subject; `tallies[w][s]` belongs to
/// `workloads[w]` and `subjects[s]`.
pub fn rows(
    workloads: &[Workload],
    subjects: &[String],
    tallies: &[Vec<Tally>],
    reference: &str,
) -> Vec<Row> {
    let mut rows = Vec::new();
    for (workload, tallies) in workloads.iter().zip(tallies) {
        let reference = subjects
            .iter()
            .position(|s| s == reference)
            .and_then(|index| tallies.get(index))
            .map(|t| throughput(t.ops, t.busy));
        for (subject, tally) in subjects.iter().zip(tallies) {
            let ops_per_sec = throughput(tally.ops, tally.busy);
            rows.push(Row {
                workload: workload.name().to_string(),
                unit: workload.unit().to_string(),
                subject: subject.clone(),
                ops: tally.ops,
                seconds: tally.busy.as_secs_f64(),
                ops_per_sec,
                p50_ms: percentile_ms(&tally.latencies, 0.50),
                p90_ms: percentile_ms(&tally.latencies, 0.90),
                p99_ms: percentile_ms(&tally.latencies, 0.99),
                ratio_to_reference: ratio(ops_per_sec, reference),
                round_ops_per_sec: tally.rounds.clone(),
            });
        }
    }
    rows
}

/// Operations per second; 0 when no time was spent.
pub fn throughput(ops: u64, busy: Duration) -> f64 {
    let seconds = busy.as_secs_f64();
    if seconds > 0.0 {
        ops as f64 / seconds
    } else {
        0.0
    }
}

/// The latency at quantile `q` of a histogram of microseconds, in milliseconds (0 if empty).
pub fn percentile_ms(latencies: &Histogram<u64>, q: f64) -> f64 {
    if latencies.is_empty() {
        return 0.0;
    }
    latencies.value_at_quantile(q) as f64 / 1000.0
}

/// `value ÷ reference`, or None without a usable reference.
pub fn ratio(value: f64, reference: Option<f64>) -> Option<f64> {
    reference.filter(|r| *r > 0.0).map(|r| value / r)
}

/// A rate with as many decimals as it needs: `12345`, `48.3`, `1.47`.
pub fn format_rate(rate: f64) -> String {
    if rate >= 100.0 {
        format!("{rate:.0}")
    } else if rate >= 10.0 {
        format!("{rate:.1}")
    } else {
        format!("{rate:.2}")
    }
}

/// `1.23x`, or `-` without a ratio.
pub fn format_ratio(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "-".to_string(), |r| format!("{r:.2}x"))
}

/// The table printed on stdout.
pub fn table(rows: &[Row], reference: &str) -> Table {
    let mut table = Table::new();
    table.load_preset(presets::ASCII_MARKDOWN).set_header(vec![
        "workload".to_string(),
        "subject".to_string(),
        "ops".to_string(),
        "ops/s".to_string(),
        "p50 ms".to_string(),
        "p90 ms".to_string(),
        "p99 ms".to_string(),
        format!("vs {reference}"),
    ]);
    for row in rows {
        table.add_row(vec![
            row.workload.clone(),
            row.subject.clone(),
            format!("{} {}", row.ops, row.unit),
            format_rate(row.ops_per_sec),
            format!("{:.2}", row.p50_ms),
            format!("{:.2}", row.p90_ms),
            format!("{:.2}", row.p99_ms),
            format_ratio(row.ratio_to_reference),
        ]);
    }
    for index in 2..8 {
        if let Some(column) = table.column_mut(index) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}

/// The same figures as CSV, one line per row, ratio empty without a reference.
pub fn csv(rows: &[Row]) -> String {
    let mut out = String::from(
        "workload,unit,subject,ops,seconds,ops_per_sec,p50_ms,p90_ms,p99_ms,ratio_to_reference\n",
    );
    for row in rows {
        let fields = [
            csv_field(&row.workload),
            csv_field(&row.unit),
            csv_field(&row.subject),
            row.ops.to_string(),
            format!("{:.3}", row.seconds),
            format!("{:.1}", row.ops_per_sec),
            format!("{:.3}", row.p50_ms),
            format!("{:.3}", row.p90_ms),
            format!("{:.3}", row.p99_ms),
            row.ratio_to_reference
                .map_or_else(String::new, |r| format!("{r:.3}")),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// A CSV field, quoted when it holds a comma, a quote or a line break.
fn csv_field(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

/// What `results.json` holds: how the figures were made, and the rows.
#[derive(Serialize)]
pub struct Summary<'a> {
    pub command: String,
    pub machine: Machine,
    pub reference: &'a str,
    pub subjects: &'a [String],
    pub rounds: usize,
    pub params: &'a Params,
    pub results: &'a [Row],
}

/// The machine the figures were measured on.
#[derive(Serialize)]
pub struct Machine {
    pub cores: usize,
    pub memory_gib: Option<f64>,
}

impl Machine {
    pub fn here() -> Self {
        let memory_gib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|info| {
                let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
                line.split_whitespace().nth(1)?.parse::<f64>().ok()
            })
            .map(|kib| (kib / 1024.0 / 1024.0 * 10.0).round() / 10.0);
        Self {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib,
        }
    }
}

/// The command line, with any password in a URL argument replaced by `***`.
pub fn command_line(args: impl IntoIterator<Item = String>) -> String {
    args.into_iter()
        .map(|arg| rudder_storage::config::redact(&arg))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Writes `results.json` and `results.csv` into `dir`.
pub fn write_files(dir: &Path, summary: &Summary) -> Result<()> {
    let json = serde_json::to_string_pretty(summary)?;
    let path = dir.join("results.json");
    std::fs::write(&path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    let path = dir.join("results.csv");
    std::fs::write(&path, csv(summary.results))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ops: u64, millis: u64, latencies_us: &[u64]) -> Sample {
        let mut histogram = Histogram::new(3).unwrap();
        for latency in latencies_us {
            histogram.record(*latency).unwrap();
        }
        Sample {
            ops,
            elapsed: Duration::from_millis(millis),
            latencies: histogram,
        }
    }

    #[test]
    fn percentiles_are_in_milliseconds() {
        let latencies: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        let sample = sample(100, 1000, &latencies);
        assert!((percentile_ms(&sample.latencies, 0.5) - 50.0).abs() < 0.1);
        assert!((percentile_ms(&sample.latencies, 0.9) - 90.0).abs() < 0.1);
        assert!((percentile_ms(&sample.latencies, 0.99) - 99.0).abs() < 0.1);
        assert_eq!(percentile_ms(&Histogram::new(3).unwrap(), 0.99), 0.0);
    }

    #[test]
    fn ratios_divide_by_the_reference_and_need_one() {
        assert_eq!(ratio(300.0, Some(150.0)), Some(2.0));
        assert_eq!(ratio(300.0, None), None);
        assert_eq!(ratio(300.0, Some(0.0)), None);
        assert_eq!(format_ratio(Some(0.5)), "0.50x");
        assert_eq!(format_ratio(None), "-");
        assert_eq!(throughput(10, Duration::ZERO), 0.0);
        assert_eq!(format_rate(12345.6), "12346");
        assert_eq!(format_rate(48.26), "48.3");
        assert_eq!(format_rate(1.466), "1.47");
    }

    #[test]
    fn rows_sum_rounds_and_compare_with_etcd() {
        let subjects = vec!["sqlite".to_string(), "etcd".to_string()];
        let mut sqlite = Tally::new().unwrap();
        sqlite.add(&sample(1000, 500, &[1000])).unwrap();
        sqlite.add(&sample(1000, 500, &[3000])).unwrap();
        let mut etcd = Tally::new().unwrap();
        etcd.add(&sample(1000, 1000, &[2000])).unwrap();
        let rows = rows(
            &[Workload::Create],
            &subjects,
            &[vec![sqlite, etcd]],
            "etcd",
        );
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].ops, 2000);
        assert!((rows[0].ops_per_sec - 2000.0).abs() < 1e-9);
        assert_eq!(rows[0].round_ops_per_sec, vec![2000.0, 2000.0]);
        assert_eq!(rows[0].ratio_to_reference, Some(2.0));
        assert_eq!(rows[1].ratio_to_reference, Some(1.0));
        assert!((rows[0].p90_ms - 3.0).abs() < 0.01);

        let without = super::rows(
            &[Workload::Create],
            &subjects[..1],
            &[vec![Tally::new().unwrap()]],
            "etcd",
        );
        assert_eq!(without[0].ratio_to_reference, None);
    }

    #[test]
    fn csv_has_a_header_and_one_line_per_row() {
        let row = Row {
            workload: "get".into(),
            unit: "gets".into(),
            subject: "odd,name".into(),
            ops: 5000,
            seconds: 0.5,
            ops_per_sec: 10_000.0,
            p50_ms: 1.0,
            p90_ms: 2.0,
            p99_ms: 3.25,
            ratio_to_reference: None,
            round_ops_per_sec: vec![],
        };
        let with_ratio = Row {
            subject: "etcd".into(),
            ratio_to_reference: Some(1.0),
            ..row.clone()
        };
        let text = csv(&[row, with_ratio]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "workload,unit,subject,ops,seconds,ops_per_sec,p50_ms,p90_ms,p99_ms,ratio_to_reference"
        );
        assert_eq!(
            lines[1],
            "get,gets,\"odd,name\",5000,0.500,10000.0,1.000,2.000,3.250,"
        );
        assert_eq!(
            lines[2],
            "get,gets,etcd,5000,0.500,10000.0,1.000,2.000,3.250,1.000"
        );
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    #[test]
    fn command_lines_hide_passwords() {
        let args = [
            "rudder",
            "--postgres-url",
            "postgres://bob:secret@db:5432/x",
        ];
        assert_eq!(
            command_line(args.iter().map(|a| a.to_string())),
            "rudder --postgres-url postgres://bob:***@db:5432/x"
        );
        assert_eq!(
            command_line(["postgres://bob@db/x".to_string()].into_iter()),
            "postgres://bob@db/x"
        );
    }
}
