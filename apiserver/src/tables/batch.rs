//! batch/v1 tables: Job (status, completions, duration) and CronJob.

use jiff::Timestamp;
use serde_json::Value;

use crate::json::{
    array_at, int_at, is_deleting, len_at, name, opt_bool_at, opt_int_at, opt_str_at, str_at,
    value_at,
};

use super::format::{
    age, age_col, col, container_cells, format_selector, human_duration, name_col, since, time_at,
    wide, CONTAINERS_DESC, IMAGES_DESC,
};
use super::{Column, Printer};

const SELECTOR_DESC: &str = "A label query over the pods the job's pod count covers.";

/// The table of Jobs.
pub struct JobTable;

impl Printer for JobTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Status",
                "string",
                "The job's overall state, such as Running, Complete, Failed or Suspended.",
            ),
            col(
                "Completions",
                "string",
                "Succeeded pods out of the completions the job needs.",
            ),
            col(
                "Duration",
                "string",
                "How long the job ran, or has been running so far.",
            ),
            age_col(),
        ]
        .into_iter()
        .chain(wide_tail())
        .collect()
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        vec![
            Value::from(name(obj)),
            job_status(obj).into(),
            completions(obj).into(),
            job_duration(obj, now).into(),
            age(obj, now),
        ]
        .into_iter()
        .chain(wide_cells(value_at(obj, &["spec"])))
        .collect()
    }
}

/// The table of CronJobs.
pub struct CronJobTable;

impl Printer for CronJobTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col("Schedule", "string", "The schedule, in cron format."),
            col(
                "Timezone",
                "string",
                "The time zone of the schedule; the controller's local zone when unset.",
            ),
            col(
                "Suspend",
                "boolean",
                "Whether later runs are suspended; runs already started are not affected.",
            ),
            col(
                "Active",
                "integer",
                "How many of the cron job's jobs are running now.",
            ),
            col(
                "Last Schedule",
                "string",
                "When a job was last successfully scheduled.",
            ),
            age_col(),
        ]
        .into_iter()
        .chain(wide_tail())
        .collect()
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let last = time_at(obj, &["status", "lastScheduleTime"]);
        let suspend = match opt_bool_at(obj, &["spec", "suspend"]) {
            Some(true) => "True",
            Some(false) => "False",
            None => "<unset>",
        };
        vec![
            Value::from(name(obj)),
            str_at(obj, &["spec", "schedule"]).into(),
            opt_str_at(obj, &["spec", "timeZone"])
                .unwrap_or("<none>")
                .into(),
            suspend.into(),
            len_at(obj, &["status", "active"]).into(),
            last.map_or_else(|| "<none>".to_string(), |t| since(Some(t), now))
                .into(),
            age(obj, now),
        ]
        .into_iter()
        .chain(wide_cells(value_at(obj, &["spec", "jobTemplate", "spec"])))
        .collect()
    }
}

/// The wide columns both tables end with: the job's containers, images and selector.
fn wide_tail() -> [Column; 3] {
    [
        wide("Containers", "string", CONTAINERS_DESC),
        wide("Images", "string", IMAGES_DESC),
        wide("Selector", "string", SELECTOR_DESC),
    ]
}

/// The cells of [`wide_tail`], from a job spec.
fn wide_cells(job_spec: Option<&Value>) -> [Value; 3] {
    let (names, images) =
        container_cells(job_spec.and_then(|j| value_at(j, &["template", "spec"])));
    let selector = job_spec.map_or_else(
        || "<none>".to_string(),
        |j| format_selector(j, &["selector"]),
    );
    [names, images, selector.into()]
}

fn has_condition(obj: &Value, ctype: &str) -> bool {
    array_at(obj, &["status", "conditions"])
        .iter()
        .find(|c| str_at(c, &["type"]) == ctype)
        .is_some_and(|c| str_at(c, &["status"]) == "True")
}

fn job_status(obj: &Value) -> &'static str {
    if has_condition(obj, "Complete") {
        "Complete"
    } else if has_condition(obj, "Failed") {
        "Failed"
    } else if is_deleting(obj) {
        "Terminating"
    } else if has_condition(obj, "Suspended") {
        "Suspended"
    } else if has_condition(obj, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    }
}

