//! The batch group: Jobs and CronJobs.

use k8s_openapi::api as k8s;
use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::field_set::at_or;
use crate::selectors::{FieldSet, Fields, Refusal, METADATA_ONLY};
use crate::validation::{Errs, NameRule};
use crate::{defaults, tables, validation};

/// batch/v1 Job.
pub const JOBS: ResourceInfo = resource!("batch", "v1", "Job", "jobs", "job", true, short: NONE, categories: ALL,
        sub: &[status_of("batch", "v1", "Job")], prefix: "/registry/jobs", k8s::batch::v1::Job,
        strategy: &JobStrategy, printer: &tables::batch::JobTable);

/// batch/v1 CronJob.
pub const CRON_JOBS: ResourceInfo = resource!("batch", "v1", "CronJob", "cronjobs", "cronjob", true, short: &["cj"], categories: ALL,
        sub: &[status_of("batch", "v1", "CronJob")], prefix: "/registry/cronjobs", k8s::batch::v1::CronJob,
        strategy: &CronJobStrategy, printer: &tables::batch::CronJobTable);

/// The rules of Job objects.
pub struct JobStrategy;

impl Strategy for JobStrategy {
    fn uses_generation(&self) -> bool {
        true
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::workloads::default_job(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::batch::validate_job(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Job
    }

    fn fields(&self) -> &'static FieldSet {
        &JOB_FIELDS
    }
}

/// The rules of CronJob objects.
pub struct CronJobStrategy;

impl Strategy for CronJobStrategy {
    fn uses_generation(&self) -> bool {
        true
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::workloads::default_cronjob(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::batch::validate_cronjob_object(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::CronJob
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

/// Jobs select by their count of succeeded pods, and word refusals their own way.
static JOB_FIELDS: FieldSet = FieldSet {
    accepted: &["metadata.name", "metadata.namespace", "status.successful"],
    refusal: Refusal::QuotedFor("batchv1.Job"),
    paths: &[],
    extract: |obj: &Value, fields: &mut Fields| {
        let succeeded = at_or(obj, "/status/succeeded", "0");
        fields.insert("status.successful".into(), succeeded);
    },
};
