//! Charts of a benchmark's rows, each as PNG and SVG: one bar chart of throughput by subject
//! per workload (`throughput-<workload>`, bars labelled with ops/s and the ratio to etcd), and
//! one chart of p50/p90/p99 latency with a panel per workload (`latency`). Text is drawn with
//! DejaVu Sans, embedded in the binary (Bitstream Vera licence, see DejaVuSans-LICENSE.txt).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use plotters::coord::ranged1d::SegmentedCoord;
use plotters::coord::types::RangedCoordi32;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::report::{format_rate, format_ratio, Row};

const FONT: &[u8] = include_bytes!("DejaVuSans.ttf");
const SUBJECT_COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];
const PERCENTILE_COLORS: [RGBColor; 3] = [
    RGBColor(158, 202, 225),
    RGBColor(66, 146, 198),
    RGBColor(8, 69, 148),
];

/// Makes the embedded font the charts' `sans-serif`.
pub fn register_font() -> Result<()> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| anyhow!("the embedded DejaVu Sans font cannot be read"))
}

/// Writes every chart into `dir` and returns the files written.
pub fn write(dir: &Path, rows: &[Row]) -> Result<Vec<PathBuf>> {
    register_font()?;
    let mut workloads: Vec<&str> = Vec::new();
    for row in rows {
        if !workloads.contains(&row.workload.as_str()) {
            workloads.push(&row.workload);
        }
    }
    let groups: Vec<(&str, Vec<&Row>)> = workloads
        .iter()
        .map(|w| (*w, rows.iter().filter(|r| r.workload == *w).collect()))
        .collect();
    let mut written = Vec::new();
    for (workload, rows) in &groups {
        let stem = format!("throughput-{workload}");
        let size = (800, 480);
        let png = dir.join(format!("{stem}.png"));
        throughput(&BitMapBackend::new(&png, size).into_drawing_area(), rows)
            .with_context(|| format!("drawing {}", png.display()))?;
        let svg = dir.join(format!("{stem}.svg"));
        throughput(&SVGBackend::new(&svg, size).into_drawing_area(), rows)
            .with_context(|| format!("drawing {}", svg.display()))?;
        written.extend([png, svg]);
    }
    let columns = groups.len().clamp(1, 3);
    let size = (
        420 * columns as u32,
        360 * groups.len().div_ceil(3).max(1) as u32,
    );
    let png = dir.join("latency.png");
    latency(&BitMapBackend::new(&png, size).into_drawing_area(), &groups)
        .with_context(|| format!("drawing {}", png.display()))?;
    let svg = dir.join("latency.svg");
    latency(&SVGBackend::new(&svg, size).into_drawing_area(), &groups)
        .with_context(|| format!("drawing {}", svg.display()))?;
    written.extend([png, svg]);
    Ok(written)
}

/// Throughput of one workload by subject.
fn throughput<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, rows: &[&Row]) -> Result<()> {
    let Some(first) = rows.first() else {
        return Ok(());
    };
    root.fill(&WHITE).map_err(failed)?;
    let top = rows.iter().map(|r| r.ops_per_sec).fold(0.0, f64::max);
    let names: Vec<&str> = rows.iter().map(|r| r.subject.as_str()).collect();
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!("{}: {}/s (higher is better)", first.workload, first.unit),
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(36)
        .y_label_area_size(96)
        .build_cartesian_2d(segments(rows.len()), 0.0..(top * 1.2).max(1.0))
        .map_err(failed)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_max_light_lines(2)
        .x_labels(rows.len())
        .x_label_formatter(&|value| subject_label(&names, value))
        .y_label_formatter(&|value| axis_label(*value, top))
        .y_desc(format!("{}/s", first.unit))
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(failed)?;
    chart
        .draw_series(rows.iter().enumerate().map(|(i, row)| {
            let i = i as i32;
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), row.ops_per_sec),
                ],
                SUBJECT_COLORS[i as usize % SUBJECT_COLORS.len()].filled(),
            );
            bar.set_margin(0, 0, 24, 24);
            bar
        }))
        .map_err(failed)?;
    let above =
        TextStyle::from(("sans-serif", 15).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart
        .draw_series(rows.iter().enumerate().map(|(i, row)| {
            let label = match row.ratio_to_reference {
                Some(_) => format!(
                    "{}/s ({})",
                    format_rate(row.ops_per_sec),
                    format_ratio(row.ratio_to_reference)
                ),
                None => format!("{}/s", format_rate(row.ops_per_sec)),
            };
            Text::new(
                label,
                (SegmentValue::CenterOf(i as i32), row.ops_per_sec),
                above.clone(),
            )
        }))
        .map_err(failed)?;
    root.present().map_err(failed)?;
    Ok(())
}

