//! Validation of the batch group: Job and CronJob.

use serde_json::Value;

use super::json::{self, child, Errs};
use super::meta::{selector_matches, validate_label_selector};
use super::pod::validate_pod_template;
use super::FieldError;

/// Job: its spec, and what an update may not change.
pub fn validate_job(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    let empty = Value::Object(Default::default());
    let s = json::obj_at(obj, "", "spec", errs).unwrap_or(&empty);
    validate_job_spec(s, "spec", errs);
    if let Some(old_spec) = old.and_then(|o| o.get("spec")) {
        validate_job_update(s, old_spec, errs);
    }
}

/// CronJob: its schedule, time zone and job template.
pub fn validate_cronjob_object(obj: &Value, _old: Option<&Value>, errs: &mut Errs) {
    let empty = Value::Object(Default::default());
    let s = json::obj_at(obj, "", "spec", errs).unwrap_or(&empty);
    validate_cronjob(obj, s, errs);
}

/// Validates a JobSpec at `path` (a Job's spec or a CronJob's job template spec).
pub fn validate_job_spec(s: &Value, path: &str, errs: &mut Errs) {
    for f in [
        "parallelism",
        "completions",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ] {
        json::non_negative_at(s, path, f, errs);
    }
    if let Some(v) = json::int_at(s, path, "activeDeadlineSeconds", errs) {
        if v <= 0 {
            errs.push(FieldError::invalid(
                child(path, "activeDeadlineSeconds"),
                v,
                "must be greater than 0",
            ));
        }
    }
    json::bool_at(s, path, "suspend", errs);
    let manual = json::bool_at(s, path, "manualSelector", errs) == Some(true);
    let selector = json::obj_at(s, path, "selector", errs);
    if let Some(sel) = selector {
        validate_label_selector(sel, &child(path, "selector"), errs);
    } else if manual {
        errs.push(FieldError::required(child(path, "selector"), ""));
    }
    let completions = s.get("completions").and_then(Value::as_i64);
    match json::str_at(s, path, "completionMode", errs) {
        None | Some("NonIndexed") => {}
        Some("Indexed") => {
            if completions.is_none() {
                errs.push(FieldError::required(
                    child(path, "completions"),
                    "when completion mode is Indexed",
                ));
            }
            if let Some(c) = completions.filter(|c| *c > 100_000) {
                errs.push(FieldError::invalid(
                    child(path, "completions"),
                    c,
                    "must be less than or equal to 100000 when completion mode is Indexed",
                ));
            }
        }
        Some(other) => errs.push(FieldError::not_supported(
            child(path, "completionMode"),
            other,
            &["NonIndexed", "Indexed"],
        )),
    }
    let indexed = s.get("completionMode").and_then(Value::as_str) == Some("Indexed");
    validate_indexed_only(s, path, indexed, errs);
    if let Some(p) = json::str_at(s, path, "podReplacementPolicy", errs) {
        if p != "TerminatingOrFailed" && p != "Failed" {
            errs.push(FieldError::not_supported(
                child(path, "podReplacementPolicy"),
                p,
                &["Failed", "TerminatingOrFailed"],
            ));
        }
    }
    let tp = child(path, "template");
    let Some(t) = json::obj_at(s, path, "template", errs) else {
        errs.push(FieldError::required(tp, ""));
        return;
    };
    let labels = crate::json::value_at(t, &["metadata", "labels"])
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(sel) = selector {
        if !selector_matches(sel, &labels) {
            let shown = if labels.is_null() {
                Value::Object(Default::default())
            } else {
                labels
            };
            errs.push(FieldError::invalid(
                child(&tp, "metadata.labels"),
                shown,
                "`selector` does not match template `labels`",
            ));
        }
    }
    validate_pod_template(t, &tp, errs);
    let policy = crate::json::opt_str_at(t, &["spec", "restartPolicy"]).unwrap_or("");
    if policy != "OnFailure" && policy != "Never" {
        errs.push(FieldError::not_supported(
            child(&tp, "spec.restartPolicy"),
            policy,
            &["OnFailure", "Never"],
        ));
    } else if s.get("podFailurePolicy").is_some_and(|p| !p.is_null()) && policy != "Never" {
        errs.push(FieldError::invalid(
            child(&tp, "spec.restartPolicy"),
            policy,
            "only \"Never\" is supported when podFailurePolicy is specified",
        ));
    }
}

