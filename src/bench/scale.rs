//! `rudder bench storage --writers 1,16,64,256 --keys 10k,100k`: the same workloads at every
//! combination of client count and key-space size, to show how each subject scales. Each
//! combination (a [`Point`]) is a full run of the workloads (rounds rotating the subjects as
//! usual); afterwards the memory each subject's server holds is read ([`super::memory`]). The
//! report is a table per workload with one column per writer count, the memory table, the
//! published figures these can be set against, and — with `--out` — `results.json`,
//! `results.csv` and a chart per workload with writers on the x axis (`scaling-<workload>`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use comfy_table::{presets, CellAlignment, Table};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;

use super::charts::failed;
use super::report::{format_rate, format_ratio, Machine, Row};
use super::workloads::Params;

/// One combination of key-space size and client count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Point {
    pub keys: usize,
    pub writers: usize,
}

/// Every combination, key-space sizes outermost (a larger key space only adds keys to what the
/// smaller one wrote), each list in the order given.
pub fn points(keys: &[usize], writers: &[usize]) -> Vec<Point> {
    keys.iter()
        .flat_map(|&keys| writers.iter().map(move |&writers| Point { keys, writers }))
        .collect()
}

/// A count with an optional `k` (thousand) or `m` (million) suffix: `500`, `10k`, `1m`.
pub fn parse_count(text: &str) -> std::result::Result<usize, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, factor) = match lower.as_bytes().last() {
        Some(b'k') => (&lower[..lower.len() - 1], 1_000),
        Some(b'm') => (&lower[..lower.len() - 1], 1_000_000),
        _ => (lower.as_str(), 1),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| format!("{text:?} is not a count (e.g. 500, 10k, 1m)"))
}

/// The workload sizes at `point`: its clients and key space; when the key space varies, the
/// list workload pages over the whole of it.
pub fn params_at(base: &Params, point: Point, keys_vary: bool) -> Params {
    let mut params = base.clone();
    params.keys = point.keys;
    params.writers = point.writers;
    if keys_vary {
        params.list_keys = point.keys;
    }
    params
}

/// The memory a subject's server held after a point.
#[derive(Clone, Debug, Serialize)]
pub struct Memory {
    pub subject: String,
    /// PSS of the server process(es) listening on the subject's port; `None` for embedded
    /// stores or a server this user cannot inspect.
    pub server_pss_bytes: Option<u64>,
}

/// What one point measured.
#[derive(Serialize)]
pub struct Measured {
    pub point: Point,
    pub results: Vec<Row>,
    pub memory: Vec<Memory>,
    /// RSS of the bench process itself (it holds the embedded stores and every client).
    pub bench_rss_bytes: Option<u64>,
}

/// Figures others published, to set these against — named as published, not measured here.
pub const PUBLISHED: &[&str] = &[
    "etcd's performance guide (etcd.io op-guide/performance; 3 members of 8 vCPU / 16 GB / \
     SSD, 256 B values): puts to the leader, 1 client: 583/s (1.6 ms average); 1,000 clients \
     over 100 connections: 44,341/s (22 ms)",
    "KubeBrain on TiKV (ByteDance): 28.6k creates/s at 300 clients",
];