/// p50/p90/p99 latency of every workload, a panel each, grouped by subject.
fn latency<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    groups: &[(&str, Vec<&Row>)],
) -> Result<()> {
    root.fill(&WHITE).map_err(failed)?;
    let columns = groups.len().clamp(1, 3);
    let panels = root.split_evenly((groups.len().div_ceil(3).max(1), columns));
    for ((workload, rows), panel) in groups.iter().zip(panels.iter()) {
        let top = rows.iter().map(|r| r.p99_ms).fold(0.0, f64::max);
        let names: Vec<&str> = rows.iter().map(|r| r.subject.as_str()).collect();
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("{workload}: latency (ms)"), ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(28)
            .y_label_area_size(56)
            .build_cartesian_2d(segments(rows.len()), 0.0..(top * 1.5).max(0.01))
            .map_err(failed)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_max_light_lines(2)
            .x_labels(rows.len())
            .x_label_formatter(&|value| subject_label(&names, value))
            .y_label_formatter(&|value| axis_label(*value, top))
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(failed)?;
        let segment = chart.plotting_area().dim_in_pixel().0 / rows.len().max(1) as u32;
        let pad = segment / 8;
        let width = segment.saturating_sub(2 * pad) / 3;
        for (k, name) in ["p50", "p90", "p99"].into_iter().enumerate() {
            let color = PERCENTILE_COLORS[k];
            chart
                .draw_series(rows.iter().enumerate().map(|(i, row)| {
                    let value = [row.p50_ms, row.p90_ms, row.p99_ms][k];
                    let i = i as i32;
                    let mut bar = Rectangle::new(
                        [
                            (SegmentValue::Exact(i), 0.0),
                            (SegmentValue::Exact(i + 1), value),
                        ],
                        color.filled(),
                    );
                    let left = pad + k as u32 * width;
                    let right = pad + (2 - k as u32) * width;
                    bar.set_margin(0, 0, left, right);
                    bar
                }))
                .map_err(failed)?
                .label(name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(failed)?;
    }
    root.present().map_err(failed)?;
    Ok(())
}

/// One segment of the x axis per subject (a range `0..n` has `n + 1` segments).
fn segments(subjects: usize) -> SegmentedCoord<RangedCoordi32> {
    (0..(subjects as i32 - 1).max(0)).into_segmented()
}

/// The subject name under the middle of its segment; nothing elsewhere.
fn subject_label(names: &[&str], value: &SegmentValue<i32>) -> String {
    match value {
        SegmentValue::CenterOf(i) => usize::try_from(*i)
            .ok()
            .and_then(|i| names.get(i))
            .map_or_else(String::new, |name| name.to_string()),
        _ => String::new(),
    }
}

/// An axis value with the decimals that an axis reaching `top` needs.
fn axis_label(value: f64, top: f64) -> String {
    let decimals = if top >= 100.0 {
        0
    } else if top >= 10.0 {
        1
    } else {
        2
    };
    format!("{value:.decimals$}")
}

pub(super) fn failed(error: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("{error}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(workload: &str, subject: &str, ops_per_sec: f64, ratio: Option<f64>) -> Row {
        Row {
            workload: workload.into(),
            unit: "gets".into(),
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
    fn writes_a_png_and_an_svg_per_chart() {
        let dir = tempfile::tempdir().unwrap();
        let rows = [
            row("get", "sqlite", 9000.0, Some(1.5)),
            row("get", "etcd", 6000.0, Some(1.0)),
            row("list", "sqlite", 5.0, None),
        ];
        let written = write(dir.path(), &rows).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "throughput-get.png",
                "throughput-get.svg",
                "throughput-list.png",
                "throughput-list.svg",
                "latency.png",
                "latency.svg"
            ]
        );
        let png = std::fs::read(dir.path().join("latency.png")).unwrap();
        assert!(png.starts_with(b"\x89PNG"));
        let svg = std::fs::read_to_string(dir.path().join("throughput-get.svg")).unwrap();
        assert!(svg.contains("sqlite") && svg.contains("1.50x"));
        assert_eq!(axis_label(2000.0, 8000.0), "2000");
        assert_eq!(axis_label(0.25, 1.5), "0.25");
    }
}
