//! What a plugin answers: success, a rejection (that preemption might fix, or not), an
//! error, or "skip me this cycle" — with upstream's reason texts, which users read in
//! `FailedScheduling` events.

/// The kind of answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Success,
    /// Does not fit now; removing pods (preemption) might help.
    Unschedulable,
    /// Does not fit, and preemption cannot change that (labels, taints, names).
    UnschedulableAndUnresolvable,
    /// The plugin failed.
    Error,
    /// The plugin has nothing to do for this pod.
    Skip,
}

/// A plugin's answer with its reasons and the plugin that gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub reasons: Vec<String>,
    pub plugin: &'static str,
}

impl Status {
    pub fn success() -> Self {
        Self::new(Code::Success, Vec::new())
    }

    pub fn skip() -> Self {
        Self::new(Code::Skip, Vec::new())
    }

    pub fn unschedulable(reason: impl Into<String>) -> Self {
        Self::new(Code::Unschedulable, vec![reason.into()])
    }

    pub fn unresolvable(reason: impl Into<String>) -> Self {
        Self::new(Code::UnschedulableAndUnresolvable, vec![reason.into()])
    }

    pub fn error(reason: impl Into<String>) -> Self {
        Self::new(Code::Error, vec![reason.into()])
    }

    pub fn new(code: Code, reasons: Vec<String>) -> Self {
        Self {
            code,
            reasons,
            plugin: "",
        }
    }

    pub fn with_plugin(mut self, plugin: &'static str) -> Self {
        self.plugin = plugin;
        self
    }

    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    pub fn is_skip(&self) -> bool {
        self.code == Code::Skip
    }
}
