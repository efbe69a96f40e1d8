//! `/metrics/resource`: the node's, pods' and containers' CPU time and memory working set in
//! Prometheus text, under upstream's stable metric names — what metrics-server reads to
//! answer `kubectl top`. Each sample carries the time it was measured (milliseconds).

use std::fmt::Write as _;

use super::summary::{CpuStats, MemoryStats, Summary};

fn millis(time: &str) -> String {
    time.parse::<jiff::Timestamp>()
        .map(|t| format!(" {}", t.as_millisecond()))
        .unwrap_or_default()
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<String>,
}

impl Family {
    fn new(name: &'static str, kind: &'static str, help: &'static str) -> Self {
        Self {
            name,
            kind,
            help,
            samples: Vec::new(),
        }
    }

    fn sample(&mut self, labels: &[(&str, &str)], value: f64, time: &str) {
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        let labels = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", labels.join(","))
        };
        self.samples
            .push(format!("{}{labels} {value}{}", self.name, millis(time)));
    }

    fn write(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} [STABLE] {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind);
        for sample in &self.samples {
            let _ = writeln!(out, "{sample}");
        }
    }
}

fn cpu_seconds(cpu: Option<&CpuStats>) -> Option<(f64, &str)> {
    let cpu = cpu?;
    let nanos = cpu.usage_core_nano_seconds?;
    #[allow(clippy::cast_precision_loss)]
    Some((nanos as f64 / 1e9, cpu.time.as_str()))
}

fn working_set(memory: Option<&MemoryStats>) -> Option<(f64, &str)> {
    let memory = memory?;
    #[allow(clippy::cast_precision_loss)]
    Some((memory.working_set_bytes? as f64, memory.time.as_str()))
}

/// The exposition of `summary`.
pub fn render(summary: &Summary) -> String {
    let mut container_cpu = Family::new(
        "container_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the container in core-seconds",
    );
    let mut container_memory = Family::new(
        "container_memory_working_set_bytes",
        "gauge",
        "Current working set of the container in bytes",
    );
    let mut container_start = Family::new(
        "container_start_time_seconds",
        "gauge",
        "Start time of the container since unix epoch in seconds",
    );
    let mut node_cpu = Family::new(
        "node_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the node in core-seconds",
    );
    let mut node_memory = Family::new(
        "node_memory_working_set_bytes",
        "gauge",
        "Current working set of the node in bytes",
    );
    let mut pod_cpu = Family::new(
        "pod_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the pod in core-seconds",
    );
    let mut pod_memory = Family::new(
        "pod_memory_working_set_bytes",
        "gauge",
        "Current working set of the pod in bytes",
    );
    let mut scrape_error = Family::new(
        "resource_scrape_error",
        "gauge",
        "1 if there was an error while getting container metrics, 0 otherwise",
    );
    if let Some((v, t)) = cpu_seconds(summary.node.cpu.as_ref()) {
        node_cpu.sample(&[], v, t);
    }
    if let Some((v, t)) = working_set(summary.node.memory.as_ref()) {
        node_memory.sample(&[], v, t);
    }
    for pod in &summary.pods {
        let (ns, name) = (pod.pod_ref.namespace.as_str(), pod.pod_ref.name.as_str());
        if let Some((v, t)) = cpu_seconds(pod.cpu.as_ref()) {
            pod_cpu.sample(&[("namespace", ns), ("pod", name)], v, t);
        }
        if let Some((v, t)) = working_set(pod.memory.as_ref()) {
            pod_memory.sample(&[("namespace", ns), ("pod", name)], v, t);
        }
        for c in &pod.containers {
            let labels = [
                ("container", c.name.as_str()),
                ("namespace", ns),
                ("pod", name),
            ];
            if let Some((v, t)) = cpu_seconds(c.cpu.as_ref()) {
                container_cpu.sample(&labels, v, t);
            }
            if let Some((v, t)) = working_set(c.memory.as_ref()) {
                container_memory.sample(&labels, v, t);
            }
            if let Ok(start) = c.start_time.parse::<jiff::Timestamp>() {
                #[allow(clippy::cast_precision_loss)]
                let seconds = start.as_millisecond() as f64 / 1e3;
                container_start.sample(&labels, seconds, "");
            }
        }
    }
    scrape_error.sample(&[], 0.0, "");
    let mut out = String::new();
    for family in [
        &container_cpu,
        &container_memory,
        &container_start,
        &node_cpu,
        &node_memory,
        &pod_cpu,
        &pod_memory,
        &scrape_error,
    ] {
        family.write(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::summary::*;
    use super::*;

    #[test]
    fn pods_and_containers_are_labelled_as_metrics_server_reads_them() {
        let time = "2026-12-05T10:00:00Z".to_owned();
        let summary = Summary {
            node: NodeStats {
                node_name: "n1".into(),
                cpu: Some(CpuStats {
                    time: time.clone(),
                    usage_core_nano_seconds: Some(2_500_000_000),
                    usage_nano_cores: None,
                }),
                memory: Some(MemoryStats {
                    time: time.clone(),
                    working_set_bytes: Some(1024),
                    ..Default::default()
                }),
                ..Default::default()
            },
            pods: vec![PodStats {
                pod_ref: PodReference {
                    name: "web".into(),
                    namespace: "default".into(),
                    uid: "u1".into(),
                },
                containers: vec![ContainerStats {
                    name: "c\"1".into(),
                    start_time: "2026-12-05T09:00:00Z".into(),
                    memory: Some(MemoryStats {
                        time: time.clone(),
                        working_set_bytes: Some(4096),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                memory: Some(MemoryStats {
                    time: time.clone(),
                    working_set_bytes: Some(4096),
                    ..Default::default()
                }),
                ..Default::default()
            }],
        };
        let text = render(&summary);
        let at = "1796464800000";
        for line in [
            "# TYPE node_cpu_usage_seconds_total counter".to_owned(),
            format!("node_cpu_usage_seconds_total 2.5 {at}"),
            format!("node_memory_working_set_bytes 1024 {at}"),
            format!(
                "container_memory_working_set_bytes{{container=\"c\\\"1\",namespace=\"default\",pod=\"web\"}} 4096 {at}"
            ),
            format!("pod_memory_working_set_bytes{{namespace=\"default\",pod=\"web\"}} 4096 {at}"),
            "container_start_time_seconds{container=\"c\\\"1\",namespace=\"default\",pod=\"web\"} 1796461200".to_owned(),
            "resource_scrape_error 0".to_owned(),
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} missing from\n{text}");
        }
        // A container without CPU numbers has no CPU sample.
        assert!(
            !text.contains("container_cpu_usage_seconds_total{"),
            "{text}"
        );
    }
}
