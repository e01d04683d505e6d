//! The CNI error result (cni-SPEC.md §5 "Error"): what plexus answers. The
//! layers above have error types of their own, each turned into a
//! `CniError`, its code chosen, by one `From` where plexus answers.
//!
//! Convention: `msg` is short and fixed per kind of failure; `details` names the
//! offending field (as a path such as `plugins[1].ipam.type` or an environment
//! variable such as `CNI_IFNAME`) followed by the reason, e.g.
//! `CNI_IFNAME: "eth0/x" must not contain '/'`.

use serde_json::{json, Value};

/// The well-known error codes of cni-SPEC.md §5, plus plexus's own (100+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// 1: Incompatible CNI version.
    IncompatibleVersion,
    /// 2: Unsupported field in network configuration.
    UnsupportedField,
    /// 3: Container unknown or does not exist.
    UnknownContainer,
    /// 4: Invalid necessary environment variables.
    InvalidEnvironment,
    /// 5: I/O failure.
    Io,
    /// 6: Failed to decode content.
    Decode,
    /// 7: Invalid network config.
    InvalidConfig,
    /// 11: Try again later.
    TryAgainLater,
    /// 50: The plugin is not available.
    NotAvailable,
    /// 51: Not available, and existing containers may have limited connectivity.
    NotAvailableLimited,
    /// 100+: plugin-specific.
    Plugin(u32),
}

impl ErrorCode {
    /// The `msg` plexus gives an error of this code (cni-SPEC "Error").
    pub fn description(self) -> &'static str {
        match self {
            ErrorCode::IncompatibleVersion => "incompatible CNI version",
            ErrorCode::UnsupportedField => "unsupported field in network configuration",
            ErrorCode::UnknownContainer => "container unknown or does not exist",
            ErrorCode::InvalidEnvironment => "invalid environment variable",
            ErrorCode::Io => "I/O failure",
            ErrorCode::Decode => "failed to decode content",
            ErrorCode::InvalidConfig => "invalid network configuration",
            ErrorCode::TryAgainLater => "try again later",
            ErrorCode::NotAvailable => "plugin not available",
            ErrorCode::NotAvailableLimited => {
                "plugin not available; existing containers may have limited connectivity"
            }
            ErrorCode::Plugin(_) => "plugin-specific error",
        }
    }

    pub fn as_u32(self) -> u32 {
        match self {
            ErrorCode::IncompatibleVersion => 1,
            ErrorCode::UnsupportedField => 2,
            ErrorCode::UnknownContainer => 3,
            ErrorCode::InvalidEnvironment => 4,
            ErrorCode::Io => 5,
            ErrorCode::Decode => 6,
            ErrorCode::InvalidConfig => 7,
            ErrorCode::TryAgainLater => 11,
            ErrorCode::NotAvailable => 50,
            ErrorCode::NotAvailableLimited => 51,
            ErrorCode::Plugin(n) => n,
        }
    }

    pub fn from_u32(code: u32) -> ErrorCode {
        match code {
            1 => ErrorCode::IncompatibleVersion,
            2 => ErrorCode::UnsupportedField,
            3 => ErrorCode::UnknownContainer,
            4 => ErrorCode::InvalidEnvironment,
            5 => ErrorCode::Io,
            6 => ErrorCode::Decode,
            7 => ErrorCode::InvalidConfig,
            11 => ErrorCode::TryAgainLater,
            50 => ErrorCode::NotAvailable,
            51 => ErrorCode::NotAvailableLimited,
            n => ErrorCode::Plugin(n),
        }
    }
}

/// Plugin-specific codes plexus uses (cni-SPEC.md §5: 100+ are free).
pub mod codes {
    /// A network named by a pod could not be resolved (multi-net-spec §3.4.1 rule 4).
    pub const NETWORK_NOT_FOUND: u32 = 100;
    /// A pod's selection could not be honoured (capability missing, duplicate
    /// interface name, namespace isolation ...).
    pub const ATTACHMENT_REJECTED: u32 = 101;
    // 102 was "not implemented"; nothing answers with it, and it stays
    // unassigned so that no old reading of it meets a new meaning.
    /// A delegate or built-in plugin failed.
    pub const PLUGIN_FAILED: u32 = 103;
    /// The Kubernetes API server refused a request (forbidden, invalid ...);
    /// one it did not answer is code 11, try again later.
    pub const KUBERNETES_API: u32 = 104;
    /// kubelet's PodResources API could not be reached, refused the call or
    /// does not know the pod; one that did not answer in time is code 11.
    pub const POD_RESOURCES: u32 = 105;
}

/// A CNI error: what plexus prints on stdout before exiting non-zero.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{msg}: {details}")]
pub struct CniError {
    pub code: ErrorCode,
    pub msg: String,
    pub details: String,
    /// Set by a plugin whose failed ADD took back everything it had done
    /// (the built-in drivers, through their undo log): the DEL a runtime
    /// owes after a failed ADD (cni-SPEC §3 "Lifecycle") has nothing of it
    /// to remove, so plexus's record does not owe that plugin one, and a
    /// device that was there before (the name the ADD found taken) is never
    /// deleted. Not part of the wire format: an exec'd plugin's error is
    /// never marked.
    pub undone: bool,
}

