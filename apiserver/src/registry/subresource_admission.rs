//! Admission of the subresources a client creates or connects to, the way upstream's create
//! and connect handlers admit them: as the subresource's own kind, with the request's body (or,
//! for a connect, its options) as the object, before the registry or the proxy acts on it.
//! CREATE of `pods/binding` (`v1 Binding`), `pods/eviction` (`policy/v1 Eviction`),
//! `serviceaccounts/token` (`authentication.k8s.io/v1 TokenRequest`); CONNECT of
//! `pods/exec|attach|portforward` (`v1 PodExecOptions`, …) and `nodes/proxy`
//! (`v1 NodeProxyOptions`). A webhook or a policy registered for `pods/binding` CREATE sees the
//! Binding; one registered for pod updates or deletes does not see the bound pod's update or the
//! evicted pod's delete (upstream writes those straight to its store), so the write they go
//! through is marked admitted.

use serde_json::Value;

use super::store::attributes;
use super::{Registry, Write};
use crate::catalog::{ResourceInfo, Subresource};
use crate::error::{ApiError, Result};
use rudder_admission::Operation;

impl Registry {
    /// Runs the mutating plugins (which may change `object`), then `validate` (the kind's own
    /// checks, on what the mutating plugins made), then the validating plugins, on the create
    /// of `subresource` of `namespace/name`. Returns the write the registry's own writes for it
    /// use (marked admitted) and the plugins' warnings for the client.
    #[allow(clippy::too_many_arguments)]
    pub async fn admit_subresource_create(
        &self,
        info: &ResourceInfo,
        subresource: Subresource,
        namespace: Option<&str>,
        name: &str,
        object: &mut Value,
        write: &Write,
        validate: impl FnOnce(&Value) -> Result<()> + Send,
    ) -> Result<(Write, Vec<String>)> {
        let warnings = self
            .admit_subresource(
                Operation::Create,
                (info, subresource),
                (namespace, name),
                (object, None),
                write,
                validate,
            )
            .await?;
        let mut admitted = write.clone();
        admitted.admitted = true;
        Ok((admitted, warnings))
    }

    /// Admits a CONNECT to `subresource` of `namespace/name` with its `options` (a
    /// PodExecOptions, …). A plugin's changes to the options are not applied to the
    /// connection; a refusal ends the request before any kubelet is reached.
    pub async fn admit_connect(
        &self,
        info: &ResourceInfo,
        subresource: Subresource,
        namespace: Option<&str>,
        name: &str,
        mut options: Value,
        write: &Write,
    ) -> Result<()> {
        self.admit_subresource(
            Operation::Connect,
            (info, subresource),
            (namespace, name),
            (&mut options, None),
            write,
            |_| Ok(()),
        )
        .await
        .map(drop)
    }

    /// Admits `operation` on `subresource` of `namespace/name` as the subresource's own kind:
    /// the mutating plugins (which may change `object`; `old` is the current one, for an
    /// update), `validate`, then the validating plugins. Returns the plugins' warnings.
    pub(super) async fn admit_subresource(
        &self,
        operation: Operation,
        (info, subresource): (&ResourceInfo, Subresource),
        (namespace, name): (Option<&str>, &str),
        (object, old): (&mut Value, Option<&Value>),
        write: &Write,
        validate: impl FnOnce(&Value) -> Result<()> + Send,
    ) -> Result<Vec<String>> {
        let sub = info.subresource(subresource).ok_or_else(|| {
            ApiError::internal(format!(
                "{} has no {} subresource",
                info.plural,
                subresource.as_str()
            ))
        })?;
        let mut asked = attributes(info, operation, Some(subresource), write, object);
        asked.kind = sub.kind.kind.to_string();
        asked.kind_group = sub.kind.group.to_string();
        asked.kind_version = sub.kind.version.to_string();
        asked.namespace = namespace.map(str::to_string);
        asked.name = name.to_string();
        let chain = self.admission_for(write);
        chain.mutate(&asked, Some(object), old).await?;
        validate(object)?;
        chain.validate(&asked, Some(object), old).await?;
        Ok(asked.warnings.take())
    }
}
