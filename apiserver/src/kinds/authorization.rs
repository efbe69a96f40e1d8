//! authorization.k8s.io SelfSubjectAccessReviews: answered by the authorizer on create, never
//! stored, so most rules never apply; the entry still decides each one.

use serde_json::Value;

use super::{Reviewers, Strategy};
use crate::authn::UserInfo;
use crate::authz;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, METADATA_ONLY};
use crate::tables;
use crate::validation::{Errs, NameRule};

/// authorization.k8s.io/v1 SelfSubjectAccessReview.
pub const SELF_SUBJECT_ACCESS_REVIEWS: ResourceInfo = ResourceInfo {
    group: "authorization.k8s.io",
    version: "v1",
    kind: "SelfSubjectAccessReview",
    plural: "selfsubjectaccessreviews",
    singular: "selfsubjectaccessreview",
    namespaced: false,
    short_names: NONE,
    categories: NONE,
    verbs: CREATE_ONLY,
    subresources: &[],
    storage_prefix: "",
    canonicalize: None,
    strategy: &SelfSubjectAccessReviewStrategy,
    printer: &tables::DefaultTable,
};

/// The rules of SelfSubjectAccessReviews.
pub struct SelfSubjectAccessReviewStrategy;

impl Strategy for SelfSubjectAccessReviewStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, _object: &mut Value) {}

    fn validate(&self, _object: &Value, _old: Option<&Value>, _errors: &mut Errs) {}

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }

    fn review(&self, reviewers: &Reviewers, asker: &UserInfo, object: &Value) -> Option<Value> {
        Some(authz::review_self(
            reviewers.authorizer,
            &asker.name,
            &asker.groups,
            object,
        ))
    }
}