/// `backoffLimitPerIndex`, `maxFailedIndexes` and `successPolicy` belong to Indexed Jobs.
fn validate_indexed_only(s: &Value, path: &str, indexed: bool, errs: &mut Errs) {
    let per_index = json::non_negative_at(s, path, "backoffLimitPerIndex", errs);
    json::non_negative_at(s, path, "maxFailedIndexes", errs);
    if let Some(limit) = per_index.filter(|_| !indexed) {
        errs.push(FieldError::invalid(
            child(path, "backoffLimitPerIndex"),
            limit,
            "requires indexed completion mode",
        ));
    }
    if s.get("maxFailedIndexes").is_some_and(|m| !m.is_null()) && per_index.is_none() {
        errs.push(FieldError::required(
            child(path, "backoffLimitPerIndex"),
            "when maxFailedIndexes is specified",
        ));
    }
    if s.get("successPolicy").is_some_and(|p| !p.is_null()) && !indexed {
        errs.push(FieldError::invalid(
            child(path, "successPolicy"),
            s["successPolicy"].clone(),
            "requires indexed completion mode",
        ));
    }
}

fn validate_job_update(s: &Value, old_spec: &Value, errs: &mut Errs) {
    for f in [
        "selector",
        "completionMode",
        "podFailurePolicy",
        "backoffLimitPerIndex",
    ] {
        json::immutable(s, old_spec, "spec", f, errs);
    }
    if s.get("completions") != old_spec.get("completions") {
        let indexed = s.get("completionMode").and_then(Value::as_str) == Some("Indexed");
        let elastic = indexed && s.get("completions") == s.get("parallelism");
        if !elastic {
            json::immutable(s, old_spec, "spec", "completions", errs);
        }
    }
    let suspended = old_spec.get("suspend").and_then(Value::as_bool) == Some(true);
    if !suspended && s.get("template") != old_spec.get("template") {
        json::immutable(s, old_spec, "spec", "template", errs);
    }
}

/// Whether Go's `time.LoadLocation` would accept `tz` (checked against the host's zoneinfo
/// when present; otherwise by IANA name shape).
pub fn time_zone_exists(tz: &str) -> bool {
    if tz.is_empty() || tz == "UTC" {
        return true;
    }
    let shape_ok = !tz.starts_with('/')
        && !tz.contains("..")
        && tz
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"/_+-".contains(&c));
    if !shape_ok {
        return false;
    }
    let dir = std::path::Path::new("/usr/share/zoneinfo");
    if dir.is_dir() {
        dir.join(tz).is_file()
    } else {
        true
    }
}

fn validate_cronjob(obj: &Value, s: &Value, errs: &mut Errs) {
    if let Some(name) = crate::json::opt_str_at(obj, &["metadata", "name"]) {
        if name.len() > 52 {
            errs.push(FieldError::invalid(
                "metadata.name",
                name,
                super::names::max_len_error(52),
            ));
        }
    }
    let tz = json::str_at(s, "spec", "timeZone", errs);
    match json::str_or_empty(s, "spec", "schedule", errs) {
        "" => errs.push(FieldError::required("spec.schedule", "")),
        schedule => {
            if let Err(e) = super::cron::parse_standard(schedule) {
                errs.push(FieldError::invalid("spec.schedule", schedule, e));
            }
            if schedule.contains("TZ") {
                let msg = if tz.is_some() {
                    "cannot use both timeZone field and TZ or CRON_TZ in schedule"
                } else {
                    "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
                };
                errs.push(FieldError::invalid("spec.schedule", schedule, msg));
            }
        }
    }
    if let Some(tz) = tz {
        if tz.is_empty() {
            errs.push(FieldError::invalid(
                "spec.timeZone",
                tz,
                "timeZone must be nil or non-empty string",
            ));
        } else if tz.eq_ignore_ascii_case("local") {
            errs.push(FieldError::invalid("spec.timeZone", tz, "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"));
        } else if !time_zone_exists(tz) {
            errs.push(FieldError::invalid(
                "spec.timeZone",
                tz,
                format!("unknown time zone {tz}"),
            ));
        }
    }
    match json::str_or_empty(s, "spec", "concurrencyPolicy", errs) {
        "" => errs.push(FieldError::required("spec.concurrencyPolicy", "")),
        "Allow" | "Forbid" | "Replace" => {}
        other => errs.push(FieldError::not_supported(
            "spec.concurrencyPolicy",
            other,
            &["Allow", "Forbid", "Replace"],
        )),
    }
    for f in [
        "startingDeadlineSeconds",
        "successfulJobsHistoryLimit",
        "failedJobsHistoryLimit",
    ] {
        json::non_negative_at(s, "spec", f, errs);
    }
    json::bool_at(s, "spec", "suspend", errs);
    let empty = Value::Object(Default::default());
    let jt = json::obj_at(s, "spec", "jobTemplate", errs).unwrap_or(&empty);
    if let Some(meta) = json::obj_at(jt, "spec.jobTemplate", "metadata", errs) {
        let labels = json::str_map_at(meta, "spec.jobTemplate.metadata", "labels", errs);
        super::meta::validate_labels(&labels, "spec.jobTemplate.metadata.labels", errs);
    }
    let js = json::obj_at(jt, "spec.jobTemplate", "spec", errs).unwrap_or(&empty);
    validate_job_spec(js, "spec.jobTemplate.spec", errs);
}