/// The scaling table: per workload, subject and key-space size, one column per writer count
/// with `ops/s (p99 ms, ratio)`.
pub fn table(measured: &[Measured], writers: &[usize], reference: &str) -> Table {
    let mut header = vec![
        "workload".to_string(),
        "subject".to_string(),
        "keys".to_string(),
    ];
    header.extend(writers.iter().map(|w| format!("{w} writers")));
    let mut table = Table::new();
    table
        .load_preset(presets::ASCII_MARKDOWN)
        .set_header(header);
    let Some(first) = measured.first() else {
        return table;
    };
    let mut key_spaces: Vec<usize> = measured.iter().map(|m| m.point.keys).collect();
    key_spaces.dedup();
    for template in &first.results {
        for &keys in &key_spaces {
            let mut line = vec![
                template.workload.clone(),
                template.subject.clone(),
                count_label(keys),
            ];
            for &clients in writers {
                let row = measured
                    .iter()
                    .find(|m| {
                        m.point
                            == Point {
                                keys,
                                writers: clients,
                            }
                    })
                    .and_then(|m| {
                        m.results.iter().find(|r| {
                            r.workload == template.workload && r.subject == template.subject
                        })
                    });
                line.push(row.map_or_else(String::new, |row| {
                    let ratio = if row.subject == reference {
                        String::new()
                    } else {
                        format!(", {}", format_ratio(row.ratio_to_reference))
                    };
                    format!(
                        "{} ({:.1} ms{ratio})",
                        format_rate(row.ops_per_sec),
                        row.p99_ms
                    )
                }));
            }
            table.add_row(line);
        }
    }
    for index in 3..3 + writers.len() {
        if let Some(column) = table.column_mut(index) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}

/// Server memory by subject after each key-space size (its last writer count).
pub fn memory_table(measured: &[Measured]) -> Table {
    let mut key_spaces: Vec<usize> = measured.iter().map(|m| m.point.keys).collect();
    key_spaces.dedup();
    let last_of = |keys: usize| measured.iter().rev().find(|m| m.point.keys == keys);
    let mut header = vec!["server memory (PSS)".to_string()];
    header.extend(
        key_spaces
            .iter()
            .map(|k| format!("after {} keys", count_label(*k))),
    );
    let mut table = Table::new();
    table
        .load_preset(presets::ASCII_MARKDOWN)
        .set_header(header);
    if let Some(first) = measured.first() {
        for (index, memory) in first.memory.iter().enumerate() {
            let mut line = vec![memory.subject.clone()];
            for &keys in &key_spaces {
                let figure = last_of(keys)
                    .and_then(|m| m.memory.get(index))
                    .and_then(|m| m.server_pss_bytes);
                line.push(figure.map_or_else(|| "in process".to_string(), mebibytes));
            }
            table.add_row(line);
        }
        let mut line = vec!["(the bench process: embedded stores and all clients)".to_string()];
        for &keys in &key_spaces {
            let figure = last_of(keys).and_then(|m| m.bench_rss_bytes);
            line.push(figure.map_or_else(|| "?".to_string(), mebibytes));
        }
        table.add_row(line);
    }
    table
}

fn mebibytes(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// `10k`, `1m`, `2500`.
pub fn count_label(count: usize) -> String {
    if count >= 1_000_000 && count.is_multiple_of(1_000_000) {
        format!("{}m", count / 1_000_000)
    } else if count >= 1_000 && count.is_multiple_of(1_000) {
        format!("{}k", count / 1_000)
    } else {
        count.to_string()
    }
}

/// What `results.json` holds for a scaling run.
#[derive(Serialize)]
pub struct Summary<'a> {
    pub command: String,
    pub machine: Machine,
    pub reference: &'a str,
    pub subjects: &'a [String],
    pub rounds: usize,
    pub params: &'a Params,
    pub published_not_measured_here: &'a [&'a str],
    pub points: &'a [Measured],
}

/// Writes `results.json`, `results.csv` (one line per point, workload and subject) and the
/// charts; returns the chart files.
pub fn write_files(dir: &Path, summary: &Summary) -> Result<Vec<PathBuf>> {
    let json = serde_json::to_string_pretty(summary)?;
    let path = dir.join("results.json");
    std::fs::write(&path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    let mut csv = String::from(
        "keys,writers,workload,subject,ops,seconds,ops_per_sec,p50_ms,p90_ms,p99_ms,ratio_to_reference\n",
    );
    for measured in summary.points {
        for row in &measured.results {
            csv.push_str(&format!(
                "{},{},{},{},{},{:.6},{:.3},{:.3},{:.3},{:.3},{}\n",
                measured.point.keys,
                measured.point.writers,
                row.workload,
                row.subject,
                row.ops,
                row.seconds,
                row.ops_per_sec,
                row.p50_ms,
                row.p90_ms,
                row.p99_ms,
                row.ratio_to_reference
                    .map_or_else(String::new, |r| format!("{r:.4}")),
            ));
        }
    }
    let path = dir.join("results.csv");
    std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))?;
    super::charts::register_font()?;
    charts(dir, summary.points)
}

