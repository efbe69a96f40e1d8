//! The figures of `rudder bench api`: a [`Tally`] per workload and subject sums the rounds;
//! [`rows`] turns them into objects/s, latency percentiles, response sizes and the ratio to the
//! reference subject (etcd) measured in the same run; then the table printed on stdout and
//! `results.json`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use comfy_table::{presets, CellAlignment, Table};
use hdrhistogram::Histogram;
use serde::Serialize;

use super::api::Params;
use super::report::{format_rate, format_ratio, percentile_ms, ratio, throughput, Machine};

/// The API workloads, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Create,
    List,
    ListPaged,
}

impl Workload {
    pub const ALL: [Workload; 3] = [Workload::Create, Workload::List, Workload::ListPaged];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Create => "create",
            Workload::List => "list",
            Workload::ListPaged => "list-paged",
        }
    }
}

/// What one workload measured on one subject in one round.
pub struct Sample {
    /// Creates, or lists (a paged list counts once).
    pub ops: u64,
    /// Wall time of the creates; the lists' times summed.
    pub elapsed: Duration,
    /// Each create's or each list's latency, in microseconds.
    pub latencies: Histogram<u64>,
    /// Bytes of one list response (all pages of one paged list); 0 for creates.
    pub bytes: u64,
    /// Pages of one list; 0 for creates.
    pub pages: u64,
}

/// One line of progress for a finished sample.
pub fn describe(workload: Workload, sample: &Sample, params: &Params) -> String {
    match workload {
        Workload::Create => format!(
            "{} creates/s, p50 {:.2} ms, p99 {:.2} ms",
            format_rate(throughput(sample.ops, sample.elapsed)),
            percentile_ms(&sample.latencies, 0.50),
            percentile_ms(&sample.latencies, 0.99),
        ),
        Workload::List | Workload::ListPaged => format!(
            "{} lists of {} pods in {} page(s), p50 {:.1} ms, min {:.1} ms, {}",
            sample.ops,
            params.pods,
            sample.pages,
            percentile_ms(&sample.latencies, 0.50),
            min_ms(&sample.latencies),
            format_bytes(sample.bytes),
        ),
    }
}

/// Everything measured for one workload on one subject, over all rounds.
pub struct Tally {
    ops: u64,
    busy: Duration,
    latencies: Histogram<u64>,
    bytes: u64,
    pages: u64,
    /// creates/s (create) or p50 ms (lists) of each round.
    rounds: Vec<f64>,
    /// Why rounds failed, if any did.
    errors: Vec<String>,
}

impl Tally {
    pub fn new() -> Result<Self> {
        Ok(Self {
            ops: 0,
            busy: Duration::ZERO,
            latencies: Histogram::new(3)?,
            bytes: 0,
            pages: 0,
            rounds: Vec::new(),
            errors: Vec::new(),
        })
    }

    pub fn add(&mut self, workload: Workload, sample: &Sample) -> Result<()> {
        self.ops += sample.ops;
        self.busy += sample.elapsed;
        self.latencies.add(&sample.latencies)?;
        self.bytes = self.bytes.max(sample.bytes);
        self.pages = self.pages.max(sample.pages);
        self.rounds.push(match workload {
            Workload::Create => throughput(sample.ops, sample.elapsed),
            Workload::List | Workload::ListPaged => percentile_ms(&sample.latencies, 0.50),
        });
        Ok(())
    }

    /// Records a round that failed; its figures stay out of the tally.
    pub fn fail(&mut self, error: String) {
        self.errors.push(error);
    }

    fn failed(&self) -> bool {
        !self.errors.is_empty()
    }
}

/// One line of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub workload: String,
    pub subject: String,
    /// Creates, or lists.
    pub ops: u64,
    /// Time spent in the operations over all rounds.
    pub seconds: f64,
    /// create: creates ÷ wall time; lists: pods ÷ the p50 list time.
    pub objects_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    /// Bytes of one full list (all pages of a paged list); None for creates.
    pub response_bytes: Option<u64>,
    /// Pages per list; None for creates.
    pub pages: Option<u64>,
    /// objects_per_sec ÷ the reference subject's, when the reference was measured.
    pub ratio_to_reference: Option<f64>,
    /// Per round: creates/s (create) or p50 ms (lists), to show the spread.
    pub rounds: Vec<f64>,
    /// The errors of the rounds that failed (their figures are left out).
    pub errors: Vec<String>,
}