#[cfg(test)]
mod tests {
    use super::super::validate_kind as validate;
    use serde_json::{json, Value};

    fn pod_template(policy: &str) -> Value {
        json!({"spec": {"restartPolicy": policy, "dnsPolicy": "ClusterFirst",
            "containers": [{"name": "c", "image": "busybox", "imagePullPolicy": "IfNotPresent", "terminationMessagePolicy": "File"}]}})
    }

    fn msgs(kind: &str, spec: Value, old: Option<&Value>) -> Vec<String> {
        let obj = json!({"metadata": {"name": "j", "namespace": "default"}, "spec": spec});
        validate("batch", kind, true, &obj, old)
            .iter()
            .map(|e| e.message())
            .collect()
    }

    #[test]
    fn job_cases() {
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("a job restarting on failure passes", json!({"template": pod_template("OnFailure")}), vec![]),
            ("a job may not restart always", json!({"template": pod_template("Always")}),
                vec!["spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""]),
            ("negative parallelism is invalid", json!({"parallelism": -1, "template": pod_template("Never")}),
                vec!["spec.parallelism: Invalid value: -1: must be greater than or equal to 0"]),
            ("indexed jobs need completions", json!({"completionMode": "Indexed", "template": pod_template("Never")}),
                vec!["spec.completions: Required value: when completion mode is Indexed"]),
            ("a manual selector must match", json!({"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}, "template": pod_template("Never")}),
                vec!["spec.template.metadata.labels: Invalid value: map[string]string{}: `selector` does not match template `labels`"]),
            ("a pod failure policy needs restartPolicy Never",
                json!({"podFailurePolicy": {"rules": []}, "template": pod_template("OnFailure")}),
                vec!["spec.template.spec.restartPolicy: Invalid value: \"OnFailure\": only \"Never\" is supported when podFailurePolicy is specified"]),
            ("a pod failure policy with restartPolicy Never passes",
                json!({"podFailurePolicy": {"rules": []}, "template": pod_template("Never")}), vec![]),
            ("a per-index limit needs an Indexed job",
                json!({"backoffLimitPerIndex": 1, "template": pod_template("Never")}),
                vec!["spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode"]),
            ("maxFailedIndexes needs a per-index limit",
                json!({"completionMode": "Indexed", "completions": 2, "maxFailedIndexes": 1, "template": pod_template("Never")}),
                vec!["spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified"]),
            ("an Indexed job with a per-index limit passes",
                json!({"completionMode": "Indexed", "completions": 2, "backoffLimitPerIndex": 1, "maxFailedIndexes": 1, "template": pod_template("Never")}), vec![]),
            ("a template of the wrong type is reported", json!({"template": []}),
                vec!["spec.template: Invalid value: []: must be an object", "spec.template: Required value"]),
        ];
        for (name, spec, want) in cases {
            assert_eq!(msgs("Job", spec, None), want, "{name}");
        }
    }

    #[test]
    fn cronjob_cases() {
        let jt = json!({"spec": {"template": pod_template("OnFailure")}});
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("a good cronjob passes", json!({"schedule": "*/1 * * * *", "concurrencyPolicy": "Allow", "jobTemplate": jt}), vec![]),
            ("a schedule is required", json!({"concurrencyPolicy": "Allow", "jobTemplate": jt}),
                vec!["spec.schedule: Required value"]),
            ("a bad schedule is invalid", json!({"schedule": "* * *", "concurrencyPolicy": "Allow", "jobTemplate": jt}),
                vec!["spec.schedule: Invalid value: \"* * *\": expected exactly 5 fields, found 3: [* * *]"]),
            ("an unknown policy is unsupported", json!({"schedule": "@daily", "concurrencyPolicy": "Sometimes", "jobTemplate": jt}),
                vec!["spec.concurrencyPolicy: Unsupported value: \"Sometimes\": supported values: \"Allow\", \"Forbid\", \"Replace\""]),
            ("Local is not a time zone", json!({"schedule": "@daily", "timeZone": "Local", "concurrencyPolicy": "Allow", "jobTemplate": jt}),
                vec!["spec.timeZone: Invalid value: \"Local\": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"]),
            ("TZ in the schedule is refused", json!({"schedule": "TZ=UTC 0 * * * *", "concurrencyPolicy": "Allow", "jobTemplate": jt}),
                vec!["spec.schedule: Invalid value: \"TZ=UTC 0 * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead"]),
        ];
        for (name, spec, want) in cases {
            assert_eq!(msgs("CronJob", spec, None), want, "{name}");
        }
    }

    #[test]
    fn a_running_jobs_template_is_immutable() {
        let old = json!({"metadata": {"name": "j", "namespace": "d"}, "spec": {"template": pod_template("Never")}});
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("other");
        let errs = validate("batch", "Job", true, &new, Some(&old));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.template");
        assert_eq!(errs[0].detail, "field is immutable");
    }
}