/// One line of a chart: a subject at one key-space size, `(writers, value)` per point.
struct Line {
    label: String,
    points: Vec<(f64, f64)>,
}

/// `scaling-<workload>.png` / `.svg`: throughput and p99 against writers (log scale), one line
/// per subject and key-space size.
fn charts(dir: &Path, measured: &[Measured]) -> Result<Vec<PathBuf>> {
    let Some(first) = measured.first() else {
        return Ok(Vec::new());
    };
    let mut workloads: Vec<&str> = Vec::new();
    for row in &first.results {
        if !workloads.contains(&row.workload.as_str()) {
            workloads.push(&row.workload);
        }
    }
    let mut key_spaces: Vec<usize> = measured.iter().map(|m| m.point.keys).collect();
    key_spaces.dedup();
    let several_key_spaces = key_spaces.len() > 1;
    let mut written = Vec::new();
    for workload in workloads {
        let mut throughput = Vec::new();
        let mut p99 = Vec::new();
        let mut unit = String::new();
        for template in first.results.iter().filter(|r| r.workload == workload) {
            for &keys in &key_spaces {
                let label = if several_key_spaces {
                    format!("{} ({} keys)", template.subject, count_label(keys))
                } else {
                    template.subject.clone()
                };
                let rows: Vec<(usize, &Row)> = measured
                    .iter()
                    .filter(|m| m.point.keys == keys)
                    .filter_map(|m| {
                        let row = m
                            .results
                            .iter()
                            .find(|r| r.workload == workload && r.subject == template.subject)?;
                        Some((m.point.writers, row))
                    })
                    .collect();
                if let Some((_, row)) = rows.first() {
                    unit = row.unit.clone();
                }
                throughput.push(Line {
                    label: label.clone(),
                    points: rows
                        .iter()
                        .map(|(w, r)| (*w as f64, r.ops_per_sec))
                        .collect(),
                });
                p99.push(Line {
                    label,
                    points: rows.iter().map(|(w, r)| (*w as f64, r.p99_ms)).collect(),
                });
            }
        }
        let stem = format!("scaling-{workload}");
        let size = (1200, 480);
        let png = dir.join(format!("{stem}.png"));
        let svg = dir.join(format!("{stem}.svg"));
        let title = |what: &str| format!("{workload}: {what} by writers");
        draw(
            &BitMapBackend::new(&png, size).into_drawing_area(),
            &title(&format!("{unit}/s")),
            &throughput,
            &p99,
        )
        .with_context(|| format!("drawing {}", png.display()))?;
        draw(
            &SVGBackend::new(&svg, size).into_drawing_area(),
            &title(&format!("{unit}/s")),
            &throughput,
            &p99,
        )
        .with_context(|| format!("drawing {}", svg.display()))?;
        written.extend([png, svg]);
    }
    Ok(written)
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Two panels: throughput (left) and p99 latency (right), writers on a log x axis.
fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    throughput: &[Line],
    p99: &[Line],
) -> Result<()> {
    root.fill(&WHITE).map_err(failed)?;
    let panels = root.split_evenly((1, 2));
    for (panel, (lines, caption)) in panels.iter().zip([
        (throughput, title.to_string()),
        (p99, "p99 latency (ms)".into()),
    ]) {
        let all = lines.iter().flat_map(|line| line.points.iter());
        let (mut low, mut high, mut top) = (f64::MAX, 1.0f64, 0.0f64);
        for (x, y) in all {
            low = low.min(*x);
            high = high.max(*x);
            top = top.max(*y);
        }
        if low > high {
            low = 1.0;
        }
        let mut chart = ChartBuilder::on(panel)
            .caption(caption, ("sans-serif", 20))
            .margin(14)
            .x_label_area_size(36)
            .y_label_area_size(72)
            .build_cartesian_2d(
                ((low * 0.8).max(0.5)..high * 1.25).log_scale(),
                0.0..(top * 1.15).max(0.01),
            )
            .map_err(failed)?;
        chart
            .configure_mesh()
            .x_desc("writers (concurrent clients)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format_rate(*y))
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(failed)?;
        for (index, line) in lines.iter().enumerate() {
            let color = COLORS[index % COLORS.len()];
            chart
                .draw_series(std::iter::once(PathElement::new(
                    line.points.clone(),
                    color.stroke_width(2),
                )))
                .map_err(failed)?
                .label(line.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2))
                });
            chart
                .draw_series(
                    line.points
                        .iter()
                        .map(|point| Circle::new(*point, 3, color.filled())),
                )
                .map_err(failed)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(failed)?;
    }
    root.present().map_err(failed)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(workload: &str, subject: &str, ops_per_sec: f64, ratio: Option<f64>) -> Row {
        Row {
            workload: workload.into(),
            unit: "creates".into(),
            subject: subject.into(),
            ops: 100,
            seconds: 1.0,
            ops_per_sec,
            p50_ms: 1.0,
            p90_ms: 2.0,
            p99_ms: 4.0,
            ratio_to_reference: ratio,
            round_ops_per_sec: vec![ops_per_sec],
        }
    }

    #[test]
    fn counts_take_suffixes() {
        assert_eq!(parse_count("10k"), Ok(10_000));
        assert_eq!(parse_count("1M"), Ok(1_000_000));
        assert_eq!(parse_count("250"), Ok(250));
        assert!(parse_count("ten").is_err());
        assert!(parse_count("k").is_err());
        assert_eq!(count_label(100_000), "100k");
        assert_eq!(count_label(2_500), "2500");
        assert_eq!(
            points(&[10, 20], &[1, 16]),
            [
                Point {
                    keys: 10,
                    writers: 1
                },
                Point {
                    keys: 10,
                    writers: 16
                },
                Point {
                    keys: 20,
                    writers: 1
                },
                Point {
                    keys: 20,
                    writers: 16
                },
            ]
        );
    }

    #[test]
    fn the_table_has_a_column_per_writer_count_and_the_charts_a_line_per_subject() {
        let measured: Vec<Measured> = [(1, 100.0, 50.0), (16, 1000.0, 2000.0)]
            .into_iter()
            .map(|(writers, etcd, sqlite)| Measured {
                point: Point {
                    keys: 10_000,
                    writers,
                },
                results: vec![
                    row("create", "sqlite", sqlite, Some(sqlite / etcd)),
                    row("create", "etcd", etcd, Some(1.0)),
                ],
                memory: vec![
                    Memory {
                        subject: "sqlite".into(),
                        server_pss_bytes: None,
                    },
                    Memory {
                        subject: "etcd".into(),
                        server_pss_bytes: Some(64 << 20),
                    },
                ],
                bench_rss_bytes: Some(100 << 20),
            })
            .collect();
        let text = table(&measured, &[1, 16], "etcd").to_string();
        assert!(
            text.contains(" 1 writers |") && text.contains(" 16 writers |"),
            "{text}"
        );
        assert!(text.contains("50.0 (4.0 ms, 0.50x)"), "{text}");
        assert!(text.contains("2000 (4.0 ms, 2.00x)"), "{text}");
        assert!(text.contains("1000 (4.0 ms)"), "{text}");
        let memory = memory_table(&measured).to_string();
        assert!(
            memory.contains("64 MiB") && memory.contains("in process"),
            "{memory}"
        );

        let dir = tempfile::tempdir().unwrap();
        super::super::charts::register_font().unwrap();
        let written = charts(dir.path(), &measured).unwrap();
        assert_eq!(written.len(), 2);
        let svg = std::fs::read_to_string(dir.path().join("scaling-create.svg")).unwrap();
        assert!(
            svg.contains("sqlite") && svg.contains("writers"),
            "chart text missing"
        );
    }
}