/// The rows of every workload (outer, in [`Workload::ALL`] order) and subject;
/// `tallies[w][s]` belongs to `Workload::ALL[w]` and `subjects[s]`.
pub fn rows(
    subjects: &[String],
    tallies: &[Vec<Tally>],
    reference: &str,
    params: &Params,
) -> Vec<Row> {
    let mut rows = Vec::new();
    for (workload, tallies) in Workload::ALL.iter().zip(tallies) {
        let rate = |tally: &Tally| match workload {
            Workload::Create => throughput(tally.ops, tally.busy),
            Workload::List | Workload::ListPaged => {
                let p50 = percentile_ms(&tally.latencies, 0.50);
                if p50 > 0.0 {
                    params.pods as f64 / (p50 / 1000.0)
                } else {
                    0.0
                }
            }
        };
        // A reference that failed a round is no reference for this workload.
        let reference = subjects
            .iter()
            .position(|s| s == reference)
            .and_then(|index| tallies.get(index))
            .filter(|tally| !tally.failed())
            .map(rate);
        for (subject, tally) in subjects.iter().zip(tallies) {
            let objects_per_sec = rate(tally);
            let ratio_to_reference = match tally.failed() {
                true => None,
                false => ratio(objects_per_sec, reference),
            };
            let listing = *workload != Workload::Create;
            rows.push(Row {
                workload: workload.name().to_string(),
                subject: subject.clone(),
                ops: tally.ops,
                seconds: tally.busy.as_secs_f64(),
                objects_per_sec,
                p50_ms: percentile_ms(&tally.latencies, 0.50),
                p99_ms: percentile_ms(&tally.latencies, 0.99),
                min_ms: min_ms(&tally.latencies),
                max_ms: percentile_ms(&tally.latencies, 1.0),
                response_bytes: listing.then_some(tally.bytes),
                pages: listing.then_some(tally.pages),
                ratio_to_reference,
                rounds: tally.rounds.clone(),
                errors: tally.errors.clone(),
            });
        }
    }
    rows
}

/// The smallest latency of a histogram of microseconds, in milliseconds (0 if empty).
fn min_ms(latencies: &Histogram<u64>) -> f64 {
    if latencies.is_empty() {
        return 0.0;
    }
    latencies.min() as f64 / 1000.0
}

/// `812 B`, `48.3 KiB`, `12.4 MiB`.
pub fn format_bytes(bytes: u64) -> String {
    let bytes = bytes as f64;
    if bytes < 1024.0 {
        format!("{bytes} B")
    } else if bytes < 1024.0 * 1024.0 {
        format!("{:.1} KiB", bytes / 1024.0)
    } else {
        format!("{:.1} MiB", bytes / 1024.0 / 1024.0)
    }
}

