//! authorization.k8s.io's reviews and authentication.k8s.io's SelfSubjectReview: kinds that are
//! answered on create (authz/reviews.rs), never stored, so most rules never apply; the entries
//! still decide each one. One strategy serves them all, told apart by what answers them.

use futures::future::BoxFuture;
use serde_json::Value;

use super::{Reviewers, Strategy};
use crate::authn::UserInfo;
use crate::authz::reviews;
use crate::catalog::*;
use crate::error::ApiError;
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, METADATA_ONLY};
use crate::tables;
use crate::validation::{Errs, NameRule};

/// How one review kind is answered: by whom, for which namespace, about what.
type Answer = fn(&Reviewers, &UserInfo, Option<&str>, &Value) -> Result<Value, ApiError>;

/// Who answers a review kind.
pub enum Answerer {
    /// The authorizer, at once.
    Now(Answer),
    /// The authenticator, which may read the store (TokenReview).
    Token,
}

/// The rules of a review kind.
pub struct ReviewStrategy {
    answer: Answerer,
}

impl Strategy for ReviewStrategy {
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

    fn review<'a>(
        &'a self,
        reviewers: &'a Reviewers<'a>,
        asker: &'a UserInfo,
        namespace: Option<&'a str>,
        object: &'a Value,
    ) -> Option<BoxFuture<'a, Result<Value, ApiError>>> {
        Some(Box::pin(async move {
            match &self.answer {
                Answerer::Now(answer) => answer(reviewers, asker, namespace, object),
                Answerer::Token => Ok(reviews::review_token(reviewers.authenticator, object).await),
            }
        }))
    }
}

/// A review kind's entry: create only, never stored.
macro_rules! review {
    ($group:expr, $version:expr, $kind:expr, $plural:expr, $singular:expr, $namespaced:expr,
     $answer:expr) => {
        ResourceInfo {
            group: $group,
            version: $version,
            kind: $kind,
            plural: $plural,
            singular: $singular,
            namespaced: $namespaced,
            short_names: NONE,
            categories: NONE,
            verbs: CREATE_ONLY,
            subresources: &[],
            storage_prefix: "",
            canonicalize: None,
            strategy: &ReviewStrategy { answer: $answer },
            printer: &tables::DefaultTable,
        }
    };
}

/// authorization.k8s.io/v1 SelfSubjectAccessReview: may I?
pub const SELF_SUBJECT_ACCESS_REVIEWS: ResourceInfo = review!(
    "authorization.k8s.io",
    "v1",
    "SelfSubjectAccessReview",
    "selfsubjectaccessreviews",
    "selfsubjectaccessreview",
    false,
    Answerer::Now(|reviewers, asker, _, object| Ok(reviews::review_self(
        reviewers.authorizer,
        &asker.name,
        &asker.groups,
        object
    )))
);

/// authorization.k8s.io/v1 SubjectAccessReview: may they?
pub const SUBJECT_ACCESS_REVIEWS: ResourceInfo = review!(
    "authorization.k8s.io",
    "v1",
    "SubjectAccessReview",
    "subjectaccessreviews",
    "subjectaccessreview",
    false,
    Answerer::Now(|reviewers, _, _, object| reviews::review_subject(
        reviewers.authorizer,
        object,
        None
    ))
);

/// authorization.k8s.io/v1 LocalSubjectAccessReview: may they, in this namespace?
pub const LOCAL_SUBJECT_ACCESS_REVIEWS: ResourceInfo = review!(
    "authorization.k8s.io",
    "v1",
    "LocalSubjectAccessReview",
    "localsubjectaccessreviews",
    "localsubjectaccessreview",
    true,
    Answerer::Now(|reviewers, _, namespace, object| {
        reviews::review_subject(reviewers.authorizer, object, Some(namespace.unwrap_or("")))
    })
);

/// authorization.k8s.io/v1 SelfSubjectRulesReview: what may I do here?
pub const SELF_SUBJECT_RULES_REVIEWS: ResourceInfo = review!(
    "authorization.k8s.io",
    "v1",
    "SelfSubjectRulesReview",
    "selfsubjectrulesreviews",
    "selfsubjectrulesreview",
    false,
    Answerer::Now(|reviewers, asker, _, object| reviews::review_rules(
        reviewers.authorizer,
        asker,
        object
    ))
);

/// authentication.k8s.io/v1 SelfSubjectReview: who am I?
pub const SELF_SUBJECT_REVIEWS: ResourceInfo = review!(
    "authentication.k8s.io",
    "v1",
    "SelfSubjectReview",
    "selfsubjectreviews",
    "selfsubjectreview",
    false,
    Answerer::Now(|_, asker, _, object| Ok(reviews::review_identity(
        asker,
        object,
        "authentication.k8s.io/v1"
    )))
);

/// authentication.k8s.io/v1beta1 SelfSubjectReview: the same question as v1, asked by kubectl
/// 1.27 (which tries v1beta1, then v1alpha1) and by clients of 1.27 and 1.28 libraries. Served
/// beside v1, which stays the group's preferred version.
pub const SELF_SUBJECT_REVIEWS_V1BETA1: ResourceInfo = review!(
    "authentication.k8s.io",
    "v1beta1",
    "SelfSubjectReview",
    "selfsubjectreviews",
    "selfsubjectreview",
    false,
    Answerer::Now(|_, asker, _, object| Ok(reviews::review_identity(
        asker,
        object,
        "authentication.k8s.io/v1beta1"
    )))
);

/// authentication.k8s.io/v1 TokenReview: whose is this token?
pub const TOKEN_REVIEWS: ResourceInfo = review!(
    "authentication.k8s.io",
    "v1",
    "TokenReview",
    "tokenreviews",
    "tokenreview",
    false,
    Answerer::Token
);