fn completions(obj: &Value) -> String {
    let succeeded = int_at(obj, &["status", "succeeded"]);
    if let Some(total) = opt_int_at(obj, &["spec", "completions"]) {
        return format!("{succeeded}/{total}");
    }
    match int_at(obj, &["spec", "parallelism"]) {
        p if p > 1 => format!("{succeeded}/1 of {p}"),
        _ => format!("{succeeded}/1"),
    }
}

fn job_duration(obj: &Value, now: Timestamp) -> String {
    let Some(start) = time_at(obj, &["status", "startTime"]) else {
        return String::new();
    };
    let end = time_at(obj, &["status", "completionTime"]).unwrap_or(now);
    human_duration(end.duration_since(start))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    fn row(printer: &dyn Printer, obj: Value) -> Vec<Value> {
        printer.cells(&obj, now())
    }

    #[test]
    fn a_finished_job_is_complete_with_its_run_time() {
        let obj = json!({"metadata": {"name": "pi", "creationTimestamp": "2024-05-01T11:00:00Z"},
            "spec": {"completions": 1, "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}},
                "template": {"spec": {"containers": [{"name": "pi", "image": "perl"}]}}},
            "status": {"succeeded": 1, "startTime": "2024-05-01T11:00:00Z",
                "completionTime": "2024-05-01T11:00:42Z",
                "conditions": [{"type": "Complete", "status": "True"}]}});
        assert_eq!(
            row(&JobTable, obj),
            [
                json!("pi"),
                json!("Complete"),
                json!("1/1"),
                json!("42s"),
                json!("60m"),
                json!("pi"),
                json!("perl"),
                json!("batch.kubernetes.io/controller-uid=u")
            ]
        );
    }

    #[test]
    fn a_running_job_counts_its_duration_up_to_now() {
        let obj = json!({"spec": {"parallelism": 3},
            "status": {"startTime": "2024-05-01T11:55:00Z"}});
        let r = row(&JobTable, obj);
        assert_eq!(r[1..4], [json!("Running"), json!("0/1 of 3"), json!("5m")]);
    }

    #[test]
    fn job_status_prefers_failed_then_terminating_then_suspended() {
        let failed = json!({"status": {"conditions": [{"type": "Failed", "status": "True"}]}});
        assert_eq!(row(&JobTable, failed)[1], json!("Failed"));
        let deleting = json!({"metadata": {"deletionTimestamp": "2024-05-01T11:00:00Z"},
            "status": {"conditions": [{"type": "Suspended", "status": "True"}]}});
        assert_eq!(row(&JobTable, deleting)[1], json!("Terminating"));
        let suspended = json!({"status": {"conditions": [
            {"type": "Suspended", "status": "True"}, {"type": "Complete", "status": "False"}]}});
        assert_eq!(row(&JobTable, suspended)[1], json!("Suspended"));
        let target =
            json!({"status": {"conditions": [{"type": "FailureTarget", "status": "True"}]}});
        assert_eq!(row(&JobTable, target)[1], json!("FailureTarget"));
    }

    #[test]
    fn a_job_that_never_started_has_an_empty_duration() {
        let r = row(&JobTable, json!({}));
        assert_eq!(r[2..4], [json!("0/1"), json!("")]);
        assert_eq!(r[7], json!("<none>"));
    }

    #[test]
    fn cron_jobs_show_schedule_zone_suspend_active_and_last_run() {
        let obj = json!({"metadata": {"name": "nightly"},
            "spec": {"schedule": "0 3 * * *", "timeZone": "Etc/UTC", "suspend": false,
                "jobTemplate": {"spec": {"template": {"spec": {
                    "containers": [{"name": "backup", "image": "backup:1"}]}}}}},
            "status": {"active": [{"name": "nightly-1"}], "lastScheduleTime": "2024-05-01T09:00:00Z"}});
        assert_eq!(
            row(&CronJobTable, obj),
            [
                json!("nightly"),
                json!("0 3 * * *"),
                json!("Etc/UTC"),
                json!("False"),
                json!(1),
                json!("3h"),
                json!("<unknown>"),
                json!("backup"),
                json!("backup:1"),
                json!("<none>")
            ]
        );
    }

    #[test]
    fn a_bare_cron_job_shows_none_and_unset() {
        let r = row(&CronJobTable, json!({"spec": {"schedule": "* * * * *"}}));
        assert_eq!(
            r[2..6],
            [json!("<none>"), json!("<unset>"), json!(0), json!("<none>")]
        );
    }
}