/// The table printed on stdout.
pub fn table(rows: &[Row], reference: &str) -> Table {
    let mut table = Table::new();
    table.load_preset(presets::ASCII_MARKDOWN).set_header(vec![
        "workload".to_string(),
        "subject".to_string(),
        "measured".to_string(),
        "objects/s".to_string(),
        "p50 ms".to_string(),
        "p99 ms".to_string(),
        "min ms".to_string(),
        "response".to_string(),
        format!("vs {reference}"),
    ]);
    for row in rows {
        let mut measured = match (row.workload.as_str(), row.pages) {
            ("create", _) => format!("{} creates", row.ops),
            (_, Some(pages)) if pages > 1 => format!("{} lists × {pages} pages", row.ops),
            _ => format!("{} lists", row.ops),
        };
        if !row.errors.is_empty() {
            measured = format!("FAILED {}× (see below)", row.errors.len());
            if row.ops == 0 {
                let mut cells = vec![row.workload.clone(), row.subject.clone(), measured];
                cells.resize(9, "-".to_string());
                table.add_row(cells);
                continue;
            }
        }
        table.add_row(vec![
            row.workload.clone(),
            row.subject.clone(),
            measured,
            format_rate(row.objects_per_sec),
            format!("{:.2}", row.p50_ms),
            format!("{:.2}", row.p99_ms),
            format!("{:.2}", row.min_ms),
            row.response_bytes
                .map_or_else(|| "-".to_string(), format_bytes),
            format_ratio(row.ratio_to_reference),
        ]);
    }
    for index in 2..9 {
        if let Some(column) = table.column_mut(index) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}

/// One line per failed row: which workload on which subject, and its first error.
pub fn failures(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter_map(|row| {
            let first = row.errors.first()?;
            Some(format!(
                "FAILED {} on {} ({} of its rounds): {first}",
                row.workload,
                row.subject,
                row.errors.len()
            ))
        })
        .collect()
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

/// Writes `results.json` into `dir`; returns its path.
pub fn write_json(dir: &Path, summary: &Summary) -> Result<PathBuf> {
    let json = serde_json::to_string_pretty(summary)?;
    let path = dir.join("results.json");
    std::fs::write(&path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            creates: 100,
            clients: 4,
            pods: 10_000,
            list_repeats: 2,
            page_size: 500,
        }
    }

    fn sample(ops: u64, millis: u64, latencies_ms: &[u64], bytes: u64, pages: u64) -> Sample {
        let mut latencies = Histogram::new(3).unwrap();
        for latency in latencies_ms {
            latencies.record(latency * 1000).unwrap();
        }
        Sample {
            ops,
            elapsed: Duration::from_millis(millis),
            latencies,
            bytes,
            pages,
        }
    }

    #[test]
    fn creates_compare_throughput_and_lists_compare_p50() {
        let subjects = vec!["sqlite".to_string(), "etcd".to_string()];
        let mut tallies = Vec::new();
        for workload in Workload::ALL {
            let (mut sqlite, mut etcd) = (Tally::new().unwrap(), Tally::new().unwrap());
            match workload {
                Workload::Create => {
                    sqlite
                        .add(workload, &sample(100, 50, &[1, 2], 0, 0))
                        .unwrap();
                    etcd.add(workload, &sample(100, 100, &[2, 4], 0, 0))
                        .unwrap();
                }
                _ => {
                    sqlite
                        .add(workload, &sample(2, 300, &[100, 200], 9000, 20))
                        .unwrap();
                    etcd.add(workload, &sample(2, 600, &[200, 400], 9000, 20))
                        .unwrap();
                }
            }
            tallies.push(vec![sqlite, etcd]);
        }
        let rows = rows(&subjects, &tallies, "etcd", &params());
        assert_eq!(rows.len(), 6);
        assert_eq!(rows[0].workload, "create");
        assert!((rows[0].objects_per_sec - 2000.0).abs() < 1e-6);
        assert_eq!(rows[0].ratio_to_reference, Some(2.0));
        assert_eq!(rows[0].response_bytes, None);
        assert_eq!(rows[1].ratio_to_reference, Some(1.0));
        // Lists: pods ÷ p50; sqlite's p50 is 100 ms, etcd's 200 ms.
        assert_eq!(rows[2].workload, "list");
        assert!((rows[2].objects_per_sec - 100_000.0).abs() < 100.0);
        let list_ratio = rows[2].ratio_to_reference.unwrap();
        assert!((list_ratio - 2.0).abs() < 0.01, "{list_ratio}");
        assert!((rows[2].min_ms - 100.0).abs() < 0.1);
        assert!((rows[2].max_ms - 200.0).abs() < 0.2);
        assert_eq!(rows[5].pages, Some(20));
        assert_eq!(rows[5].response_bytes, Some(9000));
        let text = table(&rows, "etcd").to_string();
        assert!(text.contains("2 lists × 20 pages"), "{text}");
        assert!(text.contains("100 creates"), "{text}");
    }

    #[test]
    fn failures_are_reported_and_have_no_ratio() {
        let subjects = vec!["sqlite".to_string(), "etcd".to_string()];
        let mut tallies = Vec::new();
        for workload in Workload::ALL {
            let mut sqlite = Tally::new().unwrap();
            sqlite
                .add(workload, &sample(2, 300, &[100, 200], 9000, 1))
                .unwrap();
            let mut etcd = Tally::new().unwrap();
            etcd.fail("message too large".to_string());
            tallies.push(vec![sqlite, etcd]);
        }
        let rows = rows(&subjects, &tallies, "etcd", &params());
        assert_eq!(rows[2].ratio_to_reference, None);
        assert_eq!(rows[3].errors, vec!["message too large".to_string()]);
        let text = table(&rows, "etcd").to_string();
        assert!(text.contains("FAILED 1×"), "{text}");
        let failures = failures(&rows);
        assert_eq!(failures.len(), 3);
        assert_eq!(
            failures[1],
            "FAILED list on etcd (1 of its rounds): message too large"
        );
    }

    #[test]
    fn sizes_are_human() {
        assert_eq!(format_bytes(812), "812 B");
        assert_eq!(format_bytes(49_459), "48.3 KiB");
        assert_eq!(format_bytes(13_002_342), "12.4 MiB");
    }
}