impl CniError {
    pub fn new(code: ErrorCode, msg: impl Into<String>, details: impl Into<String>) -> Self {
        CniError {
            code,
            msg: msg.into(),
            details: details.into(),
            undone: false,
        }
    }

    /// A standard code's error: its [`ErrorCode::description`] as `msg`, and `details` that say
    /// "`subject`: `reason`".
    fn about(code: ErrorCode, subject: impl AsRef<str>, reason: impl AsRef<str>) -> Self {
        let (subject, reason) = (subject.as_ref(), reason.as_ref());
        Self::new(code, code.description(), format!("{subject}: {reason}"))
    }

    /// Code 7, for a config that parsed but is not valid. `field` is the path
    /// of the offending key.
    pub fn invalid_config(field: impl AsRef<str>, reason: impl AsRef<str>) -> Self {
        Self::about(ErrorCode::InvalidConfig, field, reason)
    }

    /// Code 6, for content that could not be decoded at all.
    pub fn decode(what: impl AsRef<str>, reason: impl AsRef<str>) -> Self {
        Self::about(ErrorCode::Decode, what, reason)
    }

    /// Code 4, naming the environment variable.
    pub fn invalid_env(var: impl AsRef<str>, reason: impl AsRef<str>) -> Self {
        Self::about(ErrorCode::InvalidEnvironment, var, reason)
    }

    /// Code 1.
    pub fn incompatible_version(field: impl AsRef<str>, reason: impl AsRef<str>) -> Self {
        Self::about(ErrorCode::IncompatibleVersion, field, reason)
    }

    /// Code 5.
    pub fn io(what: impl AsRef<str>, err: impl std::fmt::Display) -> Self {
        Self::about(ErrorCode::Io, what, err.to_string())
    }

    /// A plexus-specific code (see [`codes`]).
    pub fn plugin(code: u32, msg: impl Into<String>, details: impl Into<String>) -> Self {
        Self::new(ErrorCode::Plugin(code), msg, details)
    }

    /// Prefix the field path in `details` with `outer`, so errors found deep in
    /// a structure name their full path (`plugins[2]` + `ipam.type`).
    pub fn within(mut self, outer: impl AsRef<str>) -> Self {
        prefix_path(&mut self.details, outer.as_ref());
        self
    }

    /// Several failures as one error: the first one's code, every details
    /// (`what`: the operation, "GC"). Needs at least one.
    pub fn combine(what: &str, mut errors: Vec<CniError>) -> CniError {
        assert!(!errors.is_empty(), "combine: no errors");
        if errors.len() == 1 {
            return errors.remove(0);
        }
        let details: Vec<String> = errors.iter().map(|e| e.details.clone()).collect();
        CniError::new(
            errors[0].code,
            format!("{what}: {} operations failed", errors.len()),
            details.join("; "),
        )
    }

    /// The error result object of cni-SPEC.md §5.
    pub fn to_json(&self, cni_version: &str) -> Value {
        json!({
            "cniVersion": cni_version,
            "code": self.code.as_u32(),
            "msg": self.msg,
            "details": self.details,
        })
    }
}

pub type CniResultOf<T> = std::result::Result<T, CniError>;

/// `outer.path`, or `outer[i]...` for an index: how a field's path is
/// put inside the path of what holds it ([`CniError::within`], and the
/// spec objects' errors).
pub fn prefix_path(path: &mut String, outer: &str) {
    if outer.is_empty() {
        return;
    }
    if path.is_empty() {
        *path = outer.to_string();
        return;
    }
    let joint = if path.starts_with('[') { "" } else { "." };
    *path = format!("{outer}{joint}{path}");
}

/// For tests: the details of `result`'s error, which must have `code`.
#[cfg(test)]
#[track_caller]
pub(crate) fn details_of<T: std::fmt::Debug>(
    result: Result<T, CniError>,
    code: ErrorCode,
) -> String {
    let e = result.unwrap_err();
    assert_eq!(e.code, code, "{e}");
    e.details
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_json_has_the_spec_keys() {
        // cni-SPEC.md §5 "Error": cniVersion, code, msg, details.
        let e = CniError::invalid_config("ipam.subnet", "192.168.0.0/31 is too small");
        assert_eq!(
            e.to_json("1.1.0"),
            json!({"cniVersion": "1.1.0", "code": 7, "msg": "invalid network configuration",
                   "details": "ipam.subnet: 192.168.0.0/31 is too small"})
        );
    }

    #[test]
    fn within_builds_paths() {
        let e = CniError::invalid_config("type", "missing").within("plugins[2]");
        assert_eq!(e.details, "plugins[2].type: missing");
        let e = CniError::invalid_config("[0]", "bad").within("ips");
        assert_eq!(e.details, "ips[0]: bad");
    }

    #[test]
    fn codes_round_trip() {
        for n in [1, 2, 3, 4, 5, 6, 7, 11, 50, 51, 100, 999] {
            assert_eq!(ErrorCode::from_u32(n).as_u32(), n);
        }
    }
}
